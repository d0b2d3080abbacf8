// Random Hadamard transform (NUMERICS.md §4): v' = 1/4 * FWHT16(v ⊙ sigma), Sylvester ordering
// (stages h = 1, 2, 4, 8; (a, b) -> (a + b, a - b)), so FWHT16 is the matrix H[i][j] =
// (-1)^popcount(i & j), H H = 16 I, and the transform is orthonormal: R = 1/4 H diag(sigma),
// R^T R = I. Its inverse is v = sigma ⊙ 1/4 FWHT16(v'), i.e. rht16 with no signs, then the signs.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/numerics.h"
#include "tests/numerics_test_helpers.h"

using fp4::RhtSigns;
using fp4test::TestRng;

namespace {

int hadamard(int i, int j) { return (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -1 : 1; }

// The sign mask (bit i set: sigma_i = -1) from a string of 16 '+'/'-'.
uint16_t mask_from(const std::string& s) {
  uint16_t m = 0;
  for (int i = 0; i < 16; ++i)
    if (s.at(i) == '-') m |= static_cast<uint16_t>(1u << i);
  return m;
}

// How far a GEMM of transformed operands strays from the GEMM of the originals: the largest
// |Σ_r a'·b' − Σ_r a·b| / Σ_r |a·b| over the outputs (i, j), the sums over r < depth, where a(i, r)
// and b(j, r) are the original operands' elements and a_t, b_t the transformed ones'.
template <typename A, typename B, typename At, typename Bt>
double worst_gemm_deviation(int rows, int cols, int depth, A a, B b, At a_t, Bt b_t) {
  double worst = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      double y = 0, yt = 0, s = 0;
      for (int r = 0; r < depth; ++r) {
        const double x = a(i, r), w = b(j, r);
        y += x * w;
        yt += static_cast<double>(a_t(i, r)) * b_t(j, r);
        s += std::abs(x * w);
      }
      worst = std::max(worst, std::abs(yt - y) / s);
    }
  return worst;
}

std::vector<float> rht_apply(std::vector<float> v, uint16_t signs) {
  fp4::rht16(v.data(), signs);
  return v;
}

std::vector<float> rht_invert(std::vector<float> v, uint16_t signs) {
  fp4::rht16(v.data(), 0);  // 1/4 FWHT16
  for (int i = 0; i < 16; ++i)
    if ((signs >> i) & 1) v[i] = -v[i];
  return v;
}

double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

std::vector<float> random16(TestRng& rng, float scale) {
  std::vector<float> v(16);
  for (float& x : v) x = rng.sym() * scale;
  return v;
}

// The sign vectors every policy test uses.
const uint16_t kMasks[] = {0x0000, fp4::kRhtFixedSigns, 0xFFFF, 0x5A3C, 0x8001};

}  // namespace

TEST_CASE("RHT: the fixed sign vector is TransformerEngine's + + + - + - - - - - - + - + - -", "[numerics][rht]") {
  const uint16_t te = mask_from("+++-+------+-+--");
  CHECK(fp4::kRhtFixedSigns == te);
  CHECK(te == 0xD7E8);  // bits 3 5 6 7 8 9 10 12 14 15
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}})
    for (uint32_t layer : {0u, 7u, 0xffffu})
      for (uint32_t step : {0u, 1u, 99999u}) CHECK(fp4::rht_sign_mask(RhtSigns::fixed, seed, layer, step) == te);
}

