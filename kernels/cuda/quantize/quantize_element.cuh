// quantize_element.cuh — numerics.h's quantize_element, restated without data-dependent branches
// for the fused kernels (internal to kernels/cuda).
//
// Why: compiled for the GPU, numerics.h's round_nearest_index (a chain of if/else on the value),
// round_stochastic_index (an early return) and the IEEE division of quantize_element (a range check
// with a slow-path call) become branches that diverge across a warp and fence every element off
// from the next. Here instead:
//   * round to nearest is float arithmetic on the rounded magnitude itself (nearest_magnitude: for
//     e2m1 Veltkamp's split to two significant bits with the exponent floored at 0, for e1m2 rint,
//     then the clip), with no index search or table lookup; the magnitude index is derived from it
//     only when codes are asked for;
//   * stochastic rounding is float arithmetic on the magnitude too (stochastic_magnitude: floor on
//     the binade's quantum by a round-toward-zero add), without float<->int conversions;
//   * t = v / s for fp32 scales is a reciprocal once per block and one Markstein correction per
//     value (FastDivisor: three FP operations), exact for scales in [2^-60, 2^60]; e4m3x2 and e8m0
//     need one multiply;
//   * the bf16 rounding of the dequantized value is the hardware conversion (two at a time).
// Each replaced step is equal to the original for every input, by the argument next to it, and
// tests/gpu/element_test.cu checks them against numerics.h exhaustively (every float for the
// rounding steps and the bf16 conversions, every pair of significands for the division) and on
// billions of random operands (the division's whole range, whole elements). The block scale, the
// code's layout and the reference path for unusual blocks (fp32 scales outside the fast division's
// range) are numerics.h's own code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/cuda/bf16_convert.cuh"
#include "kernels/numerics.h"

