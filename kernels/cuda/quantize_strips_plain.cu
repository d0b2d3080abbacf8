// quantize_strips_plain.cu — the strip kernel for copies that round to nearest without the RHT
// (plain_strip_kernel, launch_plain_strips): both copies, or the column copy alone, 1D blocks of
// 16, fp32 or e4m3x2 scales, no codes. Training asks for these most (X's and W's copies in the
// recipes that put the RHT on the weight gradient only), and the benchmark's fused RN rows measure
// them.
//
// The strips are fused_strip_kernel's (quantize_rows.cu): a warp quantizes 16 rows x 64 columns at
// a time, staged in its own shared buffers by cp.async one strip ahead, persistent and grid-stride,
// no CTA barrier; the buffer layout, the lane-to-block mapping and the per-block decisions are the
// same, so the outputs are the same bits (the [gpu] tests compare both with the CPU reference).
// What differs, besides the word-wise steps below:
//   * the strip's position (row block, column strip, first element) is stepped from one strip to
//     the next instead of divided out of the strip index twice per strip, and each lane's cp.async
//     addresses are a fixed offset from the strip's first element;
//   * the block scales take block_scale / block_scale_pair (quantize_element.cuh: the fp32 division
//     as the fast quotient, the E4M3 rounding by the hardware, two blocks per conversion);
// fused_strip_kernel's RHT path has no registers to spare for these at 3 CTAs per SM (it spilled
// with them), hence a kernel of its own.
// Tried and measured slower on the H200 (bench/RESULTS.md, version 9): strips of 128 columns (the
// access pattern alone moves 84 % of the copy's bandwidth there against 75 % with 64 columns, but
// the kernel fell to 71 %), 4 CTAs per SM (64 registers: spills), a third buffer, and lane pairs
// trading halves so that each row-copy store writes whole sectors.
#include <cstring>
#include <stdexcept>

#include "kernels/cuda/quantize_kernels.cuh"

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

// One column pair of a 16-row block (w[r]: row r's word, column c in the low half), RN, no RHT:
// w[r] becomes the copy's word (NaN halves for a non-finite block); s0, s1 the stored scales (NaN
// for a non-finite block). Returns whether a block was non-finite.
template <Grid G, ScaleMode M>
__device__ __forceinline__ bool column_pair_rn_plain(uint32_t* w, const CopyArgs& c, const BlockScaler& k, float& s0,
                                                     float& s1) {
  constexpr int B = 16;
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
  } else {
    float v0[B], v1[B];
#pragma unroll
    for (int r = 0; r < B; ++r) {
      v0[r] = low_bf16(w[r]);
      v1[r] = high_bf16(w[r]);
    }
    uint32_t code[B];
    quantize_values<B, G, Rounding::rn, M, false>(v0, code, bs0, f0, c.max_index, [](int) { return 0.0f; });
    quantize_values<B, G, Rounding::rn, M, false>(v1, code, bs1, f1, c.max_index, [](int) { return 0.0f; });
    const uint32_t nan_mask = (f0 ? 0u : 0x0000ffffu) | (f1 ? 0u : 0xffff0000u);
#pragma unroll
    for (int r = 0; r < B; ++r) w[r] = (hw_pack_bf16x2(v0[r], v1[r]) & ~nan_mask) | (kNaNPair & nan_mask);
  }
  const float nan = bits_float(kF32QuietNaN);
  s0 = f0 ? bs0.stored : nan;
  s1 = f1 ? bs1.stored : nan;
  return !f0 || !f1;
}