TEST_CASE("RHT: the transform is 1/4 H16 diag(sigma) with Sylvester's H16", "[numerics][rht]") {
  for (uint16_t signs : kMasks) {
    for (int j = 0; j < 16; ++j) {
      std::vector<float> e(16, 0.0f);
      e[j] = 1.0f;
      const std::vector<float> col = rht_apply(e, signs);
      const float sj = ((signs >> j) & 1) ? -1.0f : 1.0f;
      for (int i = 0; i < 16; ++i) {
        INFO("signs 0x" << std::hex << signs << std::dec << ", column " << j << ", row " << i);
        CHECK(col[i] == 0.25f * sj * static_cast<float>(hadamard(i, j)));  // exact
      }
    }
  }
  // A hand vector: 1/4 FWHT(1, 2, ..., 16). Row 0 sums: 136/4 = 34. Row 2^k alternates blocks of
  // 2^k: (1 - 2 + 3 - ... - 16) = -8 -> -2; blocks of 2: -16 -> -4; of 4: -32 -> -8; of 8:
  // 36 - 100 = -64 -> -16. Every other row of a linear ramp is 0.
  std::vector<float> ramp(16);
  for (int i = 0; i < 16; ++i) ramp[i] = static_cast<float>(i + 1);
  const std::vector<float> want = {34, -2, -4, 0, -8, 0, 0, 0, -16, 0, 0, 0, 0, 0, 0, 0};
  CHECK(rht_apply(ramp, 0) == want);
  // With the fixed signs, the ramp's row 0 is sum(sigma_i (i+1))/4:
  //   + at 1 2 3 5 12 14 (sum 37), - at the rest (136 - 37 = 99) -> (37 - 99)/4 = -15.5.
  CHECK(rht_apply(ramp, fp4::kRhtFixedSigns)[0] == -15.5f);
}

TEST_CASE("RHT: norm preserved to fp32 rounding", "[numerics][rht]") {
  TestRng rng(1);
  double worst = 0.0;
  for (uint16_t signs : kMasks)
    for (int trial = 0; trial < 200; ++trial) {
      const float scale = std::ldexp(1.0f, static_cast<int>(rng.next() % 40) - 20);
      const std::vector<float> v = random16(rng, scale);
      const double n0 = norm2(v), n1 = norm2(rht_apply(v, signs));
      worst = std::max(worst, std::abs(n1 - n0) / n0);
    }
  INFO("worst relative change of the squared norm: " << worst);
  // Four rounded additions per output: relative error of each output <= ~4 * 2^-24 of the
  // largest partial sum; the squared norm moves by far less than 2e-6.
  CHECK(worst < 2e-6);
  CHECK(worst > 0.0);  // it is fp32 arithmetic, not exact: the test would notice a fake
}

TEST_CASE("RHT: sigma * 1/4 FWHT undoes it, applying it twice only inverts with no signs", "[numerics][rht]") {
  TestRng rng(2);
  for (uint16_t signs : kMasks) {
    INFO("signs 0x" << std::hex << signs);
    // Small integers: every sum is exact, so the round trip is exact.
    std::vector<float> ints(16);
    for (float& x : ints) x = static_cast<float>(static_cast<int>(rng.next() % 201) - 100);
    CHECK(rht_invert(rht_apply(ints, signs), signs) == ints);
    // Random fp32 values: back to within fp32 rounding.
    for (int trial = 0; trial < 100; ++trial) {
      const std::vector<float> v = random16(rng, 1.0f);
      const std::vector<float> back = rht_invert(rht_apply(v, signs), signs);
      double err = 0;
      for (int i = 0; i < 16; ++i) err += (static_cast<double>(back[i]) - v[i]) * (back[i] - v[i]);
      CHECK(std::sqrt(err / norm2(v)) < 1e-6);
    }
  }
  // (1/4 H)(1/4 H) = I: with no signs, rht16 is its own inverse.
  std::vector<float> ints(16);
  for (int i = 0; i < 16; ++i) ints[i] = static_cast<float>(3 * i - 20);
  CHECK(rht_apply(rht_apply(ints, 0), 0) == ints);
  // With signs, 1/16 H sigma H sigma is not the identity: e_0 -> (1/4, ..., 1/4) -> (1/16) H sigma 1.
  std::vector<float> e0(16, 0.0f);
  e0[0] = 1.0f;
  CHECK(rht_apply(rht_apply(e0, fp4::kRhtFixedSigns), fp4::kRhtFixedSigns) != e0);
  CHECK(rht_invert(rht_apply(e0, fp4::kRhtFixedSigns), fp4::kRhtFixedSigns) == e0);
}

