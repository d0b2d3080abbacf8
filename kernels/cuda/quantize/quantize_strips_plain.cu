// quantize_strips_plain.cu — the strip kernel for copies that round to nearest without the RHT
// (plain_strip_kernel, launch_plain_strips): both copies, or the column copy alone, no codes, 1D
// blocks of 16 with fp32 or e4m3x2 scales (e2m1, ufp4, nvfp4, ufp4-e4m3) or of 32 with e8m0 scales
// (mxfp4). Training asks for these most (X's and W's copies in the recipes that put the RHT on the
// weight gradient only), and the benchmark's fused RN rows measure them.
//
// The strips are fused_strip_kernel's (quantize_rows.cu), B rows deep: a warp quantizes B rows x 64
// columns at a time, staged in its own shared buffers by cp.async one strip ahead, persistent and
// grid-stride, no CTA barrier; the per-block decisions are the same, so the outputs are the same
// bits (the [gpu] tests compare both with the CPU reference). What differs, besides the word-wise
// steps below:
//   * the row copy leaves through the buffer: each lane writes its blocks' words back over their
//     source chunks, and the strip goes out as it came in, whole 128-byte row lines (storing each
//     block from its lane writes half sectors, and that access pattern alone moves less of the
//     copy's bandwidth; bench/RESULTS.md has the measurements);
//   * the strip's position (row block, column strip, first element) is stepped from one strip to
//     the next instead of divided out of the strip index twice per strip, and each lane's cp.async
//     addresses are a fixed offset from the strip's first element;
//   * the block scales take block_scale / block_scale_pair (quantize_element.cuh: the fp32 division
//     as the fast quotient, the E4M3 rounding by the hardware, two blocks per conversion).
// fused_strip_kernel's RHT path has no registers to spare for these at 3 CTAs per SM (it spilled
// with them, and the row copy through the buffer made it slower there), hence a kernel of its own.
// Tried and slower (bench/RESULTS.md lists each with its figures): strips of 128 columns (the
// access pattern alone moves more of the copy's bandwidth, but the kernel did not), 4 CTAs per SM
// (64 registers: spills), a third buffer, and lane pairs trading halves so that each row-copy
// store writes whole sectors (the buffer does that now without shuffles).
#include <cstring>
#include <stdexcept>

#include "kernels/cuda/quantize/quantize_kernels.cuh"

