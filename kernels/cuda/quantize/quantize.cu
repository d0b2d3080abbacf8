// quantize.cu — see quantize.cuh: the host API (checks, launches) and the tensor amax pass. The
// fused quantize kernel itself is in quantize_kernels.cuh.
//
// e4m3x2 needs each copy's tensor amax before any block can be scaled: a first kernel reads x once
// for both copies and leaves per-CTA maxima, and its last CTA to finish (counted on the
// workspace's zeroed counter) reduces them and makes the tensor scales. Maxima of non-negative,
// non-NaN floats do not depend on the order of reduction, so the result is deterministic (the only
// atomic is the integer count).
#include "kernels/cuda/quantize/quantize.cuh"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/quantize.h"  // shape_error: the shape rules are the reference's
#include "kernels/cuda/quantize/quantize_kernels.cuh"
#include "kernels/cuda/quantize/quantize_recipes.cuh"

namespace fp4::cuda {

namespace detail {
// Both copies, RN, no codes, 1D blocks of 16, one (grid, scale mode) family with fp32 or e4m3x2
// scales: a kernel over 16 x 64 strips without CTA barriers (quantize_rows.cu). Returns false, launching
// nothing, otherwise. (Declared here, not in quantize_kernels.cuh, so that the fused instances do
// not recompile.)
bool launch_fused_strips(const FusedArgs& a, int b, cudaStream_t stream);
}  // namespace detail

namespace {

using namespace detail;

// The amax pass loops over tiles with at most this many CTAs (its per-CTA maxima fit the workspace).
constexpr int kMaxAmaxBlocks = 1024;

// ---------------------------------------------------------------------------------------------
// Tensor amax (e4m3x2's amax_t, and any copy that asks for its amax)
// ---------------------------------------------------------------------------------------------

struct AmaxArgs {
  Source src;
  int tiles;
  bool row_rht, col_rht;  // col_rht only when the column copy exists (then rows % 16 == 0)
  uint16_t row_signs, col_signs;
};

// The CTA-wide maxima of three per-thread values (plain |x|, the row RHT's, the column RHT's),
// left in thread 0's m: warp shuffles, then thread 0 over the warps' maxima. Every thread of the
// CTA calls it (one barrier).
__device__ void cta_max3(float (&m)[3]) {
  __shared__ float warp_max[3][kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m[i] = fmaxf(m[i], __shfl_xor_sync(0xffffffffu, m[i], off));
    if (lane == 0) warp_max[i][warp] = m[i];
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 0; i < 3; ++i) {
      float r = 0.0f;
      for (int w = 0; w < kWarps; ++w) r = fmaxf(r, warp_max[i][w]);
      m[i] = r;
    }
}

// This CTA's row of partials: [gridDim.x][3].
__device__ void store_cta_maxima(float m_plain, float m_row, float m_col, float* partials) {
  float m[3] = {m_plain, m_row, m_col};
  cta_max3(m);
  if (threadIdx.x == 0)
    for (int i = 0; i < 3; ++i) partials[blockIdx.x * 3 + i] = m[i];
}

struct FinalizeCopy {
  bool present, rht, two_level;
  float gmax;
  float* amax_out;          // may be null
  float* tensor_scale_out;  // may be null; written only for e4m3x2 (the quantize pass writes 1)
};

// What the amax pass's last CTA makes of the maxima: each copy's tensor scale (ts_out[0]: row copy,
// ts_out[1]: column copy) and its amax / tensor_scale outputs.
struct AmaxFinish {
  FinalizeCopy row, col;
  TensorScale* ts_out;
  unsigned* done;  // Workspace::zeroed_counter: CTAs that have stored their maxima; left at 0
};

// Every CTA of an amax kernel ends here, after store_cta_maxima. Thread 0 makes its CTA's maxima
// visible device-wide (the fence) before counting the CTA done; the CTA that counts last reads
// every CTA's maxima (past L1, which never held them) and finishes: what a separate one-CTA kernel
// did before, without its launch.
__device__ void finish_amax(const float* partials, const AmaxFinish& f) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();  // also: thread 0 has read the first cta_max3's shared maxima before reuse
  if (threadIdx.x == 0) last = atomicAdd(f.done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  float total[3] = {0.0f, 0.0f, 0.0f};
  for (int i = threadIdx.x; i < static_cast<int>(gridDim.x); i += kThreads)
#pragma unroll
    for (int j = 0; j < 3; ++j) total[j] = fmaxf(total[j], __ldcg(partials + i * 3 + j));
  cta_max3(total);
  if (threadIdx.x != 0) return;
  *f.done = 0;  // every other CTA has counted: the next pass starts from zero
  const FinalizeCopy copies[2] = {f.row, f.col};
  for (int i = 0; i < 2; ++i) {
    const FinalizeCopy& c = copies[i];
    if (!c.present) continue;
    const float amax = c.rht ? total[1 + i] : total[0];
    TensorScale ts{1.0f, 1.0f};
    if (c.two_level) ts = make_tensor_scale(amax, c.gmax);
    f.ts_out[i] = ts;
    if (c.amax_out != nullptr) *c.amax_out = amax;
    if (c.two_level && c.tensor_scale_out != nullptr) *c.tensor_scale_out = ts.dec;
  }
}

// The amax kernels' running maxima, over finite values (a tensor amax ignores NaN and infinities):
// of |x|, of the row copy's values after its RHT along rows, of the column copy's values after its
// RHT along columns. The RHT maxima are taken over the butterfly's unscaled outputs
// (fwht16_signed) and scaled by 1/4 once, at the end: the same bits as the maximum of rht16's
// outputs (numerics.h), one multiply a value fewer.
//
// Each value costs one instruction, in two passes when needed: the fast pass takes fmaxf of |v|,
// which drops NaNs (fmaxf returns the other operand) but keeps infinities, so its maximum equals
// the maximum over finite values whenever it is finite. A thread (or, in the tile kernel, a CTA)
// whose fast maxima are not all finite — an infinity among its values, or a butterfly that
// overflowed fp32 — takes its values again with the exact step (max_abs_finite: a test and a
// select a value more). Training's tensors hold no infinity, so the exact pass does not run there.
struct AmaxMaxima {
  float plain = 0.0f, row = 0.0f, col = 0.0f;  // row, col: before the RHT's 1/4
  __device__ bool finite() const { return plain < kInf && row < kInf && col < kInf; }
  static constexpr float kInf = __builtin_huge_valf();
};

template <bool kExact>
__device__ __forceinline__ float amax_step(float m, float v) {
  if constexpr (kExact) return max_abs_finite(m, v);
  else return fmaxf(m, fabsf(v));
}

// This CTA's row of partials ([gridDim.x][3]), with the RHT maxima scaled by their 1/4.
__device__ void store_amax_maxima(const AmaxMaxima& m, float* partials) {
  store_cta_maxima(m.plain, m.row * 0.25f, m.col * 0.25f, partials);
}

// The tile kernel's maxima over this CTA's tiles (every thread of the CTA calls it: barriers).
template <bool kExact>
__device__ AmaxMaxima amax_tiles(const AmaxArgs& a, bf16_t* tile) {
  AmaxMaxima m;
  for (int t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int r0 = (t / a.src.col_tiles) * 16, c0 = (t % a.src.col_tiles) * kTileCols;
    load_tile<16>(a.src, r0, c0, tile);
    __syncthreads();
    // 16-element row vectors: 16 rows × 32 per tile, 2 per thread (zero padding adds nothing).
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const int k = it * kThreads + threadIdx.x;
      const bf16_t* p = tile + (k % 16) * kPitch + (k / 16) * 16;
      float v[16];
      unpack8(*reinterpret_cast<const uint4*>(p), v);
      unpack8(*reinterpret_cast<const uint4*>(p + 8), v + 8);
#pragma unroll
      for (int j = 0; j < 16; ++j) m.plain = amax_step<kExact>(m.plain, v[j]);
      if (a.row_rht) {
        fwht16_signed(v, a.row_signs);
#pragma unroll
        for (int j = 0; j < 16; ++j) m.row = amax_step<kExact>(m.row, v[j]);
      }
    }
    if (a.col_rht) {
      // 16-element column vectors: each thread takes a pair of adjacent columns.
      const int lc = 2 * threadIdx.x;
      float v0[16], v1[16];
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(tile + r * kPitch + lc);
        v0[r] = bits_float(w << 16);
        v1[r] = bits_float(w & 0xffff0000u);
      }
      fwht16_signed(v0, a.col_signs);
      fwht16_signed(v1, a.col_signs);
#pragma unroll
      for (int r = 0; r < 16; ++r) m.col = amax_step<kExact>(amax_step<kExact>(m.col, v0[r]), v1[r]);
    }
    __syncthreads();  // before the next tile overwrites this one
  }
  return m;
}

