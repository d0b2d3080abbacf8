// ops_attention.cu — see ops.cuh: causal multi-head attention, forward and backward, in fp32.
//
// A straightforward tiled kernel, correctness and determinism first. A block owns 32 queries (or,
// in the dk/dv pass, 32 keys) of one (sequence, head); its 8 warps own 4 of them each (rows w,
// w + 8, w + 16, w + 24 of the tile, which balances the causal triangle). The other side streams
// through shared memory in tiles of 32. Scores are computed one key (or query) per lane, each a
// plain sequential dot product over head_dim; output sums run one lane per feature over the 32
// tile entries in order, the weights broadcast by shuffles. Every sum's order is fixed by the
// shape; no atomics: dq is summed by the query's warp, dk and dv by the key's warp.
//   forward:   online softmax over the key tiles (running max m, sum l, rescaled output), then
//              out = acc / l and lse = m + log(l).
//   backward:  p = exp(s − lse) recomputed. Pass A (per query): D_t = Σ_j p_j dP_j (the reference's
//              formula, dP_j = dout_t·v_j), kept in scratch, then dq_t = Σ_j dS_j k_j, dS_j =
//              p_j (dP_j − D_t) / sqrt(hd), keys in order. Pass B (per key): dk_j = Σ_{t≥j} dS_tj q_t
//              and dv_j = Σ_{t≥j} p_tj dout_t, queries in increasing order — the reference's order.
// Rows of Q/dout read one per lane are padded to head_dim + 1 floats in shared memory, so the 32
// lanes hit 32 different banks.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <cmath>
#include <string>

