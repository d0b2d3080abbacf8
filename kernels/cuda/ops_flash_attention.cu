// ops_flash_attention.cu — see flash_attention.cuh: fused causal attention on tensor cores.
//
// Tiling. Queries and keys come in tiles of 64 rows × 64 features (bf16). A CTA has 4 warps; each
// warp owns 16 rows of the CTA's own tile (queries in the forward and the dQ pass, keys in the
// dK/dV pass) and streams the other side's tiles through shared memory, double-buffered with
// cp.async so the next tile loads while this one is multiplied. Causality: the CTA for tile i only
// visits the tiles on its side of the diagonal, and masks inside the diagonal tile. The grid runs
// the longest CTAs first (they start while the short ones fill the tail).
//
//   forward (one CTA per 64 queries): for key tiles 0..i: S = Q·Kᵀ (fp32), online softmax (running
//     row max m and sum l, the output rescaled by exp(m_old − m_new)), O += P·V with P rounded to
//     bf16; finally out = O / l, lse = m + log l.
//   backward: D_t = dout_t·out_t (a warp per row and head, fixed butterfly). Then, without atomics,
//     the standard deterministic split:
//     dK/dV pass (one CTA per 64 keys): for query tiles i..last, in increasing order: Sᵀ = K·Qᵀ,
//       Pᵀ = exp(Sᵀ/8 − lse), dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D); dV += Pᵀ·dO, dK += dSᵀ·Q; dK /= 8.
//     dQ pass (one CTA per 64 queries): for key tiles 0..i: S, P, dP, dS again; dQ += dS·K; dQ /= 8.
//     Computing Sᵀ (keys as rows) in the dK/dV pass puts Pᵀ and dSᵀ in registers in exactly the
//     layout of an mma A operand, as S (queries as rows) is for P·V in the forward.
//
// mma layout (PTX mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32). With g = lane / 4, c = lane % 4:
//   A 16×16 (row-major, 4 registers of two bf16, the lower half the smaller column):
//       a0 = (row g, cols 2c, 2c+1), a1 = (row g+8, same cols), a2 = (row g, cols 2c+8, 2c+9),
//       a3 = (row g+8, cols 2c+8, 2c+9);
//   B 16×8 (k × n, 2 registers): b0 = (k rows 2c, 2c+1; col g), b1 = (k rows 2c+8, 2c+9; col g);
//   C/D 16×8 fp32: d0, d1 = (row g, cols 2c, 2c+1), d2, d3 = (row g+8, cols 2c, 2c+1).
// So two neighbouring 16×8 accumulator tiles (columns 0–7 and 8–15), packed pairwise to bf16, are
// exactly an A operand over k = those 16 columns: P never leaves registers.
// Operands come from shared memory with ldmatrix.x4 (four 8×8 b16 matrices, lanes 8m..8m+7 giving
// matrix m's row addresses; lane gets (row g, cols 2c, 2c+1) of each, or with .trans (rows 2c,
// 2c+1; col g), i.e. the transposed matrix). Rows stored along the reduction dimension (Q and K
// rows for S = Q·Kᵀ, whose reduction is the feature) load plainly; rows across it (V for P·V,
// whose reduction is over keys) load with .trans. Shared rows are padded to 72 bf16 (144 bytes):
// the 8 rows one matrix reads then start 16 bytes apart modulo 128 and hit distinct banks.
//
// Determinism: each output element is written by one thread; its sums run over tiles in a fixed
// order, within an mma in the hardware's fixed order, and across the 4 lanes of a row by fixed
// butterflies. No atomics anywhere.
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <cmath>
#include <cstdint>
#include <string>

