// [gpu] The grouped GEMM (kernels/cuda/grouped_gemm.cuh) against fp4::cpu::gemm, product by
// product, in the three forms the MoE blocks use: the experts' forward (NT, bf16 out), their
// dgrad (NN, bf16 out) and their weight gradient (TN, fp32 out accumulated with beta = 1), over
// groups stacked in one buffer as the dispatch lays them out (empty, one-row and odd-sized groups
// among them). The bound is ops_test.cpp's check_gemm's: 2·(k + 2)·eps·(|alpha|·(|A||B|) + |beta·C0|),
// plus half a bf16 ulp for a bf16 output. Every call is also made twice and must give the same bits.
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
  bool trans_a, trans_b, out_bf16;
  float beta;
};

// Groups of `rows` rows stacked in X [total, k] (the dispatch's layout); each group's own weight
// W_j. NT: Y_j [rows, n] = X_j · W_jᵀ (W_j [n, k]); NN: Y_j = X_j · W_j (W_j [k, n]); TN: C_j [k, n]
// += X_jᵀ · D_j with D_j [rows, n] (a weight gradient: the reduction runs over the group's rows).
void check_grouped(const Form& f, const std::vector<int>& rows, int n, int k, uint64_t seed) {
  cu::GroupedGemm grouped;
  const int G = static_cast<int>(rows.size());
  std::vector<int64_t> first(G + 1, 0);
  for (int j = 0; j < G; ++j) first[j + 1] = first[j] + rows[j];
  const size_t total = static_cast<size_t>(first[G]);
  // A: the stacked operand; B: per group; C: per product.
  std::vector<float> a;
  std::vector<bf16_t> ab;
  bf16_normal(total * k, seed, a, ab);  // X [total, k] in every form
  const int b_rows = f.trans_a ? 0 : (f.trans_b ? n : k);
  std::vector<std::vector<float>> b(G);
  std::vector<std::vector<bf16_t>> bb(G);
  std::vector<std::vector<float>> c0(G), want(G), mag(G);
  for (int j = 0; j < G; ++j) {
    const int m = f.trans_a ? k : rows[j];               // the product's output rows
    const size_t b_size =
        f.trans_a ? static_cast<size_t>(rows[j]) * n : static_cast<size_t>(b_rows) * (f.trans_b ? k : n);
    bf16_normal(b_size, seed + 10 + j, b[j], bb[j]);
    std::vector<bf16_t> unused;
    if (f.beta != 0)
      bf16_normal(static_cast<size_t>(m) * n, seed + 100 + j, c0[j], unused);
    else
      c0[j].assign(static_cast<size_t>(m) * n, 0.0f);
  }
  std::vector<DeviceArray<bf16_t>> gb;
  std::vector<DeviceArray<float>> gc32;
  std::vector<DeviceArray<bf16_t>> gc16;
  DeviceArray<bf16_t> ga(ab);
  for (int j = 0; j < G; ++j) gb.emplace_back(bb[j]);
  std::vector<std::vector<float>> runs[2];
  for (int run = 0; run < 2; ++run) {
    gc32.clear();
    gc16.clear();
    std::vector<cu::GroupedProduct> products;
    for (int j = 0; j < G; ++j) {
      const bf16_t* x = ga.get() + first[j] * k;
      cu::GroupedProduct p;
      if (f.trans_a) {  // C_j [k, n] += X_jᵀ · D_j: A = X_j stored [rows, k], B = D_j [rows, n]
        p.a = x;
        p.b = gb[j].get();
        p.m = k;
        p.n = n;
        p.k = rows[j];
      } else {
        p.a = x;
        p.b = gb[j].get();
        p.m = rows[j];
        p.n = n;
        p.k = k;
      }
      if (f.out_bf16) {
        std::vector<bf16_t> c(c0[j].size());
        for (size_t i = 0; i < c.size(); ++i) c[i] = fp4::float_to_bf16(c0[j][i]);
        gc16.emplace_back(c);
        p.c = gc16.back().get();
      } else {
        gc32.emplace_back(c0[j]);
        p.c = gc32.back().get();
      }
      if (p.m > 0 && p.n > 0 && p.k == 0) continue;  // k = 0: left out by the caller (run refuses it)
      products.push_back(p);
    }
    grouped.run(f.trans_a, f.trans_b, products, 1.0f, f.beta, f.out_bf16, nullptr);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    for (int j = 0; j < G; ++j) {
      if (f.out_bf16) {
        const std::vector<bf16_t> r = gc16[j].download();
        std::vector<float> v(r.size());
        for (size_t i = 0; i < r.size(); ++i) v[i] = fp4::bf16_to_float(r[i]);
        runs[run].push_back(v);
      } else {
        runs[run].push_back(gc32[j].download());
      }
    }
  }
  size_t checked = 0;
  for (int j = 0; j < G; ++j) {
    const int m = f.trans_a ? k : rows[j];
    const int kk = f.trans_a ? rows[j] : k;
    if (m == 0 || kk == 0) continue;
    const float* xa = a.data() + first[j] * k;
    std::vector<float> c = c0[j];
    fp4::cpu::gemm(f.trans_a, f.trans_b, m, n, kk, 1.0f, xa, b[j].data(), f.beta, c.data());
    std::vector<float> abs_a(xa, xa + static_cast<size_t>(rows[j]) * k), abs_b = b[j], m_ab(c.size());
    for (float& v : abs_a) v = std::fabs(v);
    for (float& v : abs_b) v = std::fabs(v);
    fp4::cpu::gemm(f.trans_a, f.trans_b, m, n, kk, 1.0f, abs_a.data(), abs_b.data(), 0.0f, m_ab.data());
    size_t bad = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      double bound = 2.0 * (kk + 2) * kEps * (1.001 * m_ab[i] + std::fabs(f.beta * c0[j][i]));
      if (f.out_bf16) bound += 0x1p-8 * (std::fabs(c[i]) + bound);
      if (!(std::fabs(static_cast<double>(runs[0][j][i]) - c[i]) <= bound)) ++bad;
      ++checked;
    }
    INFO(f.name << " group " << j << " (" << rows[j] << " rows, n " << n << ", k " << k << "): " << bad
                << " values outside the bound");
    CHECK(bad == 0);
    INFO(f.name << " group " << j << ": two identical calls");
    CHECK(std::memcmp(runs[0][j].data(), runs[1][j].data(), runs[0][j].size() * sizeof(float)) == 0);
  }
  std::printf("[grouped gemm] %-28s %d groups, %zu values within the bound\n", f.name, G, checked);
}

}  // namespace