// One 16-element row block as 8 source words (w[j]: elements 2j, 2j + 1), RN, no RHT: w becomes the
// copy's words, scale the stored scale (NaN for a non-finite block). Returns whether it was
// non-finite.
template <Grid G, ScaleMode M>
__device__ __forceinline__ bool row_block_rn_plain(uint32_t* w, const CopyArgs& c, const BlockScaler& k, float& scale) {
  constexpr int B = 16;
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

template <Grid G, ScaleMode M, bool kRowCopy>
__global__ void __launch_bounds__(kThreads, 3) plain_strip_kernel(const FusedArgs a, int col_strips, int nstrips) {
  constexpr int B = 16;
  const CopyArgs& rc = a.row;
  const CopyArgs& cc = a.col;
  write_unit_tensor_scales(a);
  // fused_strip_kernel's buffers: two per warp; row r's 16-byte chunk c at chunk c ^ ((r / 2) % 2).
  __shared__ __align__(16) uint32_t strip_buf[kWarps][2][16 * 32];
  const int lane = threadIdx.x % 32;
  const int cols = a.src.cols;
  const int stride = static_cast<int>(gridDim.x) * kWarps;

  // Strip t: row block rb = t / col_strips, column strip cs = t % col_strips, first element
  // off = rb * 16 * cols + cs * 64; `advanced` steps to strip t + stride.
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
  // Lane l copies rows 4i + l / 8, i < 4, chunk l % 8 of a strip: source offsets
  // off + lane_src + 4i * cols, buffer offsets 128i + lane_buf (the swizzle depends on the row
  // through (l / 8) / 2 only).
  const int lane_chunk = lane % 8, lane_row = lane / 8;
  const int lane_src = lane_row * cols + 8 * lane_chunk;
  const int lane_buf = lane_row * 32 + 4 * (lane_chunk ^ ((lane_row >> 1) & 1));
  auto issue = [&](const StripPos& t, uint32_t* dst) {
    if (t.cs * kStripCols + 8 * lane_chunk < cols) {  // cols % 16 == 0: a chunk is wholly in or out
      const bf16_t* src = a.src.x + t.off + lane_src;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        __pipeline_memcpy_async(dst + i * 128 + lane_buf, src + static_cast<int64_t>(4 * i) * cols, 16);
    }
  };
  // Per-copy scale constants (the tensor scales are final: the amax pass ran first).
  const BlockScaler col_scaler = make_block_scaler<M>(cc.spec.gmax, load_tensor_scale(cc));
  BlockScaler row_scaler{};
  if constexpr (kRowCopy) row_scaler = make_block_scaler<M>(rc.spec.gmax, load_tensor_scale(rc));

  int strip = static_cast<int>((blockIdx.x * kThreads + threadIdx.x) / 32);
  StripPos pos = locate(strip);
  if (strip < nstrips) issue(pos, strip_buf[threadIdx.x / 32][0]);
  __pipeline_commit();
  bool nonfinite = false;
  for (int k = 0; strip < nstrips; strip += stride, ++k) {
    const uint32_t* buf = strip_buf[threadIdx.x / 32][k & 1];
    if (strip < nstrips - stride) issue(advanced(pos), strip_buf[threadIdx.x / 32][(k + 1) & 1]);
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncwarp();

    // Column copy: lane l's columns 2l, 2l + 1, one source word per row.
    {
      const int gc = pos.cs * kStripCols + 2 * lane;
      uint32_t w[B];
#pragma unroll
      for (int r = 0; r < B; ++r) w[r] = buf[r * 32 + (lane ^ (((r >> 1) & 1) << 2))];
      float s0, s1;
      const bool bad = column_pair_rn_plain<G, M>(w, cc, col_scaler, s0, s1);
      if (gc < cols) {  // cols % 16 == 0: whole groups of 8 lanes are in or out
        if (cc.dequant != nullptr) {
          bf16_t* dst = cc.dequant + pos.off + 2 * lane;
#pragma unroll
          for (int r = 0; r < B; ++r) *reinterpret_cast<uint32_t*>(dst + static_cast<int64_t>(r) * cols) = w[r];
        }
        if (cc.scales != nullptr)
          *reinterpret_cast<float2*>(cc.scales + static_cast<int64_t>(pos.rb) * cols + gc) = make_float2(s0, s1);
        nonfinite = nonfinite || bad;
      }
    }

    // Row copy: lane l takes blocks (row 2 * (l / 4) + u, block g = l % 4 of the strip), u < 2.
    if constexpr (kRowCopy) {
      const CopyArgs& c = rc;
      const int g = lane & 3, f = (lane >> 2) & 1;
      const int block_col = pos.cs * kStripCols + 16 * g;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int r = 2 * (lane >> 2) + u;
        const uint4 c0 = *reinterpret_cast<const uint4*>(buf + r * 32 + 4 * ((2 * g) ^ f));
        const uint4 c1 = *reinterpret_cast<const uint4*>(buf + r * 32 + 4 * ((2 * g + 1) ^ f));
        uint32_t w[B / 2] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
        float scale;
        const bool bad = row_block_rn_plain<G, M>(w, c, row_scaler, scale);
        const int64_t i = pos.off + static_cast<int64_t>(r) * cols + 16 * g;  // the block's first element
        if (block_col < cols) {
          if (c.dequant != nullptr) {
            uint4* dst = reinterpret_cast<uint4*>(c.dequant + i);
            dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
            dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
          }
          if (c.scales != nullptr) c.scales[i / B] = scale;
          nonfinite = nonfinite || bad;
        }
      }
    }
    __syncwarp();  // every lane has read this buffer before the next issue overwrites it
    pos = advanced(pos);
  }
  if (__any_sync(0xffffffffu, nonfinite) && lane == 0 && a.nonfinite_flag != nullptr) atomicOr(a.nonfinite_flag, 1u);
}

