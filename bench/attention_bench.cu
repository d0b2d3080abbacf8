// attention_bench.cu — causal attention, forward and backward: the fp32 tiled kernel (ops.cuh's
// attention_forward/backward) against the fused bf16 tensor-core one (flash_attention.cuh), with a
// cuBLASLt bf16 GEMM (8192³, gemm.cuh) measured in the same run as the device's reference rate.
//
// Usage: fp4lab_bench_attention [iterations]     (default 20)
//
// Each call is timed alone with CUDA events after 3 warm-up calls; the table gives the median.
// FLOPs count the causal half of the products: forward 2·2·B·H·T²·hd / 2 (S = Q·Kᵀ and P·V),
// backward 2.5× the forward (S recomputed, dP, dV, dK, dQ), whatever a kernel actually recomputes.
// The flash backward includes its D = rowsum(dO ∘ O) pass; its inputs are bf16, the fp32 kernel's
// fp32 (the conversions are not timed). The flash rows are the mma.sync kernels and, on an sm_90
// device of an sm_90 build, the wgmma kernels (flash_attention.cuh's two families). Prints a
// Markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/ops.cuh"

namespace {

using namespace fp4;

// Uniform values in [-2, 2) from a hash of the index: the timings do not depend on the values, but
// they must be finite and not all equal.
__device__ float hash_uniform(size_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) ^ seed * 0x9e3779b9u;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(x >> 8) * (4.0f / 16777216.0f) - 2.0f;
}
__global__ void fill(float* f, bf16_t* b, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const bf16_t v = float_to_bf16(hash_uniform(i, seed));
    if (f) f[i] = bf16_to_float(v);
    if (b) b[i] = v;
  }
}

template <class T>
T* device_alloc(size_t n) {
  T* p = nullptr;
  FP4_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return p;
}

