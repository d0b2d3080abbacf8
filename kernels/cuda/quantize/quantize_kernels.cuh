// quantize_kernels.cuh — the fused quantize kernel (internal to kernels/cuda; the API is
// quantize.cuh). It is a template on the block size B; quantize_b16.cu and quantize_b32.cu each
// compile one instance, so the two build in parallel.
//
// How the work is laid out. The source is cut into tiles of B rows × 512 columns. A persistent CTA of
// 256 threads takes every gridDim.x-th tile; it loads each into shared memory once, with 16-byte
// asynchronous copies issued two tiles ahead (three buffers; two when the column copy's SR words
// need the space), then:
//   * column copy: each thread takes a pair of adjacent columns (B rows: one block each), runs the
//     RHT down the columns, takes the block amax, quantizes and stores straight to global memory:
//     the 32 lanes of a warp write 128 contiguous bytes of one row, a whole cache line;
//   * row copy, 1D blocks: each thread takes one B-element block of one row (consecutive lanes,
//     consecutive blocks), reads it from the tile (which is only read, so no barrier separates the
//     two copies), quantizes it and stores it and its scale straight to global memory;
//   * row copy, 2D tiles: consecutive lanes take consecutive rows, so the B rows of a tile sit in B
//     consecutive lanes and the tile amax is a shuffle reduction; the dequantized values go back
//     into the tile in place and the CTA stores it with 16-byte coalesced stores. The shared rows
//     are padded by 16 bytes so that those lanes' 16-byte accesses fall in different banks.
// The row copy alone (RN, no codes, 1D blocks) does not come here: quantize_rows.cu.
//
// Per-value arithmetic is numerics.h (block scales, RHT, Philox) and quantize_element.cuh (the
// element rounding, numerics.h's quantize_element without data-dependent branches), compiled for
// the copy's grid, rounding and scale mode as compile-time constants. The kernel is also a template
// on what is fixed about each copy (DynCopy / NoCopy / FixedCopy, below): the host picks an instance
// specialized for the copies' family (grid, scale mode), each copy's rounding and presence, without
// codes, when one is instantiated; otherwise the generic instance switches on them once per block.
#pragma once

#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/quantize/quantize.cuh"
#include "kernels/cuda/quantize/quantize_element.cuh"
#include "kernels/cuda/quantize/strip_divider.h"
#include "kernels/numerics.h"

