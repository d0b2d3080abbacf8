// ops_flash_attention_wgmma.cu — the fused causal attention of flash_attention.cuh on Hopper's
// warpgroup tensor-core instructions (wgmma.mma_async; kernels/cuda/wgmma.cuh). Built for sm_90a
// only (kernels/CMakeLists.txt); ops_flash_attention.cu calls it on sm_90 devices and keeps the
// mma.sync kernels for every other device and as the reference the tests compare it with.
//
// Same algorithm, tiles, order of every sum and element-wise code (flash_attention_common.cuh) as
// the mma.sync kernels, hence the same bits: a wgmma m64n64k16 step rounds each output element as
// the four mma.sync m16n8k16 steps covering it do (checked bit for bit by the [gpu] tests). What
// changes is who feeds the tensor cores. mma.sync needs every operand in registers, so each warp
// copies its 16-row slice of A and every 8-column slice of B out of shared memory with ldmatrix
// (about one ldmatrix.x4 per two mma); wgmma reads both straight from shared memory, for the 64
// rows of a warpgroup at once, with P and dS (computed in registers) as a register A operand. The
// tiles are stored unpadded in the 128-byte swizzled layout the instruction reads (wgmma.cuh).
//
//   forward: 2 warpgroups a CTA, 64 queries each (128 a CTA, as the mma.sync forward); per key
//     tile of 64: S = Q·Kᵀ (4 steps, both operands from shared memory), the online softmax,
//     O += bf16(P)·V (4 steps, P from registers, V read transposed).
//   backward: 1 warpgroup a CTA, the 64 rows of its tile, the same two passes (dQ; dK and dV) as
//     the mma.sync kernels.
// Each product is issued, committed and waited for before its result is used (no overlap of a
// tile's products with its softmax); three CTAs per SM in the backward and two in the forward
// overlap one another's products and element-wise work instead.
#include "kernels/cuda/flash_attention_wgmma.cuh"

#include "kernels/cuda/flash_attention_common.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace fp4::cuda::flash {

namespace {

constexpr uint32_t kTileBytes = kTile * wgmma::kRowBytes;  // 64 rows of 64 bf16: 8 KiB
constexpr int kWarpgroup = 128;
constexpr uint32_t kAlignSlack = wgmma::kAtomBytes;  // the dynamic shared base rounded up to 1 KiB

// Rows [0, rows) × 64 features from global (row stride `stride` elements) into the swizzled tile at
// shared address `dst`, 16 bytes per cp.async, by `Threads` threads; rows at or past `valid` are not
// read. Not committed here.
template <int Rows, int Threads>
__device__ __forceinline__ void load_swizzled_async(uint32_t dst, const bf16_t* src, size_t stride, int valid = Rows) {
#pragma unroll
  for (int i = 0; i < Rows * 8 / Threads; ++i) {
    const int chunk = static_cast<int>(threadIdx.x) + i * Threads;
    const int row = chunk / 8, col = chunk % 8;
    if (row < valid) cp_async16(dst + wgmma::swizzled_offset(row, col), src + static_cast<size_t>(row) * stride + col * 8);
  }
}

// The 1024-byte aligned start of the dynamic shared memory (allocated kAlignSlack bytes larger).
__device__ __forceinline__ uint32_t aligned_shared_base(const void* smem) {
  return (shared_addr(smem) + kAlignSlack - 1) & ~(kAlignSlack - 1);
}

#if FP4_WGMMA_AVAILABLE

// acc = A·Bᵀ over the 64 features, A and B K-major swizzled tiles (A's 64 rows the result rows,
// B's the result columns); acc is zeroed first and accumulated into, as the mma.sync kernels'
// zero-then-add. Issued, not waited for.
__device__ __forceinline__ void issue_abt(float (&acc)[8][4], uint32_t a_tile, uint32_t b_tile) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma::mma_ss(acc, wgmma::kmajor(a_tile, kk), wgmma::kmajor(b_tile, kk), true);
}

// The A operand of bf16(W)·tile, W a 16×64 accumulator of this warp (the fragment layout): its four
// k-steps, packed before the products are issued (so one wgmma.fence covers them all).
__device__ __forceinline__ void pack_a(uint32_t (&a)[4][4], const float (&w)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) a_operand(a[kk], w, kk);
}

