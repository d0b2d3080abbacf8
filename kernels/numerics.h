// numerics.h — NUMERICS.md (§2–4, §6) as __host__ __device__ inline code.
//
// This header is the single definition of every bit fp4lab's quantizers produce. The CPU reference
// (kernels/cpu) and the CUDA kernels (kernels/cuda) both call these functions on the same values in
// the same order, so their outputs are bit-identical by construction; the tests then check it.
// Rules that keep it that way:
//   * plain fp32 arithmetic only, one operation per statement where rounding matters (no fused
//     multiply-add can form across statements we separated on purpose: nvcc contracts a*b+c within
//     one expression, so products that feed a sum are never written in one expression here);
//   * no library transcendental functions (their last bit differs between libm and CUDA);
//   * no fast-math, no flush-to-zero: subnormals are honoured on both sides.
// This header includes nothing of ours and nothing beyond <cstdint>, <cstring>, <cfloat>.
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP4_HD __host__ __device__ __forceinline__
#else
#define FP4_HD inline
#endif

namespace fp4 {

// ---------------------------------------------------------------------------------------------
// Bit casts and bf16
// ---------------------------------------------------------------------------------------------

FP4_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FP4_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

FP4_HD bool is_finite(float x) { return (float_bits(x) & 0x7f800000u) != 0x7f800000u; }
FP4_HD bool sign_bit(float x) { return (float_bits(x) >> 31) != 0; }
FP4_HD float abs_f(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }

// bf16 is stored as its raw 16 bits (uint16_t) on both backends, so no compiler type stands
// between us and the bit pattern.
using bf16_t = uint16_t;

constexpr bf16_t kBf16QuietNaN = 0x7fc0;

FP4_HD float bf16_to_float(bf16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// Round-to-nearest-even from fp32. NaN stays NaN (quiet, sign kept); overflow rounds to ±Inf
// exactly as IEEE rounding would (the hardware cvt.rn.bf16.f32 agrees on every finite input).
FP4_HD bf16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x0040u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>((u + rounding_bias) >> 16);
}

FP4_HD float round_to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// ---------------------------------------------------------------------------------------------
// Element grids (NUMERICS.md §2). A code is 4 bits: sign << 3 | magnitude index.
// ---------------------------------------------------------------------------------------------

enum class Grid : uint8_t { e2m1 = 0, e1m2 = 1 };

// Code value marking an element of a block that held a NaN or ±Inf (not a 4-bit code).
constexpr uint8_t kNonFiniteCode = 0xff;

// Magnitude of e2m1 code index i (0..7).
FP4_HD float e2m1_magnitude(int i) {
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6: indices 0..3 step 0.5, then 2, 3, 4, 6.
  return i < 4 ? 0.5f * static_cast<float>(i) : (i == 7 ? 6.0f : static_cast<float>(i - 2));
}

FP4_HD float grid_magnitude(Grid g, int i) {
  return g == Grid::e2m1 ? e2m1_magnitude(i) : static_cast<float>(i);
}

// Largest magnitude index not above clip (clip is G_max: 6 for full e2m1, 7 for full e1m2).
FP4_HD int grid_max_index(Grid g, float gmax) {
  if (g == Grid::e1m2) return static_cast<int>(gmax);
  return gmax >= 6.0f ? 7 : (gmax >= 4.0f ? 6 : (gmax >= 3.0f ? 5 : 4));
}

// The default G_max of a grid when no clip is given.
FP4_HD float grid_full_max(Grid g) { return g == Grid::e2m1 ? 6.0f : 7.0f; }

// Round-to-nearest of a non-negative magnitude x (may be +Inf; never NaN) onto the grid, ties to
// the even code index, saturating at G_max. Returns the magnitude index.
FP4_HD int round_nearest_index(Grid g, float x, int max_index) {
  int i;
  if (g == Grid::e2m1) {
    // Midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5; "<=" sends a tie down to the even index, "<" up.
    if (x <= 0.25f) i = 0;
    else if (x < 0.75f) i = 1;
    else if (x <= 1.25f) i = 2;
    else if (x < 1.75f) i = 3;
    else if (x <= 2.5f) i = 4;
    else if (x < 3.5f) i = 5;
    else if (x <= 5.0f) i = 6;
    else i = 7;
  } else {
    if (x >= 7.0f) {
      i = 7;
    } else {
      float lo = static_cast<float>(static_cast<int>(x));  // floor: x is non-negative and < 8
      float frac = x - lo;                                   // exact (Sterbenz-style: same binade)
      int lo_i = static_cast<int>(lo);
      i = frac > 0.5f ? lo_i + 1 : (frac < 0.5f ? lo_i : lo_i + (lo_i & 1));
    }
  }
  // Restricting a grid to a prefix of its magnitudes (clip) and rounding monotonically means the
  // restricted nearest value is min(nearest, G_max).
  return i < max_index ? i : max_index;
}

// Stochastic rounding of a non-negative magnitude x (may be +Inf) with uniform u in [0, 1):
// lo <= x < hi adjacent magnitudes, p = (x - lo) / (hi - lo), hi when u < p.
FP4_HD int round_stochastic_index(Grid g, float x, int max_index, float u) {
  float gmax = grid_magnitude(g, max_index);
  if (!(x < gmax)) return max_index;  // x >= G_max (or +Inf)
  int lo_i;
  if (g == Grid::e2m1) {
    if (x < 2.0f) lo_i = static_cast<int>(x * 2.0f);  // 0..3: magnitudes step 0.5, x*2 exact
    else if (x < 3.0f) lo_i = 4;
    else if (x < 4.0f) lo_i = 5;
    else lo_i = 6;
  } else {
    lo_i = static_cast<int>(x);
  }
  float lo = grid_magnitude(g, lo_i);
  float hi = grid_magnitude(g, lo_i + 1);
  float p = (x - lo) / (hi - lo);
  return u < p ? lo_i + 1 : lo_i;
}

// Philox word -> u in [0, 1): the top 24 bits, exactly representable in fp32.
FP4_HD float uniform_from_word(uint32_t r) { return static_cast<float>(r >> 8) * (1.0f / 16777216.0f); }

// ---------------------------------------------------------------------------------------------
// E4M3 (OCP FP8 "fn": bias 7, no infinities, max 448, NaN = S.1111.111) and E8M0
// ---------------------------------------------------------------------------------------------

// floor(log2(x)) for finite x > 0, subnormals included.
FP4_HD int floor_log2(float x) {
  uint32_t u = float_bits(x) & 0x7fffffffu;
  int e = static_cast<int>(u >> 23);
  if (e != 0) return e - 127;
  // Subnormal: value = m * 2^-149 with m < 2^23.
  uint32_t m = u & 0x7fffffu;
  int top = 0;
  while ((m >> (top + 1)) != 0) ++top;
  return top - 149;
}

// 2^e as fp32 for e in [-149, 127], exact (subnormal powers included).
FP4_HD float exp2_int(int e) {
  if (e >= -126) return bits_float(static_cast<uint32_t>(e + 127) << 23);
  return bits_float(1u << (e + 149));
}

// Round a finite or infinite fp32 to E4M3 with round-to-nearest-even and saturation to ±448
// ("satfinite": what cvt.rn.satfinite.e4m3x2.f32 and TransformerEngine do). NaN gives NaN.
// Returns the E4M3 value as fp32 (every E4M3 value is exact in fp32).
FP4_HD float e4m3_rn_satfinite(float x) {
  if (!(x == x)) return x;
  float a = abs_f(x);
  float r;
  if (a >= 448.0f) {
    r = 448.0f;
  } else {
    // Quantum of E4M3 at a's binade: 2^(e-3) for normals (e >= -6), 2^-9 for subnormals.
    int e = floor_log2(a);
    int q = (e < -6 ? -6 : e) - 3;
    float scaled = a * exp2_int(-q);  // exact: power-of-two scaling of a normal number
    float whole = static_cast<float>(static_cast<int>(scaled));
    float frac = scaled - whole;
    int n = static_cast<int>(whole);
    if (frac > 0.5f || (frac == 0.5f && (n & 1))) n += 1;
    r = static_cast<float>(n) * exp2_int(q);
    if (r > 448.0f) r = 448.0f;
  }
  return sign_bit(x) ? -r : r;
}

// The 8-bit encoding of an E4M3 value (as returned by e4m3_rn_satfinite).
FP4_HD uint8_t e4m3_encode(float v) {
  uint8_t s = sign_bit(v) ? 0x80 : 0x00;
  if (!(v == v)) return static_cast<uint8_t>(s | 0x7f);
  float a = abs_f(v);
  if (a == 0.0f) return s;
  int e = floor_log2(a);
  if (e < -6) return static_cast<uint8_t>(s | static_cast<int>(a * 512.0f));  // subnormal: m * 2^-9
  int mant = static_cast<int>(a * exp2_int(3 - e)) - 8;                      // 1.mmm -> mmm
  return static_cast<uint8_t>(s | ((e + 7) << 3) | mant);
}

FP4_HD float e4m3_decode(uint8_t b) {
  float s = (b & 0x80) ? -1.0f : 1.0f;
  int e = (b >> 3) & 0xf, m = b & 0x7;
  if (e == 0xf && m == 0x7) return bits_float((b & 0x80) ? 0xffc00000u : 0x7fc00000u);  // NaN, sign kept
  if (e == 0) return s * static_cast<float>(m) * exp2_int(-9);
  return s * static_cast<float>(8 + m) * exp2_int(e - 10);
}

// ---------------------------------------------------------------------------------------------
// Scale modes (NUMERICS.md §3)
// ---------------------------------------------------------------------------------------------

enum class ScaleMode : uint8_t { fp32 = 0, e4m3x2 = 1, e8m0 = 2 };

// E8M0's emax of the element grid: floor(log2(G_max)) = 2 for both grids (6 and 7).
constexpr int kE8m0GridEmax = 2;

// The tensor-level part of e4m3x2 (TransformerEngine's operation order).
struct TensorScale {
  float enc;  // S_enc
  float dec;  // S_dec = 1 / S_enc: the dequantized operand times S_dec is the true value
};

// `scale_max` is the largest block scale the tensor scale aims at: E4M3's 448, or Four Over Six's
// 256 (section "Four Over Six" below), which leaves room for its 1.5x larger candidate scale.
FP4_HD TensorScale make_tensor_scale(float amax_t, float gmax, float scale_max = 448.0f) {
  float numerator = scale_max * gmax;
  float enc = numerator / amax_t;
  if (enc > FLT_MAX) enc = FLT_MAX;
  if (amax_t == 0.0f || enc == 0.0f) enc = 1.0f;
  TensorScale t;
  t.enc = enc;
  t.dec = 1.0f / enc;
  return t;
}

// Everything one block needs to quantize its values. `stored` is the block scale as stored
// (fp32 s, the E4M3 value of s_b, or 2^e); dequantized = bf16(q * stored).
struct BlockScale {
  float stored;
  float mul;        // t = v * mul      (e4m3x2)
  bool divide;      // t = v / stored   (fp32, e8m0)
  bool zero_block;  // fp32 and e8m0 blocks with amax 0: every code 0, output +0
};

FP4_HD BlockScale make_block_scale(ScaleMode mode, float amax_b, float gmax, TensorScale ts) {
  BlockScale b;
  b.mul = 1.0f;
  b.divide = true;
  b.zero_block = false;
  if (mode == ScaleMode::fp32) {
    b.stored = amax_b / gmax;
    b.zero_block = amax_b == 0.0f;
  } else if (mode == ScaleMode::e8m0) {
    int e = -127;
    if (amax_b == 0.0f) {
      b.zero_block = true;
    } else {
      e = floor_log2(amax_b) - kE8m0GridEmax;
      e = e < -127 ? -127 : (e > 127 ? 127 : e);
    }
    b.stored = exp2_int(e);
  } else {
    float inv_gmax = 1.0f / gmax;
    float enc_per_gmax = ts.enc * inv_gmax;
    float scaled_amax = amax_b * enc_per_gmax;
    b.stored = e4m3_rn_satfinite(scaled_amax);
    float scale_dec = b.stored * ts.dec;
    float mul = 1.0f / scale_dec;  // s_b == 0 gives +Inf here, capped next
    b.mul = mul > FLT_MAX ? FLT_MAX : mul;
    b.divide = false;
  }
  return b;
}

// Which rounding a slot uses.
enum class Rounding : uint8_t { rn = 0, sr = 1 };

struct QuantizedElement {
  bf16_t out;    // dequantized operand value (bf16 bits)
  uint8_t code;  // sign << 3 | magnitude index
};

// Quantize one finite value v of a finite block. `u` is used only for SR.
FP4_HD QuantizedElement quantize_element(float v, const BlockScale& b, Grid g, int max_index,
                                         Rounding rounding, float u) {
  QuantizedElement r;
  if (b.zero_block) {
    r.out = 0;
    r.code = 0;
    return r;
  }
  float t = b.divide ? v / b.stored : v * b.mul;
  float x = abs_f(t);
  if (!(x == x)) x = 0.0f;  // 0 / 0 when an fp32 scale underflowed to 0: the value was 0
  int i = rounding == Rounding::rn ? round_nearest_index(g, x, max_index)
                                   : round_stochastic_index(g, x, max_index, u);
  bool neg = sign_bit(v);
  float q = grid_magnitude(g, i);
  float deq = q * b.stored;
  r.out = float_to_bf16(neg ? -deq : deq);
  r.code = static_cast<uint8_t>((neg ? 8 : 0) | i);
  return r;
}

// The magnitude a 4-bit code stands for, signed (before the block scale).
FP4_HD float code_value(Grid g, uint8_t code) {
  float m = grid_magnitude(g, code & 7);
  return (code & 8) ? -m : m;
}

// ---------------------------------------------------------------------------------------------
// Four Over Six (docs/recipes.md "Four Over Six"; arXiv 2512.02010)
// ---------------------------------------------------------------------------------------------
// Each block is quantized twice, once with its amax mapped to 6 (the usual scale) and once mapped
// to 4 (a 1.5x larger scale), and keeps the candidate with the smaller sum of squared errors; a tie
// keeps 6. Under e4m3x2 the tensor scale aims block scales at 256 instead of 448, so the larger
// candidate (up to 384) still fits E4M3.

constexpr float kFourOverSixScaleMax = 256.0f;
constexpr float kFourOverSixLowMax = 4.0f;  // the second candidate's G_max

// One element's squared error under a candidate: the dequantized value q * stored, times the
// tensor scale S_dec (1 for fp32 scales), minus the value v. The caller sums these in the block's
// row-major element order, one addition per statement.
FP4_HD float candidate_squared_error(float v, const QuantizedElement& e, const BlockScale& b, float dec,
                                     Grid g) {
  if (b.zero_block) return 0.0f;
  float q = code_value(g, e.code);
  float deq = q * b.stored;
  float value = deq * dec;
  float d = value - v;
  return d * d;
}

// The choice for one block of n values v (the block's row-major order) with the element uniforms u
// (read only for SR): true when candidate 4 (s4) has the strictly smaller sum of squared errors.
// With e6 and e4 (n elements each), also both candidates' elements, so that a caller takes the
// chosen one's instead of quantizing the block a third time (the same quantize_element calls).
// The candidates' elements come from element6(v, u) and element4(v, u), which must equal
// quantize_element(v, s6 or s4, g, max_index, r, u): four_over_six_picks_four below passes
// quantize_element itself, a CUDA kernel a faster quantizer of the same values.
template <typename Element6, typename Element4>
FP4_HD bool four_over_six_picks_four_by(const float* v, const float* u, int n, const BlockScale& s6,
                                        const BlockScale& s4, float dec, Grid g, Rounding r, Element6&& element6,
                                        Element4&& element4, QuantizedElement* e6, QuantizedElement* e4) {
  float err6 = 0.0f, err4 = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < n; ++i) {
    const float ui = r == Rounding::sr ? u[i] : 0.0f;
    const QuantizedElement q6 = element6(v[i], ui);
    const QuantizedElement q4 = element4(v[i], ui);
    const float d6 = candidate_squared_error(v[i], q6, s6, dec, g);
    const float d4 = candidate_squared_error(v[i], q4, s4, dec, g);
    err6 = err6 + d6;
    err4 = err4 + d4;
    if (e6 != nullptr) e6[i] = q6;
    if (e4 != nullptr) e4[i] = q4;
  }
  return err4 < err6;
}