namespace fp4::cuda::detail {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileCols = 512;
// Shared tile row pitch in bf16 elements: 16 bytes of padding put the rows that consecutive lanes
// read in the row phase on different banks (1040 bytes = 16 mod 128).
constexpr int kPitch = kTileCols + 8;
constexpr uint32_t kF32QuietNaN = 0x7fc00000u;

// Shared memory of the fused kernel for block size B: two tiles (the one being quantized and the
// next, loading), the row copy's block scales staged for a coalesced store (+1 column against bank
// conflicts), and, when the column copy rounds stochastically, one Philox word per tile element.
__host__ __device__ constexpr int tile_bytes(int b) { return b * kPitch * 2; }
__host__ __device__ constexpr int row_scale_bytes(int b) { return (b * (kTileCols / b + 1) * 4 + 15) / 16 * 16; }
__host__ __device__ constexpr int word_bytes(int b) { return b * kTileCols * 4; }
// Tiles in shared memory at once: the one being quantized and two loading ahead (two tiles of loads
// in flight per CTA), or one ahead when the column copy's SR words also need the space.
__host__ __device__ constexpr int fused_stages(bool col_sr) { return col_sr ? 2 : 3; }
__host__ __device__ constexpr int fused_smem_bytes(int b, bool col_sr) {
  return fused_stages(col_sr) * tile_bytes(b) + row_scale_bytes(b) + (col_sr ? word_bytes(b) : 0);
}

// One copy as the kernels see it.
struct CopyArgs {
  bool present;
  QuantSpec spec;
  bf16_t* dequant;
  uint8_t* codes;
  float* scales;
  const TensorScale* ts;  // device; read for e4m3x2 only
  int max_index;
};

struct Source {
  const bf16_t* x;
  int rows, cols;
  int col_tiles;  // tiles across the columns
  bool vec_load;  // cols % 8 == 0: a tile row loads as 16-byte chunks
  // quantize_fused's source_rows (may be null): the SR draws of row r are those of source row
  // source_rows[r] (draw_row).
  const int32_t* source_rows;
  // quantize_fused's groups (count 0: none): row r draws with its group's stream (draw_stream).
  GroupStreams groups;
};

// The row whose source indices row r of x draws its SR uniforms by: r itself, or with source_rows
// (an MoE expert's gathered group) the source tensor's row, so the draws do not depend on the
// grouping (quantize.cuh). The element (r, c) draws by index draw_row(r)·cols + c; cols is a
// multiple of 4 wherever a Philox call's 4 words are shared, so that index keeps c's place in its call.
__device__ __forceinline__ uint64_t draw_row(const Source& src, int64_t r) {
  return src.source_rows != nullptr ? static_cast<uint64_t>(src.source_rows[r]) : static_cast<uint64_t>(r);
}

// The Philox stream row r of x draws its SR uniforms with: the copy's own, or with groups the
// stream of the linear whose group holds row r (quantize.cuh's GroupStreams): the last group g with
// offsets[g] <= r, by bisection (an empty group shares its offset with the next one).
__device__ __forceinline__ uint32_t draw_stream(const Source& src, uint32_t stream, int64_t r) {
  if (src.groups.count == 0) return stream;
  int lo = 0, hi = src.groups.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (src.groups.offsets[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  return philox_stream_of_linear(stream, src.groups.linear_ids[lo]);
}

struct FusedArgs {
  Source src;
  CopyArgs row, col;
  bool pair_stores;             // cols even: a column pair stores as one 4-byte / 2-byte word
  unsigned* nonfinite_flag;     // may be null
  float* unit_tensor_scale[2];  // tensor_scale outputs of non-e4m3x2 copies: CTA 0 writes 1
};

// Launches the fused kernel for block size 16 or 32 (defined in quantize_b16.cu, quantize_b32.cu).
// tiles: B-row × 512-column tiles of the source; smem: fused_smem_bytes.
void launch_fused_b16(const FusedArgs& a, int tiles, int smem, cudaStream_t stream);
void launch_fused_b32(const FusedArgs& a, int tiles, int smem, cudaStream_t stream);
// The row copy alone, RN, no codes, 1D blocks, in the families the fused kernel specializes: a
// kernel without shared memory (quantize_rows.cu). Returns false, launching nothing, otherwise.
bool launch_row_rn(const FusedArgs& a, int b, cudaStream_t stream);
// Both copies RN without the RHT, or the column copy alone so, no codes, block 16 with fp32 or
// e4m3x2 scales or block 32 with e8m0 scales: the strips working on the source words
// (quantize_strips_plain.cu). Returns false, launching nothing, otherwise.
bool launch_plain_strips(const FusedArgs& a, int b, cudaStream_t stream);

// The strip kernels (fused_strip_kernel in quantize_rows.cu, plain_strip_kernel in
// quantize_strips_plain.cu) take strips of 16 (plain: 16 or 32) rows x kStripCols columns, one per
// warp at a time.
constexpr int kStripCols = 64;

// The CTAs of a persistent launch of `kernel` (`threads` each, `smem_bytes` of dynamic shared
// memory): as many as fit on the device at once, at most `per_sm_cap` per SM and at most `wanted`.
template <class Kernel>
int64_t resident_ctas(Kernel* kernel, int64_t wanted, int threads = kThreads, int smem_bytes = 0,
                      int per_sm_cap = 1 << 30) {
  int device = 0, sms = 0, per_sm = 0;
  FP4_CUDA_CHECK(cudaGetDevice(&device));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  FP4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
  return std::min<int64_t>(wanted, static_cast<int64_t>(sms) * std::clamp(per_sm, 1, per_sm_cap));
}

#if defined(__CUDACC__)

// Every quantize kernel's first act: CTA 0 writes 1 to the tensor_scale output of each copy without
// two-level scales (FusedArgs::unit_tensor_scale; null where there is none to write).
__device__ __forceinline__ void write_unit_tensor_scales(const FusedArgs& a) {
  if (blockIdx.x == 0 && threadIdx.x < 2 && a.unit_tensor_scale[threadIdx.x] != nullptr)
    *a.unit_tensor_scale[threadIdx.x] = 1.0f;
}

// The same over finite values only (the tensor amax ignores NaN and infinities).
__device__ __forceinline__ float max_abs_finite(float m, float v) {
  const float a = abs_f(v);
  return fmaxf(m, is_finite(a) ? a : 0.0f);
}

// The block's amax and finiteness in one pass: the bits of the NaN-propagating maximum of |v| over
// its values (after the RHT), one FMNMX.NAN with the |.| operand modifier per value. When every
// value is finite this is the bits of max|v| (the reference's amax_b: a running max from 0, where
// -0 counts as 0; fmaxf returns one of its operands, and |v| is never -0), the same as the unsigned
// maximum of the magnitude bits (for non-NaN floats >= 0 the unsigned order of the bits is the
// numeric order). A NaN anywhere makes the result a NaN (max.NaN), an infinity without NaN makes it
// +Inf; both have bits >= 0x7f800000 (a NaN's, either sign, are above it), above every finite
// value, so the block is finite exactly when the result is below that, as before. (The plain fmaxf
// would drop a NaN operand, hence max.NaN.)
//
// Why the values after the RHT only: numerics.h's block is non-finite when a source value or a
// value after the RHT is. Without the RHT they are the same values. With it, every output of the
// butterfly depends on all 16 inputs through sums and differences, and a sum or difference with a
// non-finite operand is non-finite (Inf +- finite = Inf, Inf - Inf = NaN, NaN stays NaN), as is
// 0.25 * Inf; so a non-finite source makes its whole 16-vector non-finite, and the check after the
// RHT also catches a finite source whose butterfly overflowed fp32 (e.g. 16 values near 2^127).
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}

template <int N>
__device__ __forceinline__ uint32_t absmax_bits(const float* v) {
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) m = fmax_nan(m, fabsf(v[j]));
  return float_bits(m);
}
constexpr uint32_t kF32InfBits = 0x7f800000u;

// The bf16 pair every element of a non-finite block becomes (numerics.h's kBf16QuietNaN; the
// hardware conversion would give its own canonical NaN, so it is written as bits).
constexpr uint32_t kNaNPair = uint32_t{kBf16QuietNaN} | (uint32_t{kBf16QuietNaN} << 16);

// Loads source rows [r0, r0 + TR) × columns [c0, c0 + kTileCols) into the shared tile; what lies
// outside the tensor reads as 0 (and is never stored).
template <int TR>
__device__ __forceinline__ void load_tile(const Source& s, int r0, int c0, bf16_t* tile) {
  if (s.vec_load) {
    constexpr int kChunksPerRow = kTileCols / 8;
    constexpr int kPerThread = TR * kChunksPerRow / kThreads;
    uint4 chunk[kPerThread];
    // All loads first, then all shared stores: kPerThread 16-byte loads in flight per thread.
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int k = i * kThreads + threadIdx.x;
      const int r = k / kChunksPerRow, c = (k % kChunksPerRow) * 8;
      chunk[i] = make_uint4(0u, 0u, 0u, 0u);
      if (r0 + r < s.rows && c0 + c < s.cols)  // cols % 8 == 0: a chunk is wholly in or out
        chunk[i] = __ldg(reinterpret_cast<const uint4*>(s.x + static_cast<int64_t>(r0 + r) * s.cols + c0 + c));
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int k = i * kThreads + threadIdx.x;
      const int r = k / kChunksPerRow, c = (k % kChunksPerRow) * 8;
      *reinterpret_cast<uint4*>(tile + r * kPitch + c) = chunk[i];
    }
  } else {
    for (int k = threadIdx.x; k < TR * kTileCols; k += kThreads) {
      const int r = k / kTileCols, c = k % kTileCols;
      bf16_t v = 0;
      if (r0 + r < s.rows && c0 + c < s.cols) v = s.x[static_cast<int64_t>(r0 + r) * s.cols + c0 + c];
      tile[r * kPitch + c] = v;
    }
  }
}