namespace fp4::cuda::detail {

#if defined(__CUDACC__)

// ---------------------------------------------------------------------------------------------
// Round to nearest as float arithmetic: the rounded magnitude itself, not its index
// ---------------------------------------------------------------------------------------------
//
// nearest_magnitude<G>(x, gmax) == grid_magnitude(G, round_nearest_index(G, x, max_index)) for
// every non-NaN x >= 0 (+Inf included), gmax = grid_magnitude(G, max_index); checked on every such
// float and every clip by tests/gpu/element_test.cu. Why it is equal:
//   Both: clip restricts the grid to a prefix, so the restricted nearest value is min(nearest,
//   G_max) (numerics.h's argument), and since rounding is monotone and G_max is on the grid, that
//   is also nearest(min(x, G_max)): e2m1 clips first, so everything after works on xc in [0, 7]
//   (x = +Inf: fminf gives G_max; no overflow, no NaN can arise).
//   e2m1: inside a binade [2^e, 2^(e+1)), e >= 0, the grid (extended past 6 by 8) is the floats
//   with two significant bits: {1, 1.5, 2}, {2, 3, 4}, {4, 6, 8}; below 1 it is the multiples of
//   0.5: {0, 0.5, 1}. Round to nearest with ties to the even code is, in both cases, round to
//   nearest with ties to the even last significant bit (2.5 -> 2, 3.5 -> 4, 5 -> 4; 1.25 -> 1,
//   1.75 -> 2; 0.25 -> 0, 0.75 -> 1: the indices 2, 4, 6 / 0, 2 are the even ones), i.e. IEEE
//   round-to-nearest-even into a binary format with a 2-bit significand and minimum exponent 0.
//   Veltkamp's splitting does exactly that in fp32 arithmetic (p = 24, s = 22, C = 2^s + 1):
//     g = RN(C * xc), d = RN(xc - g), hi = RN(g + d)   (hi: xc rounded to p - s = 2 bits, RNE)
//   and the exponent floor is g = max(RN(C * xc), C) = RN(C * max(xc, 1)): for xc >= 1 nothing
//   changes; for xc < 1, g = C = 2^22 + 1 and d = RN(xc - C) lies in the binade [2^22, 2^23) whose
//   quantum is 0.5, so hi = C + d is xc rounded to a multiple of 0.5 with the tie going to the even
//   significand of d, i.e. to the even multiple of 0.5 (0.25 -> 0, 0.75 -> 1); xc = +0 or a
//   subnormal gives +0. No step overflows (C*xc < 2^25), and hi = g + d itself is exact.
//   e1m2: the grid is the integers, round half to even is rint (x = +Inf: rint(Inf) = Inf -> G_max).
//   A NaN x is never passed (the fast path's quotients of finite values are never NaN).
// The instructions: FMNMX, FMUL, FMNMX, FADD, FADD (e2m1, where the |.| of the quotient is an
// operand modifier of the first FMNMX); FRND, FMNMX (e1m2) — against three compares, selects and
// an index->magnitude lookup for the threshold search, and against the previous rint-on-the-quantum
// form (FMNMX, LOP3, two IADD, FMUL, FRND, FMUL, FMNMX). The e1m2 rint stays: the magic-number
// alternative (RN(x + 2^23) - 2^23) is one FADD more than the FRND it replaces.
template <Grid G>
__device__ __forceinline__ float nearest_magnitude(float x, float gmax) {
  if constexpr (G == Grid::e2m1) {
    constexpr float kSplit = 4194305.0f;  // 2^22 + 1
    const float xc = fminf(x, gmax);
    const float g = fmaxf(__fmul_rn(xc, kSplit), kSplit);
    const float d = __fsub_rn(xc, g);
    return __fadd_rn(g, d);
  } else {
    return fminf(rintf(x), gmax);
  }
}

// The magnitude index of a grid magnitude r (r = grid_magnitude(G, i), i returned). Only needed
// when codes are requested. e2m1: 0, 0.5, 1, 1.5, 2 are i / 2; 3, 4 are i - 2; 6 is 7.
template <Grid G>
__device__ __forceinline__ int magnitude_index(float r) {
  if constexpr (G == Grid::e2m1) return r <= 2.0f ? static_cast<int>(r * 2.0f) : (r < 5.0f ? static_cast<int>(r) + 2 : 7);
  return static_cast<int>(r);
}

// ---------------------------------------------------------------------------------------------
// Stochastic rounding as float arithmetic: the magnitude itself, not its index
// ---------------------------------------------------------------------------------------------
//
// The fast paths carry an element's SR uniform as u24 = u * 2^24: the Philox word's top 24 bits as
// a float (uniform24), an integer in [0, 2^24), exact; numerics.h's u = uniform_from_word(word) is
// u24 * 2^-24 exactly, so `u < p` is `u24 < p * 2^24` (a power-of-two scaling, exact).
__device__ __forceinline__ float uniform24(uint32_t word) { return static_cast<float>(word >> 8); }
__device__ __forceinline__ float uniform_from_u24(float u24) { return u24 * 5.96046448e-8f; /* 2^-24 */ }

// stochastic_magnitude<G>(x, gmax, u24) == grid_magnitude(G, round_stochastic_index(G, x, max_index,
// u24 * 2^-24)) for every non-NaN x >= 0 (+Inf included) and u24 >= 0, gmax = grid_magnitude(G,
// max_index); checked on every such float, every clip and three u per float by
// tests/gpu/element_test.cu. Why: the reference takes lo = the largest grid point <= x, hi the next,
// p = (x - lo) / (hi - lo), rounds up when u < p, and gives G_max when x >= G_max.
//   The clip first: xc = min(x, G_max). For x < G_max nothing changes; for x >= G_max (+Inf
//   included) xc = G_max, a grid point, so lo = G_max and p = 0: never up, the result is G_max, the
//   reference's. So every later step sees 0 <= xc <= G_max <= 7.
//   e2m1: inside the binade of xc (k = 2^max(e, 0), the grid there is the multiples of the quantum
//   k / 2, up to 6 and past it by 8) the scaled value y = xc * (2 / k) lies in [0, 4) and
//   lo = floor(y) * (k / 2), hi = lo + k / 2, p = y - floor(y) (both the correctly rounded value of
//   the same real: every step is exact). Here with 2^24 folded in: Y = xc * 2^24 * (2 / k) < 2^26
//   (exact, a power of two), F = floor(Y / 2^24) * 2^24 = RZ(Y + 2^47) - 2^47 (the sum lies in
//   [2^47, 2^48), whose quantum is 2^24, and rounding toward zero drops what lies below it; the
//   subtraction is exact), P = Y - F = p * 2^24 (exact), up = u24 < P, and the magnitude is
//   (F + up * 2^24) * (k / 2) * 2^-24 (exact: a multiple of 2^24 below 2^27 times a power of two).
//   The two powers of two are bit patterns made from k's exponent field: 2^24 * 2 / k =
//   0x8b800000 - k, k / 2 * 2^-24 = k - 0x0c800000 (k >= 1 keeps both normal).
//   e1m2: the grid is the integers: F = floor(xc) = RZ(xc + 2^23) - 2^23 (xc < 2^23), p = xc - F
//   (exact), up = u24 < p * 2^24, the magnitude F + up.
// Why xc is never NaN: fast-path quotients of finite values are not (see nearest_magnitude).
// The instructions (e2m1): two FMNMX, LOP3, two IADD, FMUL, FADD.RZ, three FADD, FSETP, FSEL, FMUL,
// against numerics.h's steps as selects with three float<->int conversions (quarter- or
// eighth-rate on sm_90), and against the previous form here (x < G_max checked last, p made with
// a multiply, u scaled to [0, 1): three more).
template <Grid G>
__device__ __forceinline__ float stochastic_magnitude(float x, float gmax, float u24) {
  const float xc = fminf(x, gmax);
  if constexpr (G == Grid::e2m1) {
    const uint32_t k = float_bits(fmaxf(xc, 1.0f)) & 0x7f800000u;  // 2^max(e, 0)
    const float up_scale = bits_float(0x8b800000u - k);             // 2^24 * 2 / k = 2^(25 - e)
    const float down_scale = bits_float(k - 0x0c800000u);           // k / 2 * 2^-24 = 2^(e - 25)
    const float y = __fmul_rn(xc, up_scale);                        // exact: a power-of-two scaling
    const float f = __fsub_rn(__fadd_rz(y, 1.40737488e14f /* 2^47 */), 1.40737488e14f);
    const float p = __fsub_rn(y, f);
    const float r = u24 < p ? __fadd_rn(f, 16777216.0f /* 2^24 */) : f;
    return __fmul_rn(r, down_scale);
  } else {
    const float f = __fsub_rn(__fadd_rz(xc, 8388608.0f), 8388608.0f);
    const float p = __fmul_rn(__fsub_rn(xc, f), 16777216.0f /* 2^24 */);
    return u24 < p ? __fadd_rn(f, 1.0f) : f;
  }
}

// ---------------------------------------------------------------------------------------------
// t = v / s for fp32 block scales, without the division's slow path
// ---------------------------------------------------------------------------------------------
//
// For a block whose scale s lies in [2^-60, 2^60] (fast_divisor_ok), y = RN(1/s) once per block,
// then per value one Markstein correction of the plain product:
//   q0 = RN(v * y)                    within 1.5 ulps of v/s (y has relative error <= 2^-24)
//   r  = RN(v - s*q0)
//   q1 = RN(q0 + r*y)                 = RN(v/s)
// Markstein's theorem covers q0 within 1 ulp (then r is exact and one fused step rounds correctly),
// but q0 = RN(v*y) is not always within 1 ulp (it can be up to 1.5 ulps off when v's significand
// is below s's and y's rounding error is near its bound: millions of such pairs exist), so the
// theorem alone does not cover every pair. The claim is instead checked exhaustively:
// tests/gpu/element_test.cu runs the three operations on every pair of significands (v, s in
// [1, 2): all 2^46 pairs) against the IEEE quotient (the previous form, two corrections of five
// operations, needed no such check). Every other pair of the range is one of those scaled by
// powers of two (sign symmetric), and every step scales with it exactly while nothing underflows:
// with s in [2^-60, 2^60] and 2^-30 <= |v/s| <= 8, y, q0 and q1 are normal, and the exact remainder
// v - s*q0 is a multiple of 2^-137 (ulp(s) >= 2^-83, ulp(q0) >= 2^-54, ulp(v) >= 2^-113), so r is
// either that remainder exactly (below 2^-126 it has fewer than 11 significant bits: a subnormal)
// or it needs more than 24 bits and lies above 2^-113, where its rounding is the same relative
// rounding as in the significand pair; the fused steps round once, as in the pair.
// Smaller values ("tiny") only meet the rounding as 0 < t < 2^-30, and for them the three steps
// only promise |q1| < 2^-28 (|q0| < 2^-30 (1 + 2^-23) + 2^-150, |r*y| < 2.01 * 2^-30; also checked
// on random tiny quotients by element_test.cu). That is enough wherever the exact t cannot change
// the decision: round to nearest gives index 0 for any such t; stochastic rounding rounds up only
// when u < p, with p = 2t (e2m1) or t (e1m2) below 2^-27 either way, so for u >= 2^-24 (u24 >= 1)
// both round down to 0. Only u = 0 (a word below 256: one in 2^24) compares with the exact p
// (up when RN(|v|/s) > 0); quantize_values sends blocks holding such a u to numerics.h's
// quantize_element, as it sends blocks whose scale is outside the range.
__device__ __forceinline__ bool fast_divisor_ok(float s) {
  return s >= 8.67361738e-19f /* 2^-60 */ && s <= 1.15292150e18f /* 2^60 */;
}

struct FastDivisor {
  float s, y;
};

// RN(1/s) for s in [2^-60, 2^60] without __frcp_rn's range check: the hardware's approximate
// reciprocal and one Newton step with fused operations, which is the sequence __frcp_rn itself runs
// for such s (checked against __frcp_rn on every float of the range by tests/gpu/element_test.cu).
// Outside the range the result is not used (fast_divisor_ok fails first).
__device__ __forceinline__ float reciprocal_in_range(float s) {
  float r0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(s));
  const float e = __fmaf_rn(-s, r0, 1.0f);
  return __fmaf_rn(r0, e, r0);
}