// acc += A·tile over the tile's 64 rows, A from pack_a, the tile read MN-major. Issued, not waited
// for: `a` must stay untouched until then (hold).
__device__ __forceinline__ void issue_wb(float (&acc)[8][4], const uint32_t (&a)[4][4], uint32_t tile) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma::mma_rs(acc, a[kk], wgmma::mnmajor(tile, kk));
}

// Keeps a register A operand alive (unmodified, unreused) until here: the tensor cores read it
// asynchronously, up to the wait.
__device__ __forceinline__ void hold(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[kk][i])::"memory");
}

// Ends a batch of products: commit, wait, and keep the compiler's reads of the results below.
__device__ __forceinline__ void finish(float (&x)[8][4]) {
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(x);
}
__device__ __forceinline__ void finish(float (&x)[8][4], float (&y)[8][4]) {
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(x);
  wgmma::fence_operands(y);
}

#endif  // FP4_WGMMA_AVAILABLE

// ---- Forward ----------------------------------------------------------------------------------

// Four stages: tile kt − 1 (its V still read by the P·V in flight), kt, and two loading.
constexpr int kFwdStages = 4;
// The 64-query tile, then kFwdStages stages of (K tile, V tile): 73 KiB, three CTAs a SM.
constexpr size_t kForwardShared = kAlignSlack + kTileBytes + kFwdStages * 2 * kTileBytes;

// One warpgroup a CTA (64 queries): every branch around a wgmma then depends on the CTA alone,
// which ptxas needs to keep the products asynchronous (with two warpgroups a CTA, branching on the
// warpgroup index serializes them).
__global__ void __launch_bounds__(kWarpgroup, 3) flash_forward_wgmma_kernel(const bf16_t* qkv, Geometry geo, float* out,
                                                                float* lse, StoreOut store) {
#if FP4_WGMMA_AVAILABLE
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sQ = aligned_shared_base(smem);
  const uint32_t sKV = sQ + kTileBytes;  // stage s: K at sKV + 2s·kTileBytes, V right after
  const int seq = geo.seq_len;
  const int qt = seq / kTile - 1 - static_cast<int>(blockIdx.x);  // longest first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kTile;  // the CTA's first query
  // Key tiles 0..qt, the last (the diagonal) with a mask: the tiles each of these rows visits in
  // the mma.sync forward.
  const size_t d = geo.d(), stride = 3 * d;
  const bf16_t* q_g = qkv + (static_cast<size_t>(b) * seq + q0) * stride + static_cast<size_t>(h) * kHd;
  const bf16_t* k_g = qkv + static_cast<size_t>(b) * seq * stride + d + static_cast<size_t>(h) * kHd;
  const bf16_t* v_g = k_g + d;
  const size_t tile_stride = static_cast<size_t>(kTile) * stride;
  auto stage = [&](int kt) { return sKV + (kt % kFwdStages) * 2 * kTileBytes; };
  auto load_kv = [&](int kt) {
    load_swizzled_async<kTile, kWarpgroup>(stage(kt), k_g + kt * tile_stride, stride);
    load_swizzled_async<kTile, kWarpgroup>(stage(kt) + kTileBytes, v_g + kt * tile_stride, stride);
  };

  // Groups: Q with key tile 0, then one group per key tile (empty past the last), so that before
  // key tile kt's wait exactly groups 0..kt+1 are committed and wait_group 1 completes tile kt.
  load_swizzled_async<kTile, kWarpgroup>(sQ, q_g, stride);
  load_kv(0);
  cp_async_commit();
  if (qt >= 1) load_kv(1);
  cp_async_commit();

  // The products of tile kt are S_kt = Q·K_ktᵀ and O += bf16(P_kt)·V_kt. The second is issued
  // together with S_{kt+1}, so that the tensor cores accumulate it while this warpgroup computes
  // P_{kt+1}; O's rescaling by tile kt+1's max waits for it. The operations on O are those of the
  // unpipelined order (O·corr_kt, then + P_kt·V_kt, then ·corr_kt+1 …): the same bits.
  float o[1][8][4];
  zero(o);
  float m_run[1][2] = {{-INFINITY, -INFINITY}}, l_run[1][2] = {{0.0f, 0.0f}};
  uint32_t a[4][4];  // bf16(P) of the previous tile, the A operand of its P·V
  for (int kt = 0; kt <= qt; ++kt) {
    cp_async_wait<1>();
    wgmma::fence_async_shared();  // this thread's cp.async writes, visible to the tensor cores
    __syncthreads();  // tile kt visible to all; every warp is done with tile kt − 2's stage
    if (kt + 2 <= qt) load_kv(kt + 2);  // into the stage tile kt − 2 used
    cp_async_commit();

    float s[1][8][4];
    zero(s);
    wgmma::fence();
    issue_abt(s[0], sQ, stage(kt));  // S = Q · Kᵀ
    wgmma::commit();
    if (kt > 0) {
      wgmma::fence();
      issue_wb(o[0], a, stage(kt - 1) + kTileBytes);  // O += bf16(P_{kt−1}) · V_{kt−1}
    }
    wgmma::commit();   // an empty group on the first tile: the waits below are then the same for all
    wgmma::wait<1>();  // S done; the P·V may still run
    wgmma::fence_operands(s[0]);
    if (kt == qt) mask_above_diagonal<1>(s, -16 * warp, lane);
    float corr[1][2];
    softmax_scores<1>(s, m_run, l_run, corr);
    wgmma::wait<0>();
    wgmma::fence_operands(o[0]);
    hold(a);
    rescale<1>(o, corr);
    pack_a(a, s[0]);
  }
  // The last tile's P·V: nothing left to overlap it with.
  wgmma::fence();
  issue_wb(o[0], a, stage(qt) + kTileBytes);
  finish(o[0]);
  hold(a);
  write_forward_rows<1>(o, m_run, l_run, geo, b, h, q0 + 16 * warp, lane, out, lse, store);
#else
  (void)qkv, (void)geo, (void)out, (void)lse, (void)store;
  __trap();  // not built for sm_90a: never launched (ops_flash_attention.cu checks the device)
#endif
}