// Starts loading the tile at (r0, c0) into `tile` (as load_tile) without waiting: 16-byte cp.async
// copies that land while the CTA works on the previous tile; the caller commits and waits. Chunks
// outside the tensor are zeroed by plain stores. Without 16-byte rows it loads synchronously.
template <int TR>
__device__ __forceinline__ void issue_tile_load(const Source& s, int r0, int c0, bf16_t* tile) {
  if (!s.vec_load) {
    load_tile<TR>(s, r0, c0, tile);
    return;
  }
  constexpr int kChunksPerRow = kTileCols / 8;
#pragma unroll
  for (int i = 0; i < TR * kChunksPerRow / kThreads; ++i) {
    const int k = i * kThreads + threadIdx.x;
    const int r = k / kChunksPerRow, c = (k % kChunksPerRow) * 8;
    bf16_t* dst = tile + r * kPitch + c;
    if (r0 + r < s.rows && c0 + c < s.cols)
      __pipeline_memcpy_async(dst, s.x + static_cast<int64_t>(r0 + r) * s.cols + c0 + c, 16);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// Calls f(grid, rounding, scale mode, codes wanted) with each a std::integral_constant, so the
// per-element code is compiled once per combination, with no per-element branch on any of them.
// Without codes (training never asks for them) no code is computed, packed or stored at all.
template <class F>
__device__ __forceinline__ void dispatch_kind(const QuantSpec& s, bool codes, F&& f) {
  auto by_codes = [&](auto g, auto r, auto m) {
    if (codes) f(g, r, m, std::true_type{});
    else f(g, r, m, std::false_type{});
  };
  auto by_scale = [&](auto g, auto r) {
    if (s.scale == ScaleMode::e4m3x2) by_codes(g, r, std::integral_constant<ScaleMode, ScaleMode::e4m3x2>{});
    else if (s.scale == ScaleMode::e8m0) by_codes(g, r, std::integral_constant<ScaleMode, ScaleMode::e8m0>{});
    else by_codes(g, r, std::integral_constant<ScaleMode, ScaleMode::fp32>{});
  };
  auto by_rounding = [&](auto g) {
    if (s.rounding == Rounding::sr) by_scale(g, std::integral_constant<Rounding, Rounding::sr>{});
    else by_scale(g, std::integral_constant<Rounding, Rounding::rn>{});
  };
  if (s.grid == Grid::e1m2) by_rounding(std::integral_constant<Grid, Grid::e1m2>{});
  else by_rounding(std::integral_constant<Grid, Grid::e2m1>{});
}

__device__ __forceinline__ TensorScale load_tensor_scale(const CopyArgs& c) {
  if (c.spec.scale == ScaleMode::e4m3x2) return *c.ts;
  return TensorScale{1.0f, 1.0f};
}

// Quantizes the N values v[0..N) of one block (or one column of a tile) in place: v[j] becomes the
// signed dequantized value in fp32, exactly representable in bf16 or rounded to it by the caller's
// hardware conversion (hw_pack_bf16x2), and with kCodes code[j] its code. uniform(j) gives element
// j's SR uniform as u24 (uniform24 of its word; not called for RN). The branches here are per block:
//   * non-finite block: v[j] = 0 (the caller writes kNaNPair over it), code kNonFiniteCode;
//   * zero block (fp32 / e8m0 with amax 0): numerics.h's output +0, code 0;
//   * fast blocks: BlockQuantizer::quantize; other blocks (and, for SR with fp32 scales, blocks
//     holding a uniform below 2^-24: BlockQuantizer::kNeedsNonzeroUniform): numerics.h's
//     quantize_element, whose bf16 result (never NaN in a finite block) converts to fp32 and back
//     unchanged.
template <int N, Grid G, Rounding R, ScaleMode M, bool kCodes, class Uniform>
__device__ __forceinline__ void quantize_values(float* v, uint32_t* code, const BlockScale& bs, bool finite,
                                                int max_index, Uniform&& uniform) {
  const BlockQuantizer<G, R, M> q(bs, max_index);
  bool fast = q.fast();
  if constexpr (BlockQuantizer<G, R, M>::kNeedsNonzeroUniform) {
    bool low = false;
#pragma unroll
    for (int j = 0; j < N; ++j) low = low || uniform(j) < 1.0f;
    fast = fast && !low;
  }
  if (!finite || bs.zero_block) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      v[j] = 0.0f;
      if constexpr (kCodes) code[j] = finite ? 0u : uint32_t{kNonFiniteCode};
    }
  } else if (fast) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float u24 = 0.0f;
      if constexpr (R == Rounding::sr) u24 = uniform(j);
      v[j] = q.template quantize<kCodes>(v[j], u24, code[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float u = 0.0f;
      if constexpr (R == Rounding::sr) u = uniform_from_u24(uniform(j));
      const QuantizedElement e = q.reference(v[j], u);
      v[j] = bf16_to_float(e.out);
      if constexpr (kCodes) code[j] = e.code;
    }
  }
}