namespace fp4::cuda {

namespace {

constexpr int kHd = kFlashHeadDim;  // 64 features
constexpr int kTile = kFlashBlock;  // 64 rows per tile
constexpr int kPitch = kHd + 8;     // shared row pitch in bf16 (see the bank note above)
constexpr int kTileElems = kTile * kPitch;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kScale = 0.125f;  // 1 / sqrt(64), exact (the reference's fp32 scale)

static_assert(kTile == kWarps * 16, "each warp owns 16 rows of the CTA's tile");

// ---- PTX wrappers -----------------------------------------------------------------------------

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, asynchronous (bypassing L1: each tile is read once per CTA).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a · b on one 16×8×16 tile.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats → two bf16 (round to nearest even), `lo` in the lower half (the smaller column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// ---- Tiles and fragments ----------------------------------------------------------------------

// Rows [0, 64) × 64 features from global (row stride `stride` elements) into a padded shared
// tile, 16 bytes per cp.async: 512 chunks, 4 per thread. Not committed here.
__device__ __forceinline__ void load_tile_async(bf16_t* dst, const bf16_t* src, size_t stride) {
#pragma unroll
  for (int i = 0; i < kTile * kHd / 8 / kThreads; ++i) {
    const int chunk = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = chunk / 8, col = (chunk % 8) * 8;
    cp_async16(shared_addr(dst + row * kPitch + col), src + static_cast<size_t>(row) * stride + col);
  }
}

// 64 floats (a row of lse or D) into shared memory: 16 chunks of 16 bytes.
__device__ __forceinline__ void load_stats_async(float* dst, const float* src) {
  if (threadIdx.x < kTile / 4) cp_async16(shared_addr(dst + 4 * threadIdx.x), src + 4 * threadIdx.x);
}

// The A operand for rows [row0, row0 + 16) × all 64 features of a shared tile: 4 k-steps.
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[4][4], const bf16_t* tile, int row0, int lane) {
  // Lanes 0–7: rows 0–7, cols 0–7 (a0); 8–15: rows 8–15 (a1); 16–23: rows 0–7, cols 8–15 (a2); 24–31: a3.
  const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8, col = (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) ldsm_x4(a[kk], shared_addr(tile + row * kPitch + kk * 16 + col));
}

// acc[n] (n = 0..7: columns 8n..8n+7 of a 16×64 result) += A · tileᵀ, where the shared tile's rows
// are the 64 result columns and its features the reduction (S = Q·Kᵀ, dP = dO·Vᵀ and transposes).
__device__ __forceinline__ void mma_abt(float (&acc)[8][4], const uint32_t (&a)[4][4], const bf16_t* tile,
                                        int lane) {
  // Per (k-step kk, pair of column tiles np): lanes 0–7 give tile rows 16np..+7 at features
  // 16kk..+7 (b0 of column tile 2np), 8–15 the same rows at 16kk+8.. (b1), 16–31 rows 16np+8..+15
  // (b0, b1 of column tile 2np+1).
  const int row = (lane & 7) + (lane >> 4) * 8, col = ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      ldsm_x4(b, shared_addr(tile + (np * 16 + row) * kPitch + kk * 16 + col));
      mma(acc[2 * np], a[kk], b[0], b[1]);
      mma(acc[2 * np + 1], a[kk], b[2], b[3]);
    }
  }
}

