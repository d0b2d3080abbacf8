// moe.cu — see moe.cuh. The router's per-token math is kernels/cpu/router.cpp's, operation for
// operation (expf/logf for std::exp/std::log). The dispatch gives each expert one CTA, which walks
// the assignments in token order a chunk at a time and places each of its own by a block-wide count
// of those before it: the groups of the reference's serial pass, and the same integers whatever the
// thread count.
#include "kernels/cuda/moe.cuh"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/cuda/bf16_convert.cuh"  // unpack8
#include "kernels/cuda/ops_common.cuh"    // bf16x2_bits, aligned

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return detail::elementwise_blocks(static_cast<size_t>(n), kThreads); }

__global__ void router_forward_kernel(const float* logits, int rows, int E, int K, bool sigmoid, bool renormalize,
                                      float* scores, int32_t* chosen, float* gates, float* lse) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < rows; t += gridDim.x * blockDim.x) {
    const float* z = logits + static_cast<size_t>(t) * E;
    float* s = scores + static_cast<size_t>(t) * E;
    int32_t* ch = chosen + static_cast<size_t>(t) * K;
    float* g = gates + static_cast<size_t>(t) * K;
    float m = z[0];
    for (int j = 1; j < E; ++j) m = z[j] > m ? z[j] : m;
    float sum = 0.0f;
    for (int j = 0; j < E; ++j) sum += expf(z[j] - m);
    lse[t] = m + logf(sum);
    for (int j = 0; j < E; ++j) s[j] = sigmoid ? 1.0f / (1.0f + expf(-z[j])) : expf(z[j] - m) / sum;
    // Top-k by logit, a strict > keeping the lower index on a tie (the reference's rule); the
    // picks so far are the first c entries of ch.
    for (int c = 0; c < K; ++c) {
      int best = -1;
      for (int j = 0; j < E; ++j) {
        bool taken = false;
        for (int q = 0; q < c; ++q) taken = taken || ch[q] == j;
        if (!taken && (best < 0 || z[j] > z[best])) best = j;
      }
      ch[c] = best;
    }
    // Ascending expert index (insertion sort of k values).
    for (int c = 1; c < K; ++c)
      for (int q = c; q > 0 && ch[q - 1] > ch[q]; --q) {
        const int32_t x = ch[q];
        ch[q] = ch[q - 1];
        ch[q - 1] = x;
      }
    float total = 0.0f;
    for (int c = 0; c < K; ++c) total += s[ch[c]];
    for (int c = 0; c < K; ++c) g[c] = renormalize ? s[ch[c]] / total : s[ch[c]];
  }
}

// The dispatch kernels' CTA: one per expert. A whole number of warps (the ballots need full warps).
constexpr int kDispatchThreads = 512;
constexpr int kDispatchWarps = kDispatchThreads / 32;
static_assert(kDispatchThreads % 32 == 0, "the dispatch's CTA must be whole warps");

// counts[j] = assignments to routed expert j: CTA j counts them, an integer sum (any order gives
// the same count).
__global__ void __launch_bounds__(kDispatchThreads) count_kernel(const int32_t* chosen, int64_t assignments,
                                                                 int64_t* counts) {
  const int j = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __shared__ int64_t warp_count[kDispatchWarps];
  int64_t n = 0;
  for (int64_t i = threadIdx.x; i < assignments; i += blockDim.x) n += chosen[i] == j;
  for (int o = 16; o > 0; o /= 2) n += __shfl_down_sync(0xffffffffu, n, o);
  if (lane == 0) warp_count[warp] = n;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t total = 0;
    for (int w = 0; w < kDispatchWarps; ++w) total += warp_count[w];
    counts[j] = total;
  }
}