// The column copy's SR needs one Philox word per element, and one Philox call makes the words of
// 4 consecutive source indices, which lie along a row: the CTA computes each call once into shared
// memory, words[r][c] for tile element (r, c). Within a row the calls start at the row's first
// index rounded down to a multiple of 4, so a 512-column row needs 128 calls (129 when cols is not
// a multiple of 4 and the row start falls inside a group).
template <int TR>
__device__ void fill_words(const Source& src, const QuantSpec& s, int r0, int c0, uint32_t* words) {
  const bool aligned = src.cols % 4 == 0;
  const int per_row = aligned ? kTileCols / 4 : kTileCols / 4 + 1;
  for (int k = threadIdx.x; k < TR * per_row; k += kThreads) {
    const int r = k / per_row, j = k % per_row;
    if (r0 + r >= src.rows) continue;
    const uint64_t row_start = draw_row(src, r0 + r) * src.cols + c0;
    const uint64_t first = ((row_start >> 2) + j) << 2;  // the element index of word 0
    const Philox4 w = philox_for_elements(s.seed, draw_stream(src, s.stream, r0 + r), s.step, first);
    const int lc = static_cast<int>(static_cast<int64_t>(first) - static_cast<int64_t>(row_start));
    uint32_t* dst = words + r * kTileCols;
    if (aligned) {
      *reinterpret_cast<uint4*>(dst + lc) = make_uint4(w.w[0], w.w[1], w.w[2], w.w[3]);
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (lc + q >= 0 && lc + q < kTileCols) dst[lc + q] = w.w[q];
    }
  }
}

