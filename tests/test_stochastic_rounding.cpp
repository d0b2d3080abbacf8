// Stochastic rounding (NUMERICS.md §2) and its random numbers (§6).
//   lo <= |t| < hi adjacent magnitudes, p = (|t| - lo)/(hi - lo) in fp32, u = (r >> 8) * 2^-24;
//   the magnitude is hi if u < p, else lo; |t| >= G_max gives G_max.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/numerics.h"
#include "tests/numerics_test_helpers.h"

using fp4::Grid;
using fp4::Rounding;
using fp4test::fl;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kULast = 1.0f - 0x1p-24f;  // the largest u that (r >> 8) * 2^-24 can give

struct GridConfig {
  Grid grid;
  float gmax;
  const char* name;
};

const GridConfig kConfigs[] = {
    {Grid::e2m1, 6.0f, "e2m1"},
    {Grid::e2m1, 4.0f, "e2m1 clip 4"},
    {Grid::e2m1, 3.0f, "e2m1 clip 3"},
    {Grid::e2m1, 2.0f, "e2m1 clip 2"},
    {Grid::e1m2, 7.0f, "e1m2"},
};

// The grid's magnitudes up to G_max, from the contract's table.
std::vector<float> magnitudes(const GridConfig& c) {
  std::vector<float> all = c.grid == Grid::e2m1
                               ? std::vector<float>{0, 0.5f, 1, 1.5f, 2, 3, 4, 6}
                               : std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> r;
  for (float m : all)
    if (m <= c.gmax) r.push_back(m);
  return r;
}

float sr_magnitude(const GridConfig& c, float x, float u) {
  const int mi = fp4::grid_max_index(c.grid, c.gmax);
  return fp4::grid_magnitude(c.grid, fp4::round_stochastic_index(c.grid, x, mi, u));
}

}  // namespace

TEST_CASE("SR: u = (r >> 8) * 2^-24", "[numerics][sr]") {
  CHECK(fp4::uniform_from_word(0x00000000u) == 0.0f);
  CHECK(fp4::uniform_from_word(0x000000FFu) == 0.0f);  // the low 8 bits are dropped
  CHECK(fp4::uniform_from_word(0x00000100u) == 0x1p-24f);
  CHECK(fp4::uniform_from_word(0x80000000u) == 0.5f);
  CHECK(fp4::uniform_from_word(0x7FFFFFFFu) == 0.5f - 0x1p-24f);
  CHECK(fp4::uniform_from_word(0xFFFFFFFFu) == kULast);  // never reaches 1
  CHECK(fp4::uniform_from_word(0x40000000u) == 0.25f);
}

TEST_CASE("SR: the threshold is u < p, worked by hand", "[numerics][sr]") {
  const GridConfig e2m1{Grid::e2m1, 6.0f, "e2m1"}, e1m2{Grid::e1m2, 7.0f, "e1m2"};
  // e2m1, x = 0.75 in [0.5, 1): p = 0.25/0.5 = 0.5.
  CHECK(sr_magnitude(e2m1, 0.75f, 0.0f) == 1.0f);
  CHECK(sr_magnitude(e2m1, 0.75f, 0.5f - 0x1p-24f) == 1.0f);
  CHECK(sr_magnitude(e2m1, 0.75f, 0.5f) == 0.5f);
  CHECK(sr_magnitude(e2m1, 0.75f, kULast) == 0.5f);
  // e2m1, x = 4.5 in [4, 6): p = 0.5/2 = 0.25.
  CHECK(sr_magnitude(e2m1, 4.5f, 0.25f - 0x1p-24f) == 6.0f);
  CHECK(sr_magnitude(e2m1, 4.5f, 0.25f) == 4.0f);
  // e2m1, x = 2.75 in [2, 3): p = 0.75.
  CHECK(sr_magnitude(e2m1, 2.75f, 0.75f - 0x1p-24f) == 3.0f);
  CHECK(sr_magnitude(e2m1, 2.75f, 0.75f) == 2.0f);
  // e2m1, x = 0.125 in [0, 0.5): p = 0.25.
  CHECK(sr_magnitude(e2m1, 0.125f, 0.0f) == 0.5f);
  CHECK(sr_magnitude(e2m1, 0.125f, 0.25f) == 0.0f);
  // e1m2, x = 3.25 in [3, 4): p = 0.25.
  CHECK(sr_magnitude(e1m2, 3.25f, 0.25f - 0x1p-24f) == 4.0f);
  CHECK(sr_magnitude(e1m2, 3.25f, 0.25f) == 3.0f);
  // e1m2, x = 6.875 in [6, 7): p = 0.875.
  CHECK(sr_magnitude(e1m2, 6.875f, 0.875f - 0x1p-24f) == 7.0f);
  CHECK(sr_magnitude(e1m2, 6.875f, 0.875f) == 6.0f);
  // A tiny magnitude goes up only for a tiny u: x = 2^-20, p = 2^-19.
  CHECK(sr_magnitude(e2m1, 0x1p-20f, 0.0f) == 0.5f);
  CHECK(sr_magnitude(e2m1, 0x1p-20f, 0x1p-19f) == 0.0f);
}

