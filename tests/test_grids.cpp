// Element grids of NUMERICS.md §2, round-to-nearest: every expected value below is worked out by
// hand from the grid tables in the contract, not taken from the code.
//
//   e2m1 magnitudes (index: value): 0:0  1:0.5  2:1  3:1.5  4:2  5:3  6:4  7:6     G_max 6
//   e1m2 magnitudes: index i is the integer i, 0..7                                 G_max 7
//   midpoints of e2m1 and the even index each tie goes to:
//     0.25 (0|1 -> 0)  0.75 (1|2 -> 2)  1.25 (2|3 -> 2)  1.75 (3|4 -> 4)  2.5 (4|5 -> 4)
//     3.5 (5|6 -> 6)   5 (6|7 -> 6)
//   clip c in {2, 3, 4} keeps the magnitudes <= c and saturates at G_max = c.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/numerics.h"
#include "tests/numerics_test_helpers.h"

using fp4::Grid;
using fp4test::bf;
using fp4test::fl;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

float up(float x) { return std::nextafter(x, kInf); }
float down(float x) { return std::nextafter(x, -kInf); }

struct RnCase {
  float x;
  int index;  // expected magnitude index
};

void check_rn(Grid g, int max_index, const std::vector<RnCase>& cases) {
  for (const RnCase& c : cases) {
    INFO("x = " << c.x << " (bits 0x" << std::hex << fp4test::bits_of(c.x) << std::dec
                << "), max_index " << max_index);
    CHECK(fp4::round_nearest_index(g, c.x, max_index) == c.index);
  }
}

}  // namespace

TEST_CASE("grid tables: e2m1 and e1m2 magnitudes, G_max and clip indices", "[numerics][grid]") {
  const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int i = 0; i < 8; ++i) {
    CHECK(fp4::grid_magnitude(Grid::e2m1, i) == e2m1[i]);
    CHECK(fp4::e2m1_magnitude(i) == e2m1[i]);
    CHECK(fp4::grid_magnitude(Grid::e1m2, i) == static_cast<float>(i));
  }
  CHECK(fp4::grid_full_max(Grid::e2m1) == 6.0f);
  CHECK(fp4::grid_full_max(Grid::e1m2) == 7.0f);
  // clip = G_max: the index of the largest magnitude <= clip.
  CHECK(fp4::grid_max_index(Grid::e2m1, 6.0f) == 7);
  CHECK(fp4::grid_max_index(Grid::e2m1, 4.0f) == 6);
  CHECK(fp4::grid_max_index(Grid::e2m1, 3.0f) == 5);
  CHECK(fp4::grid_max_index(Grid::e2m1, 2.0f) == 4);
  CHECK(fp4::grid_max_index(Grid::e1m2, 7.0f) == 7);
  fp4::QuantSpec s;
  s.grid = Grid::e2m1;
  s.gmax = 3.0f;
  CHECK(fp4::spec_max_index(s) == 5);
  // Codes are sign << 3 | index; code_value undoes it.
  CHECK(fp4::code_value(Grid::e2m1, 0x7) == 6.0f);
  CHECK(fp4::code_value(Grid::e2m1, 0xD) == -3.0f);
  CHECK(fp4::code_value(Grid::e1m2, 0xF) == -7.0f);
  CHECK(std::signbit(fp4::code_value(Grid::e2m1, 0x8)));
}

TEST_CASE("e2m1 round-to-nearest: hand-worked vectors, ties to the even code", "[numerics][grid]") {
  check_rn(Grid::e2m1, 7,
           {
               {0.0f, 0},
               {0.1f, 0},
               {0.25f, 0},  // tie 0|0.5 -> index 0 (even)
               {up(0.25f), 1},
               {0.5f, 1},
               {down(0.75f), 1},
               {0.75f, 2},  // tie 0.5|1 -> index 2 (1.0)
               {up(0.75f), 2},
               {1.0f, 2},
               {1.25f, 2},  // tie 1|1.5 -> index 2 (1.0)
               {up(1.25f), 3},
               {1.5f, 3},
               {down(1.75f), 3},
               {1.75f, 4},  // tie 1.5|2 -> index 4 (2.0)
               {2.0f, 4},
               {2.5f, 4},  // tie 2|3 -> index 4 (2.0)
               {up(2.5f), 5},
               {3.0f, 5},
               {down(3.5f), 5},
               {3.5f, 6},  // tie 3|4 -> index 6 (4.0)
               {4.0f, 6},
               {5.0f, 6},  // tie 4|6 -> index 6 (4.0)
               {up(5.0f), 7},
               {5.5f, 7},
               {6.0f, 7},
               // saturation: anything >= 6 is 6
               {up(6.0f), 7},
               {6.5f, 7},
               {7.0f, 7},
               {1000.0f, 7},
               {1e30f, 7},
               {FLT_MAX, 7},
               {kInf, 7},
               // subnormal magnitudes round to zero
               {1e-45f, 0},
               {FLT_MIN, 0},
           });
}

