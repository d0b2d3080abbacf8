// ops_cross_entropy.cu — see ops.cuh: fused softmax, cross-entropy and its gradient.
//
// One block per row. Each thread keeps an online (max, sum of exp(z − max)) over its strided
// elements (one read of the row); the block combines the pairs with a fixed butterfly inside each
// warp and then a fixed butterfly over the warps. Combining (m_a, s_a) with (m_b, s_b) gives
// (M, s_a·exp(m_a − M) + s_b·exp(m_b − M)), which is symmetric in a and b bit for bit, so every
// thread ends with the same lse and the result depends only on the row length. The gradient pass
// reads each logit and writes its gradient from the same thread, so dlogits may be the logits
// buffer; the target's logit is read before any thread writes.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <cmath>
#include <string>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct MaxSum {
  float m, s;
};

// An empty side (s == 0, m == −inf) contributes nothing; without the test −inf − (−inf) would make
// a NaN when both sides are empty.
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  const float ta = a.s == 0.0f ? 0.0f : a.s * expf(a.m - m);
  const float tb = b.s == 0.0f ? 0.0f : b.s * expf(b.m - m);
  return {m, ta + tb};
}

__device__ __forceinline__ MaxSum warp_combine(MaxSum v) {
  for (int off = 16; off > 0; off >>= 1) {
    const MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
    v = combine(v, o);
  }
  return v;
}

__global__ void cross_entropy_kernel(const float* logits, const int32_t* targets, int vocab, float* loss,
                                     float* dlogits, float scale) {
  __shared__ MaxSum warp_result[kWarps];
  __shared__ float target_logit;
  const size_t row = blockIdx.x;
  const float* z = logits + row * vocab;
  const int32_t target = targets[row];
  const bool valid = target >= 0 && target < vocab;
  if (threadIdx.x == 0) target_logit = valid ? z[target] : NAN;

  MaxSum acc{-INFINITY, 0.0f};
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    const float v = z[j];
    if (v > acc.m) {
      acc.s = acc.s * expf(acc.m - v) + 1.0f;  // acc.m = −inf at first: expf(−inf) = 0
      acc.m = v;
    } else {
      acc.s += expf(v - acc.m);  // NaN logits fall here and make the sum NaN
    }
  }
  acc = warp_combine(acc);
  if (threadIdx.x % 32 == 0) warp_result[threadIdx.x / 32] = acc;
  __syncthreads();  // also publishes target_logit, read before any gradient is written
  MaxSum all = threadIdx.x % 32 < kWarps ? warp_result[threadIdx.x % 32] : MaxSum{-INFINITY, 0.0f};
  all = warp_combine(all);
  const float lse = all.m + logf(all.s);
  if (threadIdx.x == 0) loss[row] = valid ? lse - target_logit : NAN;
  if (dlogits == nullptr) return;
  float* dz = dlogits + row * vocab;
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    float g = scale * expf(z[j] - lse);
    if (j == target) g -= scale;
    dz[j] = valid ? g : NAN;
  }
}

}  // namespace

void cross_entropy(const float* logits, const int32_t* targets, int rows, int vocab, float* loss,
                   float* dlogits, float scale, cudaStream_t stream) {
  detail::require(rows >= 1 && vocab >= 1, "cross_entropy",
                  "needs rows >= 1 and vocab >= 1, got rows = " + std::to_string(rows) + ", vocab = " +
                      std::to_string(vocab));
  cross_entropy_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, vocab, loss,
                                                                            dlogits, scale);
  detail::check_launch();
}

}  // namespace fp4::cuda