FP4_HD bool four_over_six_picks_four(const float* v, const float* u, int n, const BlockScale& s6,
                                     const BlockScale& s4, float dec, Grid g, int max_index, Rounding r,
                                     QuantizedElement* e6 = nullptr, QuantizedElement* e4 = nullptr) {
  return four_over_six_picks_four_by(
      v, u, n, s6, s4, dec, g, r, [&](float x, float ux) { return quantize_element(x, s6, g, max_index, r, ux); },
      [&](float x, float ux) { return quantize_element(x, s4, g, max_index, r, ux); }, e6, e4);
}

// ---------------------------------------------------------------------------------------------
// TetraJet-v2 double-block scales (docs/recipes.md "TetraJet-v2"; arXiv 2510.27527)
// ---------------------------------------------------------------------------------------------
// An fp32 scale per 128 consecutive values along the blocking axis takes the place of the tensor
// scale, and an E4M3 scale per 16 inside it, in TetraJet-v2's own operation order:
//   s_outer = amax_128 / 448 / 6            (two fp32 divisions; 0 gives 1)
//   s_inner = e4m3_rn_satfinite(amax_16 / s_outer / 6)   (a zero quotient becomes 2^-9 first)
//   t = v * (1 / (s_outer * s_inner)),  out = bf16(q * (s_outer * s_inner))

