// Gradient checks of the model's operations (kernels/cpu/ops.h) and of the bf16 linear layer.
//
// Each op runs in double; a scalar loss L = Σ w ⊙ op(inputs) with fixed random weights w turns its
// backward (fed dL/dout = w) into a gradient that is compared with central differences of L in
// double. Step h = 1e-5 on inputs of size ~1: the truncation error is ~h²·|L'''| ≈ 1e-10 and the
// cancellation error ~1e-16·|L|/h ≈ 1e-10, so a correct backward agrees to ~1e-9; the tolerance
// 1e-7 + 1e-6·|g| leaves a wide margin while any real mistake (a missing term, a wrong index) is off
// by orders of magnitude more.
#include <cmath>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include <Eigen/Core>

#include "engine/quantized_linear.h"
#include "engine/recipe.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "tests/test_model_helpers.h"

using namespace fp4::cpu;
using fp4test_model::check_gradient;
using fp4test_model::Rng;
using fp4test_model::uniform_vector;

namespace {

constexpr double kH = 1e-5, kAtol = 1e-7, kRtol = 1e-6;

double weighted_sum(const std::vector<double>& w, const std::vector<double>& y) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += w[i] * y[i];
  return s;
}

}  // namespace

// Eigen reads the cache sizes from CPUID and plans its K blocking, hence the order of a product's
// partial sums, from them: the CPU engine's bits followed the machine until gemm fixed the sizes.
TEST_CASE("cpu gemm: Eigen plans the blocking from the fixed cache sizes and not from the machine", "[model][ops]") {
  std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 0.5f), c(64 * 64, 0.0f);
  fp4::cpu::gemm(false, false, 64, 64, 64, 1.0f, a.data(), b.data(), 0.0f, c.data());
  CHECK(c[0] == 32.0f);
  CHECK(Eigen::l1CacheSize() == fp4::cpu::kGemmPlanL1);
  CHECK(Eigen::l2CacheSize() == fp4::cpu::kGemmPlanL2);
  CHECK(Eigen::l3CacheSize() == fp4::cpu::kGemmPlanL3);
}

TEST_CASE("rmsnorm backward matches finite differences", "[model][ops]") {
  const int rows = 5, d = 12;
  const double eps = 1e-5;
  Rng rng(1);
  std::vector<double> x = uniform_vector(rng, rows * d, -2, 2), gain = uniform_vector(rng, d, 0.5, 1.5);
  const std::vector<double> w = uniform_vector(rng, rows * d);
  std::vector<double> y(rows * d), rstd(rows);
  auto loss = [&] {
    rmsnorm_forward(x.data(), gain.data(), rows, d, eps, y.data(), rstd.data());
    return weighted_sum(w, y);
  };
  loss();
  std::vector<double> dx(rows * d), dgain(d, 0.0);
  rmsnorm_backward(x.data(), gain.data(), rstd.data(), w.data(), rows, d, dx.data(), dgain.data());
  check_gradient("rmsnorm dx", x, dx, loss, kH, kAtol, kRtol);
  check_gradient("rmsnorm dgain", gain, dgain, loss, kH, kAtol, kRtol);

  // The forward is the formula: y = x / sqrt(mean(x²) + eps) · gain.
  loss();
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int j = 0; j < d; ++j) ms += x[r * d + j] * x[r * d + j] / d;
    for (int j = 0; j < d; ++j)
      CHECK(y[r * d + j] == Approx(x[r * d + j] / std::sqrt(ms + eps) * gain[j]).epsilon(1e-14));
  }
}

