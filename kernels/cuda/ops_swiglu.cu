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

// With round_u (u's store, fused), u is rounded in place as it is read: the thread of (r, j) alone
// touches u's gate and up elements of (r, j).
__global__ void swiglu_forward_kernel(float* u, bool round_u, int rows, int f, float* a, StoreOut store) {
  const size_t n = static_cast<size_t>(rows) * f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / f, j = i % f;
    float gate = u[r * 2 * f + j], up = u[r * 2 * f + f + j];
    if (round_u) {
      gate = ::fp4::round_to_bf16(gate);
      up = ::fp4::round_to_bf16(up);
      u[r * 2 * f + j] = gate;
      u[r * 2 * f + f + j] = up;
    }
    const float sig = 1.0f / (1.0f + expf(-gate));
    detail::write_out(a, i, (gate * sig) * up, store);
  }
}

__global__ void swiglu_backward_kernel(const float* u, const float* da, int rows, int f, float* du, StoreOut store,
                                       bool round_da) {
  const size_t n = static_cast<size_t>(rows) * f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / f, j = i % f;
    const float g = u[r * 2 * f + j], up = u[r * 2 * f + f + j];
    const float sig = 1.0f / (1.0f + expf(-g));
    const float silu = g * sig;
    const float dai = detail::stored(da[i], round_da);
    detail::write_out(du, r * 2 * f + j, dai * up * (sig * (1.0f + g * (1.0f - sig))), store);
    detail::write_out(du, r * 2 * f + f + j, dai * silu, store);
  }
}

void check_shape(const char* op, int rows, int f) {
  detail::require(rows >= 1 && f >= 1, op,
                  "needs rows >= 1 and f >= 1, got rows = " + std::to_string(rows) + ", f = " + std::to_string(f));
}

}  // namespace

void swiglu_forward(const float* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store) {
  check_shape("swiglu_forward", rows, f);
  const size_t n = static_cast<size_t>(rows) * f;
  // round_u false: the kernel never writes u.
  swiglu_forward_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      const_cast<float*>(u), false, rows, f, a, a_store);
  detail::check_launch();
}

void swiglu_forward_round_u(float* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store) {
  check_shape("swiglu_forward_round_u", rows, f);
  const size_t n = static_cast<size_t>(rows) * f;
  swiglu_forward_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(u, true, rows, f, a,
                                                                                          a_store);
  detail::check_launch();
}

void swiglu_backward(const float* u, const float* da, int rows, int f, float* du, cudaStream_t stream,
                     StoreOut du_store, bool round_da) {
  check_shape("swiglu_backward", rows, f);
  const size_t n = static_cast<size_t>(rows) * f;
  swiglu_backward_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(u, da, rows, f, du,
                                                                                           du_store, round_da);
  detail::check_launch();
}

}  // namespace fp4::cuda