// Per-CTA maxima through a shared tile, for any shape and either RHT. partials: [gridDim.x][3].
__global__ void __launch_bounds__(kThreads) amax_kernel(const AmaxArgs a, float* partials, const AmaxFinish fin) {
  __shared__ __align__(16) bf16_t tile[16 * kPitch];
  AmaxMaxima m = amax_tiles<false>(a, tile);
  if (__syncthreads_or(!m.finite())) m = amax_tiles<true>(a, tile);
  store_amax_maxima(m, partials);
  finish_amax(partials, fin);
}

// The same maxima when no column copy needs its RHT amax and cols % 16 == 0, without shared memory:
// the tensor's 16-element vectors (row-major) are then exactly the row vectors the row RHT takes,
// and each thread reads whole vectors (two 16-byte loads each, kAmaxVecs vectors issued at once).
// partials[blockIdx.x][2] (the column maximum) is 0, as the tile kernel leaves it without col_rht.
constexpr int kAmaxVecs = 4;
template <bool kExact>
__device__ AmaxMaxima amax_row_vectors(const bf16_t* x, int64_t nvec, bool row_rht, uint16_t row_signs) {
  AmaxMaxima m;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kAmaxVecs;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kAmaxVecs + threadIdx.x; base < nvec;
       base += stride) {
    uint4 raw[kAmaxVecs][2];
#pragma unroll
    for (int u = 0; u < kAmaxVecs; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * kThreads;
      raw[u][0] = raw[u][1] = make_uint4(0u, 0u, 0u, 0u);  // zeros add nothing to a maximum
      if (i < nvec) {
        raw[u][0] = __ldg(reinterpret_cast<const uint4*>(x + i * 16));
        raw[u][1] = __ldg(reinterpret_cast<const uint4*>(x + i * 16) + 1);
      }
    }
#pragma unroll
    for (int u = 0; u < kAmaxVecs; ++u) {
      float v[16];
      unpack8(raw[u][0], v);
      unpack8(raw[u][1], v + 8);
#pragma unroll
      for (int j = 0; j < 16; ++j) m.plain = amax_step<kExact>(m.plain, v[j]);
      if (row_rht) {
        fwht16_signed(v, row_signs);
#pragma unroll
        for (int j = 0; j < 16; ++j) m.row = amax_step<kExact>(m.row, v[j]);
      }
    }
  }
  return m;
}