namespace fp4::cuda::detail {

namespace {

// Without the RHT a block's values are the source bf16 values, so three per-value steps can work on
// the source's 4-byte words (two bf16 each) instead of on fp32 values:
//   * the amax: one max.NaN.bf16x2 of |word| per two values (absmax_pairs) instead of one fp32
//     max.NaN per value. |bf16| and the maximum are exact and widening bf16 to fp32 is exact and
//     monotone, so a half's result widened is absmax_bits's result for that half's values when they
//     are finite; a NaN anywhere gives a NaN and an infinity without NaN gives +Inf, both at or
//     above kF32InfBits when widened, as absmax_bits's are: the same finiteness decision;
//   * the sign: the quantizer returns the magnitude (BlockQuantizer::magnitude), two magnitudes are
//     converted by one cvt.rn.bf16x2, and the two sign bits come from the source word with one AND-OR
//     (source sign bit = the value's sign bit; round to nearest even is symmetric, so this is
//     quantize's signed result converted);
//   * the fp32 values are unpacked only once, in the per-value loop.
// The fast loop takes blocks that are finite, non-zero and inside the fast division's range (all
// blocks but the rare ones); the others take quantize_values as the RHT path does.

__device__ __forceinline__ float low_bf16(uint32_t w) { return bits_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) { return bits_float(w & 0xffff0000u); }
constexpr uint32_t kSignPair = 0x80008000u;

// Per half of the words w[0..N): the bits of the NaN-propagating maximum of |value| (bf16).
template <int N>
__device__ __forceinline__ uint32_t absmax_pairs(const uint32_t* w) {
  __nv_bfloat162 m;
  const uint32_t zero = 0u;
  memcpy(&m, &zero, 4);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    __nv_bfloat162 h;
    memcpy(&h, &w[j], 4);
    m = __hmax2_nan(m, __habs2(h));
  }
  uint32_t bits;
  memcpy(&bits, &m, 4);
  return bits;
}

// One column pair of a B-row block, RN, no RHT: w[r] holds row r's source word (column c in the low
// half); store(r, word) receives row r's word of the copy (NaN halves for a non-finite block),
// s0, s1 the stored scales (NaN for a non-finite block). Returns whether a block was non-finite.
// The rare blocks that take the reference path (zero, non-finite, outside the fast division's
// range) read their words again with reread(r) and go one row at a time: holding w through the
// reference arithmetic spilled at B = 32.
template <int B, Grid G, ScaleMode M, class Reread, class Store>
__device__ __forceinline__ bool column_pair_rn_plain(uint32_t* w, const CopyArgs& c, const BlockScaler& k, float& s0,
                                                     float& s1, Reread&& reread, Store&& store) {
  const uint32_t m = absmax_pairs<B>(w);
  const uint32_t m0 = m << 16, m1 = m & 0xffff0000u;
  const bool f0 = m0 < kF32InfBits, f1 = m1 < kF32InfBits;
  BlockScale bs0, bs1;
  block_scale_pair<M>(k, f0 ? bits_float(m0) : 0.0f, f1 ? bits_float(m1) : 0.0f, bs0, bs1);
  const BlockQuantizer<G, Rounding::rn, M> q0(bs0, c.max_index), q1(bs1, c.max_index);
  if (f0 && f1 && !bs0.zero_block && !bs1.zero_block && q0.fast() && q1.fast()) {
#pragma unroll
    for (int r = 0; r < B; ++r) {
      uint32_t unused;
      w[r] = hw_pack_bf16x2(q0.template magnitude<false>(low_bf16(w[r]), 0.0f, unused),
                            q1.template magnitude<false>(high_bf16(w[r]), 0.0f, unused)) |
             (w[r] & kSignPair);
    }
#pragma unroll
    for (int r = 0; r < B; ++r) store(r, w[r]);
  } else {
    const uint32_t nan_mask = (f0 ? 0u : 0x0000ffffu) | (f1 ? 0u : 0xffff0000u);
#pragma unroll 1
    for (int r = 0; r < B; ++r) {
      const uint32_t x = reread(r);
      float v0 = low_bf16(x), v1 = high_bf16(x);
      uint32_t code;
      quantize_values<1, G, Rounding::rn, M, false>(&v0, &code, bs0, f0, c.max_index, [](int) { return 0.0f; });
      quantize_values<1, G, Rounding::rn, M, false>(&v1, &code, bs1, f1, c.max_index, [](int) { return 0.0f; });
      store(r, (hw_pack_bf16x2(v0, v1) & ~nan_mask) | (kNaNPair & nan_mask));
    }
  }
  const float nan = bits_float(kF32QuietNaN);
  s0 = f0 ? bs0.stored : nan;
  s1 = f1 ? bs1.stored : nan;
  return !f0 || !f1;
}

// One B-element row block as B / 2 source words (w[j]: elements 2j, 2j + 1), RN, no RHT: w becomes
// the copy's words, scale the stored scale (NaN for a non-finite block). Returns whether it was
// non-finite.
template <int B, Grid G, ScaleMode M>
__device__ __forceinline__ bool row_block_rn_plain(uint32_t* w, const CopyArgs& c, const BlockScaler& k, float& scale) {
  const uint32_t m2 = absmax_pairs<B / 2>(w);
  const uint32_t m = float_bits(fmax_nan(low_bf16(m2), high_bf16(m2)));
  const bool finite = m < kF32InfBits;
  const BlockScale bs = block_scale<M>(k, finite ? bits_float(m) : 0.0f);
  const BlockQuantizer<G, Rounding::rn, M> q(bs, c.max_index);
  if (finite && !bs.zero_block && q.fast()) {
#pragma unroll
    for (int j = 0; j < B / 2; ++j) {
      uint32_t unused;
      w[j] = hw_pack_bf16x2(q.template magnitude<false>(low_bf16(w[j]), 0.0f, unused),
                            q.template magnitude<false>(high_bf16(w[j]), 0.0f, unused)) |
             (w[j] & kSignPair);
    }
  } else {
    float v[B];
#pragma unroll
    for (int j = 0; j < B / 2; ++j) {
      v[2 * j] = low_bf16(w[j]);
      v[2 * j + 1] = high_bf16(w[j]);
    }
    uint32_t code[B];
    quantize_values<B, G, Rounding::rn, M, false>(v, code, bs, finite, c.max_index, [](int) { return 0.0f; });
#pragma unroll
    for (int j = 0; j < B / 2; ++j) w[j] = finite ? hw_pack_bf16x2(v[2 * j], v[2 * j + 1]) : kNaNPair;
  }
  scale = finite ? bs.stored : bits_float(kF32QuietNaN);
  return !finite;
}

// The strip buffer's layout: row r (32 words, 8 chunks of 16 bytes) keeps its chunk c at chunk
// c ^ swizzle(r). Any such permutation leaves the column phase (one row's 32 words across the warp)
// and the chunk copies in and out (one row's 8 chunks per quarter warp) free of bank conflicts; the
// swizzle is chosen so that the row phase's 16-byte reads are too. A quarter warp reads there:
//   * B = 16 (lane l: row 2 (l / 4) + u, block l % 4, its chunk pair 2g + j): rows 2k and 2k + 2
//     with four blocks each, so (r / 2) % 2 puts the two rows' chunk pairs on alternate chunks;
//   * B = 32 (lane l: row l / 2 + 16u, block l % 2, its chunk 4g + j): rows 4k..4k + 3 with two
//     blocks each, so r % 4 spreads the four rows' chunks over the eight positions.
template <int B>
__device__ __forceinline__ int strip_swizzle(int r) {
  return B == 16 ? (r >> 1) & 1 : r & 3;
}

// The row phase's lane mapping: the row and the block (of the strip row) that lane l quantizes in
// its step u < 2 (a strip holds 64 blocks at either B; see strip_swizzle).
template <int B>
__device__ __forceinline__ int row_phase_row(int lane, int u) {
  return B == 16 ? 2 * (lane >> 2) + u : (lane >> 1) + 16 * u;
}
template <int B>
__device__ __forceinline__ int row_phase_block(int lane) {
  return B == 16 ? lane & 3 : lane & 1;
}

template <int B>
constexpr int kPlainStripWords = B * 32;  // one strip buffer: B rows of 32 words
template <int B>
constexpr int kPlainStripSmemBytes = kWarps * 2 * kPlainStripWords<B> * 4;  // two buffers per warp

// One CTA of 8 warps per SM, persistent. The strips are memory-bound, and fewer strips in flight
// move more bytes (one, two and three CTAs per SM were measured side by side: bench/RESULTS.md),
// and the register budget of one CTA keeps B = 32's column words without spilling.
constexpr int kPlainCtasPerSm = 1;

template <int B, Grid G, ScaleMode M, bool kRowCopy>
__global__ void __launch_bounds__(kThreads, kPlainCtasPerSm)
    plain_strip_kernel(const FusedArgs a, int col_strips, int nstrips) {
  static_assert(B == 16 || B == 32, "strips of 16 or 32 rows");
  const CopyArgs& rc = a.row;
  const CopyArgs& cc = a.col;
  write_unit_tensor_scales(a);
  // Two buffers per warp (dynamic shared memory: 64 KB per CTA at B = 32), laid out as
  // strip_swizzle says.
  extern __shared__ __align__(16) uint32_t plain_strip_smem[];
  const int lane = threadIdx.x % 32;
  uint32_t* const warp_bufs = plain_strip_smem + (threadIdx.x / 32) * 2 * kPlainStripWords<B>;
  const int cols = a.src.cols;
  const int stride = static_cast<int>(gridDim.x) * kWarps;

  // Strip t: row block rb = t / col_strips, column strip cs = t % col_strips, first element
  // off = rb * B * cols + cs * 64; `advanced` steps to strip t + stride.
  struct StripPos {
    int rb, cs;
    int64_t off;
  };
  const int64_t row_block_elems = static_cast<int64_t>(B) * cols;
  auto locate = [&](int t) {
    StripPos p;
    p.rb = t / col_strips;
    p.cs = t % col_strips;
    p.off = p.rb * row_block_elems + static_cast<int64_t>(p.cs) * kStripCols;
    return p;
  };
  const StripPos step = locate(stride);
  const int64_t wrap_off = row_block_elems - static_cast<int64_t>(col_strips) * kStripCols;
  auto advanced = [&](StripPos p) {
    p.rb += step.rb;
    p.cs += step.cs;
    p.off += step.off;
    if (p.cs >= col_strips) {
      p.cs -= col_strips;
      ++p.rb;
      p.off += wrap_off;
    }
    return p;
  };
  // Lane l moves chunk l % 8 of rows 4i + l / 8, i < B / 4, in (cp.async) and out (the row copy):
  // source offsets off + lane_src + 4i * cols, buffer offsets 128i + lane_buf (4i + l / 8 and l / 8
  // have the same swizzle: it depends on r % 4 at most).
  const int lane_chunk = lane % 8, lane_row = lane / 8;
  const int lane_src = lane_row * cols + 8 * lane_chunk;
  const int lane_buf = lane_row * 32 + 4 * (lane_chunk ^ strip_swizzle<B>(lane_row));
  auto issue = [&](const StripPos& t, uint32_t* dst) {
    if (t.cs * kStripCols + 8 * lane_chunk < cols) {  // cols % 16 == 0: a chunk is wholly in or out
      const bf16_t* src = a.src.x + t.off + lane_src;
#pragma unroll
      for (int i = 0; i < B / 4; ++i)
        __pipeline_memcpy_async(dst + i * 128 + lane_buf, src + static_cast<int64_t>(4 * i) * cols, 16);
    }
  };
  // Per-copy scale constants (the tensor scales are final: the amax pass ran first).
  const BlockScaler col_scaler = make_block_scaler<M>(cc.spec.gmax, load_tensor_scale(cc));
  BlockScaler row_scaler{};
  if constexpr (kRowCopy) row_scaler = make_block_scaler<M>(rc.spec.gmax, load_tensor_scale(rc));

  int strip = static_cast<int>((blockIdx.x * kThreads + threadIdx.x) / 32);
  StripPos pos = locate(strip);
  if (strip < nstrips) issue(pos, warp_bufs);
  __pipeline_commit();
  bool nonfinite = false;
  for (int k = 0; strip < nstrips; strip += stride, ++k) {
    uint32_t* buf = warp_bufs + (k & 1) * kPlainStripWords<B>;
    if (strip < nstrips - stride) issue(advanced(pos), warp_bufs + ((k + 1) & 1) * kPlainStripWords<B>);
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncwarp();

    // Column copy: lane l's columns 2l, 2l + 1, one source word per row.
    {
      const int gc = pos.cs * kStripCols + 2 * lane;
      auto word = [&](int r) { return buf[r * 32 + (lane ^ (strip_swizzle<B>(r) << 2))]; };
      uint32_t w[B];
#pragma unroll
      for (int r = 0; r < B; ++r) w[r] = word(r);
      const bool in = gc < cols;  // cols % 16 == 0: whole groups of 8 lanes are in or out
      const bool store = in && cc.dequant != nullptr;
      bf16_t* const dst = store ? cc.dequant + pos.off + 2 * lane : nullptr;
      float s0, s1;
      const bool bad = column_pair_rn_plain<B, G, M>(w, cc, col_scaler, s0, s1, word, [&](int r, uint32_t out) {
        if (store) *reinterpret_cast<uint32_t*>(dst + static_cast<int64_t>(r) * cols) = out;
      });
      if (in) {
        if (cc.scales != nullptr)
          *reinterpret_cast<float2*>(cc.scales + static_cast<int64_t>(pos.rb) * cols + gc) = make_float2(s0, s1);
        nonfinite = nonfinite || bad;
      }
    }

    // Row copy: lane l takes blocks (row_phase_row(l, u), row_phase_block(l)), u < 2, and writes the
    // copy's words back over the block's source chunks; the strip then leaves the buffer as it came
    // in, 16-byte chunks that fill whole 128-byte lines per row. Storing each block from its lane
    // instead (16-byte stores into 8 rows per instruction, half of each sector) moves less of the
    // copy's bandwidth (bench/RESULTS.md).
    if constexpr (kRowCopy) {
      constexpr int kChunks = B / 8;  // a block's 16-byte chunks
      const int g = row_phase_block<B>(lane);
      const int block_col = pos.cs * kStripCols + B * g;
      __syncwarp();  // every lane's column reads are done before the buffer is overwritten
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int r = row_phase_row<B>(lane, u);
        uint4* chunk[kChunks];
        uint32_t w[B / 2];
#pragma unroll
        for (int j = 0; j < kChunks; ++j) {
          chunk[j] = reinterpret_cast<uint4*>(buf + r * 32 + 4 * ((kChunks * g + j) ^ strip_swizzle<B>(r)));
          const uint4 v = *chunk[j];
          w[4 * j] = v.x;
          w[4 * j + 1] = v.y;
          w[4 * j + 2] = v.z;
          w[4 * j + 3] = v.w;
        }
        float scale;
        const bool bad = row_block_rn_plain<B, G, M>(w, rc, row_scaler, scale);
#pragma unroll
        for (int j = 0; j < kChunks; ++j) *chunk[j] = make_uint4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
        if (block_col < cols) {
          if (rc.scales != nullptr) rc.scales[(pos.off + static_cast<int64_t>(r) * cols) / B + g] = scale;
          nonfinite = nonfinite || bad;
        }
      }
      __syncwarp();
      if (rc.dequant != nullptr && pos.cs * kStripCols + 8 * lane_chunk < cols) {
        bf16_t* dst = rc.dequant + pos.off + lane_src;
#pragma unroll
        for (int i = 0; i < B / 4; ++i)
          *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(4 * i) * cols) =
              *reinterpret_cast<const uint4*>(buf + i * 128 + lane_buf);
      }
    }
    __syncwarp();  // every lane has read this buffer before the next issue overwrites it
    pos = advanced(pos);
  }
  if (__any_sync(0xffffffffu, nonfinite) && lane == 0 && a.nonfinite_flag != nullptr) atomicOr(a.nonfinite_flag, 1u);
}

