// quantize_rows.cu — the row copy alone, round to nearest, without codes (what training's forward
// pass asks for), without shared memory: launch_row_rn (quantize_kernels.cuh) takes those calls
// before the fused kernel would.
//
// Why a separate kernel: the row copy's blocks are B consecutive elements of one row, and with
// cols % B == 0 block i of the tensor (row-major) is elements [i*B, (i+1)*B) and scale i of the
// [rows, cols/B] grid. So each thread owns whole blocks and needs nothing from its neighbours (no
// tile, no barrier): it issues the 16-byte loads of all its blocks up front, then for each block
// runs the RHT in registers, takes the amax, scales, rounds (quantize_values, the fused kernel's own
// per-block code, hence bit-identical to it and to the reference), and stores the dequantized
// values with 16-byte stores. Thread `lane` of a warp takes blocks base + u*32 + lane, u < kUnroll,
// so each u's 32 scales are 128 contiguous bytes, one coalesced store.
// 2D tiles (whose amax spans B rows) and everything else keep the fused kernel.
//
// It also holds fused_strip_kernel (launch_fused_strips): both copies, both RN or both SR, or the
// column copy alone, RN; no codes, 1D blocks of 16, without tiles or CTA barriers (see there). The
// RN copies without the RHT take plain_strip_kernel (quantize_strips_plain.cu) before it.
#include <stdexcept>

#include "kernels/cuda/quantize/quantize_kernels.cuh"

namespace fp4::cuda::detail {

namespace {

template <int B>
__host__ __device__ constexpr int rows_unroll() { return B == 16 ? 2 : 1; }

template <int B, Grid G, ScaleMode M>
__global__ void __launch_bounds__(kThreads) row_rn_kernel(const FusedArgs a, int64_t nblocks) {
  constexpr int U = rows_unroll<B>();
  constexpr int kChunks = B / 8;  // 16-byte chunks per block
  const CopyArgs& c = a.row;
  const QuantSpec& s = c.spec;
  write_unit_tensor_scales(a);  // the row copy's ([1] is null: no column copy here)

  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t base = warp * (32 * U) + lane;

  uint4 raw[U][kChunks];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = base + u * 32;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      raw[u][j] = make_uint4(0u, 0u, 0u, 0u);
      if (i < nblocks) raw[u][j] = __ldg(reinterpret_cast<const uint4*>(a.src.x + i * B) + j);
    }
  }
  const TensorScale ts = load_tensor_scale(c);
  bool nonfinite = false;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = base + u * 32;
    const bool valid = i < nblocks;
    float v[B];
#pragma unroll
    for (int j = 0; j < kChunks; ++j) unpack8(raw[u][j], v + 8 * j);
    if (s.rht) {
#pragma unroll
      for (int j = 0; j < B; j += kRhtSize) rht16(v + j, s.rht_signs);
    }
    const uint32_t m = absmax_bits<B>(v);  // amax and finiteness (absmax_bits)
    const bool finite = m < kF32InfBits;
    const BlockScale bs = make_block_scale(s.scale, finite ? bits_float(m) : 0.0f, s.gmax, ts);
    uint32_t code[B];
    quantize_values<B, G, Rounding::rn, M, false>(v, code, bs, finite, c.max_index, [](int) { return 0.0f; });
    if (valid) {
      if (c.dequant != nullptr) {
        uint4* dst = reinterpret_cast<uint4*>(c.dequant + i * B);
#pragma unroll
        for (int j = 0; j < kChunks; ++j) {
          uint32_t o[4];
#pragma unroll
          for (int q = 0; q < 4; ++q)
            o[q] = finite ? hw_pack_bf16x2(v[8 * j + 2 * q], v[8 * j + 2 * q + 1]) : kNaNPair;
          dst[j] = make_uint4(o[0], o[1], o[2], o[3]);
        }
      }
      if (c.scales != nullptr) c.scales[i] = finite ? bs.stored : bits_float(kF32QuietNaN);
      nonfinite = nonfinite || !finite;
    }
  }
  if (__any_sync(0xffffffffu, nonfinite) && lane == 0 && a.nonfinite_flag != nullptr) atomicOr(a.nonfinite_flag, 1u);
}