// Column copy: blocks of B consecutive rows of one column (tile_2d: B × B tiles). Thread t takes
// columns (2t, 2t + 1) of the tile. Returns whether a block it stored was non-finite.
template <int B, Grid G, Rounding R, ScaleMode M, bool kCodes>
__device__ bool col_blocks(const FusedArgs& a, const bf16_t* tile, const uint32_t* words, int r0, int c0) {
  static_assert(kTileCols / 2 == kThreads, "one column pair per thread");
  const CopyArgs& c = a.col;
  const QuantSpec& s = c.spec;
  const int rows = a.src.rows, cols = a.src.cols;
  const int lc = 2 * threadIdx.x;
  const int gr = r0, gc = c0 + lc;
  const bool valid0 = gr < rows && gc < cols;  // rows % B == 0: the tile's rows are all in or out
  const bool valid1 = gr < rows && gc + 1 < cols;

  float v0[B], v1[B];
#pragma unroll
  for (int r = 0; r < B; ++r) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(tile + r * kPitch + lc);
    v0[r] = bits_float(w << 16);
    v1[r] = bits_float(w & 0xffff0000u);
  }
  if (s.rht) {
#pragma unroll
    for (int j = 0; j < B; j += kRhtSize) {
      rht16(v0 + j, s.rht_signs);
      rht16(v1 + j, s.rht_signs);
    }
  }
  uint32_t m0 = absmax_bits<B>(v0), m1 = absmax_bits<B>(v1);  // amax and finiteness (absmax_bits)
  if (s.tile_2d) {
    // A tile's B columns are the pairs of B/2 consecutive, aligned lanes: combine over them.
    uint32_t m = max(m0, m1);
#pragma unroll
    for (int off = 1; off < B / 2; off <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    m0 = m1 = m;
  }
  const bool f0 = m0 < kF32InfBits, f1 = m1 < kF32InfBits;
  const TensorScale ts = load_tensor_scale(c);
  const BlockScale bs0 = make_block_scale(s.scale, f0 ? bits_float(m0) : 0.0f, s.gmax, ts);
  const BlockScale bs1 = make_block_scale(s.scale, f1 ? bits_float(m1) : 0.0f, s.gmax, ts);

  // The SR uniforms come from the tile's words.
  uint32_t code0[B], code1[B];
  quantize_values<B, G, R, M, kCodes>(v0, code0, bs0, f0, c.max_index,
                                      [&](int r) { return uniform24(words[r * kTileCols + lc]); });
  quantize_values<B, G, R, M, kCodes>(v1, code1, bs1, f1, c.max_index,
                                      [&](int r) { return uniform24(words[r * kTileCols + lc + 1]); });
  // out[r]: row r's two bf16 (column lc in the low half), NaN halves for non-finite blocks.
  const uint32_t nan_mask = (f0 ? 0u : 0x0000ffffu) | (f1 ? 0u : 0xffff0000u);
  uint32_t out[B];
#pragma unroll
  for (int r = 0; r < B; ++r) out[r] = (hw_pack_bf16x2(v0[r], v1[r]) & ~nan_mask) | (kNaNPair & nan_mask);

  const int64_t base = static_cast<int64_t>(gr) * cols + gc;
  if (a.pair_stores) {
    // cols is even, so valid0 implies valid1: one 4-byte and one 2-byte store per row.
    if (valid0 && c.dequant != nullptr) {
#pragma unroll
      for (int r = 0; r < B; ++r)
        *reinterpret_cast<uint32_t*>(c.dequant + base + static_cast<int64_t>(r) * cols) = out[r];
    }
    if constexpr (kCodes) {
      if (valid0) {
#pragma unroll
        for (int r = 0; r < B; ++r)
          *reinterpret_cast<uint16_t*>(c.codes + base + static_cast<int64_t>(r) * cols) =
              static_cast<uint16_t>((code0[r] & 0xffu) | ((code1[r] & 0xffu) << 8));
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < B; ++r) {
      const int64_t i = base + static_cast<int64_t>(r) * cols;
      if (c.dequant != nullptr) {
        if (valid0) c.dequant[i] = static_cast<bf16_t>(out[r] & 0xffffu);
        if (valid1) c.dequant[i + 1] = static_cast<bf16_t>(out[r] >> 16);
      }
      if constexpr (kCodes) {
        if (valid0) c.codes[i] = static_cast<uint8_t>(code0[r]);
        if (valid1) c.codes[i + 1] = static_cast<uint8_t>(code1[r]);
      }
    }
  }

  const float nan = bits_float(kF32QuietNaN);
  const float st0 = f0 ? bs0.stored : nan, st1 = f1 ? bs1.stored : nan;
  if (c.scales != nullptr) {
    if (s.tile_2d) {
      if (valid0 && lc % B == 0) c.scales[static_cast<int64_t>(gr / B) * (cols / B) + gc / B] = st0;
    } else {
      float* p = c.scales + static_cast<int64_t>(gr / B) * cols + gc;
      if (a.pair_stores) {
        if (valid0) *reinterpret_cast<float2*>(p) = make_float2(st0, st1);
      } else {
        if (valid0) p[0] = st0;
        if (valid1) p[1] = st1;
      }
    }
  }
  return (valid0 && !f0) || (valid1 && !f1);
}

// Row copy: blocks of B consecutive elements of one row (tile_2d: B × B tiles). Item k of the tile
// is row k % B, block column k / B, so consecutive lanes take consecutive rows. The dequantized
// block overwrites its own source bytes in the tile; the caller stores the tile afterwards.
template <int B, Grid G, Rounding R, ScaleMode M, bool kCodes>
__device__ bool row_blocks(const FusedArgs& a, bf16_t* tile, float* rscale, int r0, int c0) {
  constexpr int kBlocksPerRow = kTileCols / B;
  constexpr int kItems = B * kBlocksPerRow / kThreads;
  const CopyArgs& c = a.row;
  const QuantSpec& s = c.spec;
  const int rows = a.src.rows, cols = a.src.cols;
  const TensorScale ts = load_tensor_scale(c);
  bool any_nonfinite = false;
#pragma unroll 1
  for (int it = 0; it < kItems; ++it) {
    const int k = it * kThreads + threadIdx.x;
    // 2D tiles: consecutive lanes take consecutive rows (the tile amax is a shuffle reduction).
    // 1D blocks: consecutive lanes take consecutive blocks of one row, so that they store straight
    // to global memory, coalesced, and the tile is only read.
    const int r = s.tile_2d ? k % B : k / kBlocksPerRow, bc = s.tile_2d ? k / B : k % kBlocksPerRow;
    const int gr = r0 + r, gc = c0 + bc * B;
    const bool valid = gr < rows && gc < cols;  // cols % B == 0: a block is wholly in or out
    bf16_t* p = tile + r * kPitch + bc * B;

    float v[B];
    {
      // The 1D mapping's lanes are B * 2 bytes apart: each reads its chunks rotated by its block
      // column (a quarter-warp's 16-byte reads then fall in different banks), then puts them back
      // in order with selects. The 2D mapping's rows are already on different banks (kPitch).
      constexpr int kChunks = B / 8;
      const int rot = s.tile_2d ? 0 : (bc >> (B == 16 ? 2 : 1)) & (kChunks - 1);
      uint4 q[kChunks], ordered[kChunks];
#pragma unroll
      for (int j = 0; j < kChunks; ++j) q[j] = *reinterpret_cast<const uint4*>(p + 8 * ((j + rot) & (kChunks - 1)));
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        ordered[j] = q[0];
#pragma unroll
        for (int i = 1; i < kChunks; ++i)
          if (((i + rot) & (kChunks - 1)) == j) ordered[j] = q[i];
      }
#pragma unroll
      for (int j = 0; j < kChunks; ++j) unpack8(ordered[j], v + 8 * j);
    }
    if (s.rht) {
#pragma unroll
      for (int j = 0; j < B; j += kRhtSize) rht16(v + j, s.rht_signs);
    }
    uint32_t m = absmax_bits<B>(v);  // amax and finiteness (absmax_bits)
    if (s.tile_2d) {
      // The B rows of a tile are the B consecutive, aligned lanes of one half-warp or warp.
#pragma unroll
      for (int off = 1; off < B; off <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    }
    const bool finite = m < kF32InfBits;
    const BlockScale bs = make_block_scale(s.scale, finite ? bits_float(m) : 0.0f, s.gmax, ts);

    float u[B] = {};  // SR only (dead code for RN)
    if constexpr (R == Rounding::sr) {
      // Source indices 4g..4g+3 of the block (a multiple of 16 apart from the row start) are
      // exactly the 4 words of one Philox call.
      const uint64_t index0 = draw_row(a.src, gr) * cols + gc;
      const uint32_t stream = draw_stream(a.src, s.stream, gr);
#pragma unroll
      for (int g = 0; g < B / 4; ++g) {
        const Philox4 w = philox_for_elements(s.seed, stream, s.step, index0 + 4 * g);
#pragma unroll
        for (int j = 0; j < 4; ++j) u[4 * g + j] = uniform24(w.w[j]);
      }
    }
    uint32_t code[B];
    quantize_values<B, G, R, M, kCodes>(v, code, bs, finite, c.max_index, [&](int j) { return u[j]; });

    uint32_t out[B / 2];  // bf16 pairs
#pragma unroll
    for (int j = 0; j < B / 2; ++j) out[j] = finite ? hw_pack_bf16x2(v[2 * j], v[2 * j + 1]) : kNaNPair;
    if (s.tile_2d) {
#pragma unroll
      for (int j = 0; j < B / 8; ++j)
        *reinterpret_cast<uint4*>(p + 8 * j) = make_uint4(out[4 * j], out[4 * j + 1], out[4 * j + 2], out[4 * j + 3]);
    } else if (valid && c.dequant != nullptr) {
      uint4* dst = reinterpret_cast<uint4*>(c.dequant + static_cast<int64_t>(gr) * cols + gc);
#pragma unroll
      for (int j = 0; j < B / 8; ++j) dst[j] = make_uint4(out[4 * j], out[4 * j + 1], out[4 * j + 2], out[4 * j + 3]);
    }
    if constexpr (kCodes) {
      if (valid) {
        uint32_t quad[B / 4];  // code quadruples, element j in byte j % 4
#pragma unroll
        for (int j = 0; j < B / 4; ++j)
          quad[j] = (code[4 * j] & 0xffu) | ((code[4 * j + 1] & 0xffu) << 8) | ((code[4 * j + 2] & 0xffu) << 16) |
                    (code[4 * j + 3] << 24);
        uint8_t* dst = c.codes + static_cast<int64_t>(gr) * cols + gc;
#pragma unroll
        for (int j = 0; j < B / 16; ++j)
          *reinterpret_cast<uint4*>(dst + 16 * j) = make_uint4(quad[4 * j], quad[4 * j + 1], quad[4 * j + 2], quad[4 * j + 3]);
      }
    }
    const float stored = finite ? bs.stored : bits_float(kF32QuietNaN);
    if (!s.tile_2d) {
      if (valid && c.scales != nullptr) c.scales[static_cast<int64_t>(gr) * (cols / B) + gc / B] = stored;
    } else if (valid && c.scales != nullptr && r % B == 0) {
      c.scales[static_cast<int64_t>(gr / B) * (cols / B) + gc / B] = stored;
    }
    any_nonfinite = any_nonfinite || (valid && !finite);
  }
  return any_nonfinite;
}

// Stores the row copy's tile (dequantized in place) and its staged block scales, coalesced.
template <int B>
__device__ void store_row_copy(const FusedArgs& a, const bf16_t* tile, const float* rscale, int r0, int c0) {
  const CopyArgs& c = a.row;
  const int rows = a.src.rows, cols = a.src.cols;
  if (c.dequant != nullptr) {
    constexpr int kChunksPerRow = kTileCols / 8;
#pragma unroll
    for (int i = 0; i < B * kChunksPerRow / kThreads; ++i) {
      const int k = i * kThreads + threadIdx.x;
      const int r = k / kChunksPerRow, cc = (k % kChunksPerRow) * 8;
      if (r0 + r < rows && c0 + cc < cols)
        *reinterpret_cast<uint4*>(c.dequant + static_cast<int64_t>(r0 + r) * cols + c0 + cc) =
            *reinterpret_cast<const uint4*>(tile + r * kPitch + cc);
    }
  }
  if (c.scales != nullptr && !c.spec.tile_2d) {
    constexpr int kBlocksPerRow = kTileCols / B;
    const int grid_cols = cols / B;
#pragma unroll
    for (int i = 0; i < B * kBlocksPerRow / kThreads; ++i) {
      const int k = i * kThreads + threadIdx.x;
      const int r = k / kBlocksPerRow, bc = k % kBlocksPerRow;
      if (r0 + r < rows && c0 + bc * B < cols)
        c.scales[static_cast<int64_t>(r0 + r) * grid_cols + c0 / B + bc] = rscale[r * (kBlocksPerRow + 1) + bc];
    }
  }
}

// What the kernel knows about one copy at compile time. DynCopy: nothing (the copy may be absent, and
// its grid, rounding, scale mode and codes are switched on at run time, per block: the generic
// instance, which covers every spec). NoCopy: the copy is absent. FixedCopy: present, with this grid,
// rounding and scale mode and without codes (what training asks for), so its per-element code is
// the only one compiled into the instance and gets the instance's whole register allocation.
struct DynCopy {};
struct NoCopy {};
template <Grid G, Rounding R, ScaleMode M>
struct FixedCopy {};

template <class K>
struct CopyKind {  // DynCopy
  static constexpr bool kDynamic = true, kAbsent = false, kSr = false;
};
template <>
struct CopyKind<NoCopy> {
  static constexpr bool kDynamic = false, kAbsent = true, kSr = false;
};
template <Grid G, Rounding R, ScaleMode M>
struct CopyKind<FixedCopy<G, R, M>> {
  static constexpr bool kDynamic = false, kAbsent = false, kSr = R == Rounding::sr;
};

// Quantizes the tile's blocks of one copy (kRow: the row copy) as kind K says; returns whether a
// block it stored was non-finite. The row copy writes into `tile` and leaves the scales in rscale.
template <int B, bool kRow, Grid G, Rounding R, ScaleMode M, bool kCodes>
__device__ __forceinline__ bool copy_blocks(const FusedArgs& a, bf16_t* tile, float* rscale, const uint32_t* words,
                                            int r0, int c0) {
  if constexpr (kRow) return row_blocks<B, G, R, M, kCodes>(a, tile, rscale, r0, c0);
  else return col_blocks<B, G, R, M, kCodes>(a, tile, words, r0, c0);
}

template <int B, bool kRow, class K>
__device__ __forceinline__ bool run_copy(const FusedArgs& a, bf16_t* tile, float* rscale, const uint32_t* words,
                                         int r0, int c0) {
  if constexpr (CopyKind<K>::kDynamic) {
    const CopyArgs& c = kRow ? a.row : a.col;
    bool nonfinite = false;
    dispatch_kind(c.spec, c.codes != nullptr, [&](auto g, auto rd, auto m, auto cd) {
      nonfinite = copy_blocks<B, kRow, decltype(g)::value, decltype(rd)::value, decltype(m)::value,
                              decltype(cd)::value>(a, tile, rscale, words, r0, c0);
    });
    return nonfinite;
  } else {
    return [&]<Grid G, Rounding R, ScaleMode M>(FixedCopy<G, R, M>) {
      return copy_blocks<B, kRow, G, R, M, false>(a, tile, rscale, words, r0, c0);
    }(K{});
  }
}

// CTAs per SM the register allocation must allow: without a bound the compiler spends registers on
// scheduling freedom (114 for B = 16, 226 for B = 32) and one or two CTAs fit, too few to keep
// enough loads in flight. The generic instance (every combination in one function) spills a little
// under these bounds; the specialized instances fit without spills (ptxas -v).
constexpr int min_ctas_per_sm(int b) { return b == 16 ? 3 : 2; }

// The quantize pass for copies with block size B (tiles of B rows × 512 columns), either copy
// optional. Persistent: CTA b takes tiles b, b + gridDim.x, ..., and loads each next tile into the
// other buffer while it quantizes the current one. RowK, ColK: what is fixed at compile time about
// each copy (DynCopy, NoCopy, FixedCopy).
template <int B, class RowK, class ColK>
__global__ void __launch_bounds__(kThreads, min_ctas_per_sm(B)) fused_quantize_kernel(const FusedArgs a, int tiles) {
  using RowKind = CopyKind<RowK>;
  using ColKind = CopyKind<ColK>;
  extern __shared__ __align__(16) unsigned char smem[];
  const bool row_present = RowKind::kDynamic ? a.row.present : !RowKind::kAbsent;
  const bool col_present = ColKind::kDynamic ? a.col.present : !ColKind::kAbsent;
  const bool col_sr = ColKind::kDynamic ? a.col.present && a.col.spec.rounding == Rounding::sr : ColKind::kSr;
  const int stages = fused_stages(col_sr);  // as the host sized the shared memory
  auto buffer = [&](int i) { return reinterpret_cast<bf16_t*>(smem + i * tile_bytes(B)); };
  float* rscale = reinterpret_cast<float*>(smem + stages * tile_bytes(B));
  uint32_t* words = reinterpret_cast<uint32_t*>(smem + stages * tile_bytes(B) + row_scale_bytes(B));
  auto origin = [&](int t, int& r0, int& c0) {
    r0 = (t / a.src.col_tiles) * B;
    c0 = (t % a.src.col_tiles) * kTileCols;
  };

  write_unit_tensor_scales(a);

  int r0, c0;
  // Prologue: the first stages - 1 tiles (one commit group each, empty past the end).
  for (int i = 0; i < stages - 1; ++i) {
    const int64_t t = blockIdx.x + static_cast<int64_t>(i) * gridDim.x;
    if (t < tiles) {
      origin(static_cast<int>(t), r0, c0);
      issue_tile_load<B>(a.src, r0, c0, buffer(i));
    }
    __pipeline_commit();
  }
  bool nonfinite = false;
  int k = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++k) {
    bf16_t* tile = buffer(k % stages);
    // The tile stages - 1 ahead goes into the buffer the previous iteration freed (its last barrier).
    const int64_t ahead = t + static_cast<int64_t>(stages - 1) * gridDim.x;
    if (ahead < tiles) {
      int nr0, nc0;
      origin(static_cast<int>(ahead), nr0, nc0);
      issue_tile_load<B>(a.src, nr0, nc0, buffer((k + stages - 1) % stages));
    }
    __pipeline_commit();
    // This thread's copies of the current tile have landed (the newer groups may still be loading).
    if (stages == 3) __pipeline_wait_prior(2);
    else __pipeline_wait_prior(1);
    origin(t, r0, c0);
    if (col_sr) fill_words<B>(a.src, a.col.spec, r0, c0, words);
    __syncthreads();  // everyone's copies have landed, and the words are written

    if constexpr (!ColKind::kAbsent) {
      if (col_present) nonfinite = run_copy<B, false, ColK>(a, tile, rscale, words, r0, c0) || nonfinite;
    }
    if constexpr (!RowKind::kAbsent) {
      if (row_present) {
        // 1D row blocks only read the tile and store straight to global memory; 2D tiles write
        // their dequantized values into the tile, stored by the CTA afterwards.
        const bool row_2d = a.row.spec.tile_2d;
        if (col_present && row_2d) __syncthreads();  // the column phase has read the whole tile
        nonfinite = run_copy<B, true, RowK>(a, tile, rscale, words, r0, c0) || nonfinite;
        if (row_2d) {
          __syncthreads();
          store_row_copy<B>(a, tile, rscale, r0, c0);
        }
      }
    }
    __syncthreads();  // this buffer, the staged scales and the words are free for the next tiles
  }
  if (nonfinite && a.nonfinite_flag != nullptr) atomicOr(a.nonfinite_flag, 1u);
}