template <int B, Grid G, ScaleMode M, bool kRowCopy>
void launch_plain(const FusedArgs& a, cudaStream_t stream) {
  const int col_strips = (a.src.cols + kStripCols - 1) / kStripCols;
  const int64_t nstrips = static_cast<int64_t>(a.src.rows / B) * col_strips;
  if (nstrips > 0x7fffffff) throw std::invalid_argument("quantize_fused: tensor too large for one launch");
  auto* kernel = plain_strip_kernel<B, G, M, kRowCopy>;
  constexpr int smem = kPlainStripSmemBytes<B>;
  // Above the default 48 KB (B = 32) the kernel must be allowed its shared memory, as launch_instance does.
  if (smem > 48 * 1024) FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t ctas = resident_ctas(kernel, std::max<int64_t>(1, (nstrips + kWarps - 1) / kWarps), kThreads, smem,
                                     kPlainCtasPerSm);  // persistent
  kernel<<<static_cast<unsigned>(ctas), kThreads, smem, stream>>>(a, col_strips, static_cast<int>(nstrips));
  FP4_CUDA_CHECK(cudaGetLastError());
}

// The copies the plain strips make: RN without the RHT, no codes, 1D blocks of 16 with fp32 or
// e4m3x2 scales (ufp4, e2m1, nvfp4, ufp4-e4m3) or of 32 with e8m0 scales (mxfp4).
bool plain_copy(const CopyArgs& c) {
  const QuantSpec& s = c.spec;
  const bool family = (s.block == 16 && (s.scale == ScaleMode::fp32 || s.scale == ScaleMode::e4m3x2)) ||
                      (s.block == 32 && s.scale == ScaleMode::e8m0);
  return c.codes == nullptr && s.rounding == Rounding::rn && !s.rht && !s.tile_2d && family;
}

}  // namespace