TEST_CASE("RHT: a GEMM of two operands transformed along K with the same signs equals the plain GEMM",
          "[numerics][rht]") {
  // Y = A B^T with A [M, K], B [N, K]; each row's 16-vectors transformed: a'.b' = a^T R^T R b = a.b.
  const int M = 8, N = 12, K = 64;
  TestRng rng(3);
  std::vector<float> A(M * K), B(N * K);
  for (float& x : A) x = rng.sym();
  for (float& x : B) x = rng.sym();
  for (uint16_t signs : kMasks) {
    INFO("signs 0x" << std::hex << signs);
    std::vector<float> At = A, Bt = B, Bw = B;
    for (int r = 0; r < M; ++r)
      for (int k = 0; k < K; k += 16) fp4::rht16(&At[r * K + k], signs);
    for (int r = 0; r < N; ++r)
      for (int k = 0; k < K; k += 16) {
        fp4::rht16(&Bt[r * K + k], signs);
        fp4::rht16(&Bw[r * K + k], static_cast<uint16_t>(signs ^ 0x0F0F));  // different signs
      }
    double worst = 0, worst_wrong = 0;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double y = 0, yt = 0, yw = 0, na = 0, nb = 0;
        for (int k = 0; k < K; ++k) {
          y += static_cast<double>(A[i * K + k]) * B[j * K + k];
          yt += static_cast<double>(At[i * K + k]) * Bt[j * K + k];
          yw += static_cast<double>(At[i * K + k]) * Bw[j * K + k];
          na += static_cast<double>(A[i * K + k]) * A[i * K + k];
          nb += static_cast<double>(B[j * K + k]) * B[j * K + k];
        }
        const double scale = std::sqrt(na * nb);
        worst = std::max(worst, std::abs(yt - y) / scale);
        worst_wrong = std::max(worst_wrong, std::abs(yw - y) / scale);
      }
    CHECK(worst < 1e-6);
    CHECK(worst_wrong > 1e-2);  // the cancellation really needs the same signs on both sides
  }
}

TEST_CASE("RHT through quantize(): the transform runs along the blocking axis and cancels in each GEMM",
          "[numerics][rht][quantize]") {
  // fprop: Y = X W^T, X [T, K] and W [N, K] blocked along K (rows).
  // wgrad: dW = dY^T X, dY [T, N] and X [T, K] blocked along T (columns).
  const int T = 32, K = 48, N = 16;
  TestRng rng(4);
  std::vector<uint16_t> X(T * K), W(N * K), dY(T * N);
  for (auto& h : X) h = fp4test::bf_trunc(rng.sym());
  for (auto& h : W) h = fp4test::bf_trunc(rng.sym());
  for (auto& h : dY) h = fp4test::bf_trunc(rng.sym());
  fp4::QuantSpec rows;
  rows.rht = true;
  rows.rht_signs = fp4::kRhtFixedSigns;
  fp4::QuantSpec cols = rows;
  cols.along = fp4::BlockAlong::column;
  const auto Xr = fp4::cpu::quantize(X.data(), T, K, rows, true);
  const auto Wr = fp4::cpu::quantize(W.data(), N, K, rows, true);
  const auto dYc = fp4::cpu::quantize(dY.data(), T, N, cols, true);
  const auto Xc = fp4::cpu::quantize(X.data(), T, K, cols, true);
  REQUIRE(Xr.transformed.size() == X.size());
  REQUIRE(dYc.transformed.size() == dY.size());
  // Spot check the orientation: row 0 of X, elements 16..31, is rht16 of the same 16 source values.
  std::vector<float> seg(16);
  for (int k = 0; k < 16; ++k) seg[k] = fp4test::fl(X[16 + k]);
  fp4::rht16(seg.data(), fp4::kRhtFixedSigns);
  for (int k = 0; k < 16; ++k) CHECK(Xr.transformed[16 + k] == seg[k]);
  // Column 5 of X, rows 16..31.
  for (int k = 0; k < 16; ++k) seg[k] = fp4test::fl(X[(16 + k) * K + 5]);
  fp4::rht16(seg.data(), fp4::kRhtFixedSigns);
  for (int k = 0; k < 16; ++k) CHECK(Xc.transformed[(16 + k) * K + 5] == seg[k]);

  // The elements by (row, column) of each operand, as given and as transformed.
  auto x = [&](int t, int k) { return fp4test::fl(X[t * K + k]); };
  auto w = [&](int n, int k) { return fp4test::fl(W[n * K + k]); };
  auto dy = [&](int t, int n) { return fp4test::fl(dY[t * N + n]); };
  auto xr = [&](int t, int k) { return Xr.transformed[t * K + k]; };
  auto wr = [&](int n, int k) { return Wr.transformed[n * K + k]; };
  auto dyc = [&](int t, int n) { return dYc.transformed[t * N + n]; };
  auto xc = [&](int t, int k) { return Xc.transformed[t * K + k]; };
  auto transposed = [](auto f) { return [f](int i, int j) { return f(j, i); }; };
  // fprop: Y[t, n] sums over k; wgrad: dW[n, k] sums over t.
  CHECK(worst_gemm_deviation(T, N, K, x, w, xr, wr) < 1e-6);
  CHECK(worst_gemm_deviation(N, K, T, transposed(dy), transposed(x), transposed(dyc), transposed(xc)) < 1e-6);
}