// CTA j fills expert j's group: a routed expert's rows in ascending assignment (so token) index,
// a shared expert's every token in order, then the padding rows up to offsets[j + 1]. A routed
// expert's CTA takes the assignments kDispatchThreads at a time; an assignment of j is placed
// after the group's rows of earlier chunks, of earlier warps of its chunk (their ballot counts)
// and of earlier lanes of its warp.
__global__ void __launch_bounds__(kDispatchThreads) fill_kernel(const int32_t* chosen, int rows, int E, int K,
                                                                const int64_t* offsets, int32_t* slot,
                                                                int32_t* tokens, int32_t* choice) {
  const int j = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __shared__ int warp_count[kDispatchWarps];
  const int64_t begin = offsets[j], end = offsets[j + 1];
  int64_t placed = 0;  // the group's rows written so far: the same in every thread of the CTA
  if (j < E) {
    const int64_t assignments = static_cast<int64_t>(rows) * K;
    for (int64_t first = 0; first < assignments; first += blockDim.x) {
      const int64_t i = first + threadIdx.x;
      const bool mine = i < assignments && chosen[i] == j;
      const unsigned mask = __ballot_sync(0xffffffffu, mine);
      if (lane == 0) warp_count[warp] = __popc(mask);
      __syncthreads();
      int before = 0, in_chunk = 0;
      for (int w = 0; w < kDispatchWarps; ++w) {
        before += w < warp ? warp_count[w] : 0;
        in_chunk += warp_count[w];
      }
      if (mine) {
        const int64_t n = placed + before + __popc(mask & ((1u << lane) - 1u));
        tokens[begin + n] = static_cast<int32_t>(i / K);
        choice[begin + n] = static_cast<int32_t>(i);
        slot[i] = static_cast<int32_t>(n);
      }
      placed += in_chunk;
      __syncthreads();  // the next chunk writes warp_count again
    }
  } else {
    for (int64_t n = threadIdx.x; n < rows; n += blockDim.x) {
      tokens[begin + n] = static_cast<int32_t>(n);
      choice[begin + n] = -1;
    }
    placed = rows;
  }
  for (int64_t p = threadIdx.x; begin + placed + p < end; p += blockDim.x) {
    tokens[begin + placed + p] = static_cast<int32_t>(rows + p);
    choice[begin + placed + p] = -1;
  }
}

// The grouped buffers in fp32 or bf16: a bf16 value read is widened exactly; a value stored into
// bf16 is rounded as float_to_bf16 (numerics.h), as the separate conversion kernels do.
__device__ __forceinline__ float load_value(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_value(const bf16_t* p, int64_t i) { return fp4::bf16_to_float(p[i]); }
__device__ __forceinline__ void store_value(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_value(bf16_t* p, int64_t i, float v) { p[i] = fp4::float_to_bf16(v); }

// The row kernels below (gather, the sums over a token's experts, the experts' dY) take one row per
// CTA step and its features by the CTA's threads: no division per element, and each row's reads
// and writes run along it.
constexpr int kRowThreads = 128;

unsigned row_blocks(int64_t n_rows) { return detail::elementwise_blocks(static_cast<size_t>(n_rows), 1); }

template <typename T>
__global__ void __launch_bounds__(kRowThreads) gather_kernel(const T* x, const int32_t* tokens, int64_t total,
                                                             int rows, int d, T* out) {
  for (int64_t g = blockIdx.x; g < total; g += gridDim.x) {
    const int32_t t = tokens[g];
    T* dst = out + g * d;
    const T* src = x + static_cast<int64_t>(t) * d;
    for (int f = threadIdx.x; f < d; f += blockDim.x) dst[f] = t < rows ? src[f] : T(0);
  }
}

// The row of assignment i (token t, choice c) in the grouped buffers.
__device__ __forceinline__ int64_t assignment_row(const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                                                  int64_t i) {
  return offsets[chosen[i]] + slot[i];
}

// out[t, :] = Σ over t's experts in ascending index of (gates ? gate · v : v), the first term
// assigned, + each shared expert's v, then + extra[t, :] when extra is set: moe_combine (gates, no
// extra) and moe_sum_dx (no gates, the router's share as extra). A bf16 out gets the fp32 sum
// rounded by float_to_bf16 (store_value).
template <typename T, typename U>
__global__ void __launch_bounds__(kRowThreads) sum_over_experts_kernel(const T* v, const int32_t* chosen,
                                                                       const int32_t* slot, const int64_t* offsets,
                                                                       const float* gates, const float* extra,
                                                                       int rows, int E, int J, int K, int d,
                                                                       U* out) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    for (int f = threadIdx.x; f < d; f += blockDim.x) {
      float o = 0.0f;
      for (int c = 0; c < K; ++c) {
        const int64_t a = t * K + c;
        const float x = load_value(v, assignment_row(chosen, slot, offsets, a) * d + f);
        const float term = gates != nullptr ? gates[a] * x : x;
        o = c == 0 ? term : o + term;
      }
      for (int j = E; j < J; ++j) o += load_value(v, (offsets[j] + t) * d + f);
      const int64_t i = t * d + f;
      store_value(out, i, extra != nullptr ? o + extra[i] : o);
    }
  }
}