__global__ void __launch_bounds__(kThreads) amax_rows_kernel(const bf16_t* x, int64_t nvec, bool row_rht,
                                                             uint16_t row_signs, float* partials,
                                                             const AmaxFinish fin) {
  AmaxMaxima m = amax_row_vectors<false>(x, nvec, row_rht, row_signs);
  if (!m.finite()) m = amax_row_vectors<true>(x, nvec, row_rht, row_signs);
  store_amax_maxima(m, partials);  // no column RHT here: 0, as the tile kernel leaves it
  finish_amax(partials, fin);
}

// The same maxima when only the column copy takes the RHT (the gradient's two copies under NVIDIA's
// recipe: the RHT on the weight-gradient copy alone) and rows % 16 == 0, cols % 16 == 0, without
// shared memory or barriers: a warp takes strips of 16 rows × 64 columns, as fused_strip_kernel
// does, and lane l reads columns 2l, 2l + 1 of the strip's 16 rows (each row's reads are 128
// contiguous bytes across the warp, all 16 in flight at once): |x| of both, and their two 16-element
// column vectors after the RHT. The row copy has no RHT, so partials[blockIdx.x][1] is 0, as the
// tile kernel leaves it.
template <bool kExact>
__device__ AmaxMaxima amax_col_strips(const bf16_t* x, int cols, int col_strips, int nstrips, uint16_t col_signs) {
  AmaxMaxima m;
  const int lane = threadIdx.x % 32;
  const int stride = static_cast<int>(gridDim.x) * kWarps;
  for (int strip = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32; strip < nstrips;
       strip += stride) {
    const int64_t r0 = static_cast<int64_t>(strip / col_strips) * 16;
    const int c = (strip % col_strips) * 64 + 2 * lane;
    if (c >= cols) continue;  // cols % 16 == 0: the pair is wholly in or out (no shuffles in the loop)
    const bf16_t* p = x + r0 * cols + c;
    uint32_t w[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) w[r] = __ldg(reinterpret_cast<const uint32_t*>(p + static_cast<int64_t>(r) * cols));
    float v0[16], v1[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      v0[r] = bits_float(w[r] << 16);  // column c (the low half), as bf16_to_float
      v1[r] = bits_float(w[r] & 0xffff0000u);
      m.plain = amax_step<kExact>(amax_step<kExact>(m.plain, v0[r]), v1[r]);
    }
    fwht16_signed(v0, col_signs);
    fwht16_signed(v1, col_signs);
#pragma unroll
    for (int r = 0; r < 16; ++r) m.col = amax_step<kExact>(amax_step<kExact>(m.col, v0[r]), v1[r]);
  }
  return m;
}