TEST_CASE("e1m2 round-to-nearest: half to even integer, saturation at 7", "[numerics][grid]") {
  check_rn(Grid::e1m2, 7,
           {
               {0.0f, 0},
               {1e-45f, 0},
               {0.49f, 0},
               {0.5f, 0},  // tie 0|1 -> 0
               {up(0.5f), 1},
               {1.0f, 1},
               {1.5f, 2},  // tie 1|2 -> 2
               {down(1.5f), 1},
               {2.5f, 2},  // tie 2|3 -> 2
               {up(2.5f), 3},
               {2.7f, 3},
               {3.2f, 3},
               {3.5f, 4},  // tie 3|4 -> 4
               {down(3.5f), 3},
               {4.5f, 4},  // tie 4|5 -> 4
               {5.5f, 6},  // tie 5|6 -> 6
               {6.5f, 6},  // tie 6|7 -> 6
               {up(6.5f), 7},
               {6.75f, 7},
               {7.0f, 7},
               {7.49f, 7},
               {7.5f, 7},
               {down(8.0f), 7},
               {8.0f, 7},
               {1e30f, 7},
               {FLT_MAX, 7},
               {kInf, 7},
           });
}

TEST_CASE("e2m1 clip variants: G_max = clip, everything above saturates to clip", "[numerics][grid]") {
  SECTION("clip 2 (magnitudes 0 0.5 1 1.5 2)") {
    const int mi = fp4::grid_max_index(Grid::e2m1, 2.0f);
    REQUIRE(mi == 4);
    check_rn(Grid::e2m1, mi,
             {{1.25f, 2}, {1.7f, 3}, {1.75f, 4}, {2.0f, 4}, {2.4f, 4}, {2.5f, 4}, {2.6f, 4},
              {3.6f, 4}, {6.0f, 4}, {1e30f, 4}, {kInf, 4}});
  }
  SECTION("clip 3 (magnitudes ... 2 3)") {
    const int mi = fp4::grid_max_index(Grid::e2m1, 3.0f);
    REQUIRE(mi == 5);
    check_rn(Grid::e2m1, mi,
             {{2.5f, 4}, {2.6f, 5}, {3.0f, 5}, {3.4f, 5}, {3.5f, 5}, {3.6f, 5},  // 3.6 -> 3 (not 4)
              {5.0f, 5}, {6.0f, 5}, {100.0f, 5}, {kInf, 5}});
  }
  SECTION("clip 4 (magnitudes ... 3 4)") {
    const int mi = fp4::grid_max_index(Grid::e2m1, 4.0f);
    REQUIRE(mi == 6);
    check_rn(Grid::e2m1, mi,
             {{3.4f, 5}, {3.5f, 6}, {4.0f, 6}, {4.9f, 6}, {5.0f, 6}, {5.1f, 6},  // 5.1 -> 4 (not 6)
              {6.0f, 6}, {100.0f, 6}, {kInf, 6}});
  }
  SECTION("through quantize_element with a unit fp32 scale") {
    // fp32 scale with amax 3 and G_max 3: s = 3/3 = 1, so t = v.
    const fp4::BlockScale s = fp4::make_block_scale(fp4::ScaleMode::fp32, 3.0f, 3.0f, {1.0f, 1.0f});
    REQUIRE(s.stored == 1.0f);
    const int mi = fp4::grid_max_index(Grid::e2m1, 3.0f);
    fp4::QuantizedElement e = fp4::quantize_element(3.6f, s, Grid::e2m1, mi, fp4::Rounding::rn, 0.0f);
    CHECK(e.code == 5);               // +, index 5 (3.0)
    CHECK(fl(e.out) == 3.0f);
    e = fp4::quantize_element(-3.6f, s, Grid::e2m1, mi, fp4::Rounding::rn, 0.0f);
    CHECK(e.code == (8 | 5));
    CHECK(fl(e.out) == -3.0f);
  }
}