template <int B, Grid G, ScaleMode M>
void launch_rows(const FusedArgs& a, cudaStream_t stream) {
  const int64_t nblocks = static_cast<int64_t>(a.src.rows) * a.src.cols / B;
  constexpr int64_t per_cta = static_cast<int64_t>(kThreads) * rows_unroll<B>();
  const int64_t grid = std::max<int64_t>(1, (nblocks + per_cta - 1) / per_cta);
  if (grid > 0x7fffffff) throw std::invalid_argument("quantize_fused: tensor too large for one launch");
  row_rn_kernel<B, G, M><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a, nblocks);
  FP4_CUDA_CHECK(cudaGetLastError());
}

// Both copies, both RN or both SR, no codes, 1D blocks of 16, one family (fused_strip_kernel): no
// CTA barrier.
// A warp takes strips of 16 rows x 64 columns (persistent, grid-stride), each staged in the warp's
// own shared buffer by 16-byte cp.async copies issued one strip ahead (__syncwarp only).
// Column copy: lane l takes columns 2l, 2l + 1 (one 4-byte word per row, whole 16-row blocks):
// RHT down the column, amax, scale, rounding exactly as col_blocks; each row's stores are 128
// contiguous bytes across the warp. Row copy: lane l takes whole 16-element row blocks, (row
// 2 * (l / 4) + u, block l % 4), u < 2, read back from the buffer as 16-byte chunks (the transpose),
// and quantizes them as row_rn_kernel does (the same per-block code: bit-identical).
// SR (the gradient dY's two copies in training): each copy draws the uniform of element (r, c) from
// word (r'·cols + c) mod 4 of the Philox call for the source indices [4k, 4k + 4) that hold it
// (r' = draw_row(r): r, or an expert group's source row), with
// the copy's own seed, stream and step, as the reference and the tiled kernel do. The row copy's
// blocks are 16 aligned consecutive indices: 4 whole calls per block. In the column copy, lanes 2m
// and 2m + 1 hold columns 4m..4m+3 of the strip, one call per row: the even lane makes the calls of
// rows 0..7, the odd lane those of rows 8..15, and each hands the partner the two words it needs (so
// no call is made twice). The SR instances hold 32 more live values per lane (the uniforms) and get
// 2 CTAs per SM instead of 3.
template <Rounding R>
__host__ __device__ constexpr int strip_ctas_per_sm() { return R == Rounding::sr ? 2 : 3; }