TEST_CASE("RHT through quantize(): amax and scales are taken after the transform", "[numerics][rht][quantize]") {
  // Row [1, 2, ..., 16] with no signs transforms to [34, -2, -4, 0, -8, 0, 0, 0, -16, 0, ...]:
  // amax_b = 34, fp32 scale s = 34/6; e4m3x2 amax_t = 34.
  std::vector<uint16_t> x(16);
  for (int i = 0; i < 16; ++i) x[i] = fp4test::bf(static_cast<float>(i + 1));
  fp4::QuantSpec s;
  s.rht = true;
  s.rht_signs = 0;
  const auto q = fp4::cpu::quantize(x.data(), 1, 16, s, true);
  const std::vector<float> want = {34, -2, -4, 0, -8, 0, 0, 0, -16, 0, 0, 0, 0, 0, 0, 0};
  CHECK(q.transformed == want);
  CHECK(q.scales[0] == 34.0f / 6.0f);
  CHECK(q.amax == 34.0f);
  // t = v'/s: 34 -> 6 (code 7), -16 -> -2.8235 -> -3 (code 13), -8 -> -1.41 -> -1.5 (code 11),
  // -4 -> -0.706 -> -0.5 (code 9), -2 -> -0.353 -> -0.5 (code 9), 0 -> 0.
  CHECK(int(q.codes[0]) == 7);
  CHECK(int(q.codes[8]) == 13);
  CHECK(int(q.codes[4]) == 11);
  CHECK(int(q.codes[2]) == 9);
  CHECK(int(q.codes[1]) == 9);
  CHECK(int(q.codes[3]) == 0);
  s.scale = fp4::ScaleMode::e4m3x2;
  const auto q2 = fp4::cpu::quantize(x.data(), 1, 16, s);
  CHECK(q2.amax == 34.0f);
  CHECK(q2.transformed.empty());  // only kept when asked for
}