// ---- Backward ---------------------------------------------------------------------------------

// dQ for 64 queries (and D, lse·log2e of those rows); key tiles 0..diagonal in increasing order.
// Shared memory: the Q and dO tiles, then kStages stages of (K tile, V tile).
constexpr size_t kDqShared = kAlignSlack + (2 + kStages * 2) * static_cast<size_t>(kTileBytes);

template <class O, class G>
__global__ void __launch_bounds__(kWarpgroup, 3) flash_dq_wgmma_kernel(const bf16_t* qkv, const O* out, const float* lse,
                                                           const bf16_t* dout, Geometry geo, G* dqkv, float* dsum,
                                                           float* lse2) {
#if FP4_WGMMA_AVAILABLE
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sQ = aligned_shared_base(smem);
  const uint32_t sO = sQ + kTileBytes;
  const uint32_t sKV = sO + kTileBytes;  // stage s: K at sKV + 2s·kTileBytes, V right after
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
    const uint32_t st = sKV + (kt % kStages) * 2 * kTileBytes;
    load_swizzled_async<kTile, kWarpgroup>(st, k_g + kt * tile_stride, stride);
    load_swizzled_async<kTile, kWarpgroup>(st + kTileBytes, v_g + kt * tile_stride, stride);
  };

  // Stages: tile kt − 1 (its K still read by the dQ product in flight), kt, and kt + 1 loading, one
  // tile ahead. Groups: Q, dO and key tile 0, then one per key tile (empty past the last), so that
  // at tile kt's wait every committed group is needed: wait_group 0.
  load_swizzled_async<kTile, kWarpgroup>(sQ, q_g, stride);
  load_swizzled_async<kTile, kWarpgroup>(sO, o_g, d);
  load_kv(0);
  cp_async_commit();

  // While those load: D and lse·log2e of this lane's two rows.
  float lse2_r[2], d_r[2];
  row_statistics(out, lse, dout, row_q0, stat, d, h, warp, lane, d_r, lse2_r, dsum, lse2);

  // As in the forward, dQ += bf16(dS_kt)·K_kt is issued with the next tile's S and dP and
  // accumulates while this warpgroup computes that tile's dS; the sum's order is unchanged.
  float dq[1][8][4];
  zero(dq);
  uint32_t a[4][4];  // bf16(dS) of the previous tile
  for (int kt = 0; kt <= qt; ++kt) {
    cp_async_wait<0>();
    wgmma::fence_async_shared();
    __syncthreads();  // tile kt visible to all; every warp is done with tile kt − 2's stage
    if (kt + 1 <= qt) load_kv(kt + 1);  // into the stage tile kt − 2 used
    cp_async_commit();
    const uint32_t sK = sKV + (kt % kStages) * 2 * kTileBytes, sV = sK + kTileBytes;
    float s[1][8][4], dp[1][8][4];  // rows: the 64 queries; columns: the tile's 64 keys
    zero(s);
    zero(dp);
    // Three groups, waited for one at a time: P is computed while dP and the previous dQ product
    // run, dS while the dQ product does.
    wgmma::fence();
    issue_abt(s[0], sQ, sK);  // S = Q · Kᵀ
    wgmma::commit();
    issue_abt(dp[0], sO, sV);  // dP = dO · Vᵀ
    wgmma::commit();
    if (kt > 0) {
      wgmma::fence();
      issue_wb(dq[0], a, sKV + ((kt - 1) % kStages) * 2 * kTileBytes);  // dQ += bf16(dS_{kt−1}) · K_{kt−1}
    }
    wgmma::commit();  // empty on the first tile
    wgmma::wait<2>();
    wgmma::fence_operands(s[0]);
    if (kt == qt) mask_above_diagonal<1>(s, -16 * warp, lane);  // diagonal tile: key > query → −inf
    query_probabilities(s, lse2_r);
    wgmma::wait<1>();
    wgmma::fence_operands(dp[0]);
    query_dscores(s, dp, d_r);
    wgmma::wait<0>();
    wgmma::fence_operands(dq[0]);
    hold(a);
    pack_a(a, dp[0]);
    if (kt == qt) {
      wgmma::fence();
      issue_wb(dq[0], a, sK);
      finish(dq[0]);
      hold(a);
    }
  }
  store_rows(dqkv + (row_q0 + warp * 16) * stride + static_cast<size_t>(h) * kHd, stride, dq, kScale, lane);
