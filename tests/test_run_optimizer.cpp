// test_run_optimizer.cpp — AdamW, gradient clipping and the learning-rate schedules against
// values worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/run/optimizer.h"
#include "kernels/adamw.h"
#include "engine/run/schedule.h"

using namespace fp4::run;

TEST_CASE("AdamW: two steps against a hand computation", "[run][optimizer]") {
  // Three parameters: two decayed (a matrix), one not (a norm gain).
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  const std::vector<ParamRange> ranges = {{0, 2, true}, {2, 1, false}};
  AdamWHyper h;
  h.lr = 0.1;
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  AdamW opt(3);

  // Step 1, g = (0.5, −1, 0). With bias correction the first update is lr · g/|g| (ε aside):
  //   p0: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25, ratio = 0.5 / (0.5 + 1e-8) = 0.99999998
  //       p = 1 − 0.1·0.1·1 = 0.99;   p = 0.99 − 0.1·0.99999998 = 0.890000002
  //   p1: m̂ = −1, v̂ = 1: p = −2 + 0.02 = −1.98;  p = −1.98 + 0.1·0.99999999 = −1.880000001
  //   p2: g = 0 gives m = v = 0 and no update; no decay on a gain: p = 0.5
  std::vector<float> g = {0.5f, -1.0f, 0.0f};
  opt.step(p.data(), g.data(), ranges, h, 1, 1.0f);
  CHECK(p[0] == Approx(0.890000002).epsilon(1e-7));
  CHECK(p[1] == Approx(-1.880000001).epsilon(1e-7));
  CHECK(p[2] == 0.5f);
  CHECK(opt.m()[0] == Approx(0.05).epsilon(1e-7));
  CHECK(opt.v()[1] == Approx(0.001).epsilon(1e-7));

  // Step 2, g = (0.25, 1, 2) halved by a clip factor of 0.5 → (0.125, 0.5, 1):
  //   p0: m = 0.9·0.05 + 0.1·0.125 = 0.0575;  v = 0.999·0.00025 + 0.001·0.015625 = 0.000265375
  //       c1 = 1 − 0.81 = 0.19, c2 = 1 − 0.998001 = 0.001999
  //       m̂ = 0.302631578947, v̂ = 0.132753876938, sqrt = 0.364354054
  //       p = 0.890000002·(1 − 0.01) = 0.881100002;  p −= 0.1·0.830598 → 0.798040251
  //   p2: m = 0.1, v = 0.001, m̂ = 0.526315789474, v̂ = 0.500250125063, sqrt = 0.707283624
  //       p = 0.5 − 0.1·0.744136... = 0.425586319 (no decay)
  g = {0.25f, 1.0f, 2.0f};
  opt.step(p.data(), g.data(), ranges, h, 2, 0.5f);
  const auto expect = [](double p_prev, double m_prev, double v_prev, double grad, bool decay) {
    const double m = 0.9 * m_prev + 0.1 * grad, v = 0.999 * v_prev + 0.001 * grad * grad;
    const double m_hat = m / 0.19, v_hat = v / 0.001999;
    const double shrunk = decay ? p_prev * (1 - 0.01) : p_prev;
    return shrunk - 0.1 * m_hat / (std::sqrt(v_hat) + 1e-8);
  };
  CHECK(p[0] == Approx(expect(0.890000002, 0.05, 0.00025, 0.125, true)).epsilon(1e-6));
  CHECK(p[0] == Approx(0.798040251).epsilon(1e-7));
  CHECK(p[1] == Approx(expect(-1.880000001, -0.1, 0.001, 0.5, true)).epsilon(1e-6));
  CHECK(p[2] == Approx(expect(0.5, 0.0, 0.0, 1.0, false)).epsilon(1e-6));
  CHECK(p[2] == Approx(0.425586319).epsilon(1e-7));
}