namespace fp4::cuda {

namespace {

constexpr int kTile = 32;     // queries or keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPerWarp = kTile / kWarps;  // 4 rows of the tile per warp
constexpr unsigned kFull = 0xffffffffu;

struct Geometry {
  int seq_len, n_heads, head_dim;
  float scale;  // 1 / sqrt(head_dim), rounded as the reference rounds it
};

// Pointer to (sequence b, head h)'s part `part` (0 q, 1 k, 2 v) of row 0 in a [B·T, 3·d] buffer.
__device__ __forceinline__ size_t qkv_base(const Geometry& g, int b, int h, int part) {
  const size_t d = static_cast<size_t>(g.n_heads) * g.head_dim;
  return static_cast<size_t>(b) * g.seq_len * 3 * d + part * d + static_cast<size_t>(h) * g.head_dim;
}

// Loads rows [t0, t0 + kTile) (zero beyond seq_len) of a [B·T, row_stride] buffer, starting at base,
// into shared memory with the given row pitch.
__device__ __forceinline__ void load_tile(float* dst, int pitch, const float* src, size_t row_stride, int t0,
                                          const Geometry& g) {
  for (int idx = threadIdx.x; idx < kTile * g.head_dim; idx += kThreads) {
    const int r = idx / g.head_dim, i = idx % g.head_dim;
    const int t = t0 + r;
    dst[r * pitch + i] = t < g.seq_len ? src[static_cast<size_t>(t) * row_stride + i] : 0.0f;
  }
}

__device__ __forceinline__ float dot_seq(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <int NC>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(const float* qkv, Geometry g, float* out,
                                                                     float* lse) {
  extern __shared__ float smem[];
  const int hd = g.head_dim, pk = hd + 1;
  float* sQ = smem;                 // [32][hd]
  float* sK = sQ + kTile * hd;      // [32][hd + 1]
  float* sV = sK + kTile * pk;      // [32][hd]
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t stride = 3 * static_cast<size_t>(g.n_heads) * hd;
  const size_t d = static_cast<size_t>(g.n_heads) * hd;
  load_tile(sQ, hd, qkv + qkv_base(g, b, h, 0), stride, q0, g);

  float m[kPerWarp], l[kPerWarp], acc[kPerWarp][NC];
  for (int k = 0; k < kPerWarp; ++k) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
    for (int c = 0; c < NC; ++c) acc[k][c] = 0.0f;
  }
  const int last_query = min(q0 + kTile - 1, g.seq_len - 1);
  for (int j0 = 0; j0 <= last_query; j0 += kTile) {
    __syncthreads();  // the previous tiles are no longer read (and sQ is loaded)
    load_tile(sK, pk, qkv + qkv_base(g, b, h, 1), stride, j0, g);
    load_tile(sV, hd, qkv + qkv_base(g, b, h, 2), stride, j0, g);
    __syncthreads();
    for (int k = 0; k < kPerWarp; ++k) {
      const int tq = warp + kWarps * k, t = q0 + tq;
      if (t >= g.seq_len || j0 > t) continue;  // uniform over the warp
      const int j = j0 + lane;
      float s = -INFINITY;
      if (j <= t) s = dot_seq(sQ + tq * hd, sK + lane * pk, hd) * g.scale;
      const float m_new = fmaxf(m[k], detail::warp_max(s));
      const float corr = expf(m[k] - m_new);  // 0 on the first tile (m = −inf)
      const float p = j <= t ? expf(s - m_new) : 0.0f;
      l[k] = l[k] * corr + detail::warp_sum(p);
      m[k] = m_new;
      for (int c = 0; c < NC; ++c) acc[k][c] = acc[k][c] * corr;
      const int last = min(kTile - 1, t - j0);
      for (int jj = 0; jj <= last; ++jj) {
        const float pj = __shfl_sync(kFull, p, jj);
        for (int c = 0; c < NC; ++c) {
          const int dim = lane + 32 * c;
          if (dim < hd) acc[k][c] += pj * sV[jj * hd + dim];
        }
      }
    }
  }
  for (int k = 0; k < kPerWarp; ++k) {
    const int t = q0 + warp + kWarps * k;
    if (t >= g.seq_len) continue;
    float* o = out + (static_cast<size_t>(b) * g.seq_len + t) * d + static_cast<size_t>(h) * hd;
    for (int c = 0; c < NC; ++c) {
      const int dim = lane + 32 * c;
      if (dim < hd) o[dim] = acc[k][c] / l[k];
    }
    if (lane == 0) lse[(static_cast<size_t>(b) * g.n_heads + h) * g.seq_len + t] = m[k] + logf(l[k]);
  }
}

// Pass A: D_t into dsum, dq_t into dqkv's q part.
template <int NC>
__global__ void __launch_bounds__(kThreads) attention_dq_kernel(const float* qkv, const float* lse,
                                                                const float* dout, Geometry g, float* dsum,
                                                                float* dqkv) {
  extern __shared__ float smem[];
  const int hd = g.head_dim, pk = hd + 1;
  float* sQ = smem;                 // [32][hd]
  float* sO = sQ + kTile * hd;      // [32][hd]: dout
  float* sK = sO + kTile * hd;      // [32][hd + 1]
  float* sV = sK + kTile * pk;      // [32][hd + 1]
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t d = static_cast<size_t>(g.n_heads) * hd;
  const size_t stride = 3 * d;
  const size_t stat = (static_cast<size_t>(b) * g.n_heads + h) * g.seq_len;  // [B, H, T] row
  load_tile(sQ, hd, qkv + qkv_base(g, b, h, 0), stride, q0, g);
  load_tile(sO, hd, dout + static_cast<size_t>(b) * g.seq_len * d + static_cast<size_t>(h) * hd, d, q0, g);

  float lse_t[kPerWarp], D[kPerWarp], dq[kPerWarp][NC];
  for (int k = 0; k < kPerWarp; ++k) {
    const int t = q0 + warp + kWarps * k;
    lse_t[k] = t < g.seq_len ? lse[stat + t] : 0.0f;
    D[k] = 0.0f;
    for (int c = 0; c < NC; ++c) dq[k][c] = 0.0f;
  }
  const int last_query = min(q0 + kTile - 1, g.seq_len - 1);
  for (int pass = 0; pass < 2; ++pass) {
    for (int j0 = 0; j0 <= last_query; j0 += kTile) {
      __syncthreads();
      load_tile(sK, pk, qkv + qkv_base(g, b, h, 1), stride, j0, g);
      load_tile(sV, pk, qkv + qkv_base(g, b, h, 2), stride, j0, g);
      __syncthreads();
      for (int k = 0; k < kPerWarp; ++k) {
        const int tq = warp + kWarps * k, t = q0 + tq;
        if (t >= g.seq_len || j0 > t) continue;  // uniform over the warp
        const int j = j0 + lane;
        float p = 0.0f, dp = 0.0f;
        if (j <= t) {
          p = expf(dot_seq(sQ + tq * hd, sK + lane * pk, hd) * g.scale - lse_t[k]);
          dp = dot_seq(sO + tq * hd, sV + lane * pk, hd);
        }
        if (pass == 0) {
          D[k] += detail::warp_sum(p * dp);
          continue;
        }
        const float ds = p * (dp - D[k]) * g.scale;
        const int last = min(kTile - 1, t - j0);
        for (int jj = 0; jj <= last; ++jj) {
          const float dsj = __shfl_sync(kFull, ds, jj);
          for (int c = 0; c < NC; ++c) {
            const int dim = lane + 32 * c;
            if (dim < hd) dq[k][c] += dsj * sK[jj * pk + dim];
          }
        }
      }
    }
  }
  for (int k = 0; k < kPerWarp; ++k) {
    const int t = q0 + warp + kWarps * k;
    if (t >= g.seq_len) continue;
    if (lane == 0) dsum[stat + t] = D[k];
    float* o = dqkv + (static_cast<size_t>(b) * g.seq_len + t) * stride + static_cast<size_t>(h) * hd;
    for (int c = 0; c < NC; ++c) {
      const int dim = lane + 32 * c;
      if (dim < hd) o[dim] = dq[k][c];
    }
  }
}

// Pass B: dk_j and dv_j into dqkv's k and v parts.
template <int NC>
__global__ void __launch_bounds__(kThreads) attention_dkdv_kernel(const float* qkv, const float* lse,
                                                                  const float* dout, const float* dsum,
                                                                  Geometry g, float* dqkv) {
  extern __shared__ float smem[];
  const int hd = g.head_dim, pq = hd + 1;
  float* sK = smem;                 // [32][hd]: this block's keys
  float* sV = sK + kTile * hd;      // [32][hd]
  float* sQ = sV + kTile * hd;      // [32][hd + 1]: a tile of queries
  float* sO = sQ + kTile * pq;      // [32][hd + 1]: their dout
  float* sL = sO + kTile * pq;      // [32]: their lse
  float* sD = sL + kTile;           // [32]: their D
  const int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t d = static_cast<size_t>(g.n_heads) * hd;
  const size_t stride = 3 * d;
  const size_t stat = (static_cast<size_t>(b) * g.n_heads + h) * g.seq_len;
  load_tile(sK, hd, qkv + qkv_base(g, b, h, 1), stride, k0, g);
  load_tile(sV, hd, qkv + qkv_base(g, b, h, 2), stride, k0, g);

  float dk[kPerWarp][NC], dv[kPerWarp][NC];
  for (int k = 0; k < kPerWarp; ++k)
    for (int c = 0; c < NC; ++c) dk[k][c] = dv[k][c] = 0.0f;
  for (int t0 = k0; t0 < g.seq_len; t0 += kTile) {
    __syncthreads();
    load_tile(sQ, pq, qkv + qkv_base(g, b, h, 0), stride, t0, g);
    load_tile(sO, pq, dout + static_cast<size_t>(b) * g.seq_len * d + static_cast<size_t>(h) * hd, d, t0, g);
    if (threadIdx.x < kTile) {
      const int t = t0 + threadIdx.x;
      sL[threadIdx.x] = t < g.seq_len ? lse[stat + t] : 0.0f;
      sD[threadIdx.x] = t < g.seq_len ? dsum[stat + t] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < kPerWarp; ++k) {
      const int jk = warp + kWarps * k, j = k0 + jk;
      if (j >= g.seq_len) continue;  // uniform over the warp
      const int first = max(0, j - t0), last = min(kTile - 1, g.seq_len - 1 - t0);
      // Lane = query t0 + lane; only lanes in [first, last] are used below.
      const float p = expf(dot_seq(sQ + lane * pq, sK + jk * hd, hd) * g.scale - sL[lane]);
      const float dp = dot_seq(sO + lane * pq, sV + jk * hd, hd);
      const float ds = p * (dp - sD[lane]) * g.scale;
      for (int ll = first; ll <= last; ++ll) {
        const float pl = __shfl_sync(kFull, p, ll);
        const float dsl = __shfl_sync(kFull, ds, ll);
        for (int c = 0; c < NC; ++c) {
          const int dim = lane + 32 * c;
          if (dim < hd) {
            dk[k][c] += dsl * sQ[ll * pq + dim];
            dv[k][c] += pl * sO[ll * pq + dim];
          }
        }
      }
    }
  }
  for (int k = 0; k < kPerWarp; ++k) {
    const int j = k0 + warp + kWarps * k;
    if (j >= g.seq_len) continue;
    float* o = dqkv + (static_cast<size_t>(b) * g.seq_len + j) * stride + static_cast<size_t>(h) * hd;
    for (int c = 0; c < NC; ++c) {
      const int dim = lane + 32 * c;
      if (dim < hd) {
        o[d + dim] = dk[k][c];
        o[2 * d + dim] = dv[k][c];
      }
    }
  }
}

Geometry check(const char* op, int batch, int seq_len, int n_heads, int head_dim) {
  detail::require(batch >= 1 && seq_len >= 1 && n_heads >= 1, op,
                  "needs batch, seq_len and n_heads >= 1, got batch = " + std::to_string(batch) +
                      ", seq_len = " + std::to_string(seq_len) + ", n_heads = " + std::to_string(n_heads));
  detail::require(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= kMaxHeadDim, op,
                  "head_dim = " + std::to_string(head_dim) + " is not an even number in 2.." +
                      std::to_string(kMaxHeadDim));
  detail::require(batch <= 65535 && n_heads <= 65535, op, "batch or n_heads above 65535");
  // The reference's scale: 1 / sqrt(head_dim) in fp32.
  return Geometry{seq_len, n_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    FP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

template <int NC>
void forward_nc(const float* qkv, int batch, const Geometry& g, float* out, float* lse, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(kTile) * (3 * g.head_dim + 1) * sizeof(float);
  allow_shared(attention_forward_kernel<NC>, bytes);
  const dim3 grid((g.seq_len + kTile - 1) / kTile, g.n_heads, batch);
  attention_forward_kernel<NC><<<grid, kThreads, bytes, stream>>>(qkv, g, out, lse);
  detail::check_launch();
}

template <int NC>
void backward_nc(const float* qkv, const float* lse, const float* dout, int batch, const Geometry& g,
                 float* dsum, float* dqkv, cudaStream_t stream) {
  const size_t bytes_a = static_cast<size_t>(kTile) * (4 * g.head_dim + 2) * sizeof(float);
  const size_t bytes_b = bytes_a + 2 * kTile * sizeof(float);
  allow_shared(attention_dq_kernel<NC>, bytes_a);
  allow_shared(attention_dkdv_kernel<NC>, bytes_b);
  const dim3 grid((g.seq_len + kTile - 1) / kTile, g.n_heads, batch);
  attention_dq_kernel<NC><<<grid, kThreads, bytes_a, stream>>>(qkv, lse, dout, g, dsum, dqkv);
  detail::check_launch();
  attention_dkdv_kernel<NC><<<grid, kThreads, bytes_b, stream>>>(qkv, lse, dout, dsum, g, dqkv);
  detail::check_launch();
}

}  // namespace

void attention_forward(const float* qkv, int batch, int seq_len, int n_heads, int head_dim, float* out,
                       float* lse, cudaStream_t stream) {
  const Geometry g = check("attention_forward", batch, seq_len, n_heads, head_dim);
  switch ((head_dim + 31) / 32) {
    case 1: forward_nc<1>(qkv, batch, g, out, lse, stream); break;
    case 2: forward_nc<2>(qkv, batch, g, out, lse, stream); break;
    case 3: forward_nc<3>(qkv, batch, g, out, lse, stream); break;
    default: forward_nc<4>(qkv, batch, g, out, lse, stream); break;
  }
}

void attention_backward(const float* qkv, const float* lse, const float* dout, int batch, int seq_len,
                        int n_heads, int head_dim, float* dqkv, Workspace& workspace, cudaStream_t stream) {
  const Geometry g = check("attention_backward", batch, seq_len, n_heads, head_dim);
  auto* dsum = static_cast<float*>(
      workspace.get(static_cast<size_t>(batch) * n_heads * seq_len * sizeof(float)));
  switch ((head_dim + 31) / 32) {
    case 1: backward_nc<1>(qkv, lse, dout, batch, g, dsum, dqkv, stream); break;
    case 2: backward_nc<2>(qkv, lse, dout, batch, g, dsum, dqkv, stream); break;
    case 3: backward_nc<3>(qkv, lse, dout, batch, g, dsum, dqkv, stream); break;
    default: backward_nc<4>(qkv, lse, dout, batch, g, dsum, dqkv, stream); break;
  }
}

}  // namespace fp4::cuda