#else
  (void)qkv, (void)out, (void)lse, (void)dout, (void)geo, (void)dqkv, (void)dsum, (void)lse2;
  __trap();
#endif
}

// dK, dV for 64 keys; query tiles from the diagonal up, in increasing order. Shared memory: the K
// and V tiles, then kStages stages of (Q tile, dO tile, 64 lse·log2e, 64 D), each stage padded to
// a multiple of 1 KiB so that every tile stays 1024-byte aligned.
constexpr uint32_t kDkdvStats = 2 * kTile * sizeof(float);
constexpr uint32_t kDkdvStage = (2 * kTileBytes + kDkdvStats + wgmma::kAtomBytes - 1) / wgmma::kAtomBytes * wgmma::kAtomBytes;
constexpr size_t kDkdvShared = kAlignSlack + 2 * kTileBytes + kStages * kDkdvStage;

template <class G>
__global__ void __launch_bounds__(kWarpgroup, 3) flash_dkdv_wgmma_kernel(const bf16_t* qkv, const bf16_t* dout,
                                                             const float* lse2, const float* dsum, Geometry geo,
                                                             G* dqkv) {
#if FP4_WGMMA_AVAILABLE
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sK = aligned_shared_base(smem);
  const uint32_t sV = sK + kTileBytes;
  const uint32_t stages = sK + 2 * kTileBytes;
  // The stats of a stage through a generic pointer (read by ordinary loads).
  unsigned char* const smem_at_sK = smem + (sK - shared_addr(smem));
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
  auto stage_of = [&](int qt) { return static_cast<uint32_t>(((qt - kt) % kStages) * kDkdvStage); };
  auto stats_of = [&](int qt) {
    return reinterpret_cast<float*>(smem_at_sK + 2 * kTileBytes + stage_of(qt) + 2 * kTileBytes);
  };
  auto load_queries = [&](int qt) {
    const uint32_t sq = stages + stage_of(qt);
    float* sl = stats_of(qt);
    load_swizzled_async<kTile, kWarpgroup>(sq, q_g + static_cast<size_t>(qt) * kTile * stride, stride);
    load_swizzled_async<kTile, kWarpgroup>(sq + kTileBytes, o_g + static_cast<size_t>(qt) * kTile * d, d);
    load_stats_async(sl, lse2 + stat + qt * kTile);
    load_stats_async(sl + kTile, dsum + stat + qt * kTile);
  };

  // Groups: K, V with query tile kt, then one per query tile (empty past the last).
  load_swizzled_async<kTile, kWarpgroup>(sK, k_g, stride);
  load_swizzled_async<kTile, kWarpgroup>(sV, v_g, stride);
  load_queries(kt);
  cp_async_commit();
  if (kt + 1 < n_tiles) load_queries(kt + 1);
  cp_async_commit();

  float dk[1][8][4], dv[1][8][4];
  zero(dk);
  zero(dv);
  for (int qt = kt; qt < n_tiles; ++qt) {
    cp_async_wait<kStages - 2>();
    wgmma::fence_async_shared();
    __syncthreads();  // tile qt visible to all; every warp is done with tile qt − 1's stage
    if (qt + kStages - 1 < n_tiles) load_queries(qt + kStages - 1);
    cp_async_commit();
    const uint32_t sQs = stages + stage_of(qt), sOs = sQs + kTileBytes;
    const float* l_s = stats_of(qt);
    const float* d_s = l_s + kTile;

    float s[1][8][4], dp[1][8][4];  // rows: the 64 keys; columns: the tile's 64 queries
    zero(s);
    zero(dp);
    // Sᵀ and dPᵀ in two groups: Pᵀ is computed while dPᵀ runs.
    wgmma::fence();
    issue_abt(s[0], sK, sQs);  // Sᵀ = K · Qᵀ
    wgmma::commit();
    issue_abt(dp[0], sV, sOs);  // dPᵀ = V · dOᵀ
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operands(s[0]);
    if (qt == kt) mask_below_diagonal(s, warp, lane);  // diagonal tile: query < key → −inf
    key_probabilities(s, l_s, lane);
    wgmma::wait<0>();
    wgmma::fence_operands(dp[0]);
    key_dscores(s, dp, d_s, lane);

    uint32_t a_p[4][4], a_ds[4][4];
    pack_a(a_p, s[0]);
    pack_a(a_ds, dp[0]);
    wgmma::fence();
    issue_wb(dv[0], a_p, sOs);   // dV += bf16(Pᵀ) · dO
    issue_wb(dk[0], a_ds, sQs);  // dK += bf16(dSᵀ) · Q
    finish(dv[0], dk[0]);
    hold(a_p);
    hold(a_ds);
  }

  G* k_rows = dqkv + (static_cast<size_t>(b) * geo.seq_len + static_cast<size_t>(kt) * kTile + warp * 16) * stride + d +
              static_cast<size_t>(h) * kHd;
  store_rows(k_rows, stride, dk, kScale, lane);
  store_rows(k_rows + d, stride, dv, 1.0f, lane);
#else
  (void)qkv, (void)dout, (void)lse2, (void)dsum, (void)geo, (void)dqkv;
  __trap();
#endif
}

}  // namespace