constexpr int kOuterBlock = 128;

FP4_HD float double_block_outer_scale(float amax_outer) {
  float a = amax_outer / 448.0f;
  float s = a / 6.0f;
  return s == 0.0f ? 1.0f : s;
}

// The inner (E4M3) scale, returned in `inner`; the BlockScale divides by nothing and multiplies by
// 1 / (outer * inner), and stores the product so quantize_element's output is bf16(q * product).
FP4_HD BlockScale make_double_block_scale(float amax_b, float outer, float* inner) {
  float a = amax_b / outer;
  float raw = a / 6.0f;
  if (raw == 0.0f) raw = 0.001953125f;  // 2^-9, E4M3's smallest subnormal, as TetraJet-v2's kernel
  float s = e4m3_rn_satfinite(raw);
  *inner = s;
  BlockScale b;
  b.stored = outer * s;
  b.mul = b.stored != 0.0f ? 1.0f / b.stored : 0.0f;
  b.divide = false;
  b.zero_block = false;
  return b;
}

// ---------------------------------------------------------------------------------------------
// Quartet II's MS-EDEN (docs/recipes.md "Quartet II"; arXiv 2601.22813)
// ---------------------------------------------------------------------------------------------
// After a 128-wide RHT: a tensor scale aimed at block scales of 255.99 with G_max stretched to
// 6 / ((17/16) * 0.93), E4M3 block scales per 16, round-to-nearest e2m1 codes with ties away from
// zero, then per 128 values the EDEN correction sum(t^2) / sum(t * q) multiplied into each of its
// 8 block scales, which are rounded to E4M3 stochastically so the result is unbiased.

