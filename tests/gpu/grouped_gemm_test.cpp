// [gpu] The grouped GEMM (kernels/cuda/grouped_gemm.cuh) against fp4::cpu::gemm, product by
// product, in the two forms the MoE blocks use: the experts' forward (NT) and their dgrad (NN),
// bf16 out, over groups stacked in one buffer as the dispatch lays them out (empty, one-row and
// odd-sized groups among them). The bound is ops_test.cpp's check_gemm's: 2·(k + 2)·eps·|A||B|,
// plus half a bf16 ulp for the bf16 output. Every call is also made twice and must give the same
// bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/grouped_gemm.cuh"
#include "kernels/numerics.h"

namespace {

namespace cu = fp4::cuda;
using fp4::bf16_t;
using fp4::cuda::DeviceArray;

constexpr double kEps = 0x1p-23;

// Normal values rounded to bf16: the values (fp32) and their bf16 bits.
void bf16_normal(size_t n, uint64_t seed, std::vector<float>& v, std::vector<bf16_t>& b) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  v.resize(n);
  b.resize(n);
  for (size_t i = 0; i < n; ++i) v[i] = fp4::bf16_to_float(b[i] = fp4::float_to_bf16(dist(rng)));
}

struct Form {
  const char* name;
  bool trans_b;
};

// Groups of `rows` rows stacked in X [total, k] (the dispatch's layout), each with its own weight
// W_j: NT (forward) Y_j [rows, n] = X_j · W_jᵀ with W_j [n, k]; NN (dgrad) Y_j = X_j · W_j with
// W_j [k, n].
void check_grouped(const Form& f, const std::vector<int>& rows, int n, int k, uint64_t seed) {
  cu::GroupedGemm grouped;
  const int G = static_cast<int>(rows.size());
  std::vector<int64_t> first(G + 1, 0);
  for (int j = 0; j < G; ++j) first[j + 1] = first[j] + rows[j];
  const size_t total = static_cast<size_t>(first[G]);
  std::vector<float> x;
  std::vector<bf16_t> xb;
  bf16_normal(total * k, seed, x, xb);
  std::vector<std::vector<float>> w(G);
  std::vector<std::vector<bf16_t>> wb(G);
  for (int j = 0; j < G; ++j) bf16_normal(static_cast<size_t>(n) * k, seed + 10 + j, w[j], wb[j]);
  DeviceArray<bf16_t> gx(xb), gy(std::max<size_t>(total * n, 1));
  std::vector<DeviceArray<bf16_t>> gw;
  for (int j = 0; j < G; ++j) gw.emplace_back(wb[j]);
  std::vector<cu::GroupedProduct> products;
  for (int j = 0; j < G; ++j)
    products.push_back({gx.get() + first[j] * k, gw[j].get(), gy.get() + first[j] * n, rows[j], n, k});
  std::vector<float> runs[2];
  for (int run = 0; run < 2; ++run) {
    FP4_CUDA_CHECK(cudaMemset(gy.get(), 0xff, gy.size() * sizeof(bf16_t)));  // NaNs where nothing is written
    grouped.run(false, f.trans_b, products, nullptr);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<bf16_t> r = gy.download();
    runs[run].resize(total * n);
    for (size_t i = 0; i < total * n; ++i) runs[run][i] = fp4::bf16_to_float(r[i]);
  }
  size_t checked = 0;
  for (int j = 0; j < G; ++j) {
    if (rows[j] == 0) continue;
    const float* xa = x.data() + first[j] * k;
    std::vector<float> want(static_cast<size_t>(rows[j]) * n), mag(want.size());
    fp4::cpu::gemm(false, f.trans_b, rows[j], n, k, 1.0f, xa, w[j].data(), 0.0f, want.data());
    std::vector<float> abs_x(xa, xa + static_cast<size_t>(rows[j]) * k), abs_w = w[j];
    for (float& v : abs_x) v = std::fabs(v);
    for (float& v : abs_w) v = std::fabs(v);
    fp4::cpu::gemm(false, f.trans_b, rows[j], n, k, 1.0f, abs_x.data(), abs_w.data(), 0.0f, mag.data());
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      double bound = 2.0 * (k + 2) * kEps * 1.001 * mag[i];
      bound += 0x1p-8 * (std::fabs(want[i]) + bound);
      if (!(std::fabs(static_cast<double>(runs[0][first[j] * n + i]) - want[i]) <= bound)) ++bad;
      ++checked;
    }
    INFO(f.name << " group " << j << " (" << rows[j] << " rows, n " << n << ", k " << k << "): " << bad
                << " values outside the bound");
    CHECK(bad == 0);
  }
  INFO(f.name << ": two identical calls");
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
  std::printf("[grouped gemm] %-10s %d groups, %zu values within the bound\n", f.name, G, checked);
}

}  // namespace

TEST_CASE("cuda grouped gemm matches cpu::gemm per product in the MoE blocks' two forms", "[gpu][ops][moe]") {
  // An empty group, a one-row group, odd and 16-aligned sizes: the dispatch's groups.
  const std::vector<int> rows = {37, 0, 1, 128, 250, 16};
  check_grouped({"NT", true}, rows, 192, 96, 11);   // the experts' forward
  check_grouped({"NN", false}, rows, 96, 192, 21);  // their dgrad
}

TEST_CASE("cuda grouped gemm refuses a product whose reduction is empty or whose strides are short",
          "[gpu][ops][moe]") {
  cu::GroupedGemm grouped;
  DeviceArray<bf16_t> a(64), b(64), c(64);
  cu::GroupedProduct p{a.get(), b.get(), c.get(), 4, 4, 0};
  CHECK_THROWS_AS(grouped.run(false, true, {p}, nullptr), std::invalid_argument);
  p.k = 4;
  p.lda = 2;  // below k
  CHECK_THROWS_AS(grouped.run(false, true, {p}, nullptr), std::invalid_argument);
  p.lda = 0;
  p.m = 0;  // no output: nothing to do, no error
  CHECK_NOTHROW(grouped.run(false, true, {p}, nullptr));
}