// dgates[a] = dout[t] · y[a]'s row: kernels/cpu/ops.h's dot, eight lanes combined pairwise. Eight
// threads take one assignment, thread l of them the dot's lane l (elements l, l + 8, ...), so the
// eight read consecutive values; the shuffles then add the lanes as the dot does,
// ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)). The same sums in the same order: the same bits.
// A warp's four assignments share the loop's bounds (the shuffles need every lane). dout in fp32 or
// bf16 (widened exactly: the products of the fp32 form on a converted copy).
template <typename D, typename T>
__global__ void dgates_kernel(const D* dout, const T* y, const int32_t* chosen, const int32_t* slot,
                              const int64_t* offsets, int rows, int K, int d, float* dgates) {
  const int64_t n = static_cast<int64_t>(rows) * K;
  const int l = threadIdx.x & 7;
  const int64_t stride = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 3;
  for (int64_t warp_first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + (threadIdx.x & ~31)) >> 3;
       warp_first < n; warp_first += stride) {
    const int64_t a = warp_first + ((threadIdx.x & 31) >> 3);
    const bool valid = a < n;
    float acc = 0.0f;
    if (valid) {
      const D* p = dout + (a / K) * d;
      const T* q = y + assignment_row(chosen, slot, offsets, a) * d;
      int i = 0;
      for (; i + 8 <= d; i += 8) acc += load_value(p, i + l) * load_value(q, i + l);
      if (i + l < d) acc += load_value(p, i + l) * load_value(q, i + l);  // the tail: lane l takes element i + l
    }
    acc += __shfl_down_sync(0xffffffffu, acc, 1);
    acc += __shfl_down_sync(0xffffffffu, acc, 2);
    acc += __shfl_down_sync(0xffffffffu, acc, 4);
    if (valid && l == 0) dgates[a] = acc;
  }
}

template <typename D, typename T>
__global__ void __launch_bounds__(kRowThreads) expert_dy_kernel(const D* dout, const int32_t* tokens,
                                                                const int32_t* choice, const float* gates,
                                                                int64_t total, int rows, int d, T* dy) {
  for (int64_t g = blockIdx.x; g < total; g += gridDim.x) {
    const int32_t t = tokens[g];
    const float gate = choice[g] >= 0 ? gates[choice[g]] : 1.0f;
    for (int f = threadIdx.x; f < d; f += blockDim.x) {
      const int64_t i = g * d + f;
      store_value(dy, i, t < rows ? gate * load_value(dout, static_cast<int64_t>(t) * d + f) : 0.0f);
    }
  }
}

// The bf16 forms of the row kernels above when d is a multiple of 8 and every row pointer is
// 16-byte aligned (row_vectors): a thread takes 8 consecutive values of a row with one 16-byte load
// or store, where the scalar kernels move 2 bytes a thread; the CTA is dv threads (d / 8, at most
// kVecThreads) by as many rows as fill it. Each value goes through the same operations in the same
// order as in the scalar kernels (and rounded to float_to_bf16's bits): the same bits, which
// tests/gpu/moe_test.cpp checks against the fp32 forms.
constexpr int kVecThreads = 256;

// float_to_bf16 of 8 values in one 16-byte word (ops_common.cuh's bf16x2_bits, pair by pair).
__device__ __forceinline__ uint4 pack8_bf16(const float (&o)[8]) {
  return make_uint4(detail::bf16x2_bits(o[0], o[1]), detail::bf16x2_bits(o[2], o[3]), detail::bf16x2_bits(o[4], o[5]),
                    detail::bf16x2_bits(o[6], o[7]));
}