TEST_CASE("rope backward matches finite differences and rotates interleaved pairs", "[model][ops]") {
  const int batch = 2, seq = 5, heads = 2, hd = 6, d = heads * hd, stride = 3 * d;
  Rng rng(2);
  const RopeTable<double> table = rope_table<double>(seq, hd, 10000.0);
  // The rotated features sit at offset d of rows of width 3·d (k inside a packed qkv buffer).
  std::vector<double> x = uniform_vector(rng, batch * seq * stride);
  const std::vector<double> w = uniform_vector(rng, x.size());
  auto loss = [&] {
    std::vector<double> y = x;
    rope_forward(y.data() + d, batch, seq, heads, hd, stride, table);
    return weighted_sum(w, y);
  };
  std::vector<double> dx = w;
  rope_backward(dx.data() + d, batch, seq, heads, hd, stride, table);
  check_gradient("rope dx", x, dx, loss, kH, kAtol, kRtol);

  // Pair i = features (2i, 2i+1), angle pos · 10000^(−2i/hd); columns outside [d, 2d) untouched.
  std::vector<double> y = x;
  rope_forward(y.data() + d, batch, seq, heads, hd, stride, table);
  const int b = 1, pos = 3, h = 1, i = 2;
  const double angle = pos * std::pow(10000.0, -2.0 * i / hd);
  const size_t base = static_cast<size_t>(b * seq + pos) * stride + d + h * hd + 2 * i;
  CHECK(y[base] == Approx(x[base] * std::cos(angle) - x[base + 1] * std::sin(angle)).epsilon(1e-14));
  CHECK(y[base + 1] == Approx(x[base] * std::sin(angle) + x[base + 1] * std::cos(angle)).epsilon(1e-14));
  for (int r = 0; r < batch * seq; ++r)
    for (int c = 0; c < stride; ++c)
      if (c < d || c >= 2 * d) CHECK(y[r * stride + c] == x[r * stride + c]);
}

TEST_CASE("causal attention backward matches finite differences", "[model][ops]") {
  const int batch = 2, seq = 6, heads = 2, hd = 4, d = heads * hd;
  Rng rng(3);
  std::vector<double> qkv = uniform_vector(rng, batch * seq * 3 * d, -1.5, 1.5);
  const std::vector<double> w = uniform_vector(rng, batch * seq * d);
  std::vector<double> out(batch * seq * d), lse(batch * heads * seq);
  auto loss = [&] {
    attention_forward(qkv.data(), batch, seq, heads, hd, out.data(), lse.data());
    return weighted_sum(w, out);
  };
  loss();
  std::vector<double> dqkv(qkv.size());
  attention_backward(qkv.data(), lse.data(), w.data(), batch, seq, heads, hd, dqkv.data());
  check_gradient("attention dqkv", qkv, dqkv, loss, kH, kAtol, kRtol);

  // Causality: query t's output does not move when a later key or value changes.
  loss();
  const std::vector<double> before = out;
  qkv[(0 * seq + 4) * 3 * d + d + 1] += 0.5;      // key of token 4, sequence 0, head 0
  qkv[(0 * seq + 5) * 3 * d + 2 * d + 5] += 0.5;  // value of token 5, sequence 0, head 1
  loss();
  for (int t = 0; t < 4; ++t)
    for (int c = 0; c < d; ++c) CHECK(out[t * d + c] == before[t * d + c]);
}

TEST_CASE("swiglu backward matches finite differences", "[model][ops]") {
  const int rows = 4, f = 7;
  Rng rng(4);
  std::vector<double> u = uniform_vector(rng, rows * 2 * f, -4, 4);
  const std::vector<double> w = uniform_vector(rng, rows * f);
  std::vector<double> a(rows * f);
  auto loss = [&] {
    swiglu_forward(u.data(), rows, f, a.data());
    return weighted_sum(w, a);
  };
  loss();
  std::vector<double> du(u.size());
  swiglu_backward(u.data(), w.data(), rows, f, du.data());
  check_gradient("swiglu du", u, du, loss, kH, kAtol, kRtol);
  // gate | up: a = silu(gate) · up.
  const double g = u[1 * 2 * f + 3], up = u[1 * 2 * f + f + 3];
  CHECK(a[1 * f + 3] == Approx(g / (1 + std::exp(-g)) * up).epsilon(1e-14));
}

TEST_CASE("cross-entropy with softmax: value and backward", "[model][ops]") {
  const int rows = 5, vocab = 7;
  const double scale = 0.3;
  Rng rng(5);
  std::vector<double> z = uniform_vector(rng, rows * vocab, -3, 3);
  const std::vector<int32_t> targets = {0, 6, 3, 3, 1};
  std::vector<double> loss_rows(rows);
  auto loss = [&] {
    cross_entropy(z.data(), targets.data(), rows, vocab, loss_rows.data(), static_cast<double*>(nullptr), 0.0);
    double s = 0;
    for (double l : loss_rows) s += l;
    return scale * s;
  };
  loss();
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int j = 0; j < vocab; ++j) sum += std::exp(z[r * vocab + j]);
    CHECK(loss_rows[r] == Approx(std::log(sum) - z[r * vocab + targets[r]]).epsilon(1e-13));
  }
  std::vector<double> dz(z.size());
  cross_entropy(z.data(), targets.data(), rows, vocab, loss_rows.data(), dz.data(), scale);
  check_gradient("cross-entropy dlogits", z, dz, loss, kH, kAtol, kRtol);
  // In place (dlogits aliasing the logits) gives the same numbers.
  std::vector<double> inplace = z;
  cross_entropy(inplace.data(), targets.data(), rows, vocab, loss_rows.data(), inplace.data(), scale);
  CHECK(inplace == dz);
}

