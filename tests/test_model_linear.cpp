// The quantized linear layer (engine/quantized_linear) against an independent computation: each
// GEMM's operands are taken from the reference quantizer (quantize_slot → dequant · tensor_scale),
// multiplied by a naive triple loop in double, and compared with linear_forward / linear_backward.
//
// Tolerance: the layer sums K (or N, or T) products in fp32 in some order and applies the two
// tensor scales as one fp32 alpha, so |computed − exact| ≤ (terms + 3)·2⁻²⁴·(|C₀| + Σ|a·b|) — the
// standard bound for a floating-point dot product in any order, with one more rounding for alpha
// and one for adding into an existing C₀ (wgrad accumulates).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/quantized_linear.h"
#include "engine/recipe.h"
#include "tests/test_model_helpers.h"

using namespace fp4;
using namespace fp4::engine;
using fp4test_model::Rng;

namespace {

// Heavy-ish tailed test data: normal values with an occasional 8× outlier, as bf16.
std::vector<bf16_t> sample(Rng& rng, size_t n, double scale) {
  std::vector<bf16_t> v(n);
  for (bf16_t& e : v) {
    double z = rng.normal() * scale;
    if (rng.below(50) == 0) z *= 8.0;
    e = float_to_bf16(static_cast<float>(z));
  }
  return v;
}

// The operand a GEMM really multiplies: the slot's dequantized copy times its tensor scale, or the
// bf16 tensor itself where the site does not quantize.
std::vector<double> operand(const LinearSite& site, Slot slot, const std::vector<bf16_t>& t, int rows,
                            int cols) {
  std::vector<double> out(t.size());
  if (!site_is_quantized(site)) {
    for (size_t i = 0; i < t.size(); ++i) out[i] = bf16_to_float(t[i]);
    return out;
  }
  const cpu::QuantizedTensor q = quantize_slot(site, slot, t.data(), rows, cols, true);
  for (size_t i = 0; i < t.size(); ++i)
    out[i] = static_cast<double>(bf16_to_float(q.dequant[i])) * q.tensor_scale;
  return out;
}

// C[m, n] = Σ_p A(i, p) · B(p, j) in double, with accessors for the operands' layouts, checked
// element by element against `got` (+ c0 where wgrad accumulates).
template <typename FA, typename FB>
void compare_product(const char* what, int m, int n, int terms, FA a, FB b, const std::vector<float>& got,
                     const std::vector<float>* c0 = nullptr) {
  int bad = 0;
  double worst = 0.0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double exact = c0 ? (*c0)[i * n + j] : 0.0, mag = c0 ? std::abs((*c0)[i * n + j]) : 0.0;
      for (int p = 0; p < terms; ++p) {
        exact += a(i, p) * b(p, j);
        mag += std::abs(a(i, p) * b(p, j));
      }
      const double err = std::abs(got[i * n + j] - exact);
      const double tol = (terms + 3) * 0x1p-24 * mag + 1e-30;
      worst = std::max(worst, mag > 0 ? err / mag : 0.0);
      if (err > tol && bad++ < 5) {
        INFO(what << " [" << i << ", " << j << "]: got " << got[i * n + j] << ", exact " << exact
                  << ", tolerance " << tol);
        CHECK(err <= tol);
      }
    }
  }
  INFO(what << ": worst error / Σ|ab| = " << worst);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("quantized linear: the three GEMMs equal the reference quantizer's operands multiplied in double",
          "[model][linear]") {
  for (const std::string& name : recipe_preset_names()) {
    SECTION(name) {
      const Recipe recipe = recipe_preset(name);
      // Multiples of 32 (mxfp4's block) and of 16×16 tiles; of 128 for the recipes that group 128
      // values (docs/recipes.md: double-block scales, MS-EDEN's RHT).
      const bool wide = !linear_shape_error(recipe, 64, 96, 64).empty();
      const int t = wide ? 128 : 64, k = wide ? 256 : 96, n = wide ? 128 : 64;
      LinearSite site;
      site.recipe = &recipe;
      site.linear_id = 6;
      site.seed = 0x1234abcdULL;
      site.step = 17;
      site.micro_step = 3;
      Rng rng(100);
      const std::vector<bf16_t> x = sample(rng, t * k, 1.0), w = sample(rng, n * k, 0.05),
                                dy = sample(rng, t * n, 1e-3);

      // fprop: Y[t, n] = Σ_k X[t, k] · W[n, k]
      std::vector<float> y(t * n);
      REQUIRE(linear_forward(site, x.data(), w.data(), t, k, n, y.data()));
      {
        const auto X = operand(site, Slot::fprop_x, x, t, k), W = operand(site, Slot::fprop_w, w, n, k);
        compare_product(
            "fprop", t, n, k, [&](int i, int p) { return X[i * k + p]; },
            [&](int p, int j) { return W[j * k + p]; }, y);
      }
      // dgrad: dX[t, k] = Σ_n dY[t, n] · W[n, k]
      std::vector<float> dx(t * k);
      REQUIRE(linear_backward(site, x.data(), w.data(), dy.data(), t, k, n, dx.data(), nullptr));
      {
        const auto DY = operand(site, Slot::dgrad_dy, dy, t, n), W = operand(site, Slot::dgrad_w, w, n, k);
        compare_product(
            "dgrad", t, k, n, [&](int i, int p) { return DY[i * n + p]; },
            [&](int p, int j) { return W[p * k + j]; }, dx);
      }
      // wgrad: dW[n, k] = C₀ + Σ_t dY[t, n] · X[t, k]   (accumulated into C₀)
      std::vector<float> c0(n * k);
      for (float& c : c0) c = static_cast<float>(rng.normal() * 1e-3);
      std::vector<float> dw = c0;
      REQUIRE(linear_backward(site, x.data(), w.data(), dy.data(), t, k, n, nullptr, dw.data()));
      {
        const auto DY = operand(site, Slot::wgrad_dy, dy, t, n), X = operand(site, Slot::wgrad_x, x, t, k);
        compare_product(
            "wgrad", n, k, t, [&](int i, int p) { return DY[p * n + i]; },
            [&](int p, int j) { return X[p * k + j]; }, dw, &c0);
      }

      // Both gradients in one call are the same bits as one at a time.
      std::vector<float> dx2(t * k), dw2 = c0;
      REQUIRE(linear_backward(site, x.data(), w.data(), dy.data(), t, k, n, dx2.data(), dw2.data()));
      CHECK(dx2 == dx);
      CHECK(dw2 == dw);

      // Stochastic rounding: the same seed, step and micro-step give the same bits; another step
      // or micro-step draws other numbers (every 4-bit preset rounds dY stochastically).
      std::vector<float> dx3(t * k), dw3 = c0;
      REQUIRE(linear_backward(site, x.data(), w.data(), dy.data(), t, k, n, dx3.data(), dw3.data()));
      CHECK(std::memcmp(dx3.data(), dx.data(), dx.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(dw3.data(), dw.data(), dw.size() * sizeof(float)) == 0);
      for (int which = 0; which < 2; ++which) {
        LinearSite other = site;
        if (which == 0) other.step += 1;
        else other.micro_step += 1;
        std::vector<float> dx4(t * k), dw4 = c0;
        REQUIRE(linear_backward(other, x.data(), w.data(), dy.data(), t, k, n, dx4.data(), dw4.data()));
        if (recipe.quantized) {
          CHECK(dx4 != dx);
          CHECK(dw4 != dw);
        } else {
          CHECK(dx4 == dx);
          CHECK(dw4 == dw);
        }
      }

      // A 4-bit recipe really changes the product (the test would pass vacuously otherwise).
      if (recipe.quantized) {
        LinearSite plain = site;
        plain.keep_bf16 = true;
        std::vector<float> y_bf16(t * n);
        REQUIRE(linear_forward(plain, x.data(), w.data(), t, k, n, y_bf16.data()));
        CHECK(y_bf16 != y);
      }
    }
  }
}

TEST_CASE("quantized linear: a non-finite input raises the flag", "[model][linear]") {
  const int t = 32, k = 32, n = 32;
  const Recipe recipe = recipe_preset("ufp4");
  LinearSite site;
  site.recipe = &recipe;
  Rng rng(5);
  std::vector<bf16_t> x = sample(rng, t * k, 1.0);
  const std::vector<bf16_t> w = sample(rng, n * k, 0.05);
  std::vector<float> y(t * n);
  CHECK(linear_forward(site, x.data(), w.data(), t, k, n, y.data()));
  x[40] = kBf16QuietNaN;
  CHECK_FALSE(linear_forward(site, x.data(), w.data(), t, k, n, y.data()));
}