// Median time of one call in ms.
template <class F>
double median_ms(F&& call, int iterations, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) call();
  cudaEvent_t start, stop;
  FP4_CUDA_CHECK(cudaEventCreate(&start));
  FP4_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> t;
  for (int i = 0; i < iterations; ++i) {
    FP4_CUDA_CHECK(cudaEventRecord(start, stream));
    call();
    FP4_CUDA_CHECK(cudaEventRecord(stop, stream));
    FP4_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    FP4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(ms);
  }
  FP4_CUDA_CHECK(cudaEventDestroy(start));
  FP4_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Shape {
  int batch, seq, heads;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const int iterations = argc >= 2 ? std::max(1, std::atoi(argv[1])) : 20;
    constexpr int hd = 64;
    cudaDeviceProp prop{};
    FP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs; median of %d calls after 3 warm-ups\n\n", prop.name, prop.multiProcessorCount,
                iterations);
    cudaStream_t stream;
    FP4_CUDA_CHECK(cudaStreamCreate(&stream));
    const unsigned fill_blocks = 8 * prop.multiProcessorCount;

    // The reference rate: a bf16 GEMM through the project's cuBLASLt wrapper.
    double gemm_tflops = 0.0;
    {
      constexpr int n = 8192;
      const size_t nn = static_cast<size_t>(n) * n;
      bf16_t* a = device_alloc<bf16_t>(nn);
      bf16_t* b = device_alloc<bf16_t>(nn);
      bf16_t* c = device_alloc<bf16_t>(nn);
      fill<<<fill_blocks, 256, 0, stream>>>(nullptr, a, nn, 1);
      fill<<<fill_blocks, 256, 0, stream>>>(nullptr, b, nn, 2);
      FP4_CUDA_CHECK(cudaGetLastError());
      cuda::Gemm gemm;
      cuda::GemmShape shape;
      shape.trans_b = true;
      shape.m = shape.n = shape.k = n;
      const double ms = median_ms([&] { gemm.matmul(shape, 1.0f, a, b, 0.0f, c, stream); }, iterations, stream);
      gemm_tflops = 2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12;
      std::printf("cuBLASLt bf16 GEMM %d^3 (bf16 out, fp32 accumulate): %.3f ms, %.1f TFLOP/s\n\n", n, ms, gemm_tflops);
      FP4_CUDA_CHECK(cudaFree(a));
      FP4_CUDA_CHECK(cudaFree(b));
      FP4_CUDA_CHECK(cudaFree(c));
    }

    std::printf("| B | T | H | kernel | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | fwd+bwd ms | speed-up | %% of GEMM |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    const Shape shapes[] = {{8, 1024, 12}, {4, 2048, 12}};
    for (const Shape& s : shapes) {
      const size_t rows = static_cast<size_t>(s.batch) * s.seq, d = static_cast<size_t>(s.heads) * hd;
      const size_t nq = rows * 3 * d, no = rows * d, nl = static_cast<size_t>(s.batch) * s.heads * s.seq;
      float* f_qkv = device_alloc<float>(nq);
      float* f_dout = device_alloc<float>(no);
      bf16_t* b_qkv = device_alloc<bf16_t>(nq);
      bf16_t* b_dout = device_alloc<bf16_t>(no);
      float* out = device_alloc<float>(no);
      float* lse = device_alloc<float>(nl);
      float* dqkv = device_alloc<float>(nq);
      fill<<<fill_blocks, 256, 0, stream>>>(f_qkv, b_qkv, nq, 3);
      fill<<<fill_blocks, 256, 0, stream>>>(f_dout, b_dout, no, 4);
      FP4_CUDA_CHECK(cudaGetLastError());
      cuda::Workspace ws;

      const double fwd_flop = 2.0 * 2.0 * s.batch * s.heads * static_cast<double>(s.seq) * s.seq * hd / 2.0;
      const double bwd_flop = 2.5 * fwd_flop;
      const double f32_fwd = median_ms(
          [&] { cuda::attention_forward(f_qkv, s.batch, s.seq, s.heads, hd, out, lse, stream); }, iterations, stream);
      const double f32_bwd = median_ms(
          [&] { cuda::attention_backward(f_qkv, lse, f_dout, s.batch, s.seq, s.heads, hd, dqkv, ws, stream); },
          iterations, stream);
      auto row = [&](const char* name, double fwd, double bwd) {
        const double total_tflops = (fwd_flop + bwd_flop) / ((fwd + bwd) * 1e-3) / 1e12;
        std::printf("| %d | %d | %d | %s | %.3f | %.1f | %.3f | %.1f | %.3f | %.1fx | %.0f%% |\n", s.batch, s.seq,
                    s.heads, name, fwd, fwd_flop / (fwd * 1e-3) / 1e12, bwd, bwd_flop / (bwd * 1e-3) / 1e12,
                    fwd + bwd, (f32_fwd + f32_bwd) / (fwd + bwd), 100.0 * total_tflops / gemm_tflops);
      };
      row("fp32 tiled (ops.cuh)", f32_fwd, f32_bwd);
      std::vector<cuda::FlashKernels> families{cuda::FlashKernels::mma_sync};
      if (cuda::flash_wgmma_available()) families.push_back(cuda::FlashKernels::wgmma);
      for (cuda::FlashKernels family : families) {
        cuda::set_flash_kernels(family);
        const double fa_fwd = median_ms(
            [&] { cuda::flash_attention_forward(b_qkv, s.batch, s.seq, s.heads, hd, out, lse, stream); }, iterations,
            stream);
        const double fa_bwd = median_ms(
            [&] {
              cuda::flash_attention_backward(b_qkv, out, lse, b_dout, s.batch, s.seq, s.heads, hd, dqkv, ws, stream);
            },
            iterations, stream);
        row(family == cuda::FlashKernels::wgmma ? "flash bf16 wgmma" : "flash bf16 mma.sync", fa_fwd, fa_bwd);
      }
      cuda::set_flash_kernels(cuda::FlashKernels::automatic);
      for (void* p : {static_cast<void*>(f_qkv), static_cast<void*>(f_dout), static_cast<void*>(b_qkv),
                      static_cast<void*>(b_dout), static_cast<void*>(out), static_cast<void*>(lse),
                      static_cast<void*>(dqkv)})
        FP4_CUDA_CHECK(cudaFree(p));
    }
    FP4_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4lab_bench_attention: %s\n", e.what());
    return 1;
  }
}
