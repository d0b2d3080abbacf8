// ops_common.cuh — what the ops_*.cu files share: argument checks, launch sizes, warp reductions.
// nvcc only (included by .cu files, never by the public headers).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/ops.cuh"  // StoreOut
#include "kernels/cuda/bf16_convert.cuh"
#include "kernels/cuda/cuda_common.cuh"
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

// ---- bf16 rounding ----------------------------------------------------------------------------
// numerics.h's float_to_bf16 with the hardware's conversion. The software rounding (the NaN test,
// the tie bit, two adds and a shift: about eight instructions a value, and twice for a value
// rounded by its store and then copied to bf16) was a large share of the element-wise kernels'
// instructions. The hardware conversion (bf16_convert.cuh) rounds every float that is not a NaN
// exactly as float_to_bf16 does; on a NaN they differ (float_to_bf16 keeps the payload's top bits,
// quieted: (bits >> 16) | 0x40; the hardware gives 0x7fff), so a group with a NaN in it takes the
// software path (one test and branch per group, never taken in training unless a value
// overflowed). Every result is float_to_bf16's, bit for bit, for every input.
//
// Rounding and copying share one conversion: float_to_bf16(round_to_bf16(v)) == float_to_bf16(v)
// for every v (a bf16 value converts to itself; a quieted NaN stays as it is).
__device__ __forceinline__ uint32_t sw_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(::fp4::float_to_bf16(lo)) | (static_cast<uint32_t>(::fp4::float_to_bf16(hi)) << 16);
}
// isnan(a) || isnan(b) without a short circuit (one compare: setp.nan takes both operands).
__device__ __forceinline__ bool any_nan(float a, float b) { return isnan(a) | isnan(b); }

// float_to_bf16(v), branch-free.
__device__ __forceinline__ bf16_t to_bf16(float v) {
  const bf16_t hw = hw_float_to_bf16(v);
  const bf16_t quieted = static_cast<bf16_t>((::fp4::float_bits(v) >> 16) | 0x40u);
  return isnan(v) ? quieted : hw;
}

// float_to_bf16(lo) | float_to_bf16(hi) << 16.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  return any_nan(lo, hi) ? sw_bf16x2(lo, hi) : hw_pack_bf16x2(lo, hi);
}

// A value as bf16 storage keeps it: rounded to bf16 when `round` (the model's store()), else as is.
__device__ __forceinline__ float stored(float v, bool round) { return round ? ::fp4::bf16_to_float(to_bf16(v)) : v; }

// Writes a computed output element under a StoreOut: the fp32 value (rounded when s.round) at
// out[i] and, when s.bf16 is set, its bf16 copy at s.bf16[i]. A null `out` writes the bf16 copy
// only (an op whose fp32 output nothing reads).
__device__ __forceinline__ void write_out(float* out, size_t i, float v, const StoreOut& s) {
  if (!s.round && s.bf16 == nullptr) {
    if (out != nullptr) out[i] = v;
    return;
  }
  const bf16_t h = to_bf16(v);  // the rounding and the copy (see above)
  if (s.round) v = ::fp4::bf16_to_float(h);
  if (out != nullptr) out[i] = v;
  if (s.bf16 != nullptr) s.bf16[i] = h;
}

// ---- Vector access --------------------------------------------------------------------------
// The element-wise kernels move 16 bytes per access (float4, and 8 bytes for four bf16) where the
// shape and the pointers allow it: the per-instruction overhead of 4-byte accesses, not the
// arithmetic, is what kept them below the memory bandwidth. Which path runs never changes a
// result: every element still gets its own operations, in the same order.

