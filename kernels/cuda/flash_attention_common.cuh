// flash_attention_common.cuh — what the two families of fused attention kernels share (see
// flash_attention.cuh): the mma.sync kernels of ops_flash_attention.cu, which run on any sm_80+
// device, and the wgmma kernels of sm90a/ops_flash_attention_wgmma.cu, built for Hopper only.
// Both keep the accumulators of a 16-row block of each warp in mma.sync's m16n8 fragment layout
// (wgmma's m64nN accumulator is that layout per warp), so the element-wise parts of a tile — the
// causal mask, the online softmax, P and dS, the row statistics, the final stores — are one code
// here, and the two families produce the same bits wherever their products do.
//
// Fragment layout, with g = lane / 4, c = lane % 4: acc[m][n][e] of row block m is row 16m + g +
// 8·(e / 2) of the warp's rows and column 8n + 2c + e % 2 of the tile's 64.
//
// Device code, constants and one host helper (set_shared); included by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/ops_common.cuh"

namespace fp4::cuda::flash {

constexpr int kHd = kFlashHeadDim;  // 64 features
constexpr int kTile = kFlashBlock;  // 64 rows per streamed tile (and per CTA in the backward)
constexpr int kStages = 3;          // streamed tiles in flight: one computed, two loading
constexpr int kFwdTile = 2 * kTile; // 128 queries per forward CTA
constexpr float kScale = 0.125f;    // 1 / sqrt(64), exact (the reference's fp32 scale)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kScaleLog2e = 0.125f * 1.4426950408889634f;  // log2(e) / 8, one rounding

struct Geometry {
  int seq_len, n_heads;
  __host__ __device__ size_t d() const { return static_cast<size_t>(n_heads) * kHd; }
};

// Lets `kernel` take `bytes` of dynamic shared memory (above the default 48 KiB).
inline void set_shared(const void* kernel, size_t bytes) {
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// ---- PTX wrappers -----------------------------------------------------------------------------

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, asynchronous (bypassing L1: each tile is read once per CTA).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// Closes the current group of cp.async (an empty group when none was issued: the waits count
// groups, so every thread commits one per stage whether or not it had a tile to load).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 2^x, the MUFU approximation (about 2 ulp; flash_attention.cuh's precision note). 2^−inf = +0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// e^(s/8 − x) as 2^(s·log2e/8 − x2), x2 = x·log2 e: one fma (explicit: the build passes
// --fmad=false) and one MUFU.
__device__ __forceinline__ float exp_scaled(float s, float x2) { return exp2_approx(__fmaf_rn(s, kScaleLog2e, -x2)); }

// 64 floats (a row of lse·log2e or D) into shared memory: 16 chunks of 16 bytes, by threads 0–15.
__device__ __forceinline__ void load_stats_async(float* dst, const float* src) {
  if (threadIdx.x < kTile / 4) cp_async16(shared_addr(dst + 4 * threadIdx.x), src + 4 * threadIdx.x);
}

// ---- Element-wise parts of a tile -------------------------------------------------------------

template <int M>
__device__ __forceinline__ void zero(float (&x)[M][8][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) x[m][n][e] = 0.0f;
}

// k-step kk (columns 16kk..16kk+15) of a 16×64 accumulator w, rounded to bf16 as an mma A
// operand: the two column tiles 2kk and 2kk + 1, packed pairwise by the hardware's round to nearest
// even (cvt.rn.bf16x2; a NaN, which only NaN inputs produce, becomes the canonical 0x7fff).
__device__ __forceinline__ void a_operand(uint32_t (&a)[4], const float (&w)[8][4], int kk) {
  a[0] = detail::hw_pack_bf16x2(w[2 * kk][0], w[2 * kk][1]);
  a[1] = detail::hw_pack_bf16x2(w[2 * kk][2], w[2 * kk][3]);
  a[2] = detail::hw_pack_bf16x2(w[2 * kk + 1][0], w[2 * kk + 1][1]);
  a[3] = detail::hw_pack_bf16x2(w[2 * kk + 1][2], w[2 * kk + 1][3]);
}

// Scores of a tile crossing the diagonal, rows queries and columns keys: key > query → −inf.
// `offset` is the tile's first key minus the warp's first query.
template <int M>
__device__ __forceinline__ void mask_above_diagonal(float (&s)[M][8][4], int offset, int lane) {
  const int g = lane / 4, c = lane % 4;
  const int base = offset + 2 * c - g;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (base + 8 * n + (e & 1) - 16 * m - 8 * (e >> 1) > 0) s[m][n][e] = -INFINITY;
}

// The transposed scores of the diagonal tile (rows keys, columns queries, the warp's first key at
// 16·warp of the tile): query < key → −inf.
__device__ __forceinline__ void mask_below_diagonal(float (&s)[1][8][4], int warp, int lane) {
  const int g = lane / 4, c = lane % 4;
  const int off = 2 * c - g - 16 * warp;
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (off + 8 * n + (e & 1) - 8 * (e >> 1) < 0) s[0][n][e] = -INFINITY;
}

// One key tile of the forward's online softmax, for M row blocks, in two parts. softmax_scores: s
// (raw scores) becomes P in fp32, the running max m_run (log2 units, s·log2e/8) and this lane's
// partial sums l_run move on, and corr receives each row's rescaling factor 2^(m_old − m_new).
// rescale: o *= corr, the output accumulated so far brought to the new max (apart, so that the
// wgmma forward can compute a tile's P while the previous tile's P·V is still accumulating into o).
// Every row keeps at least one finite score in the first tile it visits, so m_run is finite from
// then on.
template <int M>
__device__ __forceinline__ void softmax_scores(float (&s)[M][8][4], float (&m_run)[M][2], float (&l_run)[M][2],
                                               float (&corr)[M][2]) {
  // Row max over the quad's 16 raw scores (scaling by log2e/8 > 0 keeps the order, and fp32
  // rounding is monotonic: max(s)·k rounds to the max of the rounded s·k).
  float mx[M][2], sum[M][2];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float v = fmaxf(s[m][0][2 * r], s[m][0][2 * r + 1]);
#pragma unroll
      for (int n = 1; n < 8; ++n) v = fmaxf(v, fmaxf(s[m][n][2 * r], s[m][n][2 * r + 1]));
      mx[m][r] = v;
    }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float v = mx[m][r];
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
      const float m_new = fmaxf(m_run[m][r], v * kScaleLog2e);  // finite (see above)
      corr[m][r] = exp2_approx(m_run[m][r] - m_new);            // 0 on the first tile (m = −inf)
      m_run[m][r] = m_new;
      sum[m][r] = 0.0f;
    }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp_scaled(s[m][n][e], m_run[m][e >> 1]);  // masked: 2^−inf = 0
        s[m][n][e] = p;
        sum[m][e >> 1] += p;
      }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[m][r] = l_run[m][r] * corr[m][r] + sum[m][r];
}