__global__ void __launch_bounds__(kThreads) amax_cols_kernel(const bf16_t* x, int cols, int col_strips, int nstrips,
                                                             uint16_t col_signs, float* partials,
                                                             const AmaxFinish fin) {
  AmaxMaxima m = amax_col_strips<false>(x, cols, col_strips, nstrips, col_signs);
  if (!m.finite()) m = amax_col_strips<true>(x, cols, col_strips, nstrips, col_signs);
  store_amax_maxima(m, partials);  // no row RHT here: 0, as the tile kernel leaves it
  finish_amax(partials, fin);
}

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_copy(const CopyOut* c, BlockAlong along, int rows, int cols) {
  if (c == nullptr) return;
  const char* which = along == BlockAlong::row ? "row" : "column";
  if (c->spec.along != along)
    throw std::invalid_argument(std::string("quantize_fused: the ") + which + " copy's spec must block along " +
                                which + "s");
  if (std::string err = cpu::shape_error(rows, cols, c->spec); !err.empty()) throw std::invalid_argument(err);
  if (!aligned16(c->dequant) || !aligned16(c->codes) || !aligned16(c->scales))
    throw std::invalid_argument(std::string("quantize_fused: the ") + which +
                                " copy's device buffers must be 16-byte aligned");
}

CopyArgs copy_args(const CopyOut* c, const TensorScale* ts) {
  CopyArgs a{};
  a.present = c != nullptr;
  if (c == nullptr) return a;
  a.spec = c->spec;
  a.dequant = c->dequant;
  a.codes = c->codes;
  a.scales = c->scales;
  a.ts = ts;
  a.max_index = spec_max_index(c->spec);
  return a;
}

bool two_level(const CopyOut* c) { return c != nullptr && c->spec.scale == ScaleMode::e4m3x2; }

Source make_source(const bf16_t* x, int rows, int cols, const int32_t* source_rows = nullptr,
                   const GroupStreams* groups = nullptr) {
  return Source{x, rows, cols, (cols + kTileCols - 1) / kTileCols, cols % 8 == 0, source_rows,
                groups != nullptr ? *groups : GroupStreams{}};
}