void wgmma_forward(const bf16_t* qkv, int batch, const Geometry& geo, float* out, float* lse, const StoreOut& store,
                   cudaStream_t stream) {
  set_shared(reinterpret_cast<const void*>(flash_forward_wgmma_kernel), kForwardShared);
  const dim3 grid(geo.seq_len / kTile, geo.n_heads, batch);
  flash_forward_wgmma_kernel<<<grid, kWarpgroup, kForwardShared, stream>>>(qkv, geo, out, lse, store);
  detail::check_launch();
}

template <class O, class G>
void wgmma_backward(const bf16_t* qkv, const O* out, const float* lse, const bf16_t* dout, int batch,
                    const Geometry& geo, G* dqkv, float* dsum, float* lse2, cudaStream_t stream) {
  set_shared(reinterpret_cast<const void*>(flash_dq_wgmma_kernel<O, G>), kDqShared);
  set_shared(reinterpret_cast<const void*>(flash_dkdv_wgmma_kernel<G>), kDkdvShared);
  const dim3 grid(geo.seq_len / kTile, geo.n_heads, batch);
  flash_dq_wgmma_kernel<O, G><<<grid, kWarpgroup, kDqShared, stream>>>(qkv, out, lse, dout, geo, dqkv, dsum, lse2);
  detail::check_launch();
  flash_dkdv_wgmma_kernel<G><<<grid, kWarpgroup, kDkdvShared, stream>>>(qkv, dout, lse2, dsum, geo, dqkv);
  detail::check_launch();
}

template void wgmma_backward<float, float>(const bf16_t*, const float*, const float*, const bf16_t*, int,
                                           const Geometry&, float*, float*, float*, cudaStream_t);
template void wgmma_backward<bf16_t, float>(const bf16_t*, const bf16_t*, const float*, const bf16_t*, int,
                                            const Geometry&, float*, float*, float*, cudaStream_t);
template void wgmma_backward<bf16_t, bf16_t>(const bf16_t*, const bf16_t*, const float*, const bf16_t*, int,
                                             const Geometry&, bf16_t*, float*, float*, cudaStream_t);

}  // namespace fp4::cuda::flash