constexpr float kMsEdenScaleMax = 255.99f;
constexpr float kMsEdenValMax = static_cast<float>(6.0 / (17.0 / 16.0 * 0.93));
constexpr int kMsEdenGroup = 128;

// S_dec of the tensor (amax over the rotated tensor).
FP4_HD float ms_eden_tensor_scale(float amax_t) {
  if (amax_t == 0.0f) return 1.0f;
  float a = amax_t / kMsEdenScaleMax;
  return a / kMsEdenValMax;
}

// The block's E4M3 scale before the correction (0 becomes 1, as Quartet II's kernel).
FP4_HD float ms_eden_block_scale(float amax_b, float s_dec) {
  float a = amax_b / kMsEdenValMax;
  float r = a / s_dec;
  float s = e4m3_rn_satfinite(r);
  return s == 0.0f ? 1.0f : s;
}

// Round-to-nearest onto e2m1 with ties away from zero (Quartet II compares t >= midpoint), saturating
// at 6. Returns the magnitude index.
FP4_HD int round_nearest_up_index_e2m1(float x) {
  if (x >= 5.0f) return 7;
  if (x >= 3.5f) return 6;
  if (x >= 2.5f) return 5;
  if (x >= 1.75f) return 4;
  if (x >= 1.25f) return 3;
  if (x >= 0.75f) return 2;
  if (x >= 0.25f) return 1;
  return 0;
}

