// ops_bench.cpp — the CUDA training ops (kernels/cuda/ops.cuh) and the qkv GEMM, timed at the size
// of one d12 micro-batch: 8 sequences of 1024 tokens, d_model 768, 12 heads of 64, byte vocabulary
// (and cross-entropy over a GPT-2-sized vocabulary too). One line per op: milliseconds per call, the
// mean of five calls after one warm-up. tests/gpu/ops_test.cpp checks the same ops at this size
// against the CPU; here nothing is checked, only timed.
//
//   build/bench/fp4lab_bench_ops
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/numerics.h"

namespace {

namespace cu = fp4::cuda;
using cu::DeviceArray;
using fp4::bf16_t;

std::vector<float> normal(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Milliseconds per call of fn (one warm-up, then the mean of five), on the default stream.
template <class Fn>
double time_ms(Fn&& fn) {
  fn();
  cudaEvent_t start, stop;
  FP4_CUDA_CHECK(cudaEventCreate(&start));
  FP4_CUDA_CHECK(cudaEventCreate(&stop));
  FP4_CUDA_CHECK(cudaEventRecord(start, nullptr));
  for (int i = 0; i < 5; ++i) fn();
  FP4_CUDA_CHECK(cudaEventRecord(stop, nullptr));
  FP4_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  FP4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 5.0;
}

}  // namespace

int main() {
  const int B = 8, T = 1024, H = 12, hd = 64, d = H * hd, rows = B * T, V = 256;
  const size_t nd = static_cast<size_t>(rows) * d;
  cu::Workspace ws;
  {
    std::vector<int32_t> tokens(rows);
    for (int r = 0; r < rows; ++r) tokens[r] = (r * 31) % V;
    DeviceArray<int32_t> g_tokens(tokens);
    DeviceArray<float> g_dout(normal(nd, 302)), g_dtable(normal(static_cast<size_t>(V) * d, 303));
    std::printf("embedding_backward rows=%d d=%d: %.3f ms\n", rows, d, time_ms([&] {
      cu::embedding_backward(g_tokens.get(), g_dout.get(), rows, d, V, g_dtable.get(), ws, nullptr);
    }));
  }
  {
    DeviceArray<float> g_x(normal(nd, 311)), g_gain(normal(d, 312)), g_y(nd), g_rstd(rows), g_dy(normal(nd, 313)),
        g_dx(nd), g_dgain(d);
    std::printf("rmsnorm_forward rows=%d d=%d: %.3f ms\n", rows, d, time_ms([&] {
      cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, g_y.get(), g_rstd.get(), nullptr);
    }));
    std::printf("rmsnorm_backward rows=%d d=%d: %.3f ms\n", rows, d, time_ms([&] {
      cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_dx.get(), g_dgain.get(), ws,
                           nullptr);
    }));
  }
  {  // The element-wise ops as the bf16 training step calls them (stores fused, bf16 copies written).
    const int f = 2048;
    const size_t nf = static_cast<size_t>(rows) * f;
    DeviceArray<float> qkv(normal(nd * 3, 331)), u(normal(2 * nf, 332)), a(nf), da(normal(nf, 333)), du(2 * nf),
        xa(normal(nd, 334)), xb(normal(nd, 335)), xo(nd);
    DeviceArray<bf16_t> copy(2 * nf);
    const cu::RopeTable table(T, hd, 10000.0);
    const cu::StoreOut st{true, copy.get()};
    std::printf("rope_forward_qkv B=%d T=%d H=%d hd=%d: %.3f ms\n", B, T, H, hd, time_ms([&] {
      cu::rope_forward_qkv(qkv.get(), B, T, H, hd, table, nullptr, st);
    }));
    std::printf("swiglu_forward_round_u rows=%d f=%d: %.3f ms\n", rows, f, time_ms([&] {
      cu::swiglu_forward_round_u(u.get(), rows, f, a.get(), nullptr, st);
    }));
    std::printf("swiglu_backward rows=%d f=%d: %.3f ms\n", rows, f, time_ms([&] {
      cu::swiglu_backward(u.get(), da.get(), rows, f, du.get(), nullptr, st, true);
    }));
    std::printf("residual_add n=%zu: %.3f ms\n", nd, time_ms([&] {
      cu::residual_add(xa.get(), xb.get(), xo.get(), nd, nullptr, st, true);
    }));
    std::printf("round_to_bf16 + copy n=%zu: %.3f ms\n", nd, time_ms([&] {
      cu::round_to_bf16(xo.get(), nd, copy.get(), nullptr);
    }));
  }
  {
    DeviceArray<float> f_qkv(normal(nd * 3, 323)), f_out(nd), f_lse(static_cast<size_t>(B) * H * T),
        f_dout(normal(nd, 324)), f_dqkv(nd * 3);
    std::printf("attention_forward B=%d T=%d H=%d hd=%d: %.3f ms\n", B, T, H, hd, time_ms([&] {
      cu::attention_forward(f_qkv.get(), B, T, H, hd, f_out.get(), f_lse.get(), nullptr);
    }));
    std::printf("attention_backward B=%d T=%d H=%d hd=%d: %.3f ms\n", B, T, H, hd, time_ms([&] {
      cu::attention_backward(f_qkv.get(), f_lse.get(), f_dout.get(), B, T, H, hd, f_dqkv.get(), ws, nullptr);
    }));
  }
  for (int vocab : {V, 50257}) {
    const size_t n = static_cast<size_t>(rows) * vocab;
    DeviceArray<float> z(n), loss(rows);
    FP4_CUDA_CHECK(cudaMemset(z.get(), 0, n * sizeof(float)));  // the values do not matter for the time
    std::vector<int32_t> targets(rows);
    for (int r = 0; r < rows; ++r) targets[r] = (r * 7919) % vocab;
    DeviceArray<int32_t> t(targets);
    std::printf("cross_entropy rows=%d vocab=%d (fused, in place): %.3f ms\n", rows, vocab, time_ms([&] {
      cu::cross_entropy(z.get(), t.get(), rows, vocab, loss.get(), z.get(), 1.0f / rows, nullptr);
    }));
  }
  {
    cu::Gemm gemm;
    DeviceArray<bf16_t> x(nd), w(static_cast<size_t>(3) * d * d);
    FP4_CUDA_CHECK(cudaMemset(x.get(), 0x3c, nd * sizeof(bf16_t)));
    FP4_CUDA_CHECK(cudaMemset(w.get(), 0x3c, static_cast<size_t>(3) * d * d * sizeof(bf16_t)));
    DeviceArray<float> y(nd * 3);
    const double ms = time_ms([&] { gemm.gemm(false, true, rows, 3 * d, d, 1.0f, x.get(), w.get(), 0.0f, y.get(), nullptr); });
    std::printf("gemm NT m=%d n=%d k=%d (qkv fprop): %.3f ms, %.1f TFLOP/s\n", rows, 3 * d, d, ms,
                2.0 * rows * 3.0 * d * d / (ms * 1e-3) / 1e12);
  }
  return 0;
}
