// quantize_element.cuh — numerics.h's quantize_element, restated without data-dependent branches
// for the fused kernels (internal to kernels/cuda).
//
// Why: compiled for the GPU, numerics.h's round_nearest_index (a chain of if/else on the value),
// round_stochastic_index (an early return) and the IEEE division of quantize_element (a range check
// with a slow-path call) become branches that diverge across a warp and fence every element off
// from the next. Here instead:
//   * round to nearest is float arithmetic on the rounded magnitude itself (nearest_magnitude:
//     rint on the binade's quantum, then min with G_max), with no index search or table lookup; the
//     magnitude index is derived from it only when codes are asked for;
//   * stochastic rounding keeps numerics.h's index steps, with the saturation test as a select;
//   * t = v / s for fp32 scales is a reciprocal once per block and Markstein's correction, twice,
//     per value (FastDivisor), exact for scales in [2^-60, 2^60]; e4m3x2 and e8m0 need one multiply;
//   * the bf16 rounding of the dequantized value is the hardware conversion (two at a time).
// Each replaced step is equal to the original for every input, by the argument next to it, and
// tests/gpu/element_test.cu checks them against numerics.h exhaustively (every float for the
// rounding steps and the bf16 conversions) and on billions of random operands (the division). The
// block scale, the code's layout and the reference path for unusual blocks (fp32 scales outside the
// fast division's range) are numerics.h's own code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/numerics.h"

