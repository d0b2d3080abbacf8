// ops_common.cuh — what the ops_*.cu files share: argument checks, launch sizes, warp reductions.
// nvcc only (included by .cu files, never by the public headers).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/ops.cuh"  // StoreOut
#include "kernels/cuda/quantize.cuh"
#include "kernels/numerics.h"

namespace fp4::cuda::detail {

// A shape error: one line, thrown before anything is launched.
inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

// Grid size for a grid-stride loop over n elements: enough blocks to fill the device many times
// over, capped so the index arithmetic stays cheap. Element-wise kernels only (the result of each
// element never depends on which thread computes it).
inline unsigned elementwise_blocks(size_t n, int threads) {
  const size_t want = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  constexpr size_t kMaxBlocks = 65536;
  return static_cast<unsigned>(want < 1 ? 1 : (want > kMaxBlocks ? kMaxBlocks : want));
}

inline void check_launch() { FP4_CUDA_CHECK(cudaGetLastError()); }

// A value as bf16 storage keeps it: rounded to bf16 when `round` (the model's store()), else as is.
__device__ __forceinline__ float stored(float v, bool round) { return round ? ::fp4::round_to_bf16(v) : v; }

// Writes a computed output element under a StoreOut: the fp32 value (rounded when s.round) at
// out[i] and, when s.bf16 is set, its bf16 copy at s.bf16[i].
__device__ __forceinline__ void write_out(float* out, size_t i, float v, const StoreOut& s) {
  v = stored(v, s.round);
  out[i] = v;
  if (s.bf16 != nullptr) s.bf16[i] = ::fp4::float_to_bf16(v);
}

// Butterfly reductions over a warp. Each step adds (or maxes) a lane's value with its partner's;
// since a + b == b + a exactly in IEEE arithmetic, every lane ends with the same bits, and the
// association order is fixed, so the result is deterministic.
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// ops.h's dot(): eight lane sums (element e goes to lane e mod 8, in increasing e), combined
// pairwise as ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)). Here the eight lanes are eight consecutive
// threads of a warp (a row group); `partial` is this thread's lane sum and the combination is a
// butterfly over xor 1, 2, 4, which performs exactly those additions (commutativity makes the
// partner's order irrelevant). Every thread of the group returns the dot product.
__device__ __forceinline__ float group8_combine(float partial) {
  partial += __shfl_xor_sync(0xffffffffu, partial, 1);
  partial += __shfl_xor_sync(0xffffffffu, partial, 2);
  partial += __shfl_xor_sync(0xffffffffu, partial, 4);
  return partial;
}

}  // namespace fp4::cuda::detail