__device__ __forceinline__ FastDivisor make_fast_divisor(float s) {
  FastDivisor d;
  d.s = s;
  d.y = reciprocal_in_range(s);
  return d;
}

// v / s, signed, as round to nearest needs it, for s in the fast range and |v/s| <= 8: RN(v/s) when
// |v/s| >= 2^-30, else below 2^-28 in magnitude (see above).
__device__ __forceinline__ float fast_quotient(float v, const FastDivisor& d) {
  const float q0 = __fmul_rn(v, d.y);
  const float r = __fmaf_rn(-d.s, q0, v);
  return __fmaf_rn(r, d.y, q0);
}

// |v / s| as the rounding needs it (see above).
__device__ __forceinline__ float fast_quotient_abs(float v, const FastDivisor& d) { return fabsf(fast_quotient(v, d)); }

// ---------------------------------------------------------------------------------------------
// The block scale in fewer instructions
// ---------------------------------------------------------------------------------------------
//
// block_scale<M>(k, amax) == make_block_scale(M, amax, gmax, ts) (numerics.h), bit for bit, for
// every finite amax >= 0, with what depends on the copy alone computed once (BlockScaler):
//   * fp32: stored = RN(amax / gmax) as fast_quotient(amax, gmax's FastDivisor) when amax lies in
//     [2^-90, 2^100] (the pairs-of-significands check covers every such quotient: gmax in [0.5, 7]
//     is in the divisor's range, and the quotient's steps stay normal or exact as the scaling
//     argument above needs: amax >= 2^-90 keeps the remainder a multiple of 2^-149), else the IEEE
//     division (zero and tiny blocks);
//   * e4m3x2: numerics.h's operations in its order, with the E4M3 rounding (e4m3_rn_satfinite: round
//     to nearest even, saturating at 448) as the hardware's cvt.rn.satfinite.e4m3x2.f32 and back
//     (exact: every E4M3 value is an f16 and an f32), two blocks per conversion in
//     block_scale_pair; and 1 / scale_dec as __frcp_rn (the correctly rounded reciprocal: the same
//     value as the IEEE division 1.0f / scale_dec for every input).
// tests/gpu/element_test.cu compares block_scale and block_scale_pair with make_block_scale on
// every finite amax for several gmax and tensor scales.
struct BlockScaler {
  float gmax;
  FastDivisor gmax_div;  // fp32
  TensorScale ts;        // e4m3x2
  float enc_per_gmax;    // e4m3x2: ts.enc * (1 / gmax), as numerics.h rounds it
};