TEST_CASE("cuda grouped gemm matches cpu::gemm per product in the MoE blocks' three forms", "[gpu][ops][moe]") {
  // An empty group, a one-row group, odd and 16-aligned sizes: the dispatch's groups.
  const std::vector<int> rows = {37, 0, 1, 128, 250, 16};
  check_grouped({"NT (forward), bf16 out", false, true, true, 0.0f}, rows, 192, 96, 11);
  check_grouped({"NN (dgrad), bf16 out", false, false, true, 0.0f}, rows, 96, 192, 21);
  check_grouped({"NT, fp32 out", false, true, false, 0.0f}, rows, 64, 48, 31);
  // The weight gradient: the empty group is left out (k = 0), the others accumulate into C.
  check_grouped({"TN (wgrad), fp32 += ", true, false, false, 1.0f}, rows, 80, 64, 41);
}

TEST_CASE("cuda grouped gemm refuses a product whose reduction is empty or whose strides are short",
          "[gpu][ops][moe]") {
  cu::GroupedGemm grouped;
  DeviceArray<bf16_t> a(64), b(64);
  DeviceArray<float> c(64);
  cu::GroupedProduct p{a.get(), b.get(), c.get(), 4, 4, 0};
  CHECK_THROWS_AS(grouped.run(false, true, {p}, 1.0f, 1.0f, false, nullptr), std::invalid_argument);
  p.k = 4;
  p.lda = 2;  // below k
  CHECK_THROWS_AS(grouped.run(false, true, {p}, 1.0f, 0.0f, false, nullptr), std::invalid_argument);
  p.lda = 0;
  p.m = 0;  // no output: nothing to do, no error
  CHECK_NOTHROW(grouped.run(false, true, {p}, 1.0f, 0.0f, false, nullptr));
}
