// bf16_convert.cuh — the hardware's fp32 -> bf16 conversions, one and two at a time, and the exact
// bf16 -> fp32 unpacking of a 16-byte chunk (internal to kernels/cuda; nvcc only). For every float that is not a NaN they round exactly as numerics.h's
// float_to_bf16 (checked on every float by tests/gpu/element_test.cu); on a NaN the hardware gives
// 0x7fff where float_to_bf16 keeps the payload's top bits, quieted, so callers that may meet NaNs
// handle them first (ops_common.cuh's to_bf16 and pack_bf16x4; the quantizers write NaN blocks
// themselves).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/numerics.h"

namespace fp4::cuda::detail {

__device__ __forceinline__ bf16_t hw_float_to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

// Two at once (one cvt.rn.bf16x2.f32): lo in bits 0..15, hi in 16..31, each half rounded as
// hw_float_to_bf16. Written as the instruction itself: built from __floats2bfloat162_rn's two
// halves, the compiler takes the word apart and puts it back together (PRMT, shifts, ORs: about 3
// more instructions per pair, more when the caller then ORs sign bits into it).
__device__ __forceinline__ uint32_t hw_pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// 8 bf16 (one 16-byte chunk) to fp32: one shift or mask per value (bf16_to_float of each half).
__device__ __forceinline__ void unpack8(uint4 q, float* v) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = bits_float(w[j] << 16);
    v[2 * j + 1] = bits_float(w[j] & 0xffff0000u);
  }
}

}  // namespace fp4::cuda::detail