// Stochastic rounding of a non-negative corrected scale c onto E4M3 with uniform u in [0, 1): the
// two E4M3 neighbours down <= c < up (adjacent 8-bit codes), up with probability (c - down) / (up -
// down). c >= 448 gives 448 (nothing above it to round to).
FP4_HD float e4m3_stochastic(float c, float u) {
  if (!(c < 448.0f)) return 448.0f;
  float r = e4m3_rn_satfinite(c);
  uint8_t code = e4m3_encode(r);
  float down, up;
  if (r > c) {
    up = r;
    down = e4m3_decode(static_cast<uint8_t>(code - 1));
  } else {
    down = r;
    up = e4m3_decode(static_cast<uint8_t>(code + 1));
  }
  float num = c - down;
  float den = up - down;
  float p = num / den;
  return u < p ? up : down;
}

// One block of 16 of a finite MS-EDEN group (v its rotated values): returns the block's E4M3 scale
// before the correction, and leaves each value's magnitude index in mag[k] and the terms of the
// correction's two sums in tt[k] = t² and tq[k] = t·q, which the group adds in block order.
FP4_HD float ms_eden_block_terms(const float* v, float s_dec, uint8_t* mag, float* tt, float* tq) {
  float amax_b = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < 16; ++k) {
    const float a = abs_f(v[k]);
    if (a > amax_b) amax_b = a;
  }
  const float block_scale = ms_eden_block_scale(amax_b, s_dec);
  const float denom = block_scale * s_dec;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < 16; ++k) {
    const float t = abs_f(v[k]) / denom;
    const int m = round_nearest_up_index_e2m1(t);
    mag[k] = static_cast<uint8_t>(m);
    tt[k] = t * t;
    tq[k] = t * e2m1_magnitude(m);
  }
  return block_scale;
}

