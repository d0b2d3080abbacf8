// ops_optimizer.cu — see ops.cuh: AdamW over the flat parameter buffer, and the fp64 sums (the
// global gradient norm).
//
// AdamW is element-wise: every element runs kernels/adamw.h's adamw_update, the function the CPU
// engine's fp4::run::AdamW::step runs (IEEE division and square root, no FMA contraction under
// --fmad=false), with the constants made on the host by the same make_adamw_constants, so the
// result is bit-identical to it. Each element finds its range (decay or not) by a binary search
// over the range ends, so the whole buffer is one launch.
//
// The sums: kSumBlocks blocks of kSumThreads threads; thread t of block b adds, in fp64, the
// elements b·kSumThreads + t + k·(kSumBlocks·kSumThreads), k = 0, 1, ...; each block then reduces
// its threads with a fixed tree, and one block reduces the kSumBlocks partials with a fixed tree.
// Nothing depends on the device, so the bits are the same on every run and every GPU.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <cmath>
#include <string>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kSumThreads = 256;

// ---- Sums ------------------------------------------------------------------------------------

template <bool kSquare>
__global__ void sum_partial_kernel(const float* x, size_t n, double* partial) {
  __shared__ double sh[kSumThreads];
  const size_t stride = static_cast<size_t>(kSumBlocks) * kSumThreads;
  double acc = 0.0;
  for (size_t i = blockIdx.x * static_cast<size_t>(kSumThreads) + threadIdx.x; i < n; i += stride) {
    const double v = x[i];
    acc += kSquare ? v * v : v;  // the square of a float is exact in double
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) sh[threadIdx.x] += sh[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void sum_final_kernel(const double* partial, double* out) {
  __shared__ double sh[kSumBlocks];
  sh[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  for (int half = kSumBlocks / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) sh[threadIdx.x] += sh[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

template <bool kSquare>
void launch_sum(const float* x, size_t n, double* out, Workspace& workspace, cudaStream_t stream) {
  static_assert((kSumBlocks & (kSumBlocks - 1)) == 0 && kSumBlocks <= 1024, "one block reduces the partials");
  auto* partial = static_cast<double*>(workspace.get(kSumBlocks * sizeof(double)));
  sum_partial_kernel<kSquare><<<kSumBlocks, kSumThreads, 0, stream>>>(x, n, partial);
  detail::check_launch();
  sum_final_kernel<<<1, kSumBlocks, 0, stream>>>(partial, out);
  detail::check_launch();
}

// ---- AdamW -----------------------------------------------------------------------------------

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n,
                             const size_t* ends, const uint8_t* decay, int count, AdamWConstants c,
                             float grad_scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // The first range whose end lies beyond i.
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (ends[mid] > i) hi = mid;
      else lo = mid + 1;
    }
    params[i] = adamw_update(params[i], grads[i], grad_scale, m[i], v[i], c, decay[lo] != 0);
  }
}

}  // namespace

void sum_squares_f64(const float* x, size_t n, double* out, Workspace& workspace, cudaStream_t stream) {
  launch_sum<true>(x, n, out, workspace, stream);
}

void sum_f64(const float* x, size_t n, double* out, Workspace& workspace, cudaStream_t stream) {
  launch_sum<false>(x, n, out, workspace, stream);
}

AdamWConstants adamw_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                               int64_t t) {
  detail::require(t >= 1, "adamw_constants", "the step count starts at 1, got " + std::to_string(t));
  return make_adamw_constants(lr, beta1, beta2, eps, weight_decay, t);
}

AdamWRanges::AdamWRanges(const std::vector<AdamWRange>& ranges, size_t n) : n_(n) {
  detail::require(!ranges.empty() && n > 0, "AdamWRanges", "needs at least one range and one parameter");
  std::vector<size_t> ends;
  std::vector<uint8_t> decay;
  size_t next = 0;
  for (const AdamWRange& r : ranges) {
    detail::require(r.offset == next && r.size > 0, "AdamWRanges",
                    "the ranges must be non-empty, sorted and contiguous: a range starts at " +
                        std::to_string(r.offset) + " where " + std::to_string(next) + " was expected");
    next = r.offset + r.size;
    ends.push_back(next);
    decay.push_back(r.decay ? 1 : 0);
  }
  detail::require(next == n, "AdamWRanges",
                  "the ranges cover " + std::to_string(next) + " parameters, not " + std::to_string(n));
  count_ = static_cast<int>(ranges.size());
  ends_ = DeviceArray<size_t>(ends);
  decay_ = DeviceArray<uint8_t>(decay);
}

void adamw_step(float* params, const float* grads, float* m, float* v, const AdamWRanges& ranges,
                const AdamWConstants& c, float grad_scale, cudaStream_t stream) {
  const size_t n = ranges.size();
  adamw_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      params, grads, m, v, n, ranges.device_ends(), ranges.device_decay(), ranges.count(), c, grad_scale);
  detail::check_launch();
}

}  // namespace fp4::cuda
