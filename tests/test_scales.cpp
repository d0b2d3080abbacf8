// Scale modes of NUMERICS.md §3 (fp32, e4m3x2, e8m0), E4M3 itself, and the bf16 rounding of
// outputs. Expected values are worked out by hand from the contract in the comments next to them.
//
// Two fp32 facts used throughout (derived once here):
//   fp32(1/6) = 0x3E2AAAAB = 11184811 * 2^-26 = (1 + 2^-25) / 6   (a hair above 1/6)
//   fp32(1/7) = 0x3E124925                                        (a hair above 1/7)
//   6 * fp32(1/6) = 1 + 2^-25 -> rounds to 1.0 in fp32 (2^-25 is below half an ulp of 1).
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/numerics.h"
#include "tests/numerics_test_helpers.h"

using fp4::Grid;
using fp4::ScaleMode;
using fp4test::bf;
using fp4test::bits_of;
using fp4test::fl;
using fp4test::float_of;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// E4M3 from its definition (OCP FP8 E4M3 "fn"): bias 7, 3 mantissa bits, subnormals m/8 * 2^-6,
// S.1111.111 is NaN, no infinities. Written with ldexp, independently of the library's decode.
float e4m3_reference(int b) {
  const int s = (b >> 7) & 1, e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return kNaN;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return static_cast<float>(s ? -mag : mag);
}

fp4::cpu::QuantizedTensor quantize_1row(const std::vector<float>& v, Grid g, float gmax,
                                        ScaleMode mode, int block) {
  fp4::QuantSpec spec;
  spec.grid = g;
  spec.gmax = gmax;
  spec.scale = mode;
  spec.block = block;
  const std::vector<uint16_t> x = fp4test::to_bf(v);
  return fp4::cpu::quantize(x.data(), 1, static_cast<int>(v.size()), spec);
}