bool launch_plain_strips(const FusedArgs& a, int b, cudaStream_t stream) {
  const CopyArgs& r = a.row;
  const CopyArgs& c = a.col;
  if (!c.present || !plain_copy(c) || c.spec.block != b) return false;
  if (r.present && (!plain_copy(r) || r.spec.grid != c.spec.grid || r.spec.scale != c.spec.scale)) return false;
  // The strips read 16-byte chunks of whole 16-column groups, B rows at a time.
  if (a.src.cols % 16 != 0 || a.src.rows % b != 0) return false;
  auto by_copies = [&](auto bb, auto g, auto m) {
    constexpr int B = decltype(bb)::value;
    constexpr Grid G = decltype(g)::value;
    constexpr ScaleMode M = decltype(m)::value;
    if (r.present) launch_plain<B, G, M, true>(a, stream);
    else launch_plain<B, G, M, false>(a, stream);
  };
  auto by_family = [&](auto g) {
    using B16 = std::integral_constant<int, 16>;
    if (b == 32) by_copies(std::integral_constant<int, 32>{}, g, std::integral_constant<ScaleMode, ScaleMode::e8m0>{});
    else if (c.spec.scale == ScaleMode::fp32) by_copies(B16{}, g, std::integral_constant<ScaleMode, ScaleMode::fp32>{});
    else by_copies(B16{}, g, std::integral_constant<ScaleMode, ScaleMode::e4m3x2>{});
  };
  if (c.spec.grid == Grid::e2m1) by_family(std::integral_constant<Grid, Grid::e2m1>{});
  else by_family(std::integral_constant<Grid, Grid::e1m2>{});
  return true;
}

}  // namespace fp4::cuda::detail
