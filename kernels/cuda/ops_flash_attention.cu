// ops_flash_attention.cu — see flash_attention.cuh: fused causal attention on tensor cores, the
// portable family (mma.sync, any sm_80+ device) and the host side of both families: the shape
// checks, and the choice between these kernels and the wgmma ones (sm90a/) on each call. The
// element-wise parts of a tile live in flash_attention_common.cuh, shared with the wgmma kernels.
//
// Tiling. Features are always the 64 of a head; rows come in tiles of 64 (keys everywhere, queries
// in the backward) or 128 (queries in the forward). A CTA has 4 warps. Each warp owns M·16 rows of
// the CTA's own tile (queries in the forward and the dQ pass, keys in the dK/dV pass) as M mma row
// blocks, and streams the other side's 64-row tiles through shared memory, three stages deep with
// cp.async (two tiles load while one is multiplied; one barrier per tile). Causality: the CTA only
// visits the tiles on its side of the diagonal, a warp skips a tile that is entirely above its rows
// (all masked), and only tiles that cross the diagonal pay for the element-wise mask. The grid runs
// the longest CTAs first (they start while the short ones fill the tail).
//
//   forward (one CTA per 128 queries, M = 2: 32 rows a warp): for key tiles 0..diagonal:
//     S = Q·Kᵀ (fp32), online softmax (running row max m and sum l, the output rescaled by
//     2^(m_old − m_new)), O += P·V with P rounded to bf16; finally out = O / l, lse = (m + log2 l)·ln 2.
//     Two row blocks a warp let each K/V fragment read from shared memory feed two mma: half the
//     shared-memory traffic per mma of one row block, and twice the independent mma chains.
//   backward (M = 1: each warp holds S, dP and one or two accumulators). Both passes are capped at
//     168 registers (__launch_bounds__(128, 3): three CTAs, 12 warps a SM instead of 8 at 226–255
//     registers, more warps to hide the mma, ldmatrix and MUFU latencies); to fit without spilling
//     (ptxas -v: 168 and 166 registers, no spills) they re-read the A
//     fragments of their own tile (dO in the dQ pass, K and V in the dK/dV pass) from shared memory
//     every step: 4 ldmatrix.x4 each, next to the 32–64 of the step.
//     dQ pass first (one CTA per 64 queries): D_t = dout_t·out_t for its own rows (fixed order,
//     fp32), written with lse_t·log2 e to the workspace for the next pass; then for key tiles
//     0..diagonal: S = Q·Kᵀ, P = 2^(S·log2e/8 − lse·log2e), dP = dO·Vᵀ, dS = P ∘ (dP − D);
//     dQ += dS·K; dQ /= 8.
//     dK/dV pass (one CTA per 64 keys): for query tiles diagonal..last, in increasing order:
//       Sᵀ = K·Qᵀ, Pᵀ, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D); dV += Pᵀ·dO, dK += dSᵀ·Q; dK /= 8.
//     Computing Sᵀ (keys as rows) in the dK/dV pass puts Pᵀ and dSᵀ in registers in exactly the
//     layout of an mma A operand, as S (queries as rows) is for P·V in the forward.
//
// exp2. Every exponential is ex2.approx.ftz of one fma: e^(s/8 − x) = 2^(s·(log2 e/8) − x·log2 e), the
// constant rounded once to fp32. The hardware's ex2 errs by about 2 ulp; the rounding of the fma's
// argument adds |argument|·2⁻²⁴·ln 2 relative, and the constant's rounding |s|/8·2⁻²⁴ — both far below
// the score's own fp32 error (the test's n32·Σ|q·k|/8, at least 136 ulp of |s|/8); ftz only flushes
// results below 2⁻¹²⁶ to 0. A masked score is −inf and 2^−inf = +0 exactly, as expf gave.
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
#include "kernels/cuda/flash_attention_common.cuh"
#include "kernels/cuda/flash_attention_wgmma.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