TEST_CASE("embedding backward matches finite differences", "[model][ops]") {
  const int vocab = 5, d = 3, rows = 6;
  Rng rng(6);
  std::vector<double> table = uniform_vector(rng, vocab * d);
  const std::vector<int32_t> tokens = {4, 1, 4, 0, 2, 4};  // 4 repeats; 3 never appears
  const std::vector<double> w = uniform_vector(rng, rows * d);
  std::vector<double> out(rows * d);
  auto loss = [&] {
    embedding_forward(table.data(), tokens.data(), rows, d, out.data());
    return weighted_sum(w, out);
  };
  std::vector<double> dtable(table.size(), 0.0);
  embedding_backward(tokens.data(), w.data(), rows, d, dtable.data());
  check_gradient("embedding dtable", table, dtable, loss, kH, kAtol, kRtol);
  for (int j = 0; j < d; ++j) CHECK(dtable[3 * d + j] == 0.0);
}

TEST_CASE("dot is the same sum for every alignment and matches the exact sum", "[model][ops]") {
  Rng rng(7);
  std::vector<float> a(80), b(80);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(rng.uniform(-1, 1));
    b[i] = static_cast<float>(rng.uniform(-1, 1));
  }
  for (int n : {1, 7, 8, 13, 64, 71}) {
    double exact = 0;
    for (int i = 0; i < n; ++i) exact += static_cast<double>(a[i]) * b[i];
    const float s = dot(a.data(), b.data(), n);
    CHECK(s == Approx(exact).margin(1e-5));
    // Copies at a different offset give the identical bits.
    std::vector<float> a2(n + 3), b2(n + 3);
    std::memcpy(a2.data() + 3, a.data(), n * sizeof(float));
    std::memcpy(b2.data() + 1, b.data(), n * sizeof(float));
    const float s2 = dot(a2.data() + 3, b2.data() + 1, n);
    CHECK(std::memcmp(&s, &s2, sizeof s) == 0);
  }
}

// The linear layer under the bf16 recipe, through engine/quantized_linear. Its operands are bf16,
// so a finite difference needs a step the bf16 inputs can represent exactly: every input is k/16
// with |k| ≤ 16 and h = 1/16, so X ± h stays exact in bf16, every product and partial sum is a
// multiple of 2⁻⁸ far below 2²⁴·2⁻⁸ (exact in fp32), and since the layer is linear in each operand,
// the central difference is exact too. The check is therefore equality.
TEST_CASE("bf16 linear layer: backward equals finite differences exactly", "[model][ops][linear]") {
  using namespace fp4::engine;
  const int t = 8, k = 16, n = 24;
  const Recipe recipe = recipe_preset("bf16");
  LinearSite site;
  site.recipe = &recipe;
  Rng rng(8);
  auto sixteenths = [&](size_t count) {
    std::vector<double> v(count);
    for (double& e : v) e = (rng.below(33) - 16) / 16.0;
    return v;
  };
  std::vector<double> x = sixteenths(t * k), w = sixteenths(n * k);
  const std::vector<double> g = sixteenths(t * n);  // dL/dY
  auto bf = [](const std::vector<double>& v) {
    std::vector<fp4::bf16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      b[i] = fp4::float_to_bf16(static_cast<float>(v[i]));
      REQUIRE(fp4::bf16_to_float(b[i]) == v[i]);
    }
    return b;
  };
  auto loss = [&] {
    std::vector<float> y(t * n);
    REQUIRE(linear_forward(site, bf(x).data(), bf(w).data(), t, k, n, y.data()));
    double s = 0;
    for (int i = 0; i < t * n; ++i) s += g[i] * y[i];
    return s;
  };
  std::vector<float> dx(t * k), dw(n * k, 0.0f);
  REQUIRE(linear_backward(site, bf(x).data(), bf(w).data(), bf(g).data(), t, k, n, dx.data(), dw.data()));
  const std::vector<double> dxd(dx.begin(), dx.end()), dwd(dw.begin(), dw.end());
  check_gradient("linear dX", x, dxd, loss, 1.0 / 16, 0.0, 0.0);
  check_gradient("linear dW", w, dwd, loss, 1.0 / 16, 0.0, 0.0);
}