template <int M>
__device__ __forceinline__ void rescale(float (&o)[M][8][4], const float (&corr)[M][2]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][n][e] *= corr[m][e >> 1];
}

// Both parts at once (the mma.sync forward).
template <int M>
__device__ __forceinline__ void online_softmax(float (&s)[M][8][4], float (&o)[M][8][4], float (&m_run)[M][2],
                                               float (&l_run)[M][2]) {
  float corr[M][2];
  softmax_scores<M>(s, m_run, l_run, corr);
  rescale<M>(o, corr);
}

// The forward's end for the warp's rows wq0 + 16m + 8r + g: out = O / l (under out's store) and
// lse = ln(Σ e^(s/8)) = (max·log2e/8 + log2 l)·ln 2 = max/8 + ln l.
template <int M>
__device__ __forceinline__ void write_forward_rows(const float (&o)[M][8][4], const float (&m_run)[M][2],
                                                   const float (&l_run)[M][2], Geometry geo, int b, int h, int wq0,
                                                   int lane, float* out, float* lse, const StoreOut& store) {
  const int g = lane / 4, c = lane % 4, seq = geo.seq_len;
  const size_t d = geo.d();
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[m][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int t = wq0 + 16 * m + 8 * r + g;
      const size_t at = (static_cast<size_t>(b) * seq + t) * d + static_cast<size_t>(h) * kHd;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        // out's store (ops.cuh's StoreOut) applied as it is written.
        const float v0 = detail::stored(o[m][n][2 * r] / l, store.round);
        const float v1 = detail::stored(o[m][n][2 * r + 1] / l, store.round);
        if (out != nullptr) *reinterpret_cast<float2*>(out + at + n * 8 + 2 * c) = make_float2(v0, v1);
        if (store.bf16 != nullptr)  // the pair as one 4-byte store, the lower column in the lower half
          *reinterpret_cast<uint32_t*>(store.bf16 + at + n * 8 + 2 * c) = detail::bf16x2_bits(v0, v1);
      }
      if (c == 0) lse[(static_cast<size_t>(b) * geo.n_heads + h) * seq + t] = __fmaf_rn(m_run[m][r], kLn2, logf(l));
    }
}