namespace fp4::cuda {

namespace {

using namespace flash;

constexpr int kPitch = kHd + 8;     // shared row pitch in bf16 (see the bank note above)
constexpr int kTileElems = kTile * kPitch;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kFwdRows = 32;        // query rows per warp in the forward (M = 2 row blocks)

static_assert(kTile == kWarps * 16, "in the backward each warp owns 16 rows of the CTA's tile");
static_assert(kFwdTile == kWarps * kFwdRows, "a forward CTA's warps hold its 128 queries");

// ---- PTX wrappers -----------------------------------------------------------------------------

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


// ---- Tiles and fragments ----------------------------------------------------------------------

// Rows [0, rows) × 64 features from global (row stride `stride` elements) into a padded shared
// tile, 16 bytes per cp.async (8 a row); rows at or past `valid` are not read (left as they are).
// Not committed here.
template <int Rows>
__device__ __forceinline__ void load_tile_async(bf16_t* dst, const bf16_t* src, size_t stride, int valid = Rows) {
#pragma unroll
  for (int i = 0; i < Rows * kHd / 8 / kThreads; ++i) {
    const int chunk = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = chunk / 8, col = (chunk % 8) * 8;
    if (row < valid)
      cp_async16(shared_addr(dst + row * kPitch + col), src + static_cast<size_t>(row) * stride + col);
  }
}

// The A operand for M row blocks of 16 (rows row0 + 16m ..) × all 64 features of a shared tile: 4
// k-steps each.
template <int M>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[M][4][4], const bf16_t* tile, int row0, int lane) {
  // Lanes 0–7: rows 0–7, cols 0–7 (a0); 8–15: rows 8–15 (a1); 16–23: rows 0–7, cols 8–15 (a2); 24–31: a3.
  const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8, col = (lane >> 4) * 8;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) ldsm_x4(a[m][kk], shared_addr(tile + (row + 16 * m) * kPitch + kk * 16 + col));
}

// acc[m][n] (row block m; n = 0..7: columns 8n..8n+7 of a 16×64 result) += A_m · tileᵀ, where the
// shared tile's rows are the 64 result columns and its features the reduction (S = Q·Kᵀ,
// dP = dO·Vᵀ and transposes). Each B fragment serves all M row blocks.
template <int M>
__device__ __forceinline__ void mma_abt(float (&acc)[M][8][4], const uint32_t (&a)[M][4][4], const bf16_t* tile,
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
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma(acc[m][2 * np], a[m][kk], b[0], b[1]);
        mma(acc[m][2 * np + 1], a[m][kk], b[2], b[3]);
      }
    }
  }
}