void check_outputs(const fp4::cpu::QuantizedTensor& q, size_t first, const std::vector<float>& out,
                   const std::vector<int>& mags) {
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("element " << first + i);
    const float got = fl(q.dequant.at(first + i));
    CHECK_FALSE(std::isnan(got));
    CHECK(got == out[i]);
    CHECK(int(q.codes.at(first + i) & 7) == mags[i]);
    if (out[i] != 0.0f) CHECK(bool(q.codes.at(first + i) & 8) == (out[i] < 0.0f));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// bf16
// ---------------------------------------------------------------------------------------------

TEST_CASE("bf16 round-to-nearest-even from fp32", "[numerics][bf16]") {
  // bf16 keeps 7 fraction bits. 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7: ties to even -> 1.
  CHECK(fp4::float_to_bf16(1.0f + 0x1p-8f) == 0x3F80);
  // 1 + 3*2^-8: midpoint of 1+2^-7 (odd) and 1+2^-6 (even) -> 1 + 2^-6 = 0x3F82.
  CHECK(fp4::float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);
  // Just above the first midpoint -> up.
  CHECK(fp4::float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);
  CHECK(fp4::float_to_bf16(-0.0f) == 0x8000);
  CHECK(fp4::float_to_bf16(-2.5f) == 0xC020);
  // FLT_MAX is above the midpoint between bf16's largest finite value and 2^128: rounds to +Inf.
  CHECK(fp4::float_to_bf16(FLT_MAX) == 0x7F80);
  CHECK(fp4::float_to_bf16(kInf) == 0x7F80);
  CHECK(fp4::float_to_bf16(-kInf) == 0xFF80);
  // NaN stays a NaN with its sign; never turns into Inf.
  CHECK(fp4test::bf_is_nan(fp4::float_to_bf16(kNaN)));
  CHECK(fp4test::bf_is_nan(fp4::float_to_bf16(float_of(0x7F800001u))));  // signalling NaN payload
  CHECK(fp4::float_to_bf16(float_of(0xFFC00000u)) >> 15 == 1);
  // Subnormal bf16: 2^-127 is 0x0040 (fp32 0x00400000); 2^-127 + 2^-134 (fp32 0x00408000) is the
  // midpoint of 0x0040 (even) and 0x0041 -> 0x0040; 2^-127 + 3*2^-134 is the midpoint of 0x0041 and
  // 0x0042 (even) -> 0x0042.
  CHECK(fp4::float_to_bf16(0x1p-127f) == 0x0040);
  CHECK(fp4::float_to_bf16(0x1p-127f + 0x1p-134f) == 0x0040);
  CHECK(fp4::float_to_bf16(0x1p-127f + 3 * 0x1p-134f) == 0x0042);
  CHECK(fp4::bf16_to_float(0x3F82) == 1.015625f);
}

// ---------------------------------------------------------------------------------------------
// E4M3
// ---------------------------------------------------------------------------------------------

TEST_CASE("E4M3 encode/decode round trip over all 256 codes", "[numerics][e4m3]") {
  // Anchors worked by hand.
  CHECK(fp4::e4m3_decode(0x01) == 0x1p-9f);         // smallest subnormal
  CHECK(fp4::e4m3_decode(0x07) == 7 * 0x1p-9f);     // largest subnormal
  CHECK(fp4::e4m3_decode(0x08) == 0x1p-6f);         // smallest normal
  CHECK(fp4::e4m3_decode(0x38) == 1.0f);            // e = 7: 2^0
  CHECK(fp4::e4m3_decode(0x7e) == 448.0f);          // 1.75 * 2^8
  CHECK(fp4::e4m3_decode(0xfe) == -448.0f);
  CHECK(bits_of(fp4::e4m3_decode(0x80)) == 0x80000000u);  // -0
  CHECK(std::isnan(fp4::e4m3_decode(0x7f)));
  CHECK(std::isnan(fp4::e4m3_decode(0xff)));

  float prev = -1.0f;
  for (int b = 0; b < 256; ++b) {
    INFO("code 0x" << std::hex << b);
    const float ref = e4m3_reference(b);
    const float d = fp4::e4m3_decode(static_cast<uint8_t>(b));
    if (std::isnan(ref)) {
      CHECK(std::isnan(d));
      CHECK(int(fp4::e4m3_encode(d)) == (b & 0x80 ? 0xff : 0x7f));
      continue;
    }
    CHECK(bits_of(d) == bits_of(ref));
    CHECK(int(fp4::e4m3_encode(d)) == b);
    // Every E4M3 value is a fixed point of the rounding.
    CHECK(bits_of(fp4::e4m3_rn_satfinite(d)) == bits_of(d));
    if (b < 0x7f) {  // positive codes are strictly increasing in value
      CHECK(d > prev);
      prev = d;
    }
  }
}

TEST_CASE("E4M3 rn-satfinite: every midpoint ties to the even code, neighbours go their way",
          "[numerics][e4m3]") {
  // For adjacent positive E4M3 values a (code c) and b (code c+1), the midpoint (a+b)/2 is exact in
  // fp32 and must go to the one with the even code (even mantissa); one fp32 ulp either side must
  // go to the nearer one. Same for the negated values.
  for (int c = 0; c < 0x7e; ++c) {
    const float a = e4m3_reference(c), b = e4m3_reference(c + 1);
    const float mid = (a + b) * 0.5f;
    const float even = (c % 2 == 0) ? a : b;
    INFO("codes 0x" << std::hex << c << "/0x" << c + 1 << std::dec << ": " << a << " | " << b);
    CHECK(fp4::e4m3_rn_satfinite(mid) == even);
    CHECK(fp4::e4m3_rn_satfinite(std::nextafter(mid, 0.0f)) == a);
    CHECK(fp4::e4m3_rn_satfinite(std::nextafter(mid, kInf)) == b);
    CHECK(fp4::e4m3_rn_satfinite(-mid) == -even);
    CHECK(fp4::e4m3_rn_satfinite(-std::nextafter(mid, kInf)) == -b);
  }
}

TEST_CASE("E4M3 rn-satfinite: chosen values", "[numerics][e4m3]") {
  struct Case {
    float x, want;
  };
  const Case cases[] = {
      {448.0f, 448.0f},
      {449.0f, 448.0f},
      {464.0f, 448.0f},   // midpoint of 448 and 480 (not representable): satfinite -> 448
      {480.0f, 448.0f},
      {500.0f, 448.0f},
      {1e30f, 448.0f},
      {FLT_MAX, 448.0f},
      {kInf, 448.0f},
      {-kInf, -448.0f},
      {-1000.0f, -448.0f},
      {0x1p-9f, 0x1p-9f},             // smallest subnormal
      {0x1p-10f, 0.0f},               // half of it: tie between 0 (even) and 2^-9 -> 0
      {0x1.8p-10f, 0x1p-9f},          // 0.75 * 2^-9 -> 2^-9
      {3 * 0x1p-10f, 0x1p-8f},        // 1.5 * 2^-9: tie 1|2 (x 2^-9) -> 2 * 2^-9
      {5 * 0x1p-10f, 0x1p-8f},        // 2.5 * 2^-9: tie 2|3 -> 2 * 2^-9
      {7.5f * 0x1p-9f, 0x1p-6f},      // tie between largest subnormal (7, odd) and 2^-6 (8, even)
      {0x1p-12f, 0.0f},
      {1e-45f, 0.0f},                 // fp32 subnormal
      {17.0f, 16.0f},                 // [16,32) step 2: tie 16 (m=0) | 18 (m=1) -> 16
      {19.0f, 20.0f},                 // tie 18 (m=1) | 20 (m=2) -> 20
      {18.5f, 18.0f},
      {15.5f, 16.0f},                 // tie 15 (m=7) | 16 (next binade, m=0) -> 16
      {248.0f, 256.0f},               // tie 240 (m=7) | 256 -> 256
      {240.0f, 240.0f},
      {0.1f, 0.1015625f},             // [2^-4, 2^-3) step 2^-7: 0.1/2^-7 = 12.8 -> 13 * 2^-7
      {1.0625f, 1.0f},                // tie 1 (m=0) | 1.125 (m=1) -> 1
      {1.1875f, 1.25f},               // tie 1.125 (m=1) | 1.25 (m=2) -> 1.25
  };
  for (const Case& c : cases) {
    INFO("x = " << c.x);
    const float r = fp4::e4m3_rn_satfinite(c.x);
    CHECK(r == c.want);
    CHECK(std::signbit(r) == std::signbit(c.x));  // -2^-11 style underflow keeps its sign
  }
  CHECK(bits_of(fp4::e4m3_rn_satfinite(-0x1p-11f)) == 0x80000000u);
  CHECK(std::isnan(fp4::e4m3_rn_satfinite(kNaN)));
  CHECK(int(fp4::e4m3_encode(fp4::e4m3_rn_satfinite(1e9f))) == 0x7e);
  CHECK(int(fp4::e4m3_encode(fp4::e4m3_rn_satfinite(-1e9f))) == 0xfe);
}

// ---------------------------------------------------------------------------------------------
// fp32 scale mode
// ---------------------------------------------------------------------------------------------

TEST_CASE("fp32 scale mode: s = amax_b / G_max, zero blocks, underflowing s", "[numerics][scale][fp32]") {
  const fp4::TensorScale unit{1.0f, 1.0f};
  fp4::BlockScale b = fp4::make_block_scale(ScaleMode::fp32, 6.0f, 6.0f, unit);
  CHECK(b.stored == 1.0f);
  CHECK_FALSE(b.zero_block);
  b = fp4::make_block_scale(ScaleMode::fp32, 1.0f, 6.0f, unit);
  CHECK(bits_of(b.stored) == 0x3E2AAAABu);  // fp32(1/6)
  b = fp4::make_block_scale(ScaleMode::fp32, 3.5f, 7.0f, unit);
  CHECK(b.stored == 0.5f);
  b = fp4::make_block_scale(ScaleMode::fp32, 1.0f, 3.0f, unit);
  CHECK(bits_of(b.stored) == 0x3EAAAAABu);  // fp32(1/3)

  SECTION("amax 0: every code 0, output +0") {
    b = fp4::make_block_scale(ScaleMode::fp32, 0.0f, 6.0f, unit);
    CHECK(b.zero_block);
    for (float v : {0.0f, -0.0f}) {
      const fp4::QuantizedElement e = fp4::quantize_element(v, b, Grid::e2m1, 7, fp4::Rounding::rn, 0.0f);
      CHECK(e.code == 0);
      CHECK(e.out == 0x0000);
    }
  }
  SECTION("s underflows to 0 (amax 2^-149): the outputs are 0, never NaN") {
    // 2^-149 / 6 is below half the smallest subnormal: s = 0. t = v/0 = Inf saturates to 6 and
    // 6 * 0 = 0; t = 0/0 for v = 0 must give code 0, not a NaN.
    b = fp4::make_block_scale(ScaleMode::fp32, 0x1p-149f, 6.0f, unit);
    CHECK(b.stored == 0.0f);
    CHECK_FALSE(b.zero_block);
    for (float v : {0x1p-149f, -0x1p-149f, 0.0f}) {
      INFO("v = " << v);
      for (fp4::Rounding r : {fp4::Rounding::rn, fp4::Rounding::sr}) {
        const fp4::QuantizedElement e = fp4::quantize_element(v, b, Grid::e2m1, 7, r, 0.5f);
        CHECK(fl(e.out) == 0.0f);
        CHECK_FALSE(fp4test::bf_is_nan(e.out));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// e4m3x2
// ---------------------------------------------------------------------------------------------

TEST_CASE("e4m3x2 tensor scale S_enc / S_dec", "[numerics][scale][e4m3x2]") {
  // S_enc = 448 * G_max / amax_t.
  fp4::TensorScale t = fp4::make_tensor_scale(448.0f, 6.0f);  // 2688 / 448 = 6
  CHECK(t.enc == 6.0f);
  CHECK(bits_of(t.dec) == 0x3E2AAAABu);  // fp32(1/6)
  t = fp4::make_tensor_scale(2688.0f, 6.0f);
  CHECK(t.enc == 1.0f);
  CHECK(t.dec == 1.0f);
  t = fp4::make_tensor_scale(448.0f, 7.0f);  // e1m2: 3136 / 448 = 7
  CHECK(t.enc == 7.0f);
  CHECK(bits_of(t.dec) == 0x3E124925u);  // fp32(1/7)
  t = fp4::make_tensor_scale(448.0f, 3.0f);  // clip 3: 1344 / 448 = 3
  CHECK(t.enc == 3.0f);
  t = fp4::make_tensor_scale(1.0f, 4.0f);  // clip 4: 1792
  CHECK(t.enc == 1792.0f);
  // amax_t == 0 -> 1.
  t = fp4::make_tensor_scale(0.0f, 6.0f);
  CHECK(t.enc == 1.0f);
  CHECK(t.dec == 1.0f);
  // 2688 / 1e-38 overflows fp32 -> capped at FLT_MAX; S_dec = 1/FLT_MAX (a positive subnormal).
  t = fp4::make_tensor_scale(1e-38f, 6.0f);
  CHECK(t.enc == FLT_MAX);
  CHECK(t.dec > 0.0f);
  CHECK(t.dec == 1.0f / FLT_MAX);
  CHECK(std::isfinite(t.dec));
  // S_enc == 0 (amax_t = +Inf) -> 1.
  t = fp4::make_tensor_scale(kInf, 6.0f);
  CHECK(t.enc == 1.0f);
  CHECK(t.dec == 1.0f);
}

TEST_CASE("e4m3x2 block scale: E4M3 rounding of amax_b * S_enc / G_max", "[numerics][scale][e4m3x2]") {
  // amax_t = 448, G_max 6: S_enc = 6, S_enc * fp32(1/6) = 1 + 2^-25 -> 1.0, so s_b = e4m3(amax_b).
  const fp4::TensorScale ts = fp4::make_tensor_scale(448.0f, 6.0f);
  REQUIRE(ts.enc == 6.0f);
  struct Case {
    float amax_b, s_b, mul;
  };
  // S_encb = 1 / (s_b * S_dec): with S_dec = (1+2^-25)/6, 1/S_dec = 6(1 - 2^-25) rounds to 6, so for
  // a power-of-two s_b, S_encb = 6 / s_b exactly. For s_b = 20, 448 it is one fp32 step below 6/s_b:
  //   20 * S_dec = 3.3333335 (0x40555556) -> 1/x = 0.29999998 (0x3E999999)
  //   448 * S_dec = 74.666672 (0x42955556) -> 1/x = 0.013392856 (0x3C5B6DB6)
  const Case cases[] = {
      {17.0f, 16.0f, 0.375f},                        // between 16 and 18, a tie: even -> 16
      {19.0f, 20.0f, float_of(0x3E999999u)},        // tie 18|20 -> 20
      {18.5f, 18.0f, 0.0f},                          // between, nearest 18 (mul checked below)
      {448.0f, 448.0f, float_of(0x3C5B6DB6u)},
      {1.0f, 1.0f, 6.0f},
      {0x1.8p-10f, 0x1p-9f, 3072.0f},                // 0.75 * 2^-9 -> 2^-9; 6 * 2^9
      {0x1p-10f, 0.0f, FLT_MAX},                     // tie 0|2^-9 -> 0: underflow
      {0x1p-11f, 0.0f, FLT_MAX},                     // underflow
      {0.0f, 0.0f, FLT_MAX},                         // all-zero block
  };
  for (const Case& c : cases) {
    INFO("amax_b = " << c.amax_b);
    const fp4::BlockScale b = fp4::make_block_scale(ScaleMode::e4m3x2, c.amax_b, 6.0f, ts);
    CHECK(b.stored == c.s_b);
    CHECK_FALSE(b.divide);
    if (c.mul != 0.0f) CHECK(b.mul == c.mul);
  }
  // The saturation of s_b: amax_b * 1.0 above 448 (cannot happen inside a tensor, but the rule is
  // satfinite).
  CHECK(fp4::make_block_scale(ScaleMode::e4m3x2, 500.0f, 6.0f, ts).stored == 448.0f);
  // With S_enc = 1 (amax_t = 2688): S_enc * fp32(1/6) = fp32(1/6); 2688 * fp32(1/6) = 448(1 + 2^-25)
  // rounds to 448 -> s_b = 448.
  const fp4::TensorScale ts1 = fp4::make_tensor_scale(2688.0f, 6.0f);
  CHECK(fp4::make_block_scale(ScaleMode::e4m3x2, 2688.0f, 6.0f, ts1).stored == 448.0f);
  // 100 * fp32(1/6) = 16.666667 -> E4M3 step 2 in [16, 32): 16.67 -> 16.
  CHECK(fp4::make_block_scale(ScaleMode::e4m3x2, 100.0f, 6.0f, ts1).stored == 16.0f);
  // 105 * fp32(1/6) = 17.5 + 35 * 2^-26, which fp32 rounds to 17.5 (ulp 2^-19) -> nearest 18.
  CHECK(fp4::make_block_scale(ScaleMode::e4m3x2, 105.0f, 6.0f, ts1).stored == 18.0f);
}

TEST_CASE("e4m3x2: TransformerEngine's operation order decides an E4M3 tie", "[numerics][scale][e4m3x2]") {
  // amax_t = 3: S_enc = 2688/3 = 896 (exact). S_enc * fp32(1/6) = 7 * 2^7 * 11184811 * 2^-26:
  //   7 * 11184811 = 78293677 has 27 bits -> rounds to 78293680 -> 78293680 * 2^-19 = 149.33334
  //   (above 448/3). amax_b = 2.25: 2.25 * 78293680 = 176160780 (28 bits) -> 11010049 * 2^-15
  //   = 336.00003, just above the E4M3 midpoint 336 of 320 (m=2) and 352 (m=3) -> s_b = 352.
  // The other orders give exactly 336 and the tie's even 320:
  //   (amax_b * S_enc) / 6 = 2016 / 6 = 336;  (amax_b / 6) * S_enc = 0.375 * 896 = 336.
  const fp4::TensorScale ts = fp4::make_tensor_scale(3.0f, 6.0f);
  REQUIRE(ts.enc == 896.0f);
  CHECK(fp4::make_block_scale(ScaleMode::e4m3x2, 2.25f, 6.0f, ts).stored == 352.0f);
  // 3 * 149.33334 = 448.00003 -> satfinite 448.
  CHECK(fp4::make_block_scale(ScaleMode::e4m3x2, 3.0f, 6.0f, ts).stored == 448.0f);
  // Through quantize(): block 0 holds amax_t = 3, block 1 has amax 2.25.
  std::vector<float> v(32, 0.0f);
  v[0] = 3.0f;
  v[16] = 2.25f;
  v[17] = -1.0f;
  const auto q = quantize_1row(v, Grid::e2m1, 6.0f, ScaleMode::e4m3x2, 16);
  CHECK(q.scales.at(0) == 448.0f);
  CHECK(q.scales.at(1) == 352.0f);
  // S_dec = fp32(1/896) = 2^-7 * fp32(1/7); S_encb = 1/(352 * S_dec) ~ 2.545: 2.25 -> 5.727 -> 6
  // (out 6 * 352 = 2112); -1 -> -2.545 -> -3 (out -1056).
  CHECK(fl(q.dequant[16]) == 2112.0f);
  CHECK(fl(q.dequant[17]) == -1056.0f);
}

TEST_CASE("e4m3x2 through quantize(): e2m1, amax_t = 448, worked by hand", "[numerics][scale][e4m3x2][quantize]") {
  // One row of 5 blocks. amax_t = 448 -> S_enc = 6, S_dec = fp32(1/6), S_enc/G_max -> 1.0.
  std::vector<float> v;
  // Block 0: amax 448 -> s_b = 448, S_encb = 0x3C5B6DB6 = 0.013392856 (one step below 6/448).
  //   t = v * S_encb lands one fp32 step below the ideal 6v/448, so the ideal ties 0.75 (v = 56)
  //   and 5.25 (v = 392) and 4.5 (v = 336) resolve by the operation order, not by tie-to-even:
  //   448 -> 5.9999995 -> 6 (out 6*448 = 2688)     224 -> 2.9999998 -> 3 (1344)
  //   112 -> 1.4999999 -> 1.5 (672)                 56 -> 0.74999994 -> 0.5 (224)
  //   28 -> 0.37499997 -> 0.5 (224)                 336 -> 4.4999995 -> 4 (1792)
  //   168 -> 2.2499998 -> 2 (896)                   -280 -> -3.7499998 -> -4 (-1792)
  //   392 -> 5.2499995 -> 6 (2688)                  84 -> 1.1249999 -> 1 (448)
  //   14 -> 0.18749999 -> 0                         7 -> 0.09375 -> 0
  const std::vector<float> b0 = {448, 224, -448, 112, 56, -56, 28, 0, 336, 168, -280, 392, 84, 14, 7, 1};
  const std::vector<float> o0 = {2688, 1344, -2688, 672, 224, -224, 224, 0, 1792, 896, -1792, 2688, 448, 0, 0, 0};
  const std::vector<int> m0 = {7, 5, 7, 3, 1, 1, 1, 0, 6, 4, 6, 7, 2, 0, 0, 0};
  // Block 1: amax 17 -> s_b = 16 (tie to even), S_encb = 6/16 = 0.375, t = 3v/8 exact:
  //   17 -> 6.375 -> 6 (saturation at G_max; out 96)   16 -> 6 (96)   4 -> 1.5 (24)
  //   6 -> 2.25 -> 2 (32)   10 -> 3.75 -> 4 (64)   -1 -> -0.375 -> -0.5 (-8)   2 -> 0.75 -> 1 (tie, 16)
  //   -0.5 -> -0.1875 -> -0   14 -> 5.25 -> 6 (96)   12 -> 4.5 -> 4 (64)   8 -> 3 (48)
  //   1 -> 0.375 -> 0.5 (8)   3 -> 1.125 -> 1 (16)
  const std::vector<float> b1 = {17, 16, 4, 6, 10, -1, 2, -0.5, 14, 12, 0, -17, 8, 1, 3, 0};
  const std::vector<float> o1 = {96, 96, 24, 32, 64, -8, 16, 0, 96, 64, 0, -96, 48, 8, 16, 0};
  const std::vector<int> m1 = {7, 7, 3, 4, 6, 1, 2, 0, 7, 6, 0, 7, 5, 1, 2, 0};
  // Block 2: amax 19 -> s_b = 20 (tie to even), S_encb = 0x3E999999 = 0.29999998:
  //   19 -> 5.7 -> 6 (120)   10 -> 2.9999998 -> 3 (60)   5 -> 1.4999999 -> 1.5 (30)
  //   -2.5 -> -0.74999994 -> -0.5 (-10, not the tie's -1)   7.5 -> 2.2499998 -> 2 (40)
  //   3 -> 0.9 -> 1 (20)   1 -> 0.3 -> 0.5 (10)   0.75 -> 0.225 -> 0   12 -> 3.6 -> 4 (80)
  //   15 -> 4.4999995 -> 4 (80)   -6 -> -1.8 -> -2 (-40)   18 -> 5.4 -> 6 (120)   8.5 -> 2.55 -> 3 (60)
  //   4 -> 1.2 -> 1 (20)
  const std::vector<float> b2 = {19, 10, 5, -2.5, 7.5, -19, 3, 1, 0.75, 12, 15, -6, 0, 18, 8.5, 4};
  const std::vector<float> o2 = {120, 60, 30, -10, 40, -120, 20, 10, 0, 80, 80, -40, 0, 120, 60, 20};
  const std::vector<int> m2 = {7, 5, 3, 1, 4, 7, 2, 1, 0, 6, 6, 4, 0, 7, 5, 2};
  // Block 3: all zero -> s_b = 0, outputs 0, no NaN.
  const std::vector<float> b3(16, 0.0f);
  // Block 4: amax 2^-11 -> amax_b * 1.0 = 2^-11 < 2^-10: s_b underflows to 0. S_encb = FLT_MAX,
  //   q saturates, out = bf16(q * 0) = 0 exactly, no NaN.
  const std::vector<float> b4 = {0x1p-11f, -0x1p-12f, 0x1p-13f, -0x1p-11f, 0, 0x1p-20f, 0, 0,
                                 0,        0,          0,        0,          0, 0,        0, 0};
  for (const auto* b : {&b0, &b1, &b2, &b3, &b4}) v.insert(v.end(), b->begin(), b->end());

  const auto q = quantize_1row(v, Grid::e2m1, 6.0f, ScaleMode::e4m3x2, 16);
  CHECK_FALSE(q.nonfinite);
  CHECK(q.amax == 448.0f);
  CHECK(bits_of(q.tensor_scale) == 0x3E2AAAABu);  // S_dec = fp32(1/6)
  REQUIRE(q.scales.size() == 5);
  CHECK(q.scales[0] == 448.0f);
  CHECK(q.scales[1] == 16.0f);
  CHECK(q.scales[2] == 20.0f);
  CHECK(q.scales[3] == 0.0f);
  CHECK(q.scales[4] == 0.0f);
  check_outputs(q, 0, o0, m0);
  check_outputs(q, 16, o1, m1);
  check_outputs(q, 32, o2, m2);
  for (size_t i = 48; i < 80; ++i) {
    INFO("element " << i);
    CHECK(fl(q.dequant[i]) == 0.0f);  // +0 or -0, never NaN
    CHECK_FALSE(fp4test::bf_is_nan(q.dequant[i]));
  }
  for (size_t i = 48; i < 64; ++i) CHECK(q.codes[i] == 0);  // all-zero block: +0 inputs, code 0
}

TEST_CASE("e4m3x2 through quantize(): e1m2, amax_t = 448", "[numerics][scale][e4m3x2][quantize]") {
  // S_enc = 3136/448 = 7, S_enc * fp32(1/7) = 1.0 (checked below), S_dec = fp32(1/7).
  // Block 1 amax 8 -> s_b = 8, S_encb = 1/(8 * fp32(1/7)) = 0.87499994 (below 7/8):
  //   8 -> 6.9999995 -> 7 (56)   4 -> 3.4999998 -> 3 (24; the ideal 3.5 would tie to 4)
  //   2 -> 1.7499999 -> 2 (16)   6 -> 5.2499995 -> 5 (40)   0.5 -> 0.4375 -> 0   1 -> 0.875 -> 1 (8)
  //   5 -> 4.3749995 -> 4 (32)   3 -> 2.6249998 -> 3 (24)   -1.5 -> -1.3125 -> -1 (-8)
  //   7 -> 6.1249995 -> 6 (48)   2.5 -> 2.1875 -> 2 (16)   -6.5 -> -5.6874995 -> -6 (-48)
  //   1.25 -> 1.09375 -> 1 (8)
  CHECK(7.0f * float_of(0x3E124925u) == 1.0f);
  std::vector<float> v = {448, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<float> b1 = {8, 4, 2, 6, -8, 0.5, 1, 5, 3, -1.5, 7, 0.25, 2.5, -6.5, 0, 1.25};
  const std::vector<float> o1 = {56, 24, 16, 40, -56, 0, 8, 32, 24, -8, 48, 0, 16, -48, 0, 8};
  const std::vector<int> m1 = {7, 3, 2, 5, 7, 0, 1, 4, 3, 1, 6, 0, 2, 6, 0, 1};
  v.insert(v.end(), b1.begin(), b1.end());
  const auto q = quantize_1row(v, Grid::e1m2, 7.0f, ScaleMode::e4m3x2, 16);
  CHECK(q.tensor_scale == float_of(0x3E124925u));
  CHECK(q.scales.at(0) == 448.0f);
  CHECK(q.scales.at(1) == 8.0f);
  CHECK(fl(q.dequant[0]) == 7.0f * 448.0f);
  check_outputs(q, 16, o1, m1);
}

TEST_CASE("e4m3x2 through quantize(): clip 4 saturates at the clip", "[numerics][scale][e4m3x2][quantize]") {
  // amax_t = 448, G_max 4: S_enc = 1792/448 = 4, S_enc * 0.25 = 1, S_dec = 0.25.
  // Block 1 amax 17 -> s_b = 16, S_encb = 1/(16 * 0.25) = 0.25: 17 -> 4.25 -> saturates to 4 (64);
  // 15 -> 3.75 -> 4 (64); 13 -> 3.25 -> 3 (48); 10 -> 2.5 -> 2 (tie, 32); -14 -> -3.5 -> -4 (tie, -64).
  std::vector<float> v = {448, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                          17, 15, 13, 10, -14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const auto q = quantize_1row(v, Grid::e2m1, 4.0f, ScaleMode::e4m3x2, 16);
  CHECK(q.tensor_scale == 0.25f);
  CHECK(q.scales.at(1) == 16.0f);
  check_outputs(q, 16, {64, 64, 48, 32, -64}, {6, 6, 5, 4, 6});
  CHECK(fl(q.dequant[0]) == 4.0f * 448.0f);
}

TEST_CASE("e4m3x2: all-zero tensor", "[numerics][scale][e4m3x2][quantize]") {
  const std::vector<float> v(32, 0.0f);
  const auto q = quantize_1row(v, Grid::e2m1, 6.0f, ScaleMode::e4m3x2, 16);
  CHECK(q.amax == 0.0f);
  CHECK(q.tensor_scale == 1.0f);  // amax_t == 0 -> S_enc = 1
  for (size_t i = 0; i < v.size(); ++i) {
    CHECK(q.dequant[i] == 0x0000);
    CHECK(q.codes[i] == 0);
  }
  CHECK(q.scales[0] == 0.0f);
  CHECK(q.scales[1] == 0.0f);
}

// ---------------------------------------------------------------------------------------------
// e8m0
// ---------------------------------------------------------------------------------------------

TEST_CASE("e8m0 block scale: e = floor(log2 amax) - 2, clamped to -127..127", "[numerics][scale][e8m0]") {
  const fp4::TensorScale unit{1.0f, 1.0f};
  struct Case {
    float amax, scale;
  };
  const Case cases[] = {
      {6.0f, 1.0f},           // floor(log2 6) = 2 -> e = 0
      {4.0f, 1.0f},
      {7.99f, 1.0f},
      {8.0f, 2.0f},           // e = 1
      {3.99f, 0.5f},          // e = -1
      {1.0f, 0.25f},          // e = -2
      {0x1p-125f, 0x1p-127f}, // e = -127, not clamped
      {0x1p-126f, 0x1p-127f}, // e = -128 -> clamped to -127
      {0x1p-127f, 0x1p-127f}, // subnormal amax, clamped
      {0x1.8p-128f, 0x1p-127f},
      {0x1p-149f, 0x1p-127f},
      {FLT_MAX, 0x1p125f},    // floor(log2 FLT_MAX) = 127 -> 125 (the upper clamp is not reachable)
  };
  for (const Case& c : cases) {
    INFO("amax = " << c.amax);
    const fp4::BlockScale b = fp4::make_block_scale(ScaleMode::e8m0, c.amax, 6.0f, unit);
    CHECK(b.stored == c.scale);
    CHECK_FALSE(b.zero_block);
    // emax = 2 for the uniform grid too.
    CHECK(fp4::make_block_scale(ScaleMode::e8m0, c.amax, 7.0f, unit).stored == c.scale);
  }
  CHECK(fp4::make_block_scale(ScaleMode::e8m0, 0.0f, 6.0f, unit).zero_block);
  // floor_log2 on subnormals: 3 * 2^-149 -> -148; 2^-140 -> -140; largest subnormal -> -127.
  CHECK(fp4::floor_log2(3 * 0x1p-149f) == -148);
  CHECK(fp4::floor_log2(0x1p-140f) == -140);
  CHECK(fp4::floor_log2(float_of(0x007FFFFFu)) == -127);
  CHECK(fp4::floor_log2(FLT_MIN) == -126);
  CHECK(fp4::floor_log2(0.75f) == -1);
  CHECK(fp4::exp2_int(-149) == 0x1p-149f);
  CHECK(fp4::exp2_int(-127) == 0x1p-127f);
  CHECK(fp4::exp2_int(127) == 0x1p127f);
}

TEST_CASE("e8m0 through quantize(): e2m1, block 32", "[numerics][scale][e8m0][quantize]") {
  std::vector<float> v(96, 0.0f);
  // Block 0: amax 6 -> 2^0: t = v.
  const std::vector<float> b0 = {6, 0.25, 0.75, 5, -1.25, 3.5, -6, 2.5};
  const std::vector<float> o0 = {6, 0, 1, 4, -1, 4, -6, 2};
  const std::vector<int> m0 = {7, 0, 2, 6, 2, 6, 7, 4};
  // Block 1: amax 8 -> e = 1, scale 2, t = v/2: 8 -> 4 (8); 7 -> 3.5 -> 4 (8); 5 -> 2.5 -> 2 (4);
  //   -3 -> -1.5 (-3); 1.5 -> 0.75 -> 1 (2); 0.5 -> 0.25 -> 0; 6 -> 3 (6); -7.5 -> -3.75 -> -4 (-8)
  const std::vector<float> b1 = {8, 7, 5, -3, 1.5, 0.5, 6, -7.5};
  const std::vector<float> o1 = {8, 8, 4, -3, 2, 0, 6, -8};
  const std::vector<int> m1 = {6, 6, 4, 3, 2, 0, 5, 6};
  // Block 2: amax 7.5 -> e = 0, scale 1: 7.5 saturates to 6; 7 -> 6; 5.5 -> 6.
  const std::vector<float> b2 = {7.5, 7, 5.5, -4.5};
  const std::vector<float> o2 = {6, 6, 6, -4};
  const std::vector<int> m2 = {7, 7, 7, 6};
  std::copy(b0.begin(), b0.end(), v.begin());
  std::copy(b1.begin(), b1.end(), v.begin() + 32);
  std::copy(b2.begin(), b2.end(), v.begin() + 64);
  const auto q = quantize_1row(v, Grid::e2m1, 6.0f, ScaleMode::e8m0, 32);
  REQUIRE(q.scales.size() == 3);
  CHECK(q.scales[0] == 1.0f);
  CHECK(q.scales[1] == 2.0f);
  CHECK(q.scales[2] == 1.0f);
  check_outputs(q, 0, o0, m0);
  check_outputs(q, 32, o1, m1);
  check_outputs(q, 64, o2, m2);
}

TEST_CASE("e8m0 through quantize(): e1m2 saturation of 7..8 times 2^e, subnormal and zero blocks",
          "[numerics][scale][e8m0][quantize]") {
  std::vector<float> v(128, 0.0f);
  // Block 0: amax 15 -> floor(log2 15) = 3 -> e = 1, scale 2: 15 -> 7.5 -> 7 (14); 14.5 -> 7.25 -> 7;
  //   13 -> 6.5 -> 6 (tie to even, 12); 9 -> 4.5 -> 4 (8); -11 -> -5.5 -> -6 (-12); 1 -> 0.5 -> 0.
  const std::vector<float> b0 = {15, 14.5, 13, 9, -11, 1};
  const std::vector<float> o0 = {14, 14, 12, 8, -12, 0};
  const std::vector<int> m0 = {7, 7, 6, 4, 6, 0};
  // Block 1: amax 7.75 -> e = 0: 7.75 -> 7, 7.25 -> 7, 3.5 -> 4.
  const std::vector<float> b1 = {7.75, 7.25, 3.5};
  const std::vector<float> o1 = {7, 7, 4};
  const std::vector<int> m1 = {7, 7, 4};
  // Block 2: subnormal amax 1.5 * 2^-127: floor(log2) = -127 -> e = -129 -> clamped to -127, scale
  //   2^-127: 1.5 * 2^-127 -> t = 1.5 -> 2 (e1m2 tie to even; out 2^-126); 2^-127 -> 1 (2^-127);
  //   2^-129 -> 0.25 -> 0; -2^-128 -> -0.5 -> -0 (tie to even 0)
  const std::vector<float> b2 = {0x1.8p-127f, 0x1p-127f, 0x1p-129f, -0x1p-128f};
  const std::vector<float> o2 = {0x1p-126f, 0x1p-127f, 0.0f, -0.0f};
  const std::vector<int> m2 = {2, 1, 0, 0};
  // Block 3: all zero.
  std::copy(b0.begin(), b0.end(), v.begin());
  std::copy(b1.begin(), b1.end(), v.begin() + 32);
  std::copy(b2.begin(), b2.end(), v.begin() + 64);
  const auto q = quantize_1row(v, Grid::e1m2, 7.0f, ScaleMode::e8m0, 32);
  REQUIRE(q.scales.size() == 4);
  CHECK(q.scales[0] == 2.0f);
  CHECK(q.scales[1] == 1.0f);
  CHECK(q.scales[2] == 0x1p-127f);
  check_outputs(q, 0, o0, m0);
  check_outputs(q, 32, o1, m1);
  check_outputs(q, 64, o2, m2);
  for (size_t i = 96; i < 128; ++i) {
    CHECK(q.dequant[i] == 0x0000);
    CHECK(q.codes[i] == 0);
  }
}

TEST_CASE("e8m0 through quantize(): e2m1 subnormal amax", "[numerics][scale][e8m0][quantize]") {
  // amax 2^-133 (the smallest bf16 subnormal): e = -135 -> clamped to -127, t = 2^-6 -> 0.
  // amax 2^-127: e clamped to -127, t = 1 -> 1 (out 2^-127); 2^-128 -> 0.5 (out 2^-128).
  std::vector<float> v(64, 0.0f);
  v[0] = 0x1p-133f;
  v[32] = 0x1p-127f;
  v[33] = -0x1p-128f;
  v[34] = 0x1p-129f;  // t = 0.25 -> 0 (tie to even)
  const auto q = quantize_1row(v, Grid::e2m1, 6.0f, ScaleMode::e8m0, 32);
  CHECK(q.scales[0] == 0x1p-127f);
  CHECK(q.scales[1] == 0x1p-127f);
  CHECK(fl(q.dequant[0]) == 0.0f);
  CHECK(int(q.codes[0]) == 0);
  check_outputs(q, 32, {0x1p-127f, -0x1p-128f, 0.0f}, {2, 1, 0});
}