// Whether p is a multiple of `bytes` (a power of two) as an address; null counts as aligned (an
// absent optional output).
__host__ __device__ __forceinline__ bool aligned(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// Whether write_out4 may store at out + i for any i that is a multiple of 4.
inline bool vec4_ok(const float* out, const StoreOut& s) { return aligned(out, 16) && aligned(s.bf16, 8); }

// Four consecutive bf16 bits in one 8-byte word, element 0 in the low half (little-endian).
// float_to_bf16 of each (see the bf16 rounding above).
__device__ __forceinline__ uint2 pack_bf16x4(float a, float b, float c, float d) {
  if (any_nan(a, b) | any_nan(c, d)) return make_uint2(sw_bf16x2(a, b), sw_bf16x2(c, d));
  return make_uint2(hw_pack_bf16x2(a, b), hw_pack_bf16x2(c, d));
}

// bf16_to_float of the four bf16 that pack_bf16x4 packs.
__device__ __forceinline__ float4 unpack_bf16x4(uint2 h) {
  return make_float4(::fp4::bf16_to_float(static_cast<bf16_t>(h.x & 0xffffu)),
                     ::fp4::bf16_to_float(static_cast<bf16_t>(h.x >> 16)),
                     ::fp4::bf16_to_float(static_cast<bf16_t>(h.y & 0xffffu)),
                     ::fp4::bf16_to_float(static_cast<bf16_t>(h.y >> 16)));
}

// write_out for the four elements out[i .. i+3] (i a multiple of 4, vec4_ok(out, s)): each value
// gets exactly write_out's treatment, stored with one 16-byte (and one 8-byte) access.
__device__ __forceinline__ void write_out4(float* out, size_t i, float4 v, const StoreOut& s) {
  if (!s.round && s.bf16 == nullptr) {
    if (out != nullptr) *reinterpret_cast<float4*>(out + i) = v;
    return;
  }
  const uint2 h = pack_bf16x4(v.x, v.y, v.z, v.w);  // the rounding and the copy (see above)
  if (s.round) v = unpack_bf16x4(h);
  if (out != nullptr) *reinterpret_cast<float4*>(out + i) = v;
  if (s.bf16 != nullptr) *reinterpret_cast<uint2*>(s.bf16 + i) = h;
}

// Inputs held as fp32 or as bf16 (a stored activation kept in bf16: its values are the fp32
// buffer's, bf16_to_float being exact), read as fp32. load4 reads four consecutive elements with
// one 16-byte (fp32) or 8-byte (bf16) access: p + i must be aligned for it (vec_aligned).
__device__ __forceinline__ float load1(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load1(const bf16_t* p, size_t i) { return ::fp4::bf16_to_float(p[i]); }
__device__ __forceinline__ float4 load4(const float* p, size_t i) { return *reinterpret_cast<const float4*>(p + i); }
__device__ __forceinline__ float4 load4(const bf16_t* p, size_t i) {
  return unpack_bf16x4(*reinterpret_cast<const uint2*>(p + i));
}
// Eight consecutive bf16 (one 16-byte access, p + i 16-byte aligned) as fp32: elements i .. i+3 in
// lo, i+4 .. i+7 in hi. Where every operand and the only output are bf16, the element-wise kernels
// move eight elements per access: four (8 bytes) left them below the memory bandwidth.
__device__ __forceinline__ void load8(const bf16_t* p, size_t i, float4& lo, float4& hi) {
  const uint4 w = *reinterpret_cast<const uint4*>(p + i);
  lo = unpack_bf16x4(make_uint2(w.x, w.y));
  hi = unpack_bf16x4(make_uint2(w.z, w.w));
}
// write_out's bf16 copy for eight elements dst[i .. i+7] (no fp32 output; dst + i 16-byte aligned):
// each value gets exactly write_out's treatment (whether rounded first or not, its copy is
// float_to_bf16 of it: see the bf16 rounding above).
__device__ __forceinline__ void write_bf16x8(bf16_t* dst, size_t i, float4 lo, float4 hi) {
  const uint2 a = pack_bf16x4(lo.x, lo.y, lo.z, lo.w), b = pack_bf16x4(hi.x, hi.y, hi.z, hi.w);
  *reinterpret_cast<uint4*>(dst + i) = make_uint4(a.x, a.y, b.x, b.y);
}

// Whether load4 may read at p + i for any i that is a multiple of 4.
template <class T>
inline bool vec_aligned(const T* p) {
  return aligned(p, 4 * sizeof(T));
}

// A 2-D launch over a [rows, per_row] index space (per_row: the units one thread handles in a
// row, e.g. float4 groups): threadIdx.x/blockIdx.x walk a row, threadIdx.y/blockIdx.y the rows,
// so kernels find (row, unit) without dividing (64-bit division per element was the main cost of
// the flat-index versions). The x extent is split into equal blocks, rounded up to whole warps,
// so few threads idle when per_row is not a multiple of 256; short rows stack several rows per
// block. Kernels loop (grid-stride) in both directions, so any rows and per_row are covered.
struct RowGrid {
  dim3 grid, block;
};
inline RowGrid row_grid(int rows, long long per_row, int threads = 256) {
  const long long x_blocks = (per_row + threads - 1) / threads;
  long long tx = (per_row + x_blocks - 1) / x_blocks;  // <= threads
  tx = (tx + 31) / 32 * 32;
  const long long ty = threads / tx;
  const long long y_blocks = (rows + ty - 1) / ty;
  RowGrid g;
  g.block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  g.grid = dim3(static_cast<unsigned>(x_blocks < 65536 ? x_blocks : 65536),
                static_cast<unsigned>(y_blocks < 65535 ? y_blocks : 65535));
  return g;
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