// acc[m][n] (features 8n..8n+7) += W_m · tile, W_m a 16×64 matrix in registers as 8
// accumulator-layout column tiles (w[m][n][0..3], fp32, rounded here to bf16), the shared tile's
// rows the reduction (keys for P·V, queries for Pᵀ·dO) and its features the result columns: loaded
// with .trans. Each B fragment serves all M row blocks.
template <int M>
__device__ __forceinline__ void mma_wb(float (&acc)[M][8][4], const float (&w)[M][8][4], const bf16_t* tile,
                                       int lane) {
  // Per (k-step kk over tile rows, pair of feature tiles dp): lanes 0–7 give rows 16kk..+7 at
  // features 16dp..+7 (b0 of feature tile 2dp), 8–15 rows 16kk+8..+15 (b1), 16–31 the same at
  // features 16dp+8..+15 (b0, b1 of feature tile 2dp+1).
  const int row = (lane & 7) + ((lane >> 3) & 1) * 8, col = (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      a_operand(a[m], w[m], kk);
    }
#pragma unroll
    for (int dp = 0; dp < 4; ++dp) {
      uint32_t b[4];
      ldsm_x4_trans(b, shared_addr(tile + (kk * 16 + row) * kPitch + dp * 16 + col));
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma(acc[m][2 * dp], a[m], b[0], b[1]);
        mma(acc[m][2 * dp + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// ---- Forward ----------------------------------------------------------------------------------

// Shared memory: the 128-query tile, then kStages stages of (K tile, V tile).
constexpr size_t kForwardShared = (static_cast<size_t>(kFwdTile) * kPitch + kStages * 2 * kTileElems) * sizeof(bf16_t);

// 247 registers (2 CTAs, 8 warps a SM, as FlashAttention-2's forward): capping it at 168 for a third
// CTA spills even with Q re-read every step.
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(const bf16_t* qkv, Geometry geo, float* out,
                                                                 float* lse, StoreOut store) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem);
  bf16_t* sKV = sQ + kFwdTile * kPitch;  // stage s: K at sKV + 2s·kTileElems, V right after
  const int seq = geo.seq_len;
  const int n_qtiles = (seq + kFwdTile - 1) / kFwdTile;
  const int qt = n_qtiles - 1 - static_cast<int>(blockIdx.x);  // longest first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kFwdTile;                 // the CTA's first query
  const int n_valid = min(kFwdTile, seq - q0);  // 128, or 64 in a last tile when seq % 128 = 64
  const int n_kt = (q0 + n_valid) / kTile;      // key tiles 0..n_kt−1 reach the last valid query
  const int wq0 = q0 + warp * kFwdRows;         // this warp's first query
  const bool warp_valid = warp * kFwdRows < n_valid;  // whole warps: n_valid is a multiple of 64
  const size_t d = geo.d(), stride = 3 * d;
  const bf16_t* q_g = qkv + (static_cast<size_t>(b) * seq + q0) * stride + static_cast<size_t>(h) * kHd;
  const bf16_t* k_g = qkv + static_cast<size_t>(b) * seq * stride + d + static_cast<size_t>(h) * kHd;
  const bf16_t* v_g = k_g + d;
  const size_t tile_stride = static_cast<size_t>(kTile) * stride;
  auto load_kv = [&](int kt) {
    bf16_t* st = sKV + (kt % kStages) * 2 * kTileElems;
    load_tile_async<kTile>(st, k_g + kt * tile_stride, stride);
    load_tile_async<kTile>(st + kTileElems, v_g + kt * tile_stride, stride);
  };

  // Groups: Q with key tile 0, then one group per key tile (empty past the last), so that before
  // key tile kt's wait exactly groups 0..kt+1 are committed and wait_group 1 completes tile kt.
  load_tile_async<kFwdTile>(sQ, q_g, stride, n_valid);
  load_kv(0);
  cp_async_commit();
  if (n_kt > 1) load_kv(1);
  cp_async_commit();

  uint32_t qf[2][4][4];
  float o[2][8][4];
  zero(o);
  // Per row block m and half r (rows g and g + 8): running max of the scores in log2 units
  // (s·log2e/8) and this lane's partial sum of 2^(s·log2e/8 − max) over its own columns.
  float m_run[2][2], l_run[2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_run[m][r] = -INFINITY;
      l_run[m][r] = 0.0f;
    }
  for (int kt = 0; kt < n_kt; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt visible to all; every warp is done with tile kt − 1's stage
    if (kt + kStages - 1 < n_kt) load_kv(kt + kStages - 1);  // into the stage tile kt − 1 used
    cp_async_commit();
    const int k0 = kt * kTile;
    // Nothing to do when every key of the tile is after every query of the warp (k0 is a multiple
    // of 64 and wq0 of 32, so a tile the warp does visit has k0 ≤ wq0: each of its rows keeps at
    // least key k0, and the running max stays finite).
    if (!warp_valid || k0 > wq0) continue;
    if (kt == 0) load_a_frags<2>(qf, sQ, warp * kFwdRows, lane);
    const bf16_t* sK = sKV + (kt % kStages) * 2 * kTileElems;
    const bf16_t* sV = sK + kTileElems;

    float s[2][8][4];
    zero(s);
    mma_abt<2>(s, qf, sK, lane);
    // The tile crosses the warp's diagonal: key > query → −inf.
    if (k0 + kTile - 1 > wq0) mask_above_diagonal<2>(s, k0 - wq0, lane);
    online_softmax<2>(s, o, m_run, l_run);

    mma_wb<2>(o, s, sV, lane);  // O += bf16(P) · V
  }
  if (!warp_valid) return;  // no barrier follows
  write_forward_rows<2>(o, m_run, l_run, geo, b, h, wq0, lane, out, lse, store);
}

// ---- Backward ---------------------------------------------------------------------------------

// dQ for 64 queries (and D, lse·log2e of those rows for the dK/dV pass); key tiles 0..diagonal in
// increasing order. Shared memory: the Q and dO tiles, then kStages stages of (K tile, V tile).
constexpr size_t kDqShared = (2 + kStages * 2) * static_cast<size_t>(kTileElems) * sizeof(bf16_t);

template <class O, class G>
__global__ void __launch_bounds__(kThreads, 3) flash_dq_kernel(const bf16_t* qkv, const O* out, const float* lse,
                                                            const bf16_t* dout, Geometry geo, G* dqkv,
                                                            float* dsum, float* lse2) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem);
  bf16_t* sO = sQ + kTileElems;
  bf16_t* sKV = sO + kTileElems;  // stage s: K at sKV + 2s·kTileElems, V right after
  const int n_tiles = geo.seq_len / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.x);  // longest first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t d = geo.d(), stride = 3 * d;
  const bf16_t* base = qkv + static_cast<size_t>(b) * geo.seq_len * stride + static_cast<size_t>(h) * kHd;
  const bf16_t* q_g = base + static_cast<size_t>(qt) * kTile * stride;
  const bf16_t* k_g = base + d;
  const bf16_t* v_g = base + 2 * d;
  const size_t row_q0 = static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(qt) * kTile;  // first row
  const bf16_t* o_g = dout + row_q0 * d + static_cast<size_t>(h) * kHd;
  const size_t tile_stride = static_cast<size_t>(kTile) * stride;
  const size_t stat = (static_cast<size_t>(b) * geo.n_heads + h) * geo.seq_len + static_cast<size_t>(qt) * kTile;
  auto load_kv = [&](int kt) {
    bf16_t* st = sKV + (kt % kStages) * 2 * kTileElems;
    load_tile_async<kTile>(st, k_g + kt * tile_stride, stride);
    load_tile_async<kTile>(st + kTileElems, v_g + kt * tile_stride, stride);
  };

  // Groups as in the forward: Q, dO and key tile 0, then one per key tile.
  load_tile_async<kTile>(sQ, q_g, stride);
  load_tile_async<kTile>(sO, o_g, d);
  load_kv(0);
  cp_async_commit();
  if (qt >= 1) load_kv(1);
  cp_async_commit();

  // While those load: D and lse·log2e of this lane's two rows.
  float lse2_r[2], d_r[2];
  row_statistics(out, lse, dout, row_q0, stat, d, h, warp, lane, d_r, lse2_r, dsum, lse2);

  uint32_t qf[1][4][4], of[1][4][4];
  float dq[1][8][4];
  zero(dq);
  for (int kt = 0; kt <= qt; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt visible to all; every warp is done with tile kt − 1's stage
    if (kt + kStages - 1 <= qt) load_kv(kt + kStages - 1);
    cp_async_commit();
    // Q's fragments stay in registers; dO's are re-read every step (the 168-register cap, above).
    if (kt == 0) load_a_frags<1>(qf, sQ, warp * 16, lane);
    load_a_frags<1>(of, sO, warp * 16, lane);
    const bf16_t* k_s = sKV + (kt % kStages) * 2 * kTileElems;
    const bf16_t* v_s = k_s + kTileElems;
    float s[1][8][4], dp[1][8][4];  // rows: this warp's 16 queries; columns: the tile's 64 keys
    zero(s);
    zero(dp);
    mma_abt<1>(s, qf, k_s, lane);   // S = Q · Kᵀ
    mma_abt<1>(dp, of, v_s, lane);  // dP = dO · Vᵀ
    if (kt == qt) mask_above_diagonal<1>(s, -16 * warp, lane);  // diagonal tile: key > query → −inf
    query_probabilities(s, lse2_r);
    query_dscores(s, dp, d_r);
    mma_wb<1>(dq, dp, k_s, lane);  // dQ += bf16(dS) · K
  }

  store_rows(dqkv + (row_q0 + warp * 16) * stride + static_cast<size_t>(h) * kHd, stride, dq, kScale, lane);
}