// acc[n] (features 8n..8n+7) += W · tile, W a 16×64 matrix in registers as 8 accumulator-layout
// column tiles (w[n][0..3], fp32, rounded here to bf16), the shared tile's rows the reduction (keys
// for P·V, queries for Pᵀ·dO) and its features the result columns: loaded with .trans.
__device__ __forceinline__ void mma_wb(float (&acc)[8][4], const float (&w)[8][4], const bf16_t* tile, int lane) {
  // Per (k-step kk over tile rows, pair of feature tiles dp): lanes 0–7 give rows 16kk..+7 at
  // features 16dp..+7 (b0 of feature tile 2dp), 8–15 rows 16kk+8..+15 (b1), 16–31 the same at
  // features 16dp+8..+15 (b0, b1 of feature tile 2dp+1).
  const int row = (lane & 7) + ((lane >> 3) & 1) * 8, col = (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pack_bf16(w[2 * kk][0], w[2 * kk][1]), pack_bf16(w[2 * kk][2], w[2 * kk][3]),
                           pack_bf16(w[2 * kk + 1][0], w[2 * kk + 1][1]),
                           pack_bf16(w[2 * kk + 1][2], w[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < 4; ++dp) {
      uint32_t b[4];
      ldsm_x4_trans(b, shared_addr(tile + (kk * 16 + row) * kPitch + dp * 16 + col));
      mma(acc[2 * dp], a, b[0], b[1]);
      mma(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

__device__ __forceinline__ void zero(float (&x)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) x[n][e] = 0.0f;
}

struct Geometry {
  int seq_len, n_heads;
  __host__ __device__ size_t d() const { return static_cast<size_t>(n_heads) * kHd; }
};

// ---- Forward ----------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads) flash_forward_kernel(const bf16_t* qkv, Geometry geo, float* out,
                                                                 float* lse, StoreOut store) {
  __shared__ __align__(16) bf16_t sQ[kTileElems];
  __shared__ __align__(16) bf16_t sK[2][kTileElems];
  __shared__ __align__(16) bf16_t sV[2][kTileElems];
  const int n_tiles = geo.seq_len / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.x);  // longest first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const size_t d = geo.d(), stride = 3 * d;
  const bf16_t* q_g = qkv + (static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(qt) * kTile) * stride +
                      static_cast<size_t>(h) * kHd;
  const bf16_t* k_g = qkv + static_cast<size_t>(b) * geo.seq_len * stride + d + static_cast<size_t>(h) * kHd;
  const bf16_t* v_g = k_g + d;
  const size_t tile_stride = static_cast<size_t>(kTile) * stride;

  load_tile_async(sQ, q_g, stride);
  load_tile_async(sK[0], k_g, stride);
  load_tile_async(sV[0], v_g, stride);
  cp_async_commit();

  uint32_t qf[4][4];
  float o[8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp
  for (int kt = 0; kt <= qt; ++kt) {
    const int buf = kt & 1;
    if (kt < qt) {  // prefetch the next key tile into the other buffer (freed by the last barrier)
      load_tile_async(sK[buf ^ 1], k_g + (kt + 1) * tile_stride, stride);
      load_tile_async(sV[buf ^ 1], v_g + (kt + 1) * tile_stride, stride);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == 0) load_a_frags(qf, sQ, warp * 16, lane);

    float s[8][4];
    zero(s);
    mma_abt(s, qf, sK[buf], lane);

    // Scale, mask (diagonal tile only: key column > query row), row max over the quad's 16 values.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * 16 + g + (e / 2) * 8, col = n * 8 + 2 * c + (e % 2);
        float v = s[n][e] * kScale;
        if (kt == qt && col > row) v = -INFINITY;
        s[n][e] = v;
        mx[e / 2] = fmaxf(mx[e / 2], v);
      }
    float corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);  // finite: key 0 ≤ every query is in tile 0
      corr[r] = expf(m[r] - m_new);            // 0 on the first tile (m = −inf)
      m[r] = m_new;
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = expf(s[n][e] - m[e / 2]);  // masked: exp(−inf) = 0
        s[n][e] = p;
        sum[e / 2] += p;
        o[n][e] *= corr[e / 2];
      }
    // l is each lane's partial sum over its own columns; the quad combines them at the end.
    l[0] = l[0] * corr[0] + sum[0];
    l[1] = l[1] * corr[1] + sum[1];

    mma_wb(o, s, sV[buf], lane);  // O += bf16(P) · V
    __syncthreads();              // every warp is done with this buffer before it is refilled
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const size_t row0 = static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(qt) * kTile + warp * 16 + g;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const size_t at = (row0 + r * 8) * d + static_cast<size_t>(h) * kHd;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      // out's store (ops.cuh's StoreOut) applied as it is written.
      const float v0 = detail::stored(o[n][2 * r] / l[r], store.round);
      const float v1 = detail::stored(o[n][2 * r + 1] / l[r], store.round);
      *reinterpret_cast<float2*>(out + at + n * 8 + 2 * c) = make_float2(v0, v1);
      if (store.bf16 != nullptr)  // the pair as one 4-byte store, the lower column in the lower half
        *reinterpret_cast<uint32_t*>(store.bf16 + at + n * 8 + 2 * c) =
            static_cast<uint32_t>(::fp4::float_to_bf16(v0)) | (static_cast<uint32_t>(::fp4::float_to_bf16(v1)) << 16);
    }
    if (c == 0) {
      const int t = qt * kTile + warp * 16 + g + r * 8;
      lse[(static_cast<size_t>(b) * geo.n_heads + h) * geo.seq_len + t] = m[r] + logf(l[r]);
    }
  }
}

// ---- Backward ---------------------------------------------------------------------------------

