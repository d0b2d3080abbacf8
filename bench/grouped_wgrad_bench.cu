// grouped_wgrad_bench.cu — can the MoE experts' weight gradients be one library call?
//
// Usage: fp4lab_bench_grouped_wgrad [experts [n k]]     (default 32 experts, n 1024, k 384: the
//                                                       d6-e32k2 block's mlp_in, 2 · d_ff_expert × d)
//
// The CUDA engine's expert weight gradients (engine/cuda_model/cuda_model_moe.cpp,
// experts_backward) are dW_j += dY_jᵀ · X_j over each expert's group of rows: fp32 gradients
// accumulated across micro-steps from bf16 operands, one cuBLASLt call per expert
// (kernels/cuda/gemm.cuh), 2 · E calls per MoE block and micro-step. cuBLAS's grouped call
// (cublasGemmGroupedBatchedEx, which grouped_gemm.cuh uses for the bf16-output expert GEMMs) takes
// many products of different sizes at once, but its documentation does not list a bf16 product
// into an fp32 C. This asks the library directly, on the GPU at hand:
//   1. whether the grouped call accepts bf16 A and B, an fp32 C and beta = 1 (its status);
//   2. if it does, whether its results are the products (against an fp64 host sum of the same
//      bf16 operands: fp32 accumulation over a few hundred terms gives relative errors near 1e-6;
//      the bound is 1e-4 of the magnitude of the terms) and whether two calls give the same bits;
//   3. its time for E products against E calls of gemm.cuh's Gemm, the engine's path, side by side
//      in one run (CUDA events around 20 repetitions, median of 5).
// The groups have padded sizes of 64 · (6 … 11) rows, drawn with a fixed seed: d6-e32k2's groups
// at 8192 rows a micro-step and top-2 (512 rows on average). Prints Markdown.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK, DeviceArray
#include "kernels/cuda/gemm.cuh"
#include "kernels/numerics.h"  // bf16_t, float_to_bf16, bf16_to_float

namespace {

using fp4::bf16_t;
using fp4::cuda::DeviceArray;

struct Group {
  int rows;
  std::vector<bf16_t> dy, x;  // [rows, n], [rows, k]
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int E = argc >= 2 ? std::atoi(argv[1]) : 32;
    const int n = argc >= 4 ? std::atoi(argv[2]) : 1024;
    const int k = argc >= 4 ? std::atoi(argv[3]) : 384;
    if (E < 1 || n < 1 || k < 1) throw std::invalid_argument("experts, n and k must be positive");
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<Group> groups(E);
    for (Group& g : groups) {
      g.rows = 64 * (6 + static_cast<int>(rng() % 6));
      g.dy.resize(static_cast<size_t>(g.rows) * n);
      g.x.resize(static_cast<size_t>(g.rows) * k);
      for (bf16_t& v : g.dy) v = fp4::float_to_bf16(normal(rng));
      for (bf16_t& v : g.x) v = fp4::float_to_bf16(normal(rng));
    }
    const size_t w = static_cast<size_t>(n) * k;
    std::vector<DeviceArray<bf16_t>> dy, x;
    for (const Group& g : groups) {
      dy.emplace_back(g.dy);
      x.emplace_back(g.x);
    }
    const std::vector<float> start(w * E, 0.25f);  // beta = 1 adds to what is there
    DeviceArray<float> dw_grouped(start), dw_each(start);

    // The grouped call in cuBLAS's column-major terms: our row-major dW [n, k] is column-major
    // [k, n], = X_jᵀ [k, rows] · dY_j [rows, n]: first operand X_j (column-major [k, rows], op N,
    // ld k), second dY_j (column-major [n, rows], op T, ld n).
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
    cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED);
    std::vector<cublasOperation_t> op_first(E, CUBLAS_OP_N), op_second(E, CUBLAS_OP_T);
    std::vector<int> m_arr(E, k), n_arr(E, n), k_arr(E), ld_first(E, k), ld_second(E, n), ld_out(E, k), sizes(E, 1);
    std::vector<float> alpha(E, 1.0f), beta(E, 1.0f);
    std::vector<const void*> firsts(E), seconds(E);
    std::vector<void*> outs(E);
    for (int j = 0; j < E; ++j) {
      k_arr[j] = groups[j].rows;
      firsts[j] = x[j].get();
      seconds[j] = dy[j].get();
      outs[j] = dw_grouped.get() + w * j;
    }
    const DeviceArray<const void*> d_firsts(firsts), d_seconds(seconds);
    const DeviceArray<void*> d_outs(outs);
    auto grouped = [&]() {
      return cublasGemmGroupedBatchedEx(handle, op_first.data(), op_second.data(), m_arr.data(), n_arr.data(),
                                        k_arr.data(), alpha.data(), d_firsts.get(), CUDA_R_16BF, ld_first.data(),
                                        d_seconds.get(), CUDA_R_16BF, ld_second.data(), beta.data(), d_outs.get(), CUDA_R_32F,
                                        ld_out.data(), E, sizes.data(), CUBLAS_COMPUTE_32F);
    };
    fp4::cuda::Gemm gemm;
    auto each = [&]() {
      for (int j = 0; j < E; ++j)
        gemm.gemm(true, false, n, k, groups[j].rows, 1.0f, dy[j].get(), x[j].get(), 1.0f, dw_each.get() + w * j, nullptr);
    };