TEST_CASE("signed zero and sign handling in quantize_element", "[numerics][grid]") {
  // fp32 scale, amax 6, G_max 6: s = 1.
  const fp4::BlockScale s = fp4::make_block_scale(fp4::ScaleMode::fp32, 6.0f, 6.0f, {1.0f, 1.0f});
  REQUIRE(s.stored == 1.0f);
  REQUIRE_FALSE(s.zero_block);
  struct Case {
    float v;
    uint8_t code;
    uint16_t out;  // bf16 bits
  };
  const Case cases[] = {
      {0.0f, 0x0, 0x0000},   // +0
      {-0.0f, 0x8, 0x8000},  // -0 keeps the sign in code and output
      {-0.2f, 0x8, 0x8000},  // rounds to zero, sign kept
      {-0.25f, 0x8, 0x8000}, // tie to 0, sign kept
      {0.25f, 0x0, 0x0000},
      {-0.3f, 0x9, 0xBF00},  // -0.5: bf16 0xBF00
      {-1.75f, 0xC, 0xC000}, // tie -> -2.0: bf16 0xC000
      {5.0f, 0x6, 0x4080},   // tie -> 4.0: bf16 0x4080
      {-5.5f, 0xF, 0xC0C0},  // -6.0: bf16 0xC0C0
      {-7.0f, 0xF, 0xC0C0},  // saturates at -6
  };
  for (const Case& c : cases) {
    INFO("v = " << c.v);
    const fp4::QuantizedElement e =
        fp4::quantize_element(c.v, s, Grid::e2m1, 7, fp4::Rounding::rn, 0.0f);
    CHECK(int(e.code) == int(c.code));
    CHECK(e.out == c.out);
  }
  // e1m2: -0.4 rounds to -0 with the sign bit set.
  const fp4::BlockScale s7 = fp4::make_block_scale(fp4::ScaleMode::fp32, 7.0f, 7.0f, {1.0f, 1.0f});
  REQUIRE(s7.stored == 1.0f);
  const fp4::QuantizedElement e = fp4::quantize_element(-0.4f, s7, Grid::e1m2, 7, fp4::Rounding::rn, 0.0f);
  CHECK(e.code == 0x8);
  CHECK(e.out == 0x8000);
}

// ---------------------------------------------------------------------------------------------
// The same rules through quantize(): whole blocks with a known fp32 scale.
// ---------------------------------------------------------------------------------------------

namespace {

fp4::cpu::QuantizedTensor quantize_row(const std::vector<float>& v, Grid g, float gmax) {
  fp4::QuantSpec spec;
  spec.grid = g;
  spec.gmax = gmax;
  spec.scale = fp4::ScaleMode::fp32;
  spec.block = 16;
  const std::vector<uint16_t> x = fp4test::to_bf(v);
  return fp4::cpu::quantize(x.data(), 1, static_cast<int>(v.size()), spec);
}

void check_block(const fp4::cpu::QuantizedTensor& q, const std::vector<float>& out,
                 const std::vector<int>& codes) {
  REQUIRE(q.dequant.size() == out.size());
  REQUIRE(q.codes.size() == codes.size());
  CHECK_FALSE(q.nonfinite);
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("element " << i);
    CHECK(fl(q.dequant[i]) == out[i]);
    CHECK(std::signbit(fl(q.dequant[i])) == std::signbit(out[i]));
    CHECK(int(q.codes[i]) == codes[i]);
  }
}

}  // namespace

TEST_CASE("e2m1 through quantize(): a block with s = 1 worked by hand", "[numerics][grid][quantize]") {
  // amax 6 -> s = 6/6 = 1 -> t = v; out = bf16(q * 1) = q.
  const std::vector<float> v = {6.0f,   0.25f,  0.75f, 1.25f,  1.75f,  2.5f,  3.5f,    5.0f,
                                -0.25f, -0.125f, 5.875f, 0.375f, 2.875f, -3.125f, 4.375f, -0.0f};
  const std::vector<float> out = {6.0f,  0.0f,  1.0f, 1.0f,  2.0f, 2.0f,  4.0f, 4.0f,
                                  -0.0f, -0.0f, 6.0f, 0.5f, 3.0f, -3.0f, 4.0f, -0.0f};
  const std::vector<int> codes = {7, 0, 2, 2, 4, 4, 6, 6, 8, 8, 7, 1, 5, 8 | 5, 6, 8};
  const auto q = quantize_row(v, Grid::e2m1, 6.0f);
  CHECK(q.scales.at(0) == 1.0f);
  check_block(q, out, codes);
}