// The amax pass: per-CTA maxima, then the last CTA makes amax_t and the tensor scales (ts[0] for the
// row copy, ts[1] for the column copy) and writes the copies' amax / tensor_scale outputs.
void launch_amax(const bf16_t* x, int rows, int cols, const CopyOut* row_copy, const CopyOut* col_copy,
                 float* partials, TensorScale* ts, unsigned* done, cudaStream_t stream) {
  AmaxArgs aa{};
  aa.src = make_source(x, rows, cols);
  aa.tiles = static_cast<int>((rows + 15) / 16 * static_cast<int64_t>(aa.src.col_tiles));
  aa.row_rht = row_copy != nullptr && row_copy->spec.rht;
  aa.col_rht = col_copy != nullptr && col_copy->spec.rht;
  aa.row_signs = row_copy != nullptr ? row_copy->spec.rht_signs : 0;
  aa.col_signs = col_copy != nullptr ? col_copy->spec.rht_signs : 0;
  auto fin = [](const CopyOut* c) {
    FinalizeCopy f{};
    f.present = c != nullptr;
    if (c == nullptr) return f;
    f.rht = c->spec.rht;
    f.two_level = two_level(c);
    f.gmax = c->spec.gmax;
    f.amax_out = c->amax;
    f.tensor_scale_out = c->tensor_scale;
    return f;
  };
  const AmaxFinish finish{fin(row_copy), fin(col_copy), ts, done};
  int blocks = std::min(aa.tiles, kMaxAmaxBlocks);
  if (!aa.col_rht && cols % 16 == 0) {
    const int64_t nvec = static_cast<int64_t>(rows) * cols / 16;
    blocks = static_cast<int>(std::min<int64_t>((nvec + kThreads * kAmaxVecs - 1) / (kThreads * kAmaxVecs), kMaxAmaxBlocks));
    blocks = std::max(blocks, 1);
    amax_rows_kernel<<<blocks, kThreads, 0, stream>>>(x, nvec, aa.row_rht, aa.row_signs, partials, finish);
  } else if (aa.col_rht && !aa.row_rht && rows % 16 == 0 && cols % 16 == 0) {
    const int col_strips = (cols + 63) / 64;
    const int64_t nstrips = static_cast<int64_t>(rows / 16) * col_strips;
    if (nstrips > 0x7fffffff) throw std::invalid_argument("quantize_fused: tensor too large for one launch");
    blocks = static_cast<int>(std::min<int64_t>((nstrips + kWarps - 1) / kWarps, kMaxAmaxBlocks));
    amax_cols_kernel<<<blocks, kThreads, 0, stream>>>(x, cols, col_strips, static_cast<int>(nstrips), aa.col_signs,
                                                      partials, finish);
  } else {
    amax_kernel<<<blocks, kThreads, 0, stream>>>(aa, partials, finish);
  }
  FP4_CUDA_CHECK(cudaGetLastError());
}

// One launch of the fused kernel for copies that share the block size b (either may be null).
void launch_quantize(const bf16_t* x, int rows, int cols, const CopyOut* row_copy, const CopyOut* col_copy,
                     const TensorScale* ts, unsigned* nonfinite_flag, const int32_t* source_rows,
                     const GroupStreams* groups, cudaStream_t stream) {
  const int b = row_copy != nullptr ? row_copy->spec.block : col_copy->spec.block;
  FusedArgs a{};
  a.src = make_source(x, rows, cols, source_rows, groups);
  a.row = copy_args(row_copy, ts);
  a.col = copy_args(col_copy, ts + 1);
  a.pair_stores = cols % 2 == 0;
  a.nonfinite_flag = nonfinite_flag;
  a.unit_tensor_scale[0] = row_copy != nullptr && !two_level(row_copy) ? row_copy->tensor_scale : nullptr;
  a.unit_tensor_scale[1] = col_copy != nullptr && !two_level(col_copy) ? col_copy->tensor_scale : nullptr;

  if (launch_row_rn(a, b, stream)) return;  // the row copy alone, RN, no codes: no tiles needed
  if (launch_plain_strips(a, b, stream)) return;  // no codes, RN without the RHT (block 16, or mxfp4's 32)
  if (launch_fused_strips(a, b, stream)) return;  // block 16 without codes: both copies RN or SR, or the column copy RN
  const int64_t tiles = (rows + b - 1) / b * static_cast<int64_t>(a.src.col_tiles);
  if (tiles > 0x7fffffff) throw std::invalid_argument("quantize_fused: tensor too large for one launch");
  const bool col_sr = col_copy != nullptr && col_copy->spec.rounding == Rounding::sr;
  const int smem = fused_smem_bytes(b, col_sr);
  if (b == 16) launch_fused_b16(a, static_cast<int>(tiles), smem, stream);
  else launch_fused_b32(a, static_cast<int>(tiles), smem, stream);
}

}  // namespace