    std::printf("| question | answer |\n|---|---|\n");
    const cublasStatus_t status = grouped();
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("| grouped call, bf16 A and B into an fp32 C, beta 1 | status %d (%s) |\n", static_cast<int>(status),
                status == CUBLAS_STATUS_SUCCESS ? "accepted" : "refused");
    each();
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    if (status == CUBLAS_STATUS_SUCCESS) {
      const std::vector<float> got = dw_grouped.download(), per_call = dw_each.download();
      dw_grouped.upload(start);
      if (grouped() != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("the second grouped call failed");
      const std::vector<float> again = dw_grouped.download();
      // A sample of every expert's outputs against fp64 sums of the same products.
      size_t checked = 0, bad = 0, differs_from_each = 0;
      for (int j = 0; j < E; ++j)
        for (int a = 0; a < n; a += 29)
          for (int b = 0; b < k; b += 17) {
            double sum = 0.25, scale = 0.0;
            for (int r = 0; r < groups[j].rows; ++r) {
              const double t = static_cast<double>(fp4::bf16_to_float(groups[j].dy[static_cast<size_t>(r) * n + a])) *
                               fp4::bf16_to_float(groups[j].x[static_cast<size_t>(r) * k + b]);
              sum += t;
              scale += std::fabs(t);
            }
            const size_t i = w * j + static_cast<size_t>(a) * k + b;
            ++checked;
            bad += std::fabs(got[i] - sum) > 1e-4 * (scale + 0.25);
            differs_from_each += got[i] != per_call[i];
          }
      std::printf("| grouped results against fp64 sums (a sample) | %zu of %zu outside 1e-4 of the terms' magnitude |\n",
                  bad, checked);
      std::printf("| two grouped calls | %s |\n", got == again ? "the same bits" : "DIFFERENT bits");
      std::printf("| grouped against one call each (the sample) | %zu of %zu values differ in their bits |\n",
                  differs_from_each, checked);
    }

    cudaEvent_t e0, e1;
    FP4_CUDA_CHECK(cudaEventCreate(&e0));
    FP4_CUDA_CHECK(cudaEventCreate(&e1));
    auto time_us = [&](auto&& call) {  // µs per call: 20 calls between two events, median of 5
      std::vector<float> t;
      for (int rep = 0; rep < 5; ++rep) {
        FP4_CUDA_CHECK(cudaEventRecord(e0));
        for (int it = 0; it < 20; ++it) call();
        FP4_CUDA_CHECK(cudaEventRecord(e1));
        FP4_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0.0f;
        FP4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.0f / 20.0f);
      }
      return median(t);
    };
    const float each_us = time_us(each);
    std::printf("\n| %d experts, dW [%d, %d], groups of %d to %d rows | µs a pass |\n|---|---:|\n", E, n, k,
                *std::min_element(k_arr.begin(), k_arr.end()), *std::max_element(k_arr.begin(), k_arr.end()));
    std::printf("| one gemm.cuh call per expert (the engine's path) | %.1f |\n", each_us);
    if (status == CUBLAS_STATUS_SUCCESS) {
      const float grouped_us = time_us([&] { grouped(); });
      std::printf("| one grouped call | %.1f (%.2f× the per-expert calls' time) |\n", grouped_us, grouped_us / each_us);
    }
    cublasDestroy(handle);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4lab_bench_grouped_wgrad: %s\n", e.what());
    return 1;
  }
}