// The rows this thread takes: row r0, r0 + step, ... below n.
struct RowWalk {
  int64_t r0, step;
  __device__ RowWalk()
      : r0(static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y),
        step(static_cast<int64_t>(gridDim.x) * blockDim.y) {}
};

__global__ void __launch_bounds__(kVecThreads) gather_vec_kernel(const uint4* x, const int32_t* tokens, int64_t total,
                                                                 int rows, int dv, uint4* out) {
  const RowWalk w;
  for (int64_t g = w.r0; g < total; g += w.step) {
    const int32_t t = tokens[g];
    for (int f = threadIdx.x; f < dv; f += blockDim.x)
      out[g * dv + f] = t < rows ? x[static_cast<int64_t>(t) * dv + f] : make_uint4(0, 0, 0, 0);
  }
}

__global__ void __launch_bounds__(kVecThreads) sum_over_experts_vec_kernel(const uint4* v, const int32_t* chosen,
                                                                           const int32_t* slot, const int64_t* offsets,
                                                                           const float* gates, const float* extra,
                                                                           int rows, int E, int J, int K, int dv,
                                                                           uint4* out) {
  const RowWalk w;
  for (int64_t t = w.r0; t < rows; t += w.step) {
    for (int f = threadIdx.x; f < dv; f += blockDim.x) {
      float o[8], x[8];
      for (int c = 0; c < K; ++c) {
        const int64_t a = t * K + c;
        detail::unpack8(v[assignment_row(chosen, slot, offsets, a) * dv + f], x);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float term = gates != nullptr ? gates[a] * x[e] : x[e];
          o[e] = c == 0 ? term : o[e] + term;
        }
      }
      for (int j = E; j < J; ++j) {
        detail::unpack8(v[(offsets[j] + t) * dv + f], x);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] += x[e];
      }
      const int64_t i = t * dv + f;
      if (extra != nullptr) {
        const float4 lo = reinterpret_cast<const float4*>(extra)[2 * i], hi = reinterpret_cast<const float4*>(extra)[2 * i + 1];
        const float ex[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = o[e] + ex[e];
      }
      out[i] = pack8_bf16(o);
    }
  }
}

__global__ void __launch_bounds__(kVecThreads) expert_dy_vec_kernel(const uint4* dout, const int32_t* tokens,
                                                                    const int32_t* choice, const float* gates,
                                                                    int64_t total, int rows, int dv, uint4* dy) {
  const RowWalk w;
  for (int64_t g = w.r0; g < total; g += w.step) {
    const int32_t t = tokens[g];
    const float gate = choice[g] >= 0 ? gates[choice[g]] : 1.0f;
    for (int f = threadIdx.x; f < dv; f += blockDim.x) {
      float o[8];
      if (t < rows) {
        detail::unpack8(dout[static_cast<int64_t>(t) * dv + f], o);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = gate * o[e];
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = 0.0f;
      }
      dy[g * dv + f] = pack8_bf16(o);
    }
  }
}