// D[b, h, t] = Σ_i dout[t, h·64 + i] · out[t, h·64 + i]: one warp per (row, head), two features
// per lane, then the fixed butterfly.
__global__ void flash_dsum_kernel(const float* out, const bf16_t* dout, Geometry geo, int rows, float* dsum) {
  const size_t warp_id = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp_id >= static_cast<size_t>(rows) * geo.n_heads) return;  // whole warps
  const size_t row = warp_id / geo.n_heads;
  const int h = static_cast<int>(warp_id % geo.n_heads);
  const size_t at = row * geo.d() + static_cast<size_t>(h) * kHd + 2 * lane;
  const float2 o = *reinterpret_cast<const float2*>(out + at);
  const float p0 = ::fp4::bf16_to_float(dout[at]) * o.x;
  const float p1 = ::fp4::bf16_to_float(dout[at + 1]) * o.y;
  const float v = detail::warp_sum(p0 + p1);
  if (lane == 0) {
    const size_t b = row / geo.seq_len, t = row % geo.seq_len;
    dsum[(b * geo.n_heads + h) * geo.seq_len + t] = v;
  }
}

constexpr size_t kBackwardShared = 6 * kTileElems * sizeof(bf16_t) + 4 * kTile * sizeof(float);

// dK, dV for 64 keys; query tiles from the diagonal up, in increasing order.
__global__ void __launch_bounds__(kThreads) flash_dkdv_kernel(const bf16_t* qkv, const bf16_t* dout,
                                                              const float* lse, const float* dsum, Geometry geo,
                                                              float* dqkv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem);
  bf16_t* sV = sK + kTileElems;
  bf16_t* sQ = sV + kTileElems;         // [2] tiles
  bf16_t* sO = sQ + 2 * kTileElems;     // [2] tiles of dout
  float* sL = reinterpret_cast<float*>(sO + 2 * kTileElems);  // [2][64] lse
  float* sD = sL + 2 * kTile;                                 // [2][64] D
  const int n_tiles = geo.seq_len / kTile;
  const int kt = blockIdx.x;  // key tile 0 has the most query tiles: first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const size_t d = geo.d(), stride = 3 * d;
  const bf16_t* q_g = qkv + static_cast<size_t>(b) * geo.seq_len * stride + static_cast<size_t>(h) * kHd;
  const bf16_t* k_g = q_g + static_cast<size_t>(kt) * kTile * stride + d;
  const bf16_t* v_g = k_g + d;
  const bf16_t* o_g = dout + static_cast<size_t>(b) * geo.seq_len * d + static_cast<size_t>(h) * kHd;
  const size_t stat = (static_cast<size_t>(b) * geo.n_heads + h) * geo.seq_len;

  load_tile_async(sK, k_g, stride);
  load_tile_async(sV, v_g, stride);
  auto load_queries = [&](int qt, int buf) {
    load_tile_async(sQ + buf * kTileElems, q_g + static_cast<size_t>(qt) * kTile * stride, stride);
    load_tile_async(sO + buf * kTileElems, o_g + static_cast<size_t>(qt) * kTile * d, d);
    load_stats_async(sL + buf * kTile, lse + stat + qt * kTile);
    load_stats_async(sD + buf * kTile, dsum + stat + qt * kTile);
  };
  load_queries(kt, 0);
  cp_async_commit();

  uint32_t kf[4][4], vf[4][4];
  float dk[8][4], dv[8][4];
  zero(dk);
  zero(dv);
  for (int qt = kt; qt < n_tiles; ++qt) {
    const int buf = (qt - kt) & 1;
    if (qt + 1 < n_tiles) {
      load_queries(qt + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (qt == kt) {
      load_a_frags(kf, sK, warp * 16, lane);
      load_a_frags(vf, sV, warp * 16, lane);
    }
    const bf16_t* q_s = sQ + buf * kTileElems;
    const bf16_t* o_s = sO + buf * kTileElems;
    const float* l_s = sL + buf * kTile;
    const float* d_s = sD + buf * kTile;

    float s[8][4], dp[8][4];  // rows: this warp's 16 keys; columns: the tile's 64 queries
    zero(s);
    zero(dp);
    mma_abt(s, kf, q_s, lane);   // Sᵀ = K · Qᵀ
    mma_abt(dp, vf, o_s, lane);  // dPᵀ = V · dOᵀ
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp * 16 + g + (e / 2) * 8, query = n * 8 + 2 * c + (e % 2);
        const bool masked = qt == kt && query < key;
        const float p = masked ? 0.0f : expf(s[n][e] * kScale - l_s[query]);
        s[n][e] = p;
        dp[n][e] = p * (dp[n][e] - d_s[query]);  // dSᵀ (without the 1/8, applied to dK at the end)
      }
    mma_wb(dv, s, o_s, lane);   // dV += bf16(Pᵀ) · dO
    mma_wb(dk, dp, q_s, lane);  // dK += bf16(dSᵀ) · Q
    __syncthreads();
  }

  const size_t row0 = static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(kt) * kTile + warp * 16 + g;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float* k_row = dqkv + (row0 + r * 8) * stride + d + static_cast<size_t>(h) * kHd;
    float* v_row = k_row + d;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      *reinterpret_cast<float2*>(k_row + n * 8 + 2 * c) = make_float2(dk[n][2 * r] * kScale, dk[n][2 * r + 1] * kScale);
      *reinterpret_cast<float2*>(v_row + n * 8 + 2 * c) = make_float2(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// dQ for 64 queries; key tiles 0..diagonal in increasing order.
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(const bf16_t* qkv, const bf16_t* dout,
                                                            const float* lse, const float* dsum, Geometry geo,
                                                            float* dqkv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem);
  bf16_t* sO = sQ + kTileElems;
  bf16_t* sK = sO + kTileElems;      // [2]
  bf16_t* sV = sK + 2 * kTileElems;  // [2]
  const int n_tiles = geo.seq_len / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.x);  // longest first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const size_t d = geo.d(), stride = 3 * d;
  const bf16_t* base = qkv + static_cast<size_t>(b) * geo.seq_len * stride + static_cast<size_t>(h) * kHd;
  const bf16_t* q_g = base + static_cast<size_t>(qt) * kTile * stride;
  const bf16_t* k_g = base + d;
  const bf16_t* v_g = base + 2 * d;
  const bf16_t* o_g =
      dout + (static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(qt) * kTile) * d + static_cast<size_t>(h) * kHd;
  const size_t tile_stride = static_cast<size_t>(kTile) * stride;
  const size_t stat = (static_cast<size_t>(b) * geo.n_heads + h) * geo.seq_len + static_cast<size_t>(qt) * kTile;

  load_tile_async(sQ, q_g, stride);
  load_tile_async(sO, o_g, d);
  load_tile_async(sK, k_g, stride);
  load_tile_async(sV, v_g, stride);
  cp_async_commit();
  float lse_r[2], d_r[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse_r[r] = lse[stat + warp * 16 + g + r * 8];
    d_r[r] = dsum[stat + warp * 16 + g + r * 8];
  }

  uint32_t qf[4][4], of[4][4];
  float dq[8][4];
  zero(dq);
  for (int kt = 0; kt <= qt; ++kt) {
    const int buf = kt & 1;
    if (kt < qt) {
      load_tile_async(sK + (buf ^ 1) * kTileElems, k_g + (kt + 1) * tile_stride, stride);
      load_tile_async(sV + (buf ^ 1) * kTileElems, v_g + (kt + 1) * tile_stride, stride);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == 0) {
      load_a_frags(qf, sQ, warp * 16, lane);
      load_a_frags(of, sO, warp * 16, lane);
    }
    const bf16_t* k_s = sK + buf * kTileElems;
    const bf16_t* v_s = sV + buf * kTileElems;
    float s[8][4], dp[8][4];  // rows: this warp's 16 queries; columns: the tile's 64 keys
    zero(s);
    zero(dp);
    mma_abt(s, qf, k_s, lane);   // S = Q · Kᵀ
    mma_abt(dp, of, v_s, lane);  // dP = dO · Vᵀ
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * 16 + g + (e / 2) * 8, col = n * 8 + 2 * c + (e % 2);
        const bool masked = kt == qt && col > row;
        const float p = masked ? 0.0f : expf(s[n][e] * kScale - lse_r[e / 2]);
        dp[n][e] = p * (dp[n][e] - d_r[e / 2]);  // dS without the 1/8
      }
    mma_wb(dq, dp, k_s, lane);  // dQ += bf16(dS) · K
    __syncthreads();
  }

  const size_t row0 = static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(qt) * kTile + warp * 16 + g;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float* q_row = dqkv + (row0 + r * 8) * stride + static_cast<size_t>(h) * kHd;