// kRowCopy false: the column copy alone (RN: X's weight-gradient copy in training), the same
// strips without the row phase.
template <Grid G, ScaleMode M, Rounding R, bool kRowCopy>
__global__ void __launch_bounds__(kThreads, strip_ctas_per_sm<R>()) fused_strip_kernel(const FusedArgs a,
                                                                                    const StripDivider col_strips,
                                                                                    int nstrips) {
  constexpr int B = 16;
  const CopyArgs& rc = a.row;
  const CopyArgs& cc = a.col;
  write_unit_tensor_scales(a);
  // Two strip buffers per warp: the next strip's 16-byte cp.async copies land in one while the warp
  // quantizes the other (no CTA barrier: each warp only touches its own buffers, __syncwarp).
  // Row r's 16-byte chunk c lies at chunk c ^ f(r), f(r) = (r / 2) % 2: the column phase's 4-byte
  // reads of one row stay conflict-free, and the row phase's 16-byte reads (lanes 4k..4k+3: row
  // 2k + u, blocks 0..3 of the strip) fall in distinct banks.
  __shared__ __align__(16) uint32_t strip_buf[kWarps][2][16 * 32];
  const int lane = threadIdx.x % 32;
  const int cols = a.src.cols;
  const int stride = static_cast<int>(gridDim.x) * kWarps;
  auto issue = [&](int t, uint32_t* dst) {
    const int tq = strip_quotient(col_strips, t);
    const int64_t tr0 = static_cast<int64_t>(tq) * B;
    const int tc0 = (t - tq * static_cast<int>(col_strips.d)) * kStripCols;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = i * 32 + lane, r = k / 8, c = k % 8;
      if (tc0 + 8 * c < cols)  // cols % 16 == 0: a chunk is wholly in or out
        __pipeline_memcpy_async(dst + r * 32 + 4 * (c ^ ((r >> 1) & 1)),
                                a.src.x + (tr0 + r) * cols + tc0 + 8 * c, 16);
    }
  };
  int strip = static_cast<int>((blockIdx.x * kThreads + threadIdx.x) / 32);
  if (strip < nstrips) issue(strip, strip_buf[threadIdx.x / 32][0]);
  __pipeline_commit();
  bool nonfinite = false;
  for (int k = 0; strip < nstrips; strip += stride, ++k) {
  uint32_t* buf = strip_buf[threadIdx.x / 32][k & 1];
  if (strip < nstrips - stride) issue(strip + stride, strip_buf[threadIdx.x / 32][(k + 1) & 1]);
  __pipeline_commit();
  __pipeline_wait_prior(1);
  __syncwarp();
  const int row_strip = strip_quotient(col_strips, strip);
  const int col_strip = strip - row_strip * static_cast<int>(col_strips.d);
  const int64_t r0 = static_cast<int64_t>(row_strip) * B;
  const int gc = col_strip * kStripCols + 2 * lane;
  const bool valid = gc < cols;  // cols % 16 == 0: whole groups of 8 lanes are in or out
  const int64_t base = r0 * cols + gc;
  uint32_t raw[B];
#pragma unroll
  for (int r = 0; r < B; ++r) raw[r] = buf[r * 32 + (lane ^ (((r >> 1) & 1) << 2))];

  // Column copy (as col_blocks, 1D, no codes).
  {
    const QuantSpec& s = cc.spec;
    // SR: u0[r] / u1[r], the uniforms of (row r0 + r, columns gc / gc + 1); see above. Made before
    // any per-block branch, since the words cross lanes.
    float u0[B] = {}, u1[B] = {};
    if constexpr (R == Rounding::sr) {
      const bool odd = lane & 1;
      const uint64_t group_col = static_cast<uint64_t>(gc - 2 * odd);  // 4m: the pair's first column
#pragma unroll
      for (int i = 0; i < B / 2; ++i) {
        const int64_t xrow = r0 + (odd ? B / 2 : 0) + i;
        const uint64_t row = draw_row(a.src, xrow);
        const Philox4 w = philox_for_elements(s.seed, draw_stream(a.src, s.stream, xrow), s.step, row * cols + group_col);
        // Kept: this lane's own two words of its own row; given: the partner's two of that row.
        const uint32_t keep0 = odd ? w.w[2] : w.w[0], keep1 = odd ? w.w[3] : w.w[1];
        const uint32_t give0 = odd ? w.w[0] : w.w[2], give1 = odd ? w.w[1] : w.w[3];
        const uint32_t got0 = __shfl_xor_sync(0xffffffffu, give0, 1);
        const uint32_t got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
        // Even lane: row i is its own, row i + 8 came from the partner; odd lane the other way.
        u0[i] = uniform24(odd ? got0 : keep0);
        u1[i] = uniform24(odd ? got1 : keep1);
        u0[i + B / 2] = uniform24(odd ? keep0 : got0);
        u1[i + B / 2] = uniform24(odd ? keep1 : got1);
      }
    }
    float v0[B], v1[B];
#pragma unroll
    for (int r = 0; r < B; ++r) {
      v0[r] = bits_float(raw[r] << 16);
      v1[r] = bits_float(raw[r] & 0xffff0000u);
    }
    if (s.rht) {
      rht16(v0, s.rht_signs);
      rht16(v1, s.rht_signs);
    }
    const uint32_t m0 = absmax_bits<B>(v0), m1 = absmax_bits<B>(v1);
    const bool f0 = m0 < kF32InfBits, f1 = m1 < kF32InfBits;
    const TensorScale ts = load_tensor_scale(cc);
    const BlockScale bs0 = make_block_scale(s.scale, f0 ? bits_float(m0) : 0.0f, s.gmax, ts);
    const BlockScale bs1 = make_block_scale(s.scale, f1 ? bits_float(m1) : 0.0f, s.gmax, ts);
    uint32_t code[B];
    quantize_values<B, G, R, M, false>(v0, code, bs0, f0, cc.max_index, [&](int r) { return u0[r]; });
    quantize_values<B, G, R, M, false>(v1, code, bs1, f1, cc.max_index, [&](int r) { return u1[r]; });
    const uint32_t nan_mask = (f0 ? 0u : 0x0000ffffu) | (f1 ? 0u : 0xffff0000u);
    if (valid) {
      if (cc.dequant != nullptr) {
#pragma unroll
        for (int r = 0; r < B; ++r)
          *reinterpret_cast<uint32_t*>(cc.dequant + base + static_cast<int64_t>(r) * cols) =
              (hw_pack_bf16x2(v0[r], v1[r]) & ~nan_mask) | (kNaNPair & nan_mask);
      }
      if (cc.scales != nullptr) {
        const float nan = bits_float(kF32QuietNaN);
        *reinterpret_cast<float2*>(cc.scales + (r0 / B) * cols + gc) = make_float2(f0 ? bs0.stored : nan, f1 ? bs1.stored : nan);
      }
      nonfinite = nonfinite || !f0 || !f1;
    }
  }

  // Row copy: lane l takes blocks (row 2 * (l / 4) + u, block column l % 4 of the strip), u < 2,
  // whole 16-element blocks as row_rn_kernel: RHT, amax, scale, rounding in registers.
  if constexpr (kRowCopy) {
    const CopyArgs& c = rc;
    const QuantSpec& s = c.spec;
    const TensorScale ts = load_tensor_scale(c);
    const int g = lane & 3, f = (lane >> 2) & 1;
    const int gcb = col_strip * kStripCols + 16 * g;  // the block's first column
    const bool bvalid = gcb < cols;
    // SR: the two blocks in a loop, not unrolled. The strip's code is straight-line, so its size is
    // what each warp streams through the instruction caches once per strip; a second copy of this
    // block's Philox and rounding made the SR kernel 17 KB larger and slower (bench/RESULTS.md).
    // RN keeps it unrolled: its blocks are short, and looping spilled at 80 registers.
#pragma unroll(R == Rounding::sr ? 1 : 2)
    for (int u = 0; u < 2; ++u) {
      const int r = 2 * (lane >> 2) + u;
      float v[B];
#pragma unroll
      for (int j = 0; j < 2; ++j)
        unpack8(*reinterpret_cast<const uint4*>(buf + r * 32 + 4 * ((2 * g + j) ^ f)), v + 8 * j);
      if (s.rht) rht16(v, s.rht_signs);
      const uint32_t m = absmax_bits<B>(v);
      const bool finite = m < kF32InfBits;
      const BlockScale bs = make_block_scale(s.scale, finite ? bits_float(m) : 0.0f, s.gmax, ts);
      const int64_t i = (r0 + r) * cols + gcb;
      float uw[B] = {};  // SR: the block's 16 indices are 4 whole Philox calls
      if constexpr (R == Rounding::sr) {
#pragma unroll
        for (int g4 = 0; g4 < B / 4; ++g4) {
          const Philox4 w = philox_for_elements(s.seed, draw_stream(a.src, s.stream, r0 + r), s.step,
                                                draw_row(a.src, r0 + r) * cols + gcb + 4 * g4);
#pragma unroll
          for (int j = 0; j < 4; ++j) uw[4 * g4 + j] = uniform24(w.w[j]);
        }
      }
      uint32_t code[B];
      quantize_values<B, G, R, M, false>(v, code, bs, finite, c.max_index, [&](int j) { return uw[j]; });
      if (bvalid) {
        if (c.dequant != nullptr) {
          uint4* dst = reinterpret_cast<uint4*>(c.dequant + i);
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            uint32_t o[4];
#pragma unroll
            for (int q = 0; q < 4; ++q)
              o[q] = finite ? hw_pack_bf16x2(v[8 * j + 2 * q], v[8 * j + 2 * q + 1]) : kNaNPair;
            dst[j] = make_uint4(o[0], o[1], o[2], o[3]);
          }
        }
        if (c.scales != nullptr) c.scales[i / B] = finite ? bs.stored : bits_float(kF32QuietNaN);
        nonfinite = nonfinite || !finite;
      }
    }
  }
  __syncwarp();  // every lane has read this buffer before the next issue overwrites it
  }
  if (__any_sync(0xffffffffu, nonfinite) && lane == 0 && a.nonfinite_flag != nullptr) atomicOr(a.nonfinite_flag, 1u);
}

