// ops_elementwise.cu — see ops.cuh: the bf16 conversions and the residual add. Each element is
// one independent operation, so any thread mapping gives the same bits.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void float_to_bf16_kernel(const float* x, bf16_t* y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = ::fp4::float_to_bf16(x[i]);
}

__global__ void bf16_to_float_kernel(const bf16_t* x, float* y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = ::fp4::bf16_to_float(x[i]);
}

__global__ void round_to_bf16_kernel(float* x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = ::fp4::round_to_bf16(x[i]);
}

__global__ void round_copy_kernel(float* x, bf16_t* copy, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const bf16_t h = ::fp4::float_to_bf16(x[i]);
    x[i] = ::fp4::bf16_to_float(h);  // round_to_bf16(x[i])
    copy[i] = h;                     // float_to_bf16 of the rounded value: the same bits
  }
}

__global__ void residual_add_kernel(const float* a, const float* b, float* out, size_t n, StoreOut store,
                                    bool round_b) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    detail::write_out(out, i, a[i] + detail::stored(b[i], round_b), store);
}

}  // namespace

void float_to_bf16(const float* x, bf16_t* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  float_to_bf16_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  detail::check_launch();
}

void bf16_to_float(const bf16_t* x, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  bf16_to_float_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  detail::check_launch();
}

void round_to_bf16(float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  round_to_bf16_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(x, n);
  detail::check_launch();
}

void round_to_bf16(float* x, size_t n, bf16_t* copy, cudaStream_t stream) {
  if (n == 0) return;
  round_copy_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(x, copy, n);
  detail::check_launch();
}

void residual_add(const float* a, const float* b, float* out, size_t n, cudaStream_t stream, StoreOut out_store,
                  bool round_b) {
  if (n == 0) return;
  residual_add_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(a, b, out, n, out_store,
                                                                                        round_b);
  detail::check_launch();
}

}  // namespace fp4::cuda