template <int B, class RowK, class ColK>
void launch_instance(const FusedArgs& a, int tiles, int smem, cudaStream_t stream) {
  auto* kernel = fused_quantize_kernel<B, RowK, ColK>;
  if (smem > 48 * 1024) FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t grid = resident_ctas(kernel, tiles, kThreads, smem);
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(a, tiles);
  FP4_CUDA_CHECK(cudaGetLastError());
}

// The specialized instances for one (grid, scale mode) family: each present copy without codes,
// RN or SR (both copies of one tensor share the grid and scale mode and differ in RHT and rounding).
template <int B, Grid G, ScaleMode M>
void launch_family(const FusedArgs& a, int tiles, int smem, cudaStream_t stream) {
  using Rn = FixedCopy<G, Rounding::rn, M>;
  using Sr = FixedCopy<G, Rounding::sr, M>;
  const bool row_sr = a.row.present && a.row.spec.rounding == Rounding::sr;
  const bool col_sr = a.col.present && a.col.spec.rounding == Rounding::sr;
  if (!a.row.present) {
    if (col_sr) launch_instance<B, NoCopy, Sr>(a, tiles, smem, stream);
    else launch_instance<B, NoCopy, Rn>(a, tiles, smem, stream);
  } else if (!a.col.present) {
    if (row_sr) launch_instance<B, Sr, NoCopy>(a, tiles, smem, stream);
    else launch_instance<B, Rn, NoCopy>(a, tiles, smem, stream);
  } else if (row_sr) {
    if (col_sr) launch_instance<B, Sr, Sr>(a, tiles, smem, stream);
    else launch_instance<B, Sr, Rn>(a, tiles, smem, stream);
  } else {
    if (col_sr) launch_instance<B, Rn, Sr>(a, tiles, smem, stream);
    else launch_instance<B, Rn, Rn>(a, tiles, smem, stream);
  }
}