template <Grid G, ScaleMode M, Rounding R, bool kRowCopy>
void launch_strips(const FusedArgs& a, cudaStream_t stream) {
  const int col_strips = (a.src.cols + kStripCols - 1) / kStripCols;
  const int64_t nstrips = static_cast<int64_t>(a.src.rows / 16) * col_strips;
  constexpr int64_t per_cta = kThreads / 32;
  const int64_t grid = std::max<int64_t>(1, (nstrips + per_cta - 1) / per_cta);
  if (nstrips > 0x7fffffff) throw std::invalid_argument("quantize_fused: tensor too large for one launch");
  auto* kernel = fused_strip_kernel<G, M, R, kRowCopy>;
  const int64_t ctas = resident_ctas(kernel, grid);  // persistent
  kernel<<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(a, make_strip_divider(col_strips),
                                                               static_cast<int>(nstrips));
  FP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool launch_row_rn(const FusedArgs& a, int b, cudaStream_t stream) {
  const CopyArgs& c = a.row;
  if (!c.present || a.col.present || c.codes != nullptr || c.spec.rounding != Rounding::rn || c.spec.tile_2d)
    return false;
  if (a.src.cols % b != 0) return false;  // shape_error refuses it anyway
  const QuantSpec& s = c.spec;
  if (b == 16) {
    if (s.scale == ScaleMode::fp32) {
      if (s.grid == Grid::e2m1) launch_rows<16, Grid::e2m1, ScaleMode::fp32>(a, stream);
      else launch_rows<16, Grid::e1m2, ScaleMode::fp32>(a, stream);
      return true;
    }
    if (s.scale == ScaleMode::e4m3x2) {
      if (s.grid == Grid::e2m1) launch_rows<16, Grid::e2m1, ScaleMode::e4m3x2>(a, stream);
      else launch_rows<16, Grid::e1m2, ScaleMode::e4m3x2>(a, stream);
      return true;
    }
  } else if (b == 32 && s.scale == ScaleMode::e8m0 && s.grid == Grid::e2m1) {
    launch_rows<32, Grid::e2m1, ScaleMode::e8m0>(a, stream);
    return true;
  }
  return false;
}

bool launch_fused_strips(const FusedArgs& a, int b, cudaStream_t stream) {
  const CopyArgs& r = a.row;
  const CopyArgs& c = a.col;
  // Both copies, both RN or both SR; or the column copy alone, RN.
  if (b != 16 || !c.present || r.codes != nullptr || c.codes != nullptr) return false;
  const QuantSpec& cs = c.spec;
  if (cs.block != 16 || cs.tile_2d || (cs.scale != ScaleMode::fp32 && cs.scale != ScaleMode::e4m3x2)) return false;
  if (r.present) {
    const QuantSpec& rs = r.spec;
    if (rs.block != 16 || rs.rounding != cs.rounding || rs.tile_2d || rs.grid != cs.grid || rs.scale != cs.scale)
      return false;
  } else if (cs.rounding != Rounding::rn) {
    return false;
  }
  // The strips read 16-byte chunks of whole 16-column groups.
  if (a.src.cols % 16 != 0 || a.src.rows % 16 != 0) return false;
  // One instance per (grid, scale, rounding, row copy or not): no runtime switch per element.
  auto by_copies = [&](auto g, auto m) {
    constexpr Grid G = decltype(g)::value;
    constexpr ScaleMode M = decltype(m)::value;
    if (!r.present) launch_strips<G, M, Rounding::rn, false>(a, stream);
    else if (cs.rounding == Rounding::sr) launch_strips<G, M, Rounding::sr, true>(a, stream);
    else launch_strips<G, M, Rounding::rn, true>(a, stream);
  };
  auto by_scale = [&](auto g) {
    if (cs.scale == ScaleMode::fp32) by_copies(g, std::integral_constant<ScaleMode, ScaleMode::fp32>{});
    else by_copies(g, std::integral_constant<ScaleMode, ScaleMode::e4m3x2>{});
  };
  if (cs.grid == Grid::e2m1) by_scale(std::integral_constant<Grid, Grid::e2m1>{});
  else by_scale(std::integral_constant<Grid, Grid::e1m2>{});
  return true;
}

}  // namespace fp4::cuda::detail