TEST_CASE("RHT sign policies: fixed, seeded, per_layer, per_step", "[numerics][rht]") {
  const uint64_t seed = 0x1234abcd5678ef01ull;
  SECTION("seeded: one vector per run, the same for every layer and step") {
    const uint16_t m = fp4::rht_sign_mask(RhtSigns::seeded, seed, 0, 0);
    for (uint32_t layer : {0u, 1u, 2u, 47u, 1000u})
      for (uint32_t step : {0u, 1u, 2u, 500u}) CHECK(fp4::rht_sign_mask(RhtSigns::seeded, seed, layer, step) == m);
    // Depends on the run seed (both halves of the 64-bit seed).
    std::set<uint16_t> seen;
    const uint64_t seeds[] = {seed, seed + 1, seed + 2, seed ^ (1ull << 32), seed ^ (1ull << 63), 0, 42};
    for (uint64_t s2 : seeds)
      seen.insert(fp4::rht_sign_mask(RhtSigns::seeded, s2, 0, 0));
    CHECK(seen.size() == 7);
  }
  SECTION("per_layer: differs between layers, fixed across steps") {
    std::set<uint16_t> seen;
    for (uint32_t layer = 0; layer < 24; ++layer) {
      const uint16_t m = fp4::rht_sign_mask(RhtSigns::per_layer, seed, layer, 0);
      seen.insert(m);
      for (uint32_t step : {1u, 2u, 77u}) CHECK(fp4::rht_sign_mask(RhtSigns::per_layer, seed, layer, step) == m);
    }
    CHECK(seen.size() == 24);
    CHECK(fp4::rht_sign_mask(RhtSigns::per_layer, seed, 3, 0) != fp4::rht_sign_mask(RhtSigns::per_layer, seed + 1, 3, 0));
  }
  SECTION("per_step: differs between steps (and layers), deterministic") {
    std::set<uint16_t> seen;
    for (uint32_t step = 0; step < 24; ++step) {
      const uint16_t m = fp4::rht_sign_mask(RhtSigns::per_step, seed, 5, step);
      CHECK(fp4::rht_sign_mask(RhtSigns::per_step, seed, 5, step) == m);
      seen.insert(m);
    }
    CHECK(seen.size() == 24);
    CHECK(fp4::rht_sign_mask(RhtSigns::per_step, seed, 5, 10) != fp4::rht_sign_mask(RhtSigns::per_step, seed, 6, 10));
  }
  SECTION("the drawn vectors are balanced: mean popcount over 1024 layers near 8") {
    double total = 0;
    for (uint32_t layer = 0; layer < 1024; ++layer)
      total += std::popcount(static_cast<unsigned>(fp4::rht_sign_mask(RhtSigns::per_layer, seed, layer, 0)));
    // popcount of 16 fair bits: mean 8, sd 2; the mean of 1024 has sd 0.0625.
    CHECK(std::abs(total / 1024 - 8.0) < 0.25);
  }
  SECTION("the documented packing: low 16 bits of word 0 of philox((layer, ~0, 'RHT\\0', step), seed)") {
    // seeded uses layer ~0 and step ~0; per_layer the layer and step ~0; per_step both.
    auto draw = [&](uint32_t layer, uint32_t step) {
      return static_cast<uint16_t>(fp4::philox4x32_10(layer, 0xffffffffu, 0x52485400u, step,
                                                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32))
                                       .w[0] &
                                   0xffffu);
    };
    CHECK(fp4::rht_sign_mask(RhtSigns::seeded, seed, 9, 9) == draw(0xffffffffu, 0xffffffffu));
    CHECK(fp4::rht_sign_mask(RhtSigns::per_layer, seed, 9, 9) == draw(9, 0xffffffffu));
    CHECK(fp4::rht_sign_mask(RhtSigns::per_step, seed, 9, 9) == draw(9, 9));
    // No two policies share a counter: the largest linear id's per-layer vector is not the run's
    // seeded vector, and per_step at step 0 is not per_layer.
    CHECK(draw(0xffffffffu, 0xffffffffu) != draw(0xffffu, 0xffffffffu));
    CHECK(fp4::rht_sign_mask(RhtSigns::per_step, seed, 9, 0) != fp4::rht_sign_mask(RhtSigns::per_layer, seed, 9, 0));
  }
}