// Picks the instance: a specialized one when no code is asked for and the present copies share a
// (grid, scale mode) family that this block size instantiates, else the generic one.
template <int B>
void launch_fused(const FusedArgs& a, int tiles, int smem, cudaStream_t stream) {
  const bool no_codes = (!a.row.present || a.row.codes == nullptr) && (!a.col.present || a.col.codes == nullptr);
  const QuantSpec& s = a.row.present ? a.row.spec : a.col.spec;
  const bool one_family =
      !a.row.present || !a.col.present || (a.row.spec.grid == a.col.spec.grid && a.row.spec.scale == a.col.spec.scale);
  if (no_codes && one_family) {
    if constexpr (B == 16) {
      if (s.scale == ScaleMode::fp32) {
        if (s.grid == Grid::e2m1) return launch_family<B, Grid::e2m1, ScaleMode::fp32>(a, tiles, smem, stream);
        return launch_family<B, Grid::e1m2, ScaleMode::fp32>(a, tiles, smem, stream);
      }
      if (s.scale == ScaleMode::e4m3x2) {
        if (s.grid == Grid::e2m1) return launch_family<B, Grid::e2m1, ScaleMode::e4m3x2>(a, tiles, smem, stream);
        return launch_family<B, Grid::e1m2, ScaleMode::e4m3x2>(a, tiles, smem, stream);
      }
    } else {
      if (s.scale == ScaleMode::e8m0 && s.grid == Grid::e2m1)
        return launch_family<B, Grid::e2m1, ScaleMode::e8m0>(a, tiles, smem, stream);
    }
  }
  launch_instance<B, DynCopy, DynCopy>(a, tiles, smem, stream);
}

#endif  // __CUDACC__

}  // namespace fp4::cuda::detail