bool groups_quantize_in_one_call(const QuantSpec& spec) {
  return !uses_recipe_options(spec) && spec.scale != ScaleMode::e4m3x2 && !spec.ms_eden;
}

void quantize_fused(const bf16_t* x, int rows, int cols, const CopyOut* row_copy, const CopyOut* col_copy,
                    unsigned* nonfinite_flag, Workspace& workspace, cudaStream_t stream, const int32_t* source_rows,
                    const GroupStreams* groups) {
  check_copy(row_copy, BlockAlong::row, rows, cols);
  check_copy(col_copy, BlockAlong::column, rows, cols);
  if (row_copy == nullptr && col_copy == nullptr) return;
  if (x == nullptr || !aligned16(x))
    throw std::invalid_argument("quantize_fused: the source must be a 16-byte aligned device pointer");
  if (groups != nullptr && groups->count > 0) {
    if (groups->offsets == nullptr || groups->linear_ids == nullptr)
      throw std::invalid_argument("quantize_fused: groups need their offsets and linear ids");
    for (const CopyOut* c : {row_copy, col_copy})
      if (c != nullptr && !groups_quantize_in_one_call(c->spec))
        throw std::invalid_argument("quantize_fused: several groups in one call are for copies without a tensor "
                                    "scale or docs/recipes.md's options");
  }
  const GroupStreams* keyed = groups != nullptr && groups->count > 0 ? groups : nullptr;

  // Copies with docs/recipes.md's options take quantize_recipes.cu's kernels (both copies then, x
  // read once or twice per copy); the §5 recipes never do. Both kinds of kernel draw a gathered
  // group's SR uniforms by its source_rows.
  if ((row_copy != nullptr && uses_recipe_options(row_copy->spec)) ||
      (col_copy != nullptr && uses_recipe_options(col_copy->spec))) {
    quantize_recipe_copies(x, rows, cols, row_copy, col_copy, nonfinite_flag, source_rows, workspace, stream);
    return;
  }

  // Workspace: per-CTA maxima of the amax pass, then the two tensor scales.
  const size_t partial_bytes = kMaxAmaxBlocks * 3 * sizeof(float);
  auto* ws = static_cast<unsigned char*>(workspace.get(partial_bytes + 2 * sizeof(TensorScale)));
  auto* partials = reinterpret_cast<float*>(ws);
  auto* ts = reinterpret_cast<TensorScale*>(ws + partial_bytes);

  auto wants_amax = [](const CopyOut* c) { return c != nullptr && (two_level(c) || c->amax != nullptr); };
  if (wants_amax(row_copy) || wants_amax(col_copy))
    launch_amax(x, rows, cols, row_copy, col_copy, partials, ts, workspace.zeroed_counter(stream), stream);

  if (row_copy != nullptr && col_copy != nullptr && row_copy->spec.block != col_copy->spec.block) {
    // Different block sizes need different tile heights: one launch each (x is read twice).
    launch_quantize(x, rows, cols, row_copy, nullptr, ts, nonfinite_flag, source_rows, keyed, stream);
    launch_quantize(x, rows, cols, nullptr, col_copy, ts, nonfinite_flag, source_rows, keyed, stream);
  } else {
    launch_quantize(x, rows, cols, row_copy, col_copy, ts, nonfinite_flag, source_rows, keyed, stream);
  }
}

}  // namespace fp4::cuda
