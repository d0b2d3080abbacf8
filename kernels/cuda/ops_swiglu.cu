// ops_swiglu.cu — see ops.cuh: SwiGLU forward and backward, one thread per (row, feature).
//
// The expressions are the reference's, operation for operation; the only difference from the CPU
// is the exponential (CUDA's expf, within 2 ulp, against glibc's), so results agree to a few ulp
// (tests/gpu/ops_test.cpp states the bound).
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <string>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void swiglu_forward_kernel(const float* u, int rows, int f, float* a) {
  const size_t n = static_cast<size_t>(rows) * f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / f, j = i % f;
    const float gate = u[r * 2 * f + j], up = u[r * 2 * f + f + j];
    const float sig = 1.0f / (1.0f + expf(-gate));
    a[i] = (gate * sig) * up;
  }
}

__global__ void swiglu_backward_kernel(const float* u, const float* da, int rows, int f, float* du) {
  const size_t n = static_cast<size_t>(rows) * f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / f, j = i % f;
    const float g = u[r * 2 * f + j], up = u[r * 2 * f + f + j];
    const float sig = 1.0f / (1.0f + expf(-g));
    const float silu = g * sig;
    du[r * 2 * f + j] = da[i] * up * (sig * (1.0f + g * (1.0f - sig)));
    du[r * 2 * f + f + j] = da[i] * silu;
  }
}

void check_shape(const char* op, int rows, int f) {
  detail::require(rows >= 1 && f >= 1, op,
                  "needs rows >= 1 and f >= 1, got rows = " + std::to_string(rows) + ", f = " + std::to_string(f));
}

}  // namespace

void swiglu_forward(const float* u, int rows, int f, float* a, cudaStream_t stream) {
  check_shape("swiglu_forward", rows, f);
  const size_t n = static_cast<size_t>(rows) * f;
  swiglu_forward_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(u, rows, f, a);
  detail::check_launch();
}

void swiglu_backward(const float* u, const float* da, int rows, int f, float* du, cudaStream_t stream) {
  check_shape("swiglu_backward", rows, f);
  const size_t n = static_cast<size_t>(rows) * f;
  swiglu_backward_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(u, da, rows, f, du);
  detail::check_launch();
}

}  // namespace fp4::cuda