#pragma unroll
    for (int n = 0; n < 8; ++n)
      *reinterpret_cast<float2*>(q_row + n * 8 + 2 * c) = make_float2(dq[n][2 * r] * kScale, dq[n][2 * r + 1] * kScale);
  }
}

// ---- Host side --------------------------------------------------------------------------------

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

Geometry check(const char* op, int batch, int seq_len, int n_heads, int head_dim) {
  detail::require(batch >= 1 && n_heads >= 1, op,
                  "needs batch and n_heads >= 1, got batch = " + std::to_string(batch) +
                      ", n_heads = " + std::to_string(n_heads));
  detail::require(head_dim == kHd, op,
                  "supports head_dim = " + std::to_string(kHd) + " only, got " + std::to_string(head_dim));
  detail::require(seq_len >= kTile && seq_len % kTile == 0, op,
                  "seq_len must be a positive multiple of " + std::to_string(kTile) + ", got " +
                      std::to_string(seq_len));
  detail::require(batch <= 65535 && n_heads <= 65535, op, "batch or n_heads above 65535");
  return Geometry{seq_len, n_heads};
}

void set_shared(const void* kernel, size_t bytes) {
  FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

void flash_attention_forward_stored(const bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim,
                                    float* out, float* lse, StoreOut out_store, cudaStream_t stream) {
  const Geometry geo = check("flash_attention_forward", batch, seq_len, n_heads, head_dim);
  detail::require(aligned(qkv, 16) && aligned(out, 8) && aligned(lse, 4) && aligned(out_store.bf16, 4),
                  "flash_attention_forward",
                  "qkv must be 16-byte aligned, out 8-byte aligned and out's bf16 copy 4-byte aligned");
  const dim3 grid(seq_len / kTile, n_heads, batch);
  flash_forward_kernel<<<grid, kThreads, 0, stream>>>(qkv, geo, out, lse, out_store);
  detail::check_launch();
}

void flash_attention_forward(const bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim, float* out,
                             float* lse, cudaStream_t stream) {
  flash_attention_forward_stored(qkv, batch, seq_len, n_heads, head_dim, out, lse, StoreOut{}, stream);
}

void flash_attention_backward(const bf16_t* qkv, const float* out, const float* lse, const bf16_t* dout, int batch,
                              int seq_len, int n_heads, int head_dim, float* dqkv, Workspace& workspace,
                              cudaStream_t stream) {
  const char* op = "flash_attention_backward";
  const Geometry geo = check(op, batch, seq_len, n_heads, head_dim);
  detail::require(aligned(qkv, 16) && aligned(dout, 16) && aligned(out, 8) && aligned(lse, 16) && aligned(dqkv, 8),
                  op, "qkv, dout and lse must be 16-byte aligned, out and dqkv 8-byte aligned");
  const size_t n_stats = static_cast<size_t>(batch) * n_heads * seq_len;
  auto* dsum = static_cast<float*>(workspace.get(n_stats * sizeof(float)));
  const int rows = batch * seq_len;

  constexpr int kDsumThreads = 256;
  const size_t warps = static_cast<size_t>(rows) * n_heads;
  const unsigned blocks = static_cast<unsigned>((warps * 32 + kDsumThreads - 1) / kDsumThreads);
  flash_dsum_kernel<<<blocks, kDsumThreads, 0, stream>>>(out, dout, geo, rows, dsum);
  detail::check_launch();

  set_shared(reinterpret_cast<const void*>(flash_dkdv_kernel), kBackwardShared);
  set_shared(reinterpret_cast<const void*>(flash_dq_kernel), kBackwardShared);
  const dim3 grid(seq_len / kTile, n_heads, batch);
  flash_dkdv_kernel<<<grid, kThreads, kBackwardShared, stream>>>(qkv, dout, lse, dsum, geo, dqkv);
  detail::check_launch();
  flash_dq_kernel<<<grid, kThreads, kBackwardShared, stream>>>(qkv, dout, lse, dsum, geo, dqkv);
  detail::check_launch();
}

}  // namespace fp4::cuda