// One finite 128-group of MS-EDEN: v the rotated values in group order (8 blocks of 16), u the 8
// blocks' uniforms. Leaves each block's final (stochastically rounded) E4M3 scale in scales[b] and
// each value's magnitude index in mag[k]; the value's output is ms_eden_element's.
FP4_HD void ms_eden_group(const float* v, float s_dec, const float* u, float* scales, uint8_t* mag) {
  float block_scale[kMsEdenGroup / 16];
  float num = 0.0f, den = 0.0f;
  for (int b = 0; b < kMsEdenGroup / 16; ++b) {
    float tt[16], tq[16];
    block_scale[b] = ms_eden_block_terms(v + 16 * b, s_dec, mag + 16 * b, tt, tq);
    for (int k = 0; k < 16; ++k) {
      num = num + tt[k];
      den = den + tq[k];
    }
  }
  const float correction = den == 0.0f ? 1.0f : num / den;
  for (int b = 0; b < kMsEdenGroup / 16; ++b) {
    const float corrected = block_scale[b] * correction;
    scales[b] = e4m3_stochastic(corrected, u[b]);
  }
}

// A value's output under its block's final scale: bf16(±e2m1_magnitude(mag) · scale), and its code.
FP4_HD QuantizedElement ms_eden_element(float v, uint8_t mag, float scale) {
  const bool neg = sign_bit(v);
  const float deq = e2m1_magnitude(mag) * scale;
  QuantizedElement e;
  e.out = float_to_bf16(neg ? -deq : deq);
  e.code = static_cast<uint8_t>((neg ? 8 : 0) | mag);
  return e;
}

// ---------------------------------------------------------------------------------------------
// Random Hadamard transform (NUMERICS.md §4)
// ---------------------------------------------------------------------------------------------

constexpr int kRhtSize = 16;

// Sign vectors are 16-bit masks: bit i set means sigma_i = -1.
// TransformerEngine's fixed vector + + + - + - - - - - - + - + - -:
constexpr uint16_t kRhtFixedSigns = (1u << 3) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 8) |
                                    (1u << 9) | (1u << 10) | (1u << 12) | (1u << 14) | (1u << 15);

// FWHT16(v ⊙ sigma), in place, fp32, without the 1/4: the signs, then stages h = 1, 2, 4, 8,
// (a, b) -> (a + b, a - b). rht16 is this followed by the 1/4; a tensor amax takes the maximum of
// these unscaled values and scales it once (max_j RN(y_j / 4) = RN(max_j y_j / 4): rounding is
// monotone), which is the same bits as the maximum of rht16's outputs.
FP4_HD void fwht16_signed(float* v, uint16_t signs) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < kRhtSize; ++i)
    if ((signs >> i) & 1u) v[i] = -v[i];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int h = 1; h < kRhtSize; h <<= 1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < kRhtSize; ++i) {
      if (i & h) continue;
      float a = v[i], b = v[i + h];
      v[i] = a + b;
      v[i + h] = a - b;
    }
  }
}

// v' = 1/4 * FWHT16(v ⊙ sigma), in place, fp32. Stages h = 1, 2, 4, 8; (a, b) -> (a + b, a - b).
// The 1/4 is a power of two: exact except where a result is subnormal, identical on both sides.
FP4_HD void rht16(float* v, uint16_t signs) {
  fwht16_signed(v, signs);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < kRhtSize; ++i) v[i] = v[i] * 0.25f;
}