TEST_CASE("e2m1 through quantize(): s = fp32(1/6) and the bf16 rounding of q*s",
          "[numerics][grid][quantize]") {
  // amax 1 -> s = fp32(1/6) = 0x3E2AAAAB = 11184811 * 2^-26 = (1 + 2^-25)/6.
  //   t = v / s = 6v(1 - 2^-25) in exact arithmetic; fp32 rounds 6(1-2^-25), 3(1-2^-25),
  //   1.5(1-2^-25), 0.75(1-2^-25) back to 6, 3, 1.5, 0.75 (the deviation is below half an ulp),
  //   and 0.375, 2.25, 4.125 are just as exact: t = 6v for every v below.
  //   q * s in fp32: 6s = 1 + 2^-25 -> 1.0; 3s -> 0.5; 1.5s -> 0.25; 4s = 0.66666669 (exact);
  //   2s = 0.33333334; 1s = 0.16666667; 0.5s = 0.083333336.
  //   bf16_rn: 0.66666669 = 1.0101010|1010.. x 2^-1 -> 1.0101011 x 2^-1 = 0.66796875,
  //   likewise 0.333984375, 0.1669921875, 0.08349609375.
  const std::vector<float> v = {1.0f,  0.5f,  -0.25f, 0.6875f,  0.0625f,  0.125f, 0.375f,  0.0f,
                                -1.0f, -0.5f, 0.25f,  -0.6875f, -0.0625f, -0.125f, -0.375f, -0.0f};
  // t:  6 3 -1.5 4.125 0.375 0.75 2.25 0 | -6 -3 1.5 -4.125 -0.375 -0.75 -2.25 -0
  // q:  6 3 -1.5 4     0.5   1    2    0 | -6 -3 1.5 -4     -0.5   -1    -2    -0
  const std::vector<float> out = {1.0f,  0.5f,  -0.25f, 0.66796875f,  0.08349609375f,  0.1669921875f,
                                  0.333984375f, 0.0f, -1.0f, -0.5f, 0.25f, -0.66796875f,
                                  -0.08349609375f, -0.1669921875f, -0.333984375f, -0.0f};
  const std::vector<int> codes = {7, 5, 8 | 3, 6, 1, 2, 4, 0, 8 | 7, 8 | 5, 3, 8 | 6, 8 | 1, 8 | 2, 8 | 4, 8};
  const auto q = quantize_row(v, Grid::e2m1, 6.0f);
  CHECK(fp4test::bits_of(q.scales.at(0)) == 0x3E2AAAABu);
  check_block(q, out, codes);
}

TEST_CASE("e1m2 through quantize(): half-to-even blocks", "[numerics][grid][quantize]") {
  SECTION("amax 7, s = 1") {
    const std::vector<float> v = {7.0f,  0.5f,   1.5f,  2.5f,  3.5f, 4.5f, 5.5f,  6.5f,
                                  -0.5f, -6.75f, 3.25f, -2.75f, 0.75f, 1.25f, 6.25f, -0.0f};
    const std::vector<float> out = {7.0f, 0.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, 6.0f,
                                    -0.0f, -7.0f, 3.0f, -3.0f, 1.0f, 1.0f, 6.0f, -0.0f};
    const std::vector<int> codes = {7, 0, 2, 2, 4, 4, 6, 6, 8, 8 | 7, 3, 8 | 3, 1, 1, 6, 8};
    const auto q = quantize_row(v, Grid::e1m2, 7.0f);
    CHECK(q.scales.at(0) == 1.0f);
    check_block(q, out, codes);
  }
  SECTION("amax 3.5, s = 0.5: t = 2v") {
    // t: 7 0.5 1.5 2.5 -3.5 6.5 0 1 | 4.5 -5.5 0.25 -7 3 2 5 6
    // q: 7 0   2   2   -4   6   0 1 | 4   -6   0    -7 3 2 5 6     out = q/2
    const std::vector<float> v = {3.5f,  0.25f,  0.75f,  1.25f, -1.75f, 3.25f, 0.0f,  0.5f,
                                  2.25f, -2.75f, 0.125f, -3.5f, 1.5f,   1.0f,  2.5f,  3.0f};
    const std::vector<float> out = {3.5f, 0.0f, 1.0f, 1.0f, -2.0f, 3.0f, 0.0f, 0.5f,
                                    2.0f, -3.0f, 0.0f, -3.5f, 1.5f, 1.0f, 2.5f, 3.0f};
    const std::vector<int> codes = {7, 0, 2, 2, 8 | 4, 6, 0, 1, 4, 8 | 6, 0, 8 | 7, 3, 2, 5, 6};
    const auto q = quantize_row(v, Grid::e1m2, 7.0f);
    CHECK(q.scales.at(0) == 0.5f);
    check_block(q, out, codes);
  }
}