template <ScaleMode M>
__device__ __forceinline__ BlockScaler make_block_scaler(float gmax, TensorScale ts) {
  BlockScaler k;
  k.gmax = gmax;
  k.gmax_div = make_fast_divisor(gmax);
  k.ts = ts;
  k.enc_per_gmax = ts.enc * (1.0f / gmax);
  return k;
}

// x >= 0 and not NaN (both calls' arguments), rounded to E4M3 by the hardware, two at a time.
__device__ __forceinline__ float2 e4m3_rn_satfinite_pair(float a, float b) {
  const __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(q, __NV_E4M3);
  return make_float2(__half2float(__half(__half_raw{h.x})), __half2float(__half(__half_raw{h.y})));
}

__device__ __forceinline__ BlockScale e4m3x2_block_scale(const BlockScaler& k, float stored) {
  BlockScale b;
  b.stored = stored;
  b.divide = false;
  b.zero_block = false;
  const float mul = __frcp_rn(stored * k.ts.dec);  // stored 0 gives +Inf here, capped next
  b.mul = mul > FLT_MAX ? FLT_MAX : mul;
  return b;
}

template <ScaleMode M>
__device__ __forceinline__ BlockScale block_scale(const BlockScaler& k, float amax) {
  if constexpr (M == ScaleMode::fp32) {
    BlockScale b;
    b.mul = 1.0f;
    b.divide = true;
    b.zero_block = amax == 0.0f;
    const bool fast = amax >= 8.07793567e-28f /* 2^-90 */ && amax <= 1.26765060e30f /* 2^100 */;
    b.stored = fast ? fast_quotient(amax, k.gmax_div) : amax / k.gmax;
    return b;
  } else if constexpr (M == ScaleMode::e4m3x2) {
    return e4m3x2_block_scale(k, e4m3_rn_satfinite_pair(amax * k.enc_per_gmax, 0.0f).x);
  } else {
    return make_block_scale(M, amax, k.gmax, k.ts);
  }
}