__global__ void router_backward_kernel(const float* logits, const float* scores, const int32_t* chosen,
                                       const float* lse, const float* dgates, const int64_t* counts, int rows, int E,
                                       int K, bool sigmoid, bool renormalize, float balance_scale, float z_scale,
                                       float* dlogits) {
  const float z_coef = z_scale * 2.0f / static_cast<float>(rows);
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < rows; t += gridDim.x * blockDim.x) {
    const float* z = logits + static_cast<size_t>(t) * E;
    const float* s = scores + static_cast<size_t>(t) * E;
    const int32_t* ch = chosen + static_cast<size_t>(t) * K;
    const float* dg = dgates + static_cast<size_t>(t) * K;
    float* dz = dlogits + static_cast<size_t>(t) * E;
    // dz holds ds until the scores → logits step (the reference's ds vector).
    for (int j = 0; j < E; ++j) dz[j] = 0.0f;
    if (renormalize) {
      float total = 0.0f;
      for (int c = 0; c < K; ++c) total += s[ch[c]];
      float dot = 0.0f;
      for (int c = 0; c < K; ++c) dot += dg[c] * (s[ch[c]] / total);
      for (int c = 0; c < K; ++c) dz[ch[c]] = (dg[c] - dot) / total;
    } else {
      for (int c = 0; c < K; ++c) dz[ch[c]] = dg[c];
    }
    // ∂(E · Σ f_i P_i)/∂s'_i = E · f_i / R, in double as the reference, then scaled in fp32.
    const auto dbalance = [&](int j) {
      return balance_scale * static_cast<float>(static_cast<double>(E) * static_cast<double>(counts[j]) /
                                                (static_cast<double>(rows) * K * rows));
    };
    if (!sigmoid) {
      for (int j = 0; j < E; ++j) dz[j] += dbalance(j);
    } else {
      float total = 0.0f;
      for (int j = 0; j < E; ++j) total += s[j];
      float dot = 0.0f;
      for (int j = 0; j < E; ++j) dot += dbalance(j) * (s[j] / total);
      for (int j = 0; j < E; ++j) dz[j] += (dbalance(j) - dot) / total;
    }
    if (!sigmoid) {
      float dot = 0.0f;
      for (int j = 0; j < E; ++j) dot += s[j] * dz[j];
      for (int j = 0; j < E; ++j) dz[j] = s[j] * (dz[j] - dot);
    } else {
      for (int j = 0; j < E; ++j) dz[j] = dz[j] * s[j] * (1.0f - s[j]);
    }
    if (z_scale != 0.0f)
      for (int j = 0; j < E; ++j) dz[j] += z_coef * lse[t] * expf(z[j] - lse[t]);
  }
}

void check_router(const char* op, int rows, int E, int K) {
  detail::require(rows > 0 && E > 0 && K > 0 && K <= E, op,
                  "needs rows > 0 and 1 <= top_k <= n_experts, got rows " + std::to_string(rows) + ", n_experts " +
                      std::to_string(E) + ", top_k " + std::to_string(K));
}

}  // namespace

void moe_router_forward(const float* logits, int rows, int n_experts, int top_k, bool sigmoid, bool renormalize,
                        float* scores, int32_t* chosen, float* gates, float* lse, cudaStream_t stream) {
  check_router("moe_router_forward", rows, n_experts, top_k);
  router_forward_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, rows, n_experts, top_k, sigmoid,
                                                                   renormalize, scores, chosen, gates, lse);
  detail::check_launch();
}

int64_t moe_dispatch_capacity(int rows, int n_experts, int n_shared, int top_k, int pad) {
  // Every assignment, every shared expert's R rows, and at most pad − 1 padding rows per expert.
  return static_cast<int64_t>(rows) * (top_k + n_shared) + static_cast<int64_t>(n_experts + n_shared) * (pad - 1);
}

MoeDispatch moe_dispatch(const int32_t* chosen, int rows, int n_experts, int n_shared, int top_k, int pad,
                         int32_t* slot, int32_t* tokens, int32_t* choice, int64_t* scratch, cudaStream_t stream) {
  check_router("moe_dispatch", rows, n_experts, top_k);
  detail::require(pad >= 1 && n_shared >= 0, "moe_dispatch", "needs pad >= 1 and n_shared >= 0");
  const int E = n_experts, J = n_experts + n_shared;
  count_kernel<<<E, kDispatchThreads, 0, stream>>>(chosen, static_cast<int64_t>(rows) * top_k, scratch);
  detail::check_launch();
  MoeDispatch plan;
  plan.counts.assign(J, rows);  // shared experts: every token
  FP4_CUDA_CHECK(cudaMemcpyAsync(plan.counts.data(), scratch, sizeof(int64_t) * E, cudaMemcpyDeviceToHost, stream));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
  plan.offsets.assign(J + 1, 0);
  for (int j = 0; j < J; ++j) plan.offsets[j + 1] = plan.offsets[j] + (plan.counts[j] + pad - 1) / pad * pad;
  FP4_CUDA_CHECK(cudaMemcpyAsync(scratch, plan.counts.data(), sizeof(int64_t) * J, cudaMemcpyHostToDevice, stream));
  FP4_CUDA_CHECK(cudaMemcpyAsync(scratch + J, plan.offsets.data(), sizeof(int64_t) * (J + 1), cudaMemcpyHostToDevice,
                                 stream));
  fill_kernel<<<J, kDispatchThreads, 0, stream>>>(chosen, rows, E, top_k, scratch + J, slot, tokens, choice);
  detail::check_launch();
  // No second wait: the two copies read pageable host memory, which the runtime stages before
  // they return, and the vectors' storage lives on in the returned plan anyway.
  return plan;
}