// The 128-wide RHT of MS-EDEN: v' = c * FWHT128(v ⊙ sigma), fp32, stages h = 1, 2, ..., 64 as
// above, c = fp32(1/sqrt(128)) (one multiplication per element; 1/sqrt(128) is not a power of two,
// so the two operands' factors multiply to 1/128 only within fp32 rounding). sigma is 128 bits,
// bit i of signs[i / 32] set meaning -1.
constexpr int kRhtWideSize = 128;
constexpr float kRhtWideNorm = 0.0883883476483184405f;  // 1 / sqrt(128)

FP4_HD void rht128(float* v, const uint32_t* signs) {
  for (int i = 0; i < kRhtWideSize; ++i)
    if ((signs[i >> 5] >> (i & 31)) & 1u) v[i] = -v[i];
  for (int h = 1; h < kRhtWideSize; h <<= 1) {
    for (int i = 0; i < kRhtWideSize; ++i) {
      if (i & h) continue;
      float a = v[i], b = v[i + h];
      v[i] = a + b;
      v[i + h] = a - b;
    }
  }
  for (int i = 0; i < kRhtWideSize; ++i) v[i] = v[i] * kRhtWideNorm;
}

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (NUMERICS.md §6)
// ---------------------------------------------------------------------------------------------

struct Philox4 {
  uint32_t w[4];
};

FP4_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// Salmon et al.'s Philox4x32 with 10 rounds: the key is bumped between rounds (9 bumps).
FP4_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                             uint32_t k1) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  const uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += W0;
      k1 += W1;
    }
    uint32_t hi0 = mulhi32(M0, c0), lo0 = M0 * c0;
    uint32_t hi1 = mulhi32(M1, c2), lo1 = M1 * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  Philox4 r;
  r.w[0] = c0;
  r.w[1] = c1;
  r.w[2] = c2;
  r.w[3] = c3;
  return r;
}