// Two blocks at once (the column copy's pair of columns): one E4M3 conversion for both.
template <ScaleMode M>
__device__ __forceinline__ void block_scale_pair(const BlockScaler& k, float amax0, float amax1, BlockScale& b0,
                                                 BlockScale& b1) {
  if constexpr (M == ScaleMode::e4m3x2) {
    const float2 stored = e4m3_rn_satfinite_pair(amax0 * k.enc_per_gmax, amax1 * k.enc_per_gmax);
    b0 = e4m3x2_block_scale(k, stored.x);
    b1 = e4m3x2_block_scale(k, stored.y);
  } else {
    b0 = block_scale<M>(k, amax0);
    b1 = block_scale<M>(k, amax1);
  }
}

// ---------------------------------------------------------------------------------------------
// The dequantized value's bf16 rounding
// ---------------------------------------------------------------------------------------------
//
// quantize_element computes grid_magnitude(G, i) * stored in fp32 and rounds it with float_to_bf16;
// the product here is the same (finite, no NaN), where the hardware's conversion
// (bf16_convert.cuh: hw_float_to_bf16, hw_pack_bf16x2) is float_to_bf16.

// ---------------------------------------------------------------------------------------------
// One block's quantizer
// ---------------------------------------------------------------------------------------------

// numerics.h's quantize_element, out of line: the rare blocks' path (zero uniforms, scales outside
// the fast division's range). Inlined at each of a kernel's call sites (a strip kernel quantizes
// four blocks of 16 per strip, each with its own copy), the reference's IEEE division and branches
// made up most of the SR strip kernel's machine code (167 KB for e2m1 with fp32 scales; 91 KB with
// this call), whose hot path shares the instruction caches with it; a call per element costs
// nothing where no block takes that path.
__device__ __noinline__ inline QuantizedElement reference_element(float v, BlockScale bs, Grid g, int max_index,
                                                                  Rounding rounding, float u) {
  return quantize_element(v, bs, g, max_index, rounding, u);
}

// Everything a finite, non-zero block needs per element, fixed once per block. Built from
// make_block_scale's result; `fast()` says whether the branch-free path is exact for this block
// (always for e4m3x2 and e8m0; for fp32 when the scale is in the fast division's range).
template <Grid G, Rounding R, ScaleMode M>
struct BlockQuantizer {
  BlockScale bs;
  int max_index;
  float gmax;        // grid_magnitude(G, max_index)
  float inv;         // e8m0: 1 / stored = 2^-e, exact
  FastDivisor div;   // fp32