// Whether the bf16 row kernels can take 8 values a thread (the *_vec kernels): d a multiple of 8 and
// every pointer given (null ones are absent operands) 16-byte aligned; and their launch shape.
static bool row_vectors(int d, std::initializer_list<const void*> pointers) {
  if (d % 8 != 0) return false;
  for (const void* p : pointers)
    if (!detail::aligned(p, 16)) return false;
  return true;
}

struct VecLaunch {
  dim3 block;
  unsigned grid;
};

static VecLaunch vec_launch(int64_t n_rows, int dv) {
  const int tx = std::min(dv, kVecThreads), ty = std::max(1, kVecThreads / tx);
  return {dim3(tx, ty), detail::elementwise_blocks(static_cast<size_t>(n_rows), ty)};
}

template <typename T>
static void launch_gather(const T* x, const int32_t* tokens, int64_t total, int rows, int d, T* x_groups,
                          cudaStream_t stream) {
  if (total == 0) return;
  if constexpr (std::is_same_v<T, bf16_t>) {
    if (row_vectors(d, {x, x_groups})) {
      const VecLaunch l = vec_launch(total, d / 8);
      gather_vec_kernel<<<l.grid, l.block, 0, stream>>>(reinterpret_cast<const uint4*>(x), tokens, total, rows, d / 8,
                                                        reinterpret_cast<uint4*>(x_groups));
      detail::check_launch();
      return;
    }
  }
  gather_kernel<<<row_blocks(total), kRowThreads, 0, stream>>>(x, tokens, total, rows, d, x_groups);
  detail::check_launch();
}

void moe_gather(const float* x, const int32_t* tokens, int64_t total, int rows, int d, float* x_groups,
                cudaStream_t stream) {
  launch_gather(x, tokens, total, rows, d, x_groups, stream);
}

void moe_gather(const bf16_t* x, const int32_t* tokens, int64_t total, int rows, int d, bf16_t* x_groups,
                cudaStream_t stream) {
  launch_gather(x, tokens, total, rows, d, x_groups, stream);
}

template <typename T, typename U>
static void launch_sum_over_experts(const char* op, const T* v, const int32_t* chosen, const int32_t* slot,
                                    const int64_t* offsets, const float* gates, const float* extra, int rows,
                                    int n_experts, int n_shared, int top_k, int d, U* out, cudaStream_t stream) {
  check_router(op, rows, n_experts, top_k);
  if constexpr (std::is_same_v<T, bf16_t> && std::is_same_v<U, bf16_t>) {
    if (row_vectors(d, {v, out, extra})) {
      const VecLaunch l = vec_launch(rows, d / 8);
      sum_over_experts_vec_kernel<<<l.grid, l.block, 0, stream>>>(
          reinterpret_cast<const uint4*>(v), chosen, slot, offsets, gates, extra, rows, n_experts, n_experts + n_shared,
          top_k, d / 8, reinterpret_cast<uint4*>(out));
      detail::check_launch();
      return;
    }
  }
  sum_over_experts_kernel<<<row_blocks(rows), kRowThreads, 0, stream>>>(
      v, chosen, slot, offsets, gates, extra, rows, n_experts, n_experts + n_shared, top_k, d, out);
  detail::check_launch();
}

void moe_combine(const float* y, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                 const float* gates, int rows, int n_experts, int n_shared, int top_k, int d, float* out,
                 cudaStream_t stream) {
  launch_sum_over_experts("moe_combine", y, chosen, slot, offsets, gates, nullptr, rows, n_experts, n_shared, top_k, d,
                          out, stream);
}

void moe_combine(const bf16_t* y, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                 const float* gates, int rows, int n_experts, int n_shared, int top_k, int d, bf16_t* out,
                 cudaStream_t stream) {
  launch_sum_over_experts("moe_combine", y, chosen, slot, offsets, gates, nullptr, rows, n_experts, n_shared, top_k, d,
                          out, stream);
}