TEST_CASE("AdamW: the same inputs give the same bits, whatever the split into ranges", "[run][optimizer]") {
  std::vector<float> a(1000), g(1000);
  for (int i = 0; i < 1000; ++i) {
    a[i] = std::sin(0.37f * static_cast<float>(i));
    g[i] = std::cos(1.3f * static_cast<float>(i)) * 1e-3f;
  }
  std::vector<float> b = a;
  AdamW oa(1000), ob(1000);
  AdamWHyper h;
  h.lr = 3e-3;
  h.weight_decay = 0.1;
  for (int t = 1; t <= 5; ++t) {
    oa.step(a.data(), g.data(), {{0, 1000, true}}, h, t, 0.7f);
    ob.step(b.data(), g.data(), {{0, 300, true}, {300, 700, true}}, h, t, 0.7f);
  }
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(oa.v().data(), ob.v().data(), 1000 * sizeof(float)) == 0);
  CHECK_THROWS_AS(oa.step(a.data(), g.data(), {{0, 999, true}}, h, 6, 1.0f), std::logic_error);
}

TEST_CASE("power_by_squaring: exact repeated squaring", "[run][optimizer]") {
  CHECK(fp4::power_by_squaring(0.5, 0) == 1.0);
  CHECK(fp4::power_by_squaring(0.5, 10) == 1.0 / 1024);
  CHECK(fp4::power_by_squaring(0.9, 2) == 0.9 * 0.9);
  CHECK(fp4::power_by_squaring(0.999, 1000) == Approx(std::pow(0.999, 1000)).epsilon(1e-12));
}

TEST_CASE("gradient clipping by the global norm", "[run][optimizer]") {
  const std::vector<float> g = {3.0f, 0.0f, -4.0f};
  CHECK(global_grad_norm(g.data(), g.size()) == 5.0);
  CHECK(clip_scale(5.0, 1.0) == 0.2f);
  CHECK(clip_scale(5.0, 10.0) == 1.0f);
  CHECK(clip_scale(5.0, 5.0) == 1.0f);
  CHECK(clip_scale(5.0, 0.0) == 1.0f);  // 0 turns clipping off
  // fp64 accumulation: 1e8 squares of 1e-4 sum to exactly what fp64 gives, not fp32's drift.
  const std::vector<float> many(1 << 20, 1e-3f);
  CHECK(global_grad_norm(many.data(), many.size()) == Approx(std::sqrt((1 << 20) * 1e-6)).epsilon(1e-6));
}

namespace {

// The schedule tests' run: 100 steps, lr 1.0 with a floor of 0.1, 10 warmup steps. The expected
// learning rates below are worked out from these numbers.
TrainConfig schedule_config(Schedule schedule) {
  TrainConfig t;
  t.steps = 100;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.warmup_steps = 10;
  t.schedule = schedule;
  return t;
}

}  // namespace

TEST_CASE("schedule: warmup then cosine to the floor", "[run][schedule]") {
  TrainConfig t = schedule_config(Schedule::cosine);
  CHECK(learning_rate(t, 0) == Approx(0.1));   // (0 + 1) / 10
  CHECK(learning_rate(t, 4) == Approx(0.5));
  CHECK(learning_rate(t, 9) == Approx(1.0));
  CHECK(learning_rate(t, 10) == Approx(1.0));  // cos(0)
  CHECK(learning_rate(t, 55) == Approx(0.55)); // halfway: 0.1 + 0.9 · ½
  // Last step: progress 89/90, 0.1 + 0.45 · (1 − cos(π/90)) = 0.1002741
  CHECK(learning_rate(t, 99) == Approx(0.1002741).epsilon(1e-6));
  t.warmup_steps = 0;
  CHECK(learning_rate(t, 0) == 1.0);
  CHECK(learning_rate(t, 50) == Approx(0.55));
}

TEST_CASE("schedule: warmup, stable, linear decay (wsd)", "[run][schedule]") {
  TrainConfig t = schedule_config(Schedule::wsd);
  t.decay_fraction = 0.2;
  CHECK(wsd_decay_steps(t) == 20);
  CHECK(learning_rate(t, 0) == Approx(0.1));
  CHECK(learning_rate(t, 10) == 1.0);
  CHECK(learning_rate(t, 79) == 1.0);
  CHECK(learning_rate(t, 80) == Approx(0.955));  // 1 − 0.9 · 1/20
  CHECK(learning_rate(t, 89) == Approx(0.55));   // 1 − 0.9 · 10/20
  CHECK(learning_rate(t, 99) == Approx(0.1));    // the floor at the last step
  t.decay_fraction = 0.001;                      // rounds to 0 steps: at least one
  CHECK(wsd_decay_steps(t) == 1);
  CHECK(learning_rate(t, 98) == 1.0);
  CHECK(learning_rate(t, 99) == Approx(0.1));
}