TEST_CASE("e2m1 clip variants through quantize(): s = amax/clip", "[numerics][grid][quantize]") {
  SECTION("clip 3, amax 3 -> s = 1") {
    const std::vector<float> v = {3.0f, 2.5f, 2.75f, 1.25f, -3.0f, 0.75f, 2.25f, 0.0f,
                                  -2.5f, 1.75f, 0.25f, -0.5f, 2.0f, 1.0f, 1.5f, -2.875f};
    const std::vector<float> out = {3.0f, 2.0f, 3.0f, 1.0f, -3.0f, 1.0f, 2.0f, 0.0f,
                                    -2.0f, 2.0f, 0.0f, -0.5f, 2.0f, 1.0f, 1.5f, -3.0f};
    const std::vector<int> codes = {5, 4, 5, 2, 8 | 5, 2, 4, 0, 8 | 4, 4, 0, 8 | 1, 4, 2, 3, 8 | 5};
    const auto q = quantize_row(v, Grid::e2m1, 3.0f);
    CHECK(q.scales.at(0) == 1.0f);
    check_block(q, out, codes);
  }
  SECTION("clip 4, amax 4 -> s = 1") {
    const std::vector<float> v = {4.0f, 3.5f, 3.25f, -2.5f, 3.75f, -4.0f, 0.75f, 0.0f,
                                  1.25f, 2.75f, -3.5f, 0.5f, 1.0f, 2.0f, 3.0f, 1.5f};
    const std::vector<float> out = {4.0f, 4.0f, 3.0f, -2.0f, 4.0f, -4.0f, 1.0f, 0.0f,
                                    1.0f, 3.0f, -4.0f, 0.5f, 1.0f, 2.0f, 3.0f, 1.5f};
    const std::vector<int> codes = {6, 6, 5, 8 | 4, 6, 8 | 6, 2, 0, 2, 5, 8 | 6, 1, 2, 4, 5, 3};
    const auto q = quantize_row(v, Grid::e2m1, 4.0f);
    CHECK(q.scales.at(0) == 1.0f);
    check_block(q, out, codes);
  }
  SECTION("clip 2, amax 4 -> s = 2: t = v/2") {
    // t: 2 1.75 1.25 -1.75 0.25 0.375 -2 0 | 1.5 0.75 1 0.5 -0.125 1.875 0.625 -1.25
    // q: 2 2    1    -2    0    0.5   -2 0 | 1.5 1    1 0.5 -0     2     0.5   -1     out = 2q
    const std::vector<float> v = {4.0f, 3.5f, 2.5f, -3.5f, 0.5f, 0.75f, -4.0f, 0.0f,
                                  3.0f, 1.5f, 2.0f, 1.0f, -0.25f, 3.75f, 1.25f, -2.5f};
    const std::vector<float> out = {4.0f, 4.0f, 2.0f, -4.0f, 0.0f, 1.0f, -4.0f, 0.0f,
                                    3.0f, 2.0f, 2.0f, 1.0f, -0.0f, 4.0f, 1.0f, -2.0f};
    const std::vector<int> codes = {4, 4, 2, 8 | 4, 0, 1, 8 | 4, 0, 3, 2, 2, 1, 8, 4, 1, 8 | 2};
    const auto q = quantize_row(v, Grid::e2m1, 2.0f);
    CHECK(q.scales.at(0) == 2.0f);
    check_block(q, out, codes);
  }
}