// dK, dV for 64 keys; query tiles from the diagonal up, in increasing order. lse2 and dsum are
// the dQ pass's (lse·log2e and D). Shared memory: the K and V tiles, then kStages stages of
// (Q tile, dO tile, 64 lse·log2e, 64 D).
constexpr size_t kDkdvStage = 2 * static_cast<size_t>(kTileElems) * sizeof(bf16_t) + 2 * kTile * sizeof(float);
constexpr size_t kDkdvShared = 2 * static_cast<size_t>(kTileElems) * sizeof(bf16_t) + kStages * kDkdvStage;
static_assert(kDkdvStage % 16 == 0, "cp.async needs 16-byte aligned stages");

template <class G>
__global__ void __launch_bounds__(kThreads, 3) flash_dkdv_kernel(const bf16_t* qkv, const bf16_t* dout,
                                                              const float* lse2, const float* dsum, Geometry geo,
                                                              G* dqkv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem);
  bf16_t* sV = sK + kTileElems;
  unsigned char* stages = smem + 2 * kTileElems * sizeof(bf16_t);
  const int n_tiles = geo.seq_len / kTile;
  const int kt = blockIdx.x;  // key tile 0 has the most query tiles: first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t d = geo.d(), stride = 3 * d;
  const bf16_t* q_g = qkv + static_cast<size_t>(b) * geo.seq_len * stride + static_cast<size_t>(h) * kHd;
  const bf16_t* k_g = q_g + static_cast<size_t>(kt) * kTile * stride + d;
  const bf16_t* v_g = k_g + d;
  const bf16_t* o_g = dout + static_cast<size_t>(b) * geo.seq_len * d + static_cast<size_t>(h) * kHd;
  const size_t stat = (static_cast<size_t>(b) * geo.n_heads + h) * geo.seq_len;
  auto stage_q = [&](int qt) { return reinterpret_cast<bf16_t*>(stages + ((qt - kt) % kStages) * kDkdvStage); };
  auto load_queries = [&](int qt) {
    bf16_t* sq = stage_q(qt);
    float* sl = reinterpret_cast<float*>(sq + 2 * kTileElems);
    load_tile_async<kTile>(sq, q_g + static_cast<size_t>(qt) * kTile * stride, stride);
    load_tile_async<kTile>(sq + kTileElems, o_g + static_cast<size_t>(qt) * kTile * d, d);
    load_stats_async(sl, lse2 + stat + qt * kTile);
    load_stats_async(sl + kTile, dsum + stat + qt * kTile);
  };

  // Groups: K, V with query tile kt, then one per query tile (empty past the last).
  load_tile_async<kTile>(sK, k_g, stride);
  load_tile_async<kTile>(sV, v_g, stride);
  load_queries(kt);
  cp_async_commit();
  if (kt + 1 < n_tiles) load_queries(kt + 1);
  cp_async_commit();

  uint32_t kf[1][4][4], vf[1][4][4];
  float dk[1][8][4], dv[1][8][4];
  zero(dk);
  zero(dv);
  for (int qt = kt; qt < n_tiles; ++qt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile qt visible to all; every warp is done with tile qt − 1's stage
    if (qt + kStages - 1 < n_tiles) load_queries(qt + kStages - 1);
    cp_async_commit();
    // Re-read every step rather than held across the loop: the 168-register cap (file comment).
    load_a_frags<1>(kf, sK, warp * 16, lane);
    load_a_frags<1>(vf, sV, warp * 16, lane);
    const bf16_t* q_s = stage_q(qt);
    const bf16_t* o_s = q_s + kTileElems;
    const float* l_s = reinterpret_cast<const float*>(o_s + kTileElems);
    const float* d_s = l_s + kTile;

    float s[1][8][4], dp[1][8][4];  // rows: this warp's 16 keys; columns: the tile's 64 queries
    zero(s);
    zero(dp);
    mma_abt<1>(s, kf, q_s, lane);   // Sᵀ = K · Qᵀ
    mma_abt<1>(dp, vf, o_s, lane);  // dPᵀ = V · dOᵀ
    if (qt == kt) mask_below_diagonal(s, warp, lane);  // diagonal tile: query < key → −inf
    key_probabilities(s, l_s, lane);
    key_dscores(s, dp, d_s, lane);
    mma_wb<1>(dv, s, o_s, lane);   // dV += bf16(Pᵀ) · dO
    mma_wb<1>(dk, dp, q_s, lane);  // dK += bf16(dSᵀ) · Q
  }

  G* k_rows = dqkv + (static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(kt) * kTile + warp * 16) * stride + d +
             static_cast<size_t>(h) * kHd;
  store_rows(k_rows, stride, dk, kScale, lane);
  store_rows(k_rows + d, stride, dv, 1.0f, lane);
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