TEST_CASE("SR: saturation at G_max and grid points that never move", "[numerics][sr]") {
  const std::vector<float> us = {0.0f, 0x1p-24f, 0.25f, 0.5f, 0.75f, 0.999f, kULast};
  for (const GridConfig& c : kConfigs) {
    INFO(c.name);
    for (float u : us) {
      INFO("u = " << u);
      for (float m : magnitudes(c)) CHECK(sr_magnitude(c, m, u) == m);
      CHECK(sr_magnitude(c, c.gmax, u) == c.gmax);
      CHECK(sr_magnitude(c, std::nextafter(c.gmax, kInf), u) == c.gmax);
      CHECK(sr_magnitude(c, c.gmax + 0.75f, u) == c.gmax);
      CHECK(sr_magnitude(c, 1e30f, u) == c.gmax);
      CHECK(sr_magnitude(c, kInf, u) == c.gmax);
    }
    // Grid points with the u of 1000 Philox draws.
    for (uint64_t i = 0; i < 1000; ++i) {
      const float u = fp4::uniform_from_word(fp4::philox_word_for_element(7, 3, 5, i));
      for (float m : magnitudes(c))
        if (sr_magnitude(c, m, u) != m) FAIL("grid point " << m << " moved with u = " << u);
    }
  }
  // quantize_element keeps the sign for SR too: -0.75 in a unit-scale block with u = 0 -> -1.
  const fp4::BlockScale s = fp4::make_block_scale(fp4::ScaleMode::fp32, 6.0f, 6.0f, {1.0f, 1.0f});
  fp4::QuantizedElement e = fp4::quantize_element(-0.75f, s, Grid::e2m1, 7, Rounding::sr, 0.0f);
  CHECK(e.code == (8 | 2));
  CHECK(fl(e.out) == -1.0f);
  e = fp4::quantize_element(-0.2f, s, Grid::e2m1, 7, Rounding::sr, kULast);  // p = 0.4, u > p -> -0
  CHECK(e.code == 8);
  CHECK(e.out == 0x8000);
}

