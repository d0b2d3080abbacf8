// quantize_element.cuh — numerics.h's quantize_element, restated without data-dependent branches
// for the fused kernels (internal to kernels/cuda).
//
// Why: compiled for the GPU, numerics.h's round_nearest_index (a chain of if/else on the value),
// round_stochastic_index (an early return) and the IEEE division of quantize_element (a range check
// with a slow-path call) become branches that diverge across a warp and fence every element off
// from the next; the fused kernels ran at a quarter of copy bandwidth. The functions below compute
// the same bits with compares and selects. Each replaced step is equal to the original for every
// input, by the argument next to it, and tests/gpu/element_test.cpp checks them against numerics.h
// exhaustively (every float for the rounding steps) and on billions of random operands (the
// division). The block scale, the code's layout and the reference path for unusual blocks are
// numerics.h's own code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/numerics.h"

namespace fp4::cuda::detail {

#if defined(__CUDACC__)

// ---------------------------------------------------------------------------------------------
// Round to nearest: round_nearest_index as seven thresholds
// ---------------------------------------------------------------------------------------------
//
// round_nearest_index returns the number of thresholds T_1 < ... < T_7 that x passes, clipped to
// max_index: e2m1's chain tests x <= 0.25, x < 0.75, x <= 1.25, x < 1.75, x <= 2.5, x < 3.5,
// x <= 5 in turn, so index >= k exactly when x passes T_k, with "x > T_k" for odd k (a tie stays at
// the even index below) and "x >= T_k" for even k (a tie goes up to the even index). e1m2's
// floor/fraction form is the same with T_k = k - 1/2: frac = x - floor(x) is exact (Sterbenz), so
// "frac > 0.5" is "x > lo + 0.5", and a tie at lo + 0.5 goes up exactly when lo is odd, i.e. when k
// is even. x = +Inf passes all seven; a NaN passes none and gives 0, which is what
// quantize_element's NaN -> 0 gives. Three compares find the count (a binary search).
template <Grid G>
__device__ __forceinline__ float rn_threshold(int k) {
  if constexpr (G == Grid::e2m1) {
    constexpr float t[8] = {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    return t[k];
  } else {
    return static_cast<float>(k) - 0.5f;
  }
}

template <Grid G>
__device__ __forceinline__ int nearest_index(float x, int max_index) {
  const bool ge4 = x >= rn_threshold<G>(4);
  const bool ge_even = x >= (ge4 ? rn_threshold<G>(6) : rn_threshold<G>(2));
  const float t_odd = ge4 ? (ge_even ? rn_threshold<G>(7) : rn_threshold<G>(5))
                          : (ge_even ? rn_threshold<G>(3) : rn_threshold<G>(1));
  const bool gt_odd = x > t_odd;
  const int i = (ge4 ? 4 : 0) + (ge_even ? 2 : 0) + (gt_odd ? 1 : 0);
  return i < max_index ? i : max_index;
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
  // fast(): t by the exact replacements above, then quantize_element's steps.
  __device__ __forceinline__ QuantizedElement operator()(float v, float u) const {
    float x;
    if constexpr (M == ScaleMode::e4m3x2) x = abs_f(v * bs.mul);
    else if constexpr (M == ScaleMode::e8m0) x = abs_f(v * inv);  // == v / 2^e: the same real, rounded once
    else x = fast_quotient_abs<R == Rounding::sr>(v, div);
    x = fmaxf(x, 0.0f);  // NaN -> 0, as quantize_element (x >= 0 otherwise, so nothing else changes)
    int i;
    if constexpr (R == Rounding::rn) i = nearest_index<G>(x, max_index);
    else i = stochastic_index<G>(x, max_index, gmax, u);
    const bool neg = sign_bit(v);
    const float deq = magnitude_units<G>(i) * unit_scale;
    QuantizedElement r;
    r.out = hw_float_to_bf16(neg ? -deq : deq);
    r.code = static_cast<uint8_t>((neg ? 8 : 0) | i);
    return r;
  }

  // The reference path for blocks where !fast() (numerics.h as is).
  __device__ __forceinline__ QuantizedElement reference(float v, float u) const {
    return quantize_element(v, bs, G, max_index, R, u);
  }
};

#endif  // __CUDACC__

}  // namespace fp4::cuda::detail