template <typename D, typename T>
static void launch_dgates(const D* dout, const T* y, const int32_t* chosen, const int32_t* slot,
                          const int64_t* offsets, int rows, int top_k, int d, float* dgates, cudaStream_t stream) {
  dgates_kernel<<<blocks_for(static_cast<int64_t>(rows) * top_k * 8), kThreads, 0, stream>>>(dout, y, chosen, slot,
                                                                                              offsets, rows, top_k, d,
                                                                                              dgates);
  detail::check_launch();
}

void moe_dgates(const float* dout, const float* y, const int32_t* chosen, const int32_t* slot,
                const int64_t* offsets, int rows, int top_k, int d, float* dgates, cudaStream_t stream) {
  launch_dgates(dout, y, chosen, slot, offsets, rows, top_k, d, dgates, stream);
}

void moe_dgates(const bf16_t* dout, const bf16_t* y, const int32_t* chosen, const int32_t* slot,
                const int64_t* offsets, int rows, int top_k, int d, float* dgates, cudaStream_t stream) {
  launch_dgates(dout, y, chosen, slot, offsets, rows, top_k, d, dgates, stream);
}

template <typename D, typename T>
static void launch_expert_dy(const D* dout, const int32_t* tokens, const int32_t* choice, const float* gates,
                             int64_t total, int rows, int d, T* dy, cudaStream_t stream) {
  if (total == 0) return;
  if constexpr (std::is_same_v<D, bf16_t> && std::is_same_v<T, bf16_t>) {
    if (row_vectors(d, {dout, dy})) {
      const VecLaunch l = vec_launch(total, d / 8);
      expert_dy_vec_kernel<<<l.grid, l.block, 0, stream>>>(reinterpret_cast<const uint4*>(dout), tokens, choice, gates,
                                                           total, rows, d / 8, reinterpret_cast<uint4*>(dy));
      detail::check_launch();
      return;
    }
  }
  expert_dy_kernel<<<row_blocks(total), kRowThreads, 0, stream>>>(dout, tokens, choice, gates, total, rows, d, dy);
  detail::check_launch();
}

void moe_expert_dy(const float* dout, const int32_t* tokens, const int32_t* choice, const float* gates,
                   int64_t total, int rows, int d, float* dy, cudaStream_t stream) {
  launch_expert_dy(dout, tokens, choice, gates, total, rows, d, dy, stream);
}

void moe_expert_dy(const bf16_t* dout, const int32_t* tokens, const int32_t* choice, const float* gates,
                   int64_t total, int rows, int d, bf16_t* dy, cudaStream_t stream) {
  launch_expert_dy(dout, tokens, choice, gates, total, rows, d, dy, stream);
}

void moe_sum_dx(const float* dx, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                const float* router_dh, int rows, int n_experts, int n_shared, int top_k, int d, float* dh,
                cudaStream_t stream) {
  launch_sum_over_experts("moe_sum_dx", dx, chosen, slot, offsets, nullptr, router_dh, rows, n_experts, n_shared,
                          top_k, d, dh, stream);
}

void moe_sum_dx(const bf16_t* dx, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                const float* router_dh, int rows, int n_experts, int n_shared, int top_k, int d, bf16_t* dh,
                cudaStream_t stream) {
  launch_sum_over_experts("moe_sum_dx", dx, chosen, slot, offsets, nullptr, router_dh, rows, n_experts, n_shared,
                          top_k, d, dh, stream);
}

void moe_router_backward(const float* logits, const float* scores, const int32_t* chosen, const float* lse,
                         const float* dgates, const int64_t* counts, int rows, int n_experts, int top_k, bool sigmoid,
                         bool renormalize, float balance_scale, float z_scale, float* dlogits, cudaStream_t stream) {
  check_router("moe_router_backward", rows, n_experts, top_k);
  router_backward_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, scores, chosen, lse, dgates, counts, rows,
                                                                    n_experts, top_k, sigmoid, renormalize,
                                                                    balance_scale, z_scale, dlogits);
  detail::check_launch();
}

}  // namespace fp4::cuda