template <Grid G, ScaleMode M, bool kRowCopy>
void launch_plain(const FusedArgs& a, cudaStream_t stream) {
  const int col_strips = (a.src.cols + kStripCols - 1) / kStripCols;
  const int64_t nstrips = static_cast<int64_t>(a.src.rows / 16) * col_strips;
  if (nstrips > 0x7fffffff) throw std::invalid_argument("quantize_fused: tensor too large for one launch");
  auto* kernel = plain_strip_kernel<G, M, kRowCopy>;
  const int64_t ctas = resident_ctas(kernel, std::max<int64_t>(1, (nstrips + kWarps - 1) / kWarps));  // persistent
  kernel<<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(a, col_strips, static_cast<int>(nstrips));
  FP4_CUDA_CHECK(cudaGetLastError());
}

// A copy the plain strips can make: RN without the RHT, 1D blocks of 16, fp32 or e4m3x2, no codes.
bool plain_copy(const CopyArgs& c) {
  const QuantSpec& s = c.spec;
  return c.codes == nullptr && s.rounding == Rounding::rn && !s.rht && s.block == 16 && !s.tile_2d &&
         (s.scale == ScaleMode::fp32 || s.scale == ScaleMode::e4m3x2);
}

}  // namespace

bool launch_plain_strips(const FusedArgs& a, int b, cudaStream_t stream) {
  const CopyArgs& r = a.row;
  const CopyArgs& c = a.col;
  if (b != 16 || !c.present || !plain_copy(c)) return false;
  if (r.present && (!plain_copy(r) || r.spec.grid != c.spec.grid || r.spec.scale != c.spec.scale)) return false;
  // The strips read 16-byte chunks of whole 16-column groups.
  if (a.src.cols % 16 != 0 || a.src.rows % 16 != 0) return false;
  auto by_copies = [&](auto g, auto m) {
    constexpr Grid G = decltype(g)::value;
    constexpr ScaleMode M = decltype(m)::value;
    if (r.present) launch_plain<G, M, true>(a, stream);
    else launch_plain<G, M, false>(a, stream);
  };
  auto by_scale = [&](auto g) {
    if (c.spec.scale == ScaleMode::fp32) by_copies(g, std::integral_constant<ScaleMode, ScaleMode::fp32>{});
    else by_copies(g, std::integral_constant<ScaleMode, ScaleMode::e4m3x2>{});
  };
  if (c.spec.grid == Grid::e2m1) by_scale(std::integral_constant<Grid, Grid::e2m1>{});
  else by_scale(std::integral_constant<Grid, Grid::e1m2>{});
  return true;
}

}  // namespace fp4::cuda::detail