std::atomic<FlashKernels> g_kernels{FlashKernels::automatic};

[[maybe_unused]] bool use_wgmma() { return flash_kernels_in_use() == FlashKernels::wgmma; }

}  // namespace

bool flash_wgmma_available() {
#if FP4LAB_HAVE_WGMMA
  // sm_90a code runs on compute capability 9.0 exactly.
  int device = 0, major = 0, minor = 0;
  FP4_CUDA_CHECK(cudaGetDevice(&device));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

void set_flash_kernels(FlashKernels kernels) {
  detail::require(kernels != FlashKernels::wgmma || flash_wgmma_available(), "set_flash_kernels",
                  "the wgmma kernels need a build for sm_90 and a device of compute capability 9.0");
  g_kernels.store(kernels);
}

FlashKernels flash_kernels_in_use() {
  const FlashKernels k = g_kernels.load();
  if (k != FlashKernels::automatic) return k;
  return flash_wgmma_available() ? FlashKernels::wgmma : FlashKernels::mma_sync;
}

void flash_attention_forward_stored(const bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim,
                                    float* out, float* lse, StoreOut out_store, cudaStream_t stream) {
  const Geometry geo = check("flash_attention_forward", batch, seq_len, n_heads, head_dim);
  detail::require(out != nullptr || out_store.bf16 != nullptr, "flash_attention_forward",
                  "no output: out and its bf16 copy are null");
  detail::require(aligned(qkv, 16) && aligned(out, 8) && aligned(lse, 4) && aligned(out_store.bf16, 4),
                  "flash_attention_forward",
                  "qkv must be 16-byte aligned, out 8-byte aligned and out's bf16 copy 4-byte aligned");
#if FP4LAB_HAVE_WGMMA
  if (use_wgmma()) {
    wgmma_forward(qkv, batch, geo, out, lse, out_store, stream);
    return;
  }
#endif
  set_shared(reinterpret_cast<const void*>(flash_forward_kernel), kForwardShared);
  const dim3 grid((seq_len + kFwdTile - 1) / kFwdTile, n_heads, batch);
  flash_forward_kernel<<<grid, kThreads, kForwardShared, stream>>>(qkv, geo, out, lse, out_store);
  detail::check_launch();
}

void flash_attention_forward(const bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim, float* out,
                             float* lse, cudaStream_t stream) {
  flash_attention_forward_stored(qkv, batch, seq_len, n_heads, head_dim, out, lse, StoreOut{}, stream);
}

namespace {

template <class O, class G>
void launch_backward(const bf16_t* qkv, const O* out, const float* lse, const bf16_t* dout, int batch, int seq_len,
                     int n_heads, int head_dim, G* dqkv, Workspace& workspace, cudaStream_t stream) {
  const char* op = "flash_attention_backward";
  const Geometry geo = check(op, batch, seq_len, n_heads, head_dim);
  detail::require(out != nullptr, op, "a null out");
  detail::require(aligned(qkv, 16) && aligned(dout, 16) && aligned(out, 2 * sizeof(O)) && aligned(lse, 4) &&
                      aligned(dqkv, 2 * sizeof(G)),
                  op, "qkv and dout must be 16-byte aligned, out and dqkv aligned for a pair of their elements");
  // The workspace holds D (B·H·T floats) then lse·log2e (as many), both written by the dQ pass for
  // the dK/dV pass; each starts at a multiple of 64 floats, as cp.async of a tile's 64 needs.
  const size_t n_stats = static_cast<size_t>(batch) * n_heads * seq_len;
  auto* dsum = static_cast<float*>(workspace.get(2 * n_stats * sizeof(float)));
  float* lse2 = dsum + n_stats;

#if FP4LAB_HAVE_WGMMA
  if (use_wgmma()) {
    wgmma_backward(qkv, out, lse, dout, batch, geo, dqkv, dsum, lse2, stream);
    return;
  }
#endif
  set_shared(reinterpret_cast<const void*>(flash_dq_kernel<O, G>), kDqShared);
  set_shared(reinterpret_cast<const void*>(flash_dkdv_kernel<G>), kDkdvShared);
  const dim3 grid(seq_len / kTile, n_heads, batch);
  flash_dq_kernel<O, G><<<grid, kThreads, kDqShared, stream>>>(qkv, out, lse, dout, geo, dqkv, dsum, lse2);
  detail::check_launch();
  flash_dkdv_kernel<G><<<grid, kThreads, kDkdvShared, stream>>>(qkv, dout, lse2, dsum, geo, dqkv);
  detail::check_launch();
}

}  // namespace

void flash_attention_backward(const bf16_t* qkv, const float* out, const float* lse, const bf16_t* dout, int batch,
                              int seq_len, int n_heads, int head_dim, float* dqkv, Workspace& workspace,
                              cudaStream_t stream) {
  launch_backward(qkv, out, lse, dout, batch, seq_len, n_heads, head_dim, dqkv, workspace, stream);
}

void flash_attention_backward(const bf16_t* qkv, const bf16_t* out, const float* lse, const bf16_t* dout, int batch,
                              int seq_len, int n_heads, int head_dim, float* dqkv, Workspace& workspace,
                              cudaStream_t stream) {
  launch_backward(qkv, out, lse, dout, batch, seq_len, n_heads, head_dim, dqkv, workspace, stream);
}

void flash_attention_backward(const bf16_t* qkv, const bf16_t* out, const float* lse, const bf16_t* dout, int batch,
                              int seq_len, int n_heads, int head_dim, bf16_t* dqkv, Workspace& workspace,
                              cudaStream_t stream) {
  launch_backward(qkv, out, lse, dout, batch, seq_len, n_heads, head_dim, dqkv, workspace, stream);
}

}  // namespace fp4::cuda