// The forward's output: columns i and i + 1 (i even) of an fp32 or a bf16 copy (the same values
// when the output was stored: bf16_to_float is exact).
__device__ __forceinline__ float2 out_pair(const float* out, size_t i) { return *reinterpret_cast<const float2*>(out + i); }
__device__ __forceinline__ float2 out_pair(const bf16_t* out, size_t i) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(out + i);  // the lower column in the lower half
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// The dQ pass's row statistics for this lane's rows 16·warp + g and + 8 of the query tile whose
// first row (of B·T) is row_q0: D_t = Σ_i dout_ti·out_ti (lane c takes features 16c..16c+15 in
// increasing order, then the quad's fixed butterfly: all four lanes end with the same bits) and
// lse_t·log2 e. The c = 0 lanes publish both for the dK/dV pass at stat + row.
template <class O>
__device__ __forceinline__ void row_statistics(const O* out, const float* lse, const bf16_t* dout, size_t row_q0,
                                               size_t stat, size_t d, int h, int warp, int lane, float (&d_r)[2],
                                               float (&lse2_r)[2], float* dsum, float* lse2) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = warp * 16 + g + 8 * r;  // row within the tile
    const size_t at = (row_q0 + t) * d + static_cast<size_t>(h) * kHd + 16 * c;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint4 go = *reinterpret_cast<const uint4*>(dout + at + 8 * j);  // 8 bf16, 16-byte aligned
      const uint32_t words[4] = {go.x, go.y, go.z, go.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 ov = out_pair(out, at + 8 * j + 2 * k);
        acc = __fmaf_rn(__uint_as_float(words[k] << 16), ov.x, acc);  // lower half: smaller column
        acc = __fmaf_rn(__uint_as_float(words[k] & 0xffff0000u), ov.y, acc);
      }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    d_r[r] = acc;
    lse2_r[r] = lse[stat + t] * kLog2e;
    if (c == 0) {
      dsum[stat + t] = d_r[r];
      lse2[stat + t] = lse2_r[r];
    }
  }
}

// dQ pass, one key tile (rows queries, columns keys), in two parts so that the wgmma kernels can
// start on P before dP = dO·Vᵀ is done: query_probabilities turns s (raw scores) into P =
// 2^(s·log2e/8 − lse·log2e); query_dscores turns dp into dS without the 1/8, P ∘ (dP − D).
__device__ __forceinline__ void query_probabilities(float (&s)[1][8][4], const float (&lse2_r)[2]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][n][e] = exp_scaled(s[0][n][e], lse2_r[e >> 1]);
}
__device__ __forceinline__ void query_dscores(const float (&p)[1][8][4], float (&dp)[1][8][4], const float (&d_r)[2]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[0][n][e] = p[0][n][e] * (dp[0][n][e] - d_r[e >> 1]);  // dS without the 1/8
}

// dK/dV pass, one query tile (rows keys, columns queries), in the same two parts: s becomes Pᵀ and
// dp (V·dOᵀ) dSᵀ without the 1/8, with the queries' lse·log2e (l_s) and D (d_s) from shared memory.
__device__ __forceinline__ void key_probabilities(float (&s)[1][8][4], const float* l_s, int lane) {
  const int c = lane % 4;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float2 l2 = *reinterpret_cast<const float2*>(l_s + n * 8 + 2 * c);  // queries 8n + 2c, +1
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][n][e] = exp_scaled(s[0][n][e], (e & 1) ? l2.y : l2.x);
  }
}
__device__ __forceinline__ void key_dscores(const float (&p)[1][8][4], float (&dp)[1][8][4], const float* d_s,
                                            int lane) {
  const int c = lane % 4;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float2 dd = *reinterpret_cast<const float2*>(d_s + n * 8 + 2 * c);
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[0][n][e] = p[0][n][e] * (dp[0][n][e] - ((e & 1) ? dd.y : dd.x));
  }
}

// Columns i and i + 1 of a dqkv row: fp32, or bf16 rounded to nearest even (the store the model
// applies to dqkv next, fused: the same bits as rounding the fp32 values afterwards).
__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store_pair(bf16_t* p, float a, float b) {
  *reinterpret_cast<uint32_t*>(p) = detail::bf16x2_bits(a, b);
}

// The warp's 16 rows × 64 features of an accumulator times `scale`, row `row0` (rows g and g + 8
// of it) at `dst` (rows `stride` elements apart).
template <class G>
__device__ __forceinline__ void store_rows(G* dst, size_t stride, const float (&acc)[1][8][4], float scale, int lane) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    G* row = dst + (g + r * 8) * stride;
#pragma unroll
    for (int n = 0; n < 8; ++n) store_pair(row + n * 8 + 2 * c, acc[0][n][2 * r] * scale, acc[0][n][2 * r + 1] * scale);
  }
}

}  // namespace fp4::cuda::flash