namespace fp4::cuda::detail {

#if defined(__CUDACC__)

// ---------------------------------------------------------------------------------------------
// Round to nearest as float arithmetic: the rounded magnitude itself, not its index
// ---------------------------------------------------------------------------------------------
//
// nearest_magnitude<G>(x, gmax) == grid_magnitude(G, round_nearest_index(G, x, max_index)) for
// every non-NaN x >= 0 (+Inf included), gmax = grid_magnitude(G, max_index); checked on every such
// float by tests/gpu/element_test.cu. Why it is equal:
//   e2m1: inside a binade [2^e, 2^(e+1)), e >= 0, the grid (extended past 6 by 8, 12, ...) is the
//   multiples of the quantum 2^(e-1): {1, 1.5, 2}, {2, 3, 4}, {4, 6, 8}; below 1 it is the multiples
//   of 0.5: {0, 0.5, 1}. With k = 2^max(e, 0) (the exponent bits of max(x, 1)), y = x * (2 / k) is
//   exact (a power-of-two scaling; subnormal x only doubles), and rint(y) (round half to even) picks
//   the nearest multiple. An exact tie falls on y = 2.5 or 3.5 (or 0.5, 1.5 below 1), and the even
//   integer is the even code: 2.5 -> 2 is 1.25 -> 1 / 2.5 -> 2 / 5 -> 4 (indices 2, 4, 6), 3.5 -> 4
//   is 1.75 -> 2 / 3.5 -> 4 (indices 4, 6), 0.5 -> 0 is 0.25 -> 0, 1.5 -> 2 is 0.75 -> 1 (indices 0,
//   2): exactly round_nearest_index's "<=" / "<" chain. r = rint(y) * (k / 2) is exact (a small
//   integer times a power of two; it may overflow to +Inf for x >= 2^127, which saturates anyway).
//   Anything that rounds past 6 (x > 5 with the 5 -> 4 tie) is >= 8 and saturates.
//   e1m2: the grid is the integers, round half to even is rint.
//   Both: clip restricts the grid to a prefix, so the restricted nearest value is min(nearest,
//   G_max) (numerics.h's argument). x = +Inf: e2m1 gives k = 2^128's bits, 2 / k = 0, Inf * 0 = NaN,
//   and fminf returns its non-NaN operand, G_max; e1m2's rint(Inf) = Inf -> G_max. A NaN x is never
//   passed (the fast path's quotients of finite values are never NaN).
// The instructions: FMNMX, LOP3, two IADD, FMUL, FRND, FMUL, FMNMX (e2m1); FRND, FMNMX (e1m2),
// against three compares, selects and an index->magnitude lookup for the threshold search.
template <Grid G>
__device__ __forceinline__ float nearest_magnitude(float x, float gmax) {
  if constexpr (G == Grid::e2m1) {
    const uint32_t k = float_bits(fmaxf(x, 1.0f)) & 0x7f800000u;  // 2^max(e, 0) (Inf: 0x7f800000)
    const float two_over_k = bits_float(0x7f800000u - k);         // 2^(1 - e): biased exponent 255 - (e + 127)
    const float half_k = bits_float(k - 0x00800000u);             // 2^(e - 1) >= 0.5
    return fminf(__fmul_rn(rintf(__fmul_rn(x, two_over_k)), half_k), gmax);
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
// Stochastic rounding: round_stochastic_index without the early return
// ---------------------------------------------------------------------------------------------
//
// The same steps as round_stochastic_index, with the saturation test turned into a select, and
// p = (x - lo) / (hi - lo) computed as (x - lo) * (1 / (hi - lo)): hi - lo is 1/2, 1 or 2, whose
// reciprocal is exact, and both forms are the correctly rounded value of the same real number.
// gmax is grid_magnitude(G, max_index). x is not NaN (quantize_element made it 0 before).
template <Grid G>
__device__ __forceinline__ int stochastic_index(float x, int max_index, float gmax, float u) {
  int lo_i;
  float inv_step;
  if constexpr (G == Grid::e2m1) {
    // x * 2 only matters where x < 2; an out-of-range conversion (x = +Inf) is selected away.
    const int half_steps = static_cast<int>(fminf(x, 2.0f) * 2.0f);
    lo_i = x < 2.0f ? half_steps : (x < 3.0f ? 4 : (x < 4.0f ? 5 : 6));
    inv_step = lo_i < 4 ? 2.0f : (lo_i < 6 ? 1.0f : 0.5f);
  } else {
    lo_i = static_cast<int>(fminf(x, 7.0f));
    inv_step = 1.0f;
  }
  const float lo = grid_magnitude(G, lo_i);
  const float p = (x - lo) * inv_step;
  const int i = u < p ? lo_i + 1 : lo_i;
  return x < gmax ? i : max_index;
}

// ---------------------------------------------------------------------------------------------
// t = v / s for fp32 block scales, without the division's slow path
// ---------------------------------------------------------------------------------------------
//
// For a block whose scale s lies in [2^-60, 2^60] (fast_divisor_ok), y = RN(1/s) once per block,
// then per value (Markstein's correction, twice):
//   q0 = RN(v * y)                    within 2 ulps of v/s (y has relative error <= 2^-24)
//   q1 = RN(q0 + RN(v - s*q0) * y)    within 1 ulp of v/s (the remainder's rounding adds ~2^-22 ulp)
//   q2 = RN(q1 + (v - s*q1) * y)      = RN(v/s): the remainder of a quotient within 1 ulp is exact,
//                                     and with y within 1/2 ulp of 1/s one fused step rounds
//                                     correctly (Markstein's theorem).
// This holds while every step stays clear of underflow: |v/s| >= 2^-30 (the remainders are then
// multiples of at least 2^-136, exactly representable). Smaller values ("tiny") only meet the
// rounding as 0 < t < 2^-30: round to nearest gives index 0 for any such t (the sequence cannot
// leave [0, 2^-28)), and stochastic rounding compares u with p = 2t or t < 2^-24, which only
// u = 0 passes and only when RN(|v|/s) > 0, i.e. |v|/s > 2^-150, i.e. |v|*2^90 > s*2^-60 (both
// products exact). For tiny values the caller gets either 0 or 2^-149, which makes the same
// decisions. Blocks whose scale is outside the range use numerics.h's quantize_element.
__device__ __forceinline__ bool fast_divisor_ok(float s) {
  return s >= 8.67361738e-19f /* 2^-60 */ && s <= 1.15292150e18f /* 2^60 */;
}

struct FastDivisor {
  float s, y;
  float tiny_below;  // s * 2^-30: |v| below this is tiny
  float tiny_zero;   // s * 2^-60: a tiny |v| rounds to a nonzero quotient when |v| * 2^90 exceeds it
};

__device__ __forceinline__ FastDivisor make_fast_divisor(float s) {
  FastDivisor d;
  d.s = s;
  d.y = __frcp_rn(s);
  d.tiny_below = s * 9.31322575e-10f;   // 2^-30, exact scaling
  d.tiny_zero = s * 8.67361738e-19f;    // 2^-60, exact scaling (s >= 2^-60: still normal)
  return d;
}

// |v / s| as the rounding needs it (see above); kExactTiny: stochastic rounding.
template <bool kExactTiny>
__device__ __forceinline__ float fast_quotient_abs(float v, const FastDivisor& d) {
  const float q0 = __fmul_rn(v, d.y);
  const float r0 = __fmaf_rn(-d.s, q0, v);
  const float q1 = __fmaf_rn(r0, d.y, q0);
  const float r1 = __fmaf_rn(-d.s, q1, v);
  const float q2 = __fmaf_rn(r1, d.y, q1);
  const float x = abs_f(q2);
  if constexpr (!kExactTiny) return x;
  const float a = abs_f(v);
  const float tiny = __fmul_rn(a, 1.23794004e27f /* 2^90 */) > d.tiny_zero ? 1.40129846e-45f /* 2^-149 */ : 0.0f;
  return a < d.tiny_below ? tiny : x;
}

// ---------------------------------------------------------------------------------------------
// The dequantized value: bf16(q * stored) with the sign of v
// ---------------------------------------------------------------------------------------------
//
// quantize_element computes grid_magnitude(G, i) * stored in fp32 and rounds it with float_to_bf16.
// Here: e2m1's magnitudes times 2 are the integers 0 1 2 3 4 6 8 12 (one byte each, picked by a
// byte permute), multiplied by stored / 2 — the same real product, rounded once, as long as
// stored / 2 is exact, which it is in every block the fast path takes (stored is an E4M3 value,
// a normal fp32 scale >= 2^-60, or a power of two >= 2^-127); e1m2's magnitude is i itself. The
// product is finite (no NaN), where the hardware's cvt.rn.bf16.f32 is float_to_bf16 (checked on
// every float by tests/gpu/element_test.cu).
template <Grid G>
__device__ __forceinline__ float magnitude_units(int i) {
  if constexpr (G == Grid::e2m1) return static_cast<float>(__byte_perm(0x03020100u, 0x0c080604u, static_cast<unsigned>(i)));
  return static_cast<float>(i);
}

template <Grid G>
__device__ __forceinline__ float magnitude_unit_scale(float stored) {
  if constexpr (G == Grid::e2m1) return stored * 0.5f;
  return stored;
}

__device__ __forceinline__ bf16_t hw_float_to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

// Two at once (one cvt.rn.bf16x2.f32): lo in bits 0..15, hi in 16..31. The same rounding per half as
// hw_float_to_bf16 (checked on every non-NaN float by tests/gpu/element_test.cu).
__device__ __forceinline__ uint32_t hw_pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return static_cast<uint32_t>(__bfloat16_as_ushort(h.x)) | (static_cast<uint32_t>(__bfloat16_as_ushort(h.y)) << 16);
}

// ---------------------------------------------------------------------------------------------
// One block's quantizer
// ---------------------------------------------------------------------------------------------

// Everything a finite, non-zero block needs per element, fixed once per block. Built from
// make_block_scale's result; `fast()` says whether the branch-free path is exact for this block
// (always for e4m3x2 and e8m0; for fp32 when the scale is in the fast division's range).
template <Grid G, Rounding R, ScaleMode M>
struct BlockQuantizer {
  BlockScale bs;
  int max_index;
  float gmax;        // grid_magnitude(G, max_index), for SR
  float inv;         // e8m0: 1 / stored = 2^-e, exact
  float unit_scale;  // stored, or stored / 2 for e2m1 (see magnitude_units)
  FastDivisor div;   // fp32

  __device__ __forceinline__ BlockQuantizer(const BlockScale& b, int max_idx) : bs(b), max_index(max_idx) {
    gmax = grid_magnitude(G, max_idx);
    inv = 1.0f;
    if constexpr (M == ScaleMode::e8m0) inv = exp2_int(-floor_log2(b.stored));  // stored = 2^e, e in [-127, 127]
    if constexpr (M == ScaleMode::fp32) div = make_fast_divisor(b.stored);
    unit_scale = magnitude_unit_scale<G>(b.stored);
  }

  __device__ __forceinline__ bool fast() const {
    if constexpr (M == ScaleMode::fp32) return fast_divisor_ok(bs.stored);
    return true;
  }

  // quantize_element(v, bs, G, max_index, R, u) for a finite v of a finite, non-zero block, when
  // fast(): t by the exact replacements above, then quantize_element's steps. Returns the signed
  // dequantized value in fp32 (the caller rounds it to bf16 with the hardware conversion, two at a
  // time); with kCodes, also the code. The product is grid_magnitude(i) * stored, as in numerics.h
  // (RN: nearest_magnitude is that magnitude; SR: magnitude_units * unit_scale is the same real
  // product), and is >= +0 and not NaN, so setting the sign bit is numerics.h's "neg ? -deq : deq".
  template <bool kCodes>
  __device__ __forceinline__ float quantize(float v, float u, uint32_t& code) const {
    float x;
    if constexpr (M == ScaleMode::e4m3x2) x = abs_f(v * bs.mul);
    else if constexpr (M == ScaleMode::e8m0) x = abs_f(v * inv);  // == v / 2^e: the same real, rounded once
    else x = fast_quotient_abs<R == Rounding::sr>(v, div);
    float deq;
    int i = 0;
    if constexpr (R == Rounding::rn) {
      const float r = nearest_magnitude<G>(x, gmax);  // x is never NaN here (see nearest_magnitude)
      deq = r * bs.stored;
      if constexpr (kCodes) i = magnitude_index<G>(r);
    } else {
      x = fmaxf(x, 0.0f);  // NaN -> 0, as quantize_element (x >= 0 otherwise, so nothing else changes)
      i = stochastic_index<G>(x, max_index, gmax, u);
      deq = magnitude_units<G>(i) * unit_scale;
    }
    const uint32_t sign = float_bits(v) & 0x80000000u;
    if constexpr (kCodes) code = (sign >> 28) | static_cast<uint32_t>(i);
    return bits_float(float_bits(deq) | sign);
  }

  // The same as a QuantizedElement (the element tests compare it with quantize_element).
  __device__ __forceinline__ QuantizedElement operator()(float v, float u) const {
    uint32_t code = 0;
    const float d = quantize<true>(v, u, code);
    QuantizedElement r;
    r.out = hw_float_to_bf16(d);
    r.code = static_cast<uint8_t>(code);
    return r;
  }

  // The reference path for blocks where !fast() (numerics.h as is).
  __device__ __forceinline__ QuantizedElement reference(float v, float u) const {
    return quantize_element(v, bs, G, max_index, R, u);
  }
};

#endif  // __CUDACC__

}  // namespace fp4::cuda::detail