TEST_CASE("SR is unbiased in every bin of both grids (1000 Philox draws, 4 sigma)", "[numerics][sr]") {
  // For x = lo + f (hi - lo): E[q] = lo + p (hi - lo) = x, and the mean of N = 1000 Bernoulli draws
  // has sigma = (hi - lo) sqrt(p (1 - p) / N).
  const float fractions[] = {0.125f, 0.25f, 0.5f, 0.7f, 0.875f, 0.02f};
  const int N = 1000;
  uint32_t stream = 100;
  for (const GridConfig& c : kConfigs) {
    const std::vector<float> m = magnitudes(c);
    for (size_t k = 0; k + 1 < m.size(); ++k) {
      const float lo = m[k], hi = m[k + 1];
      for (float f : fractions) {
        const float x = lo + f * (hi - lo);
        const double p = (static_cast<double>(x) - lo) / (hi - lo);
        REQUIRE(p > 0.0);
        REQUIRE(p < 1.0);
        ++stream;
        double sum = 0.0;
        int n_hi = 0;
        for (int i = 0; i < N; ++i) {
          const float u = fp4::uniform_from_word(
              fp4::philox_word_for_element(0x5eed5eed12345678ull, stream, 11, static_cast<uint64_t>(i)));
          const float q = sr_magnitude(c, x, u);
          if (q != lo && q != hi) FAIL(c.name << ": x = " << x << " gave " << q << ", not " << lo << " or " << hi);
          n_hi += q == hi;
          sum += q;
        }
        const double mean = sum / N;
        const double sigma = (hi - lo) * std::sqrt(p * (1.0 - p) / N);
        INFO(c.name << ": bin [" << lo << ", " << hi << "), x = " << x << ", p = " << p << ", mean = " << mean
                    << ", sigma = " << sigma << ", draws up = " << n_hi);
        CHECK(std::abs(mean - x) <= 4.0 * sigma);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SR through quantize(): reproducible, stream/step/seed dependent, element index = row-major index
// ---------------------------------------------------------------------------------------------

namespace {

constexpr int kR = 32, kC = 64;

// Values between grid points (with p worked out by hand) and a 6 on every position with
// r % 16 == c % 16, so every row block, column block and 16x16 tile has amax 6: fp32 scale s = 1,
// t = v.
struct BinCase {
  float x, lo, hi, p;
};
const BinCase kBins[] = {
    {0.75f, 0.5f, 1.0f, 0.5f},  {2.5f, 2.0f, 3.0f, 0.5f},  {4.5f, 4.0f, 6.0f, 0.25f},
    {1.25f, 1.0f, 1.5f, 0.5f},  {0.125f, 0.0f, 0.5f, 0.25f}, {3.75f, 3.0f, 4.0f, 0.75f},
    {5.5f, 4.0f, 6.0f, 0.75f},  {1.625f, 1.5f, 2.0f, 0.25f},
};

bool is_anchor(int r, int c) { return r % 16 == c % 16; }

std::vector<uint16_t> sr_input() {
  std::vector<uint16_t> x(kR * kC);
  for (int r = 0; r < kR; ++r)
    for (int c = 0; c < kC; ++c) {
      const int i = r * kC + c;
      const float sign = (i % 3 == 0) ? -1.0f : 1.0f;
      x[i] = fp4test::bf(is_anchor(r, c) ? 6.0f * sign : kBins[i % 8].x * sign);
    }
  return x;
}

fp4::QuantSpec sr_spec(uint64_t seed, uint32_t stream, uint32_t step) {
  fp4::QuantSpec s;
  s.grid = Grid::e2m1;
  s.gmax = 6.0f;
  s.scale = fp4::ScaleMode::fp32;
  s.block = 16;
  s.rounding = Rounding::sr;
  s.seed = seed;
  s.stream = stream;
  s.step = step;
  return s;
}

int count_differences(const fp4::cpu::QuantizedTensor& a, const fp4::cpu::QuantizedTensor& b) {
  int n = 0;
  for (size_t i = 0; i < a.codes.size(); ++i) n += a.codes[i] != b.codes[i];
  return n;
}

}  // namespace

TEST_CASE("SR through quantize(): same seed/stream/step gives the same bits, any change differs",
          "[numerics][sr][quantize]") {
  const std::vector<uint16_t> x = sr_input();
  const uint64_t seed = 0x0123456789abcdefull;
  const auto a = fp4::cpu::quantize(x.data(), kR, kC, sr_spec(seed, 0x00012005u, 3));
  const auto b = fp4::cpu::quantize(x.data(), kR, kC, sr_spec(seed, 0x00012005u, 3));
  CHECK(a.codes == b.codes);
  CHECK(a.dequant == b.dequant);
  // Non-anchor elements: 2048 - 128 = 1920, with p in {0.25, 0.5, 0.75}: two independent draws
  // disagree with probability 2p(1-p) >= 0.375, i.e. ~800 on average; any sane generator gives > 500.
  const auto other_stream = fp4::cpu::quantize(x.data(), kR, kC, sr_spec(seed, 0x00012006u, 3));
  const auto other_step = fp4::cpu::quantize(x.data(), kR, kC, sr_spec(seed, 0x00012005u, 4));
  const auto other_seed = fp4::cpu::quantize(x.data(), kR, kC, sr_spec(seed + 1, 0x00012005u, 3));
  const auto other_seed_hi = fp4::cpu::quantize(x.data(), kR, kC, sr_spec(seed ^ (1ull << 40), 0x00012005u, 3));
  CHECK(count_differences(a, other_stream) > 500);
  CHECK(count_differences(a, other_step) > 500);
  CHECK(count_differences(a, other_seed) > 500);
  CHECK(count_differences(a, other_seed_hi) > 500);
  // Round-to-nearest never looks at the random state.
  fp4::QuantSpec rn1 = sr_spec(seed, 1, 1), rn2 = sr_spec(seed + 99, 2, 2);
  rn1.rounding = rn2.rounding = Rounding::rn;
  const auto r1 = fp4::cpu::quantize(x.data(), kR, kC, rn1);
  const auto r2 = fp4::cpu::quantize(x.data(), kR, kC, rn2);
  CHECK(r1.codes == r2.codes);
  CHECK(r1.dequant == r2.dequant);
}

TEST_CASE("SR through quantize(): element i draws word i & 3 of Philox(i >> 2, i >> 34, stream, step) keyed by the seed, "
          "whatever the blocking", "[numerics][sr][quantize]") {
  const std::vector<uint16_t> x = sr_input();
  const uint64_t seed = 0xfeedface00c0ffeeull;
  const uint32_t stream = fp4::philox_stream(5, fp4::Gemm::wgrad, fp4::Operand::dy, 1);
  const uint32_t step = 1234;
  fp4::QuantSpec row = sr_spec(seed, stream, step), col = row, tile = row;
  col.along = fp4::BlockAlong::column;
  tile.tile_2d = true;
  tile.along = fp4::BlockAlong::column;
  const auto qr = fp4::cpu::quantize(x.data(), kR, kC, row);
  const auto qc = fp4::cpu::quantize(x.data(), kR, kC, col);
  const auto qt = fp4::cpu::quantize(x.data(), kR, kC, tile);
  for (float s : qr.scales) REQUIRE(s == 1.0f);
  for (float s : qc.scales) REQUIRE(s == 1.0f);
  for (float s : qt.scales) REQUIRE(s == 1.0f);
  int mismatches = 0, ups = 0, draws = 0;
  for (int r = 0; r < kR; ++r)
    for (int c = 0; c < kC; ++c) {
      const int i = r * kC + c;
      const float v = fl(x[i]);
      float want;
      if (is_anchor(r, c)) {
        want = v;  // 6 is a grid point
      } else {
        const BinCase& b = kBins[i % 8];
        // The counter spelled out from NUMERICS.md §6 (the tensor is far below 2^34 elements).
        const fp4::Philox4 w = fp4::philox4x32_10(static_cast<uint32_t>(i >> 2), 0u, stream, step,
                                                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
        const float u = static_cast<float>(w.w[i & 3] >> 8) * 0x1p-24f;
        const float mag = u < b.p ? b.hi : b.lo;
        want = v < 0 ? -mag : mag;
        ups += mag == b.hi;
        ++draws;
      }
      for (const auto* q : {&qr, &qc, &qt}) {
        if (fl(q->dequant[i]) != want || std::signbit(fl(q->dequant[i])) != std::signbit(want)) {
          ++mismatches;
          if (mismatches < 10) UNSCOPED_INFO("element (" << r << ", " << c << "): " << fl(q->dequant[i]) << " != " << want);
        }
      }
    }
  CHECK(mismatches == 0);
  // The draws are not degenerate (expected up-fraction 0.4375 over the 8 bins).
  CHECK(ups > draws / 4);
  CHECK(ups < draws * 3 / 4);
}