// The four random words of the Philox call that covers element indices [4k, 4k+4) of a tensor,
// for a given seed, stream and step. Element `index` uses word `index & 3`.
FP4_HD Philox4 philox_for_elements(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index) {
  return philox4x32_10(static_cast<uint32_t>(index >> 2), static_cast<uint32_t>(index >> 34), stream,
                       step, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

FP4_HD uint32_t philox_word_for_element(uint64_t seed, uint32_t stream, uint32_t step,
                                        uint64_t index) {
  return philox_for_elements(seed, stream, step, index).w[index & 3];
}

// Stream packing (32 bits): which tensor copy a random number belongs to.
//   bits 31..16  linear layer id (block index * 4 + position: qkv 0, attention out 1, MLP in 2,
//                MLP out 3), up to 65535
//   bits 15..14  GEMM: fprop 0, dgrad 1, wgrad 2
//   bits 13..12  operand: x 0, w 1, dy 2
//   bits 11..0   micro-step within the optimizer step (gradient accumulation), up to 4095
// Element draws use counter word 1 = index >> 34, which is 0 for any tensor under 2^34 elements;
// draws that are not per element use other values of word 1 so no two families share a counter:
//   0xffffffff  RHT sign vectors (below)
//   0xfffffffe  the quantizer probe's samples (quant/quantizer_probe.cpp)
//   top bits 10 the data sources' draws (engine/data/data_random.h)
enum class Gemm : uint8_t { fprop = 0, dgrad = 1, wgrad = 2 };
enum class Operand : uint8_t { x = 0, w = 1, dy = 2 };

constexpr uint32_t kPhiloxNonElementDomain = 0xffffffffu;
constexpr uint32_t kMaxLinearId = 0xffffu;
constexpr uint32_t kMaxMicroStep = 0xfffu;

FP4_HD uint32_t philox_stream(uint32_t linear_id, Gemm gemm, Operand operand, uint32_t micro_step) {
  return (linear_id << 16) | (static_cast<uint32_t>(gemm) << 14) |
         (static_cast<uint32_t>(operand) << 12) | (micro_step & kMaxMicroStep);
}

// A stream with its linear id replaced: the same GEMM, operand and micro-step of another linear
// (an MoE block's experts, each drawing with its own id).
FP4_HD uint32_t philox_stream_of_linear(uint32_t stream, uint32_t linear_id) {
  return (linear_id << 16) | (stream & 0xffffu);
}

// RHT sign policies (NUMERICS.md §4). The mask is the low 16 bits of word 0 of
// philox(counter = (layer, 0xffffffff, 0x5248'5400 "RHT", step), key = seed), where
//   seeded:    layer = 0xffffffff (no linear id reaches it), step = 0xffffffff
//   per_layer: layer = the linear id,                         step = 0xffffffff
//   per_step:  layer = the linear id,                         step = the optimizer step
// so the three policies never draw the same counter (no optimizer step reaches 0xffffffff), and a
// per-step vector is also distinct per layer.
//   per_call:  redrawn for every GEMM call (layer, GEMM, micro-step, step): rht_call_signs below
enum class RhtSigns : uint8_t { fixed = 0, seeded = 1, per_layer = 2, per_step = 3, per_call = 4 };

constexpr uint32_t kRhtSignStream = 0x52485400u;
constexpr uint32_t kRhtNoLayerOrStep = 0xffffffffu;

FP4_HD uint16_t rht_sign_mask(RhtSigns policy, uint64_t seed, uint32_t linear_id, uint32_t step) {
  if (policy == RhtSigns::fixed) return kRhtFixedSigns;
  uint32_t layer = policy == RhtSigns::seeded ? kRhtNoLayerOrStep : linear_id;
  uint32_t s = policy == RhtSigns::per_step ? step : kRhtNoLayerOrStep;
  Philox4 r = philox4x32_10(layer, kPhiloxNonElementDomain, kRhtSignStream, s,
                            static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<uint16_t>(r.w[0] & 0xffffu);
}

// per_call signs (Quartet II and TetraJet-v2 redraw their rotation on every call): the four words
// of philox(counter = (linear id, 0xffffffff, 0x52430000 "RC" | GEMM << 12 | micro-step, step),
// key = seed). Both operands of one GEMM call draw the same words (the RHT cancels in the product
// only then); a 16-wide RHT takes the low 16 bits of word 0, a 128-wide one all four words. The
// third word never equals kRhtSignStream's, so no other sign policy shares a counter.
constexpr uint32_t kRhtCallStream = 0x52430000u;

FP4_HD Philox4 rht_call_signs(uint64_t seed, uint32_t linear_id, Gemm gemm, uint32_t micro_step, uint32_t step) {
  return philox4x32_10(linear_id, kPhiloxNonElementDomain,
                       kRhtCallStream | (static_cast<uint32_t>(gemm) << 12) | (micro_step & kMaxMicroStep), step,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// ---------------------------------------------------------------------------------------------
// One operand slot's full description, as both backends consume it
// ---------------------------------------------------------------------------------------------

// Which way blocks run in the source tensor [R, C]: along a row (16 consecutive elements of one
// row: the copy is blocked along C) or along a column (16 consecutive rows of one column).
enum class BlockAlong : uint8_t { row = 0, column = 1 };

struct QuantSpec {
  Grid grid = Grid::e2m1;
  float gmax = 6.0f;               // G_max: the grid's maximum or its clip
  ScaleMode scale = ScaleMode::fp32;
  int block = 16;                  // 16 or 32
  bool tile_2d = false;            // one scale per block x block tile (weights)
  BlockAlong along = BlockAlong::row;
  bool rht = false;
  uint16_t rht_signs = kRhtFixedSigns;
  Rounding rounding = Rounding::rn;
  uint64_t seed = 0;               // Philox key (SR only)
  uint32_t stream = 0;             // Philox stream (SR only)
  uint32_t step = 0;               // optimizer step (SR only)
  // Recipes of docs/recipes.md beyond NUMERICS.md §5 (all off: the §5 recipes, bit for bit):
  bool four_over_six = false;      // Four Over Six: fp32 or e4m3x2 scales, full e2m1 grid
  int outer_block = 0;             // 128: TetraJet-v2's double-block scales (e4m3x2 only)
  bool ms_eden = false;            // Quartet II's MS-EDEN (e4m3x2, e2m1, block 16, 128-wide RHT)
  int rht_size = 16;               // 16, or 128 (MS-EDEN); the RHT runs along the blocking axis
  uint32_t rht_wide_signs[4] = {0, 0, 0, 0};  // the 128 signs of a 128-wide RHT

  bool operator==(const QuantSpec&) const = default;  // every field (host code: caches of copies)
};

FP4_HD int spec_max_index(const QuantSpec& s) { return grid_max_index(s.grid, s.gmax); }

}  // namespace fp4