  __device__ __forceinline__ BlockQuantizer(const BlockScale& b, int max_idx) : bs(b), max_index(max_idx) {
    gmax = grid_magnitude(G, max_idx);
    inv = 1.0f;
    if constexpr (M == ScaleMode::e8m0) inv = exp2_int(-floor_log2(b.stored));  // stored = 2^e, e in [-127, 127]
    if constexpr (M == ScaleMode::fp32) div = make_fast_divisor(b.stored);
  }

  __device__ __forceinline__ bool fast() const {
    if constexpr (M == ScaleMode::fp32) return fast_divisor_ok(bs.stored);
    return true;
  }

  // Whether an element's fast result also depends on its uniform being at least 2^-24 (u24 >= 1):
  // SR with fp32 scales, whose fast quotient is inexact for tiny values (see fast_quotient); such a
  // block with some u24 < 1 takes the reference path (quantize_values).
  static constexpr bool kNeedsNonzeroUniform = R == Rounding::sr && M == ScaleMode::fp32;

  // quantize_element(v, bs, G, max_index, R, u24 * 2^-24) for a finite v of a finite, non-zero
  // block, when fast() (and u24 >= 1 where kNeedsNonzeroUniform): t by the exact replacements above,
  // then quantize_element's steps. u24 is the SR uniform times 2^24 (uniform24), unused for RN.
  // Returns the signed dequantized value in fp32 (the caller rounds it to bf16 with the hardware
  // conversion, two at a time); with kCodes, also the code. The product is grid_magnitude(i) *
  // stored, as in numerics.h (nearest_magnitude and stochastic_magnitude give that magnitude), and
  // is >= +0 and not NaN, so setting the sign bit is numerics.h's "neg ? -deq : deq".
  template <bool kCodes>
  __device__ __forceinline__ float quantize(float v, float u24, uint32_t& code) const {
    uint32_t i = 0;
    const float deq = magnitude<kCodes>(v, u24, i);
    const uint32_t sign = float_bits(v) & 0x80000000u;
    if constexpr (kCodes) code = (sign >> 28) | i;
    return bits_float(float_bits(deq) | sign);
  }

  // quantize's dequantized value without its sign: grid_magnitude(i) * stored, >= +0, never NaN
  // (with kCodes, i is the magnitude index). A caller that knows v's sign bit from elsewhere (the
  // source bf16 word when there is no RHT) sets it after the bf16 conversion, which rounds the
  // magnitude alone (round to nearest even is symmetric): the same bits as quantize's.
  template <bool kCodes>
  __device__ __forceinline__ float magnitude(float v, float u24, uint32_t& i) const {
    float x;  // never NaN: v is finite, and so are the multipliers and the divisor
    if constexpr (M == ScaleMode::e4m3x2) x = fabsf(v * bs.mul);
    else if constexpr (M == ScaleMode::e8m0) x = fabsf(v * inv);  // == v / 2^e: the same real, rounded once
    else x = fast_quotient_abs(v, div);
    float r;
    if constexpr (R == Rounding::rn) r = nearest_magnitude<G>(x, gmax);
    else r = stochastic_magnitude<G>(x, gmax, u24);
    if constexpr (kCodes) i = static_cast<uint32_t>(magnitude_index<G>(r));
    return r * bs.stored;
  }

  // quantize_element(v, bs, G, max_index, R, u) as a QuantizedElement, for any u in [0, 1) (the
  // element tests compare it with quantize_element).
  __device__ __forceinline__ QuantizedElement operator()(float v, float u) const {
    const float u24 = u * 16777216.0f;  // exact: a power-of-two scaling
    if (kNeedsNonzeroUniform && u24 < 1.0f) return reference(v, u);
    uint32_t code = 0;
    const float d = quantize<true>(v, u24, code);
    QuantizedElement r;
    r.out = hw_float_to_bf16(d);
    r.code = static_cast<uint8_t>(code);
    return r;
  }

  // The reference path for blocks where !fast() (numerics.h as is); out of line for SR (see
  // reference_element). The RN kernels keep it inline: at their 80-register cap (three CTAs a SM)
  // the call's saved registers spilled.
  __device__ __forceinline__ QuantizedElement reference(float v, float u) const {
    if constexpr (R == Rounding::sr) return reference_element(v, bs, G, max_index, R, u);
    return quantize_element(v, bs, G, max_index, R, u);
  }
};

#endif  // __CUDACC__

}  // namespace fp4::cuda::detail
