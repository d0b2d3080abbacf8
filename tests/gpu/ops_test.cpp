// [gpu] The CUDA training ops (kernels/cuda/ops.cuh) and the cuBLASLt GEMM (kernels/cuda/gemm.cuh)
// against the CPU reference: fp4::cpu's ops<float> (kernels/cpu/ops.h), fp4::run::AdamW
// (engine/run/optimizer.h) and fp4::cpu::gemm (kernels/cpu/gemm.h).
//
// Where the GPU performs the reference's operations in the reference's order, the test demands
// identical bits: embedding (forward and backward), rmsnorm forward and dx, RoPE, the residual add,
// the bf16 conversions, AdamW, and every op's fused bf16 store against the separate passes.
// Elsewhere it states a bound next to each comparison, in units of eps = 2⁻²³ (fp32's machine
// epsilon, twice the unit roundoff u) and the reduction length: the difference of two
// implementations is at most the sum of their error bounds, and a recursive sum of n terms errs by
// at most γ_n ≈ n·u times the sum of the terms' magnitudes. Every op with a
// reduction is also run twice and must give the same bits (element-wise ops that match the CPU bit
// for bit are deterministic by that alone).
//
// Each comparison prints one line (max |difference|, the worst ratio to the bound, the share of
// bit-identical values), so the headroom is visible in the log.
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

#include "engine/run/optimizer.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/numerics.h"

namespace {

namespace cu = fp4::cuda;
namespace cpu = fp4::cpu;
using fp4::bf16_t;

constexpr double kEps = 0x1p-23;  // fp32 machine epsilon

using fp4::cuda::DeviceArray;

std::vector<float> normal(size_t n, uint64_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Identical bits everywhere (NaNs included: the same NaN bits).
void require_bits(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (bits(gpu[i]) != bits(cpu[i])) {
      if (bad++ == 0) first = i;
    }
  }
  std::printf("[ops] %-48s bit-identical: %zu of %zu differ\n", what.c_str(), bad, gpu.size());
  INFO(what << ": " << bad << " of " << gpu.size() << " values differ; first at " << first << ": gpu "
            << (bad ? gpu[first] : 0.0f) << ", cpu " << (bad ? cpu[first] : 0.0f));
  REQUIRE(bad == 0);
}

// |gpu − ref| <= bound[i] everywhere (a NaN must be matched by a NaN).
void require_within(const std::string& what, const std::vector<float>& gpu, const std::vector<double>& ref,
                    const std::vector<double>& bound) {
  REQUIRE(gpu.size() == ref.size());
  REQUIRE(bound.size() == ref.size());
  size_t bad = 0, first = 0, exact = 0;
  double max_diff = 0.0, worst = 0.0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double g = gpu[i], r = ref[i];
    if (std::isnan(g) || std::isnan(r)) {
      if (!(std::isnan(g) && std::isnan(r)) && bad++ == 0) first = i;
      continue;
    }
    const double diff = std::fabs(g - r);
    if (diff == 0.0) ++exact;
    max_diff = std::max(max_diff, diff);
    if (bound[i] > 0.0) worst = std::max(worst, diff / bound[i]);
    if (!(diff <= bound[i]) && bad++ == 0) first = i;
  }
  std::printf("[ops] %-48s max|diff| %.3e, worst diff/bound %.3f, equal %.1f%%\n", what.c_str(), max_diff, worst,
              100.0 * static_cast<double>(exact) / static_cast<double>(std::max<size_t>(gpu.size(), 1)));
  INFO(what << ": " << bad << " of " << gpu.size() << " values outside the bound; first at " << first << ": gpu "
            << gpu[first] << ", reference " << ref[first] << ", bound " << bound[first]);
  REQUIRE(bad == 0);
}

void require_same_bits(const std::string& what, const std::vector<float>& a, const std::vector<float>& b) {
  INFO(what << ": two identical runs");
  REQUIRE(a.size() == b.size());
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::string shape_name(const char* op, std::initializer_list<std::pair<const char*, int>> dims) {
  std::string s = op;
  for (const auto& [name, v] : dims) s += std::string(" ") + name + "=" + std::to_string(v);
  return s;
}

// ---------------------------------------------------------------------------------------------

TEST_CASE("cuda bf16 conversions and the residual add match the CPU bit for bit", "[gpu][ops]") {
  std::vector<float> x = normal(100003, 1);
  std::mt19937_64 rng(2);
  for (size_t i = 0; i < x.size(); i += 7) x[i] = std::ldexp(x[i], static_cast<int>(rng() % 250) - 125);
  // Ties (half a bf16 ulp above 1 and 3/2 of one), subnormals, zeros, infinities and NaNs.
  const float specials[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0x1p-140f, -0x1p-149f, 0.0f, -0.0f,
                            INFINITY,       -INFINITY,          NAN,       -NAN,        3.3895314e38f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i];
  const size_t n = x.size();

  DeviceArray<float> dx(x), dy(n), dsum(n);
  DeviceArray<bf16_t> db(n);
  cu::float_to_bf16(dx.get(), db.get(), n, nullptr);
  const std::vector<bf16_t> b = db.download();
  std::vector<float> want_b(n), got_b(n);
  for (size_t i = 0; i < n; ++i) {
    got_b[i] = fp4::bf16_to_float(b[i]);
    want_b[i] = fp4::bf16_to_float(fp4::float_to_bf16(x[i]));
  }
  require_bits("float_to_bf16", got_b, want_b);

  cu::bf16_to_float(db.get(), dy.get(), n, nullptr);
  require_bits("bf16_to_float", dy.download(), want_b);

  cu::round_to_bf16(dx.get(), n, nullptr);
  std::vector<float> want_r(n);
  for (size_t i = 0; i < n; ++i) want_r[i] = fp4::round_to_bf16(x[i]);
  require_bits("round_to_bf16", dx.download(), want_r);

  const std::vector<float> a = normal(n, 3), c = normal(n, 4, 10.0f);
  DeviceArray<float> da(a), dc(c);
  cu::residual_add(da.get(), dc.get(), dsum.get(), n, nullptr);
  std::vector<float> want_sum(n);
  for (size_t i = 0; i < n; ++i) want_sum[i] = a[i] + c[i];
  require_bits("residual_add", dsum.download(), want_sum);
  cu::residual_add(da.get(), dc.get(), da.get(), n, nullptr);  // in place
  require_bits("residual_add in place", da.download(), want_sum);
}

TEST_CASE("cuda embedding forward and backward match the CPU bit for bit", "[gpu][ops]") {
  struct Shape {
    int rows, d, vocab;
  };
  // A byte vocabulary with repeats, a GPT-2-sized one, and three tokens with very long runs; the
  // first two take the rank count, the others the counting placement (vocabularies small against
  // the rows: the first study's d2 micro-batch of 16384 rows, and one just past the switch).
  const Shape shapes[] = {{1000, 768, 256}, {37, 100, 50257}, {4099, 64, 3}, {16384, 128, 256}, {1028, 96, 256}};
  cu::Workspace ws;
  for (const Shape& s : shapes) {
    const std::string name = shape_name("embedding", {{"rows", s.rows}, {"d", s.d}, {"vocab", s.vocab}});
    std::mt19937_64 rng(static_cast<uint64_t>(s.rows) * 31 + s.vocab);
    std::vector<int32_t> tokens(s.rows);
    // Skewed (geometric-like) ids, so some tokens appear many times.
    std::exponential_distribution<double> expo(8.0 / s.vocab);
    for (int32_t& t : tokens) t = static_cast<int32_t>(std::min<double>(s.vocab - 1, std::floor(expo(rng))));
    const std::vector<float> table = normal(static_cast<size_t>(s.vocab) * s.d, 5);
    const std::vector<float> dout = normal(static_cast<size_t>(s.rows) * s.d, 6);
    const std::vector<float> dtable0 = normal(table.size(), 7, 0.1f);  // gradients accumulate

    std::vector<float> out(static_cast<size_t>(s.rows) * s.d), dtable = dtable0;
    cpu::embedding_forward(table.data(), tokens.data(), s.rows, s.d, out.data());
    cpu::embedding_backward(tokens.data(), dout.data(), s.rows, s.d, dtable.data());

    DeviceArray<float> g_table(table), g_out(out.size()), g_dout(dout), g_dtable(dtable0);
    DeviceArray<int32_t> g_tokens(tokens);
    cu::embedding_forward(g_table.get(), s.vocab, g_tokens.get(), s.rows, s.d, g_out.get(), nullptr);
    require_bits(name + " forward", g_out.download(), out);
    cu::embedding_backward(g_tokens.get(), g_dout.get(), s.rows, s.d, s.vocab, g_dtable.get(), ws, nullptr);
    const std::vector<float> first = g_dtable.download();
    require_bits(name + " backward", first, dtable);
    g_dtable.upload(dtable0);
    cu::embedding_backward(g_tokens.get(), g_dout.get(), s.rows, s.d, s.vocab, g_dtable.get(), ws, nullptr);
    require_same_bits(name + " backward", first, g_dtable.download());
    // dout held in bf16 (the residual gradient under bf16 storage): the fp32 call on its values
    std::vector<bf16_t> dout16(dout.size());
    std::vector<float> dout_rounded(dout.size());
    for (size_t i = 0; i < dout.size(); ++i) {
      dout16[i] = fp4::float_to_bf16(dout[i]);
      dout_rounded[i] = fp4::bf16_to_float(dout16[i]);
    }
    DeviceArray<bf16_t> g_dout16(dout16);
    g_dout.upload(dout_rounded);
    g_dtable.upload(dtable0);
    cu::embedding_backward(g_tokens.get(), g_dout.get(), s.rows, s.d, s.vocab, g_dtable.get(), ws, nullptr);
    const std::vector<float> from_f32 = g_dtable.download();
    g_dtable.upload(dtable0);
    cu::embedding_backward(g_tokens.get(), g_dout16.get(), s.rows, s.d, s.vocab, g_dtable.get(), ws, nullptr);
    require_bits(name + " backward, bf16 dout", g_dtable.download(), from_f32);
  }

  // A token outside the vocabulary: a NaN row forward, ignored backward.
  const std::vector<int32_t> tokens = {1, 5, -1};
  const std::vector<float> table = normal(4 * 8, 8), dout = normal(3 * 8, 9);
  DeviceArray<float> g_table(table), g_out(3 * 8), g_dout(dout);
  DeviceArray<int32_t> g_tokens(tokens);
  cu::embedding_forward(g_table.get(), 4, g_tokens.get(), 3, 8, g_out.get(), nullptr);
  const std::vector<float> out = g_out.download();
  for (int j = 0; j < 8; ++j) {
    CHECK(bits(out[j]) == bits(table[8 + j]));
    CHECK(std::isnan(out[8 + j]));
    CHECK(std::isnan(out[16 + j]));
  }
  cu::embedding_backward(g_tokens.get(), g_dout.get(), 3, 8, 4, g_table.get(), ws, nullptr);
  const std::vector<float> t2 = g_table.download();
  for (int j = 0; j < 8; ++j) {
    CHECK(bits(t2[8 + j]) == bits(table[8 + j] + dout[j]));
    CHECK(bits(t2[24 + j]) == bits(table[24 + j]));
  }
  // The same through the counting placement (40 rows, vocab 4): tokens -1 and 4 are skipped, each
  // valid token's rows are added in row order.
  std::vector<int32_t> many(40);
  for (int i = 0; i < 40; ++i) many[i] = i % 6 - 1;
  const std::vector<float> dmany = normal(40 * 8, 10);
  std::vector<float> want = table;
  for (int i = 0; i < 40; ++i)
    if (many[i] >= 0 && many[i] < 4)
      for (int j = 0; j < 8; ++j) want[many[i] * 8 + j] += dmany[i * 8 + j];
  DeviceArray<int32_t> g_many(many);
  DeviceArray<float> g_dmany(dmany), g_table2(table);
  cu::embedding_backward(g_many.get(), g_dmany.get(), 40, 8, 4, g_table2.get(), ws, nullptr);
  require_bits("embedding backward, counting placement, out-of-range tokens", g_table2.download(), want);
}

TEST_CASE("cuda rmsnorm matches the CPU: forward and dx bit for bit, dgain within its bound", "[gpu][ops]") {
  struct Shape {
    int rows, d;
  };
  // d = 771 and 3: widths without 16-byte rows (the scalar staged path); 7000: too wide for dx's
  // shared-memory tile (the direct dx kernel), 13000: for the forward's too.
  const Shape shapes[] = {{1000, 768}, {37, 100}, {130, 64}, {50, 768}, {45, 771}, {100, 3}, {5, 7000}, {3, 13000}};
  cu::Workspace ws;
  const float eps = 1e-5f;
  for (const Shape& s : shapes) {
    const std::string name = shape_name("rmsnorm", {{"rows", s.rows}, {"d", s.d}});
    const size_t n = static_cast<size_t>(s.rows) * s.d;
    const std::vector<float> x = normal(n, 11, 2.0f, 0.1f), gain = normal(s.d, 12, 0.1f, 1.0f);
    const std::vector<float> dy = normal(n, 13), dgain0 = normal(s.d, 14, 0.5f);
    std::vector<float> y(n), rstd(s.rows), dx(n), dgain = dgain0;
    cpu::rmsnorm_forward(x.data(), gain.data(), s.rows, s.d, eps, y.data(), rstd.data());
    cpu::rmsnorm_backward(x.data(), gain.data(), rstd.data(), dy.data(), s.rows, s.d, dx.data(), dgain.data());

    DeviceArray<float> g_x(x), g_gain(gain), g_y(n), g_rstd(s.rows), g_dy(dy), g_dx(n), g_dgain(dgain0);
    cu::rmsnorm_forward(g_x.get(), g_gain.get(), s.rows, s.d, eps, g_y.get(), g_rstd.get(), nullptr);
    const std::vector<float> y1 = g_y.download();
    require_bits(name + " y", y1, y);
    require_bits(name + " rstd", g_rstd.download(), rstd);
    cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), s.rows, s.d, g_dx.get(), g_dgain.get(),
                         ws, nullptr);
    const std::vector<float> dx1 = g_dx.download(), dgain1 = g_dgain.download();
    require_bits(name + " dx", dx1, dx);
    // dgain_j = dgain0_j + Σ_r dy·(x·rstd): each term carries 2 roundings; the CPU adds the rows in
    // one recursive sum (rows additions), the GPU in chunks of 64 and then the chunk sums (64 +
    // rows/64 additions), and both round the final addition into dgain. So the difference is at
    // most (rows + 64 + rows/64 + 4)·eps·Σ_r|dy·x·rstd| + 2·eps·|dgain|.
    std::vector<double> bound(s.d);
    for (int j = 0; j < s.d; ++j) {
      double mag = 0.0;
      for (int r = 0; r < s.rows; ++r) {
        const size_t i = static_cast<size_t>(r) * s.d + j;
        mag += std::fabs(static_cast<double>(dy[i]) * x[i] * rstd[r]);
      }
      bound[j] = (s.rows + 64 + s.rows / 64 + 4) * kEps * mag + 2 * kEps * std::fabs(dgain[j]);
    }
    require_within(name + " dgain", dgain1, to_double(dgain), bound);
    if (s.rows <= cu::kRmsnormRowChunk) require_bits(name + " dgain (one chunk)", dgain1, dgain);

    cu::rmsnorm_forward(g_x.get(), g_gain.get(), s.rows, s.d, eps, g_y.get(), g_rstd.get(), nullptr);
    require_same_bits(name + " y", y1, g_y.download());
    g_dgain.upload(dgain0);
    cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), s.rows, s.d, g_dx.get(), g_dgain.get(),
                         ws, nullptr);
    require_same_bits(name + " dx", dx1, g_dx.download());
    require_same_bits(name + " dgain", dgain1, g_dgain.download());
  }
}

TEST_CASE("cuda rope matches the CPU bit for bit, table included", "[gpu][ops]") {
  struct Shape {
    int batch, seq, heads, hd;
    double base;
  };
  const Shape shapes[] = {{2, 100, 12, 64, 10000.0}, {3, 17, 2, 32, 500000.0}, {1, 5, 1, 128, 10000.0}};
  for (const Shape& s : shapes) {
    const std::string name = shape_name("rope", {{"B", s.batch}, {"T", s.seq}, {"H", s.heads}, {"hd", s.hd}});
    const cpu::RopeTable<float> table = cpu::rope_table<float>(s.seq, s.hd, s.base);
    const cu::RopeTable g_table(s.seq, s.hd, s.base);
    std::vector<float> c(table.cos.size()), sn(table.sin.size());
    FP4_CUDA_CHECK(cudaMemcpy(c.data(), g_table.cos(), c.size() * sizeof(float), cudaMemcpyDeviceToHost));
    FP4_CUDA_CHECK(cudaMemcpy(sn.data(), g_table.sin(), sn.size() * sizeof(float), cudaMemcpyDeviceToHost));
    require_bits(name + " cos table", c, table.cos);
    require_bits(name + " sin table", sn, table.sin);

    // q and k rotated inside a packed qkv buffer (row stride 3·d), as the model does.
    const int d = s.heads * s.hd, stride = 3 * d;
    const size_t n = static_cast<size_t>(s.batch) * s.seq * stride;
    const std::vector<float> qkv0 = normal(n, 21);
    std::vector<float> fwd = qkv0, bwd = qkv0;
    cpu::rope_forward(fwd.data(), s.batch, s.seq, s.heads, s.hd, stride, table);
    cpu::rope_forward(fwd.data() + d, s.batch, s.seq, s.heads, s.hd, stride, table);
    cpu::rope_backward(bwd.data(), s.batch, s.seq, s.heads, s.hd, stride, table);
    cpu::rope_backward(bwd.data() + d, s.batch, s.seq, s.heads, s.hd, stride, table);

    DeviceArray<float> g(qkv0);
    cu::rope_forward(g.get(), s.batch, s.seq, s.heads, s.hd, stride, g_table, nullptr);
    cu::rope_forward(g.get() + d, s.batch, s.seq, s.heads, s.hd, stride, g_table, nullptr);
    const std::vector<float> f1 = g.download();
    require_bits(name + " forward", f1, fwd);  // v untouched too
    g.upload(qkv0);
    cu::rope_backward(g.get(), s.batch, s.seq, s.heads, s.hd, stride, g_table, nullptr);
    cu::rope_backward(g.get() + d, s.batch, s.seq, s.heads, s.hd, stride, g_table, nullptr);
    require_bits(name + " backward", g.download(), bwd);
    g.upload(qkv0);
    cu::rope_forward(g.get(), s.batch, s.seq, s.heads, s.hd, stride, g_table, nullptr);
    cu::rope_forward(g.get() + d, s.batch, s.seq, s.heads, s.hd, stride, g_table, nullptr);
    require_same_bits(name + " forward", f1, g.download());
  }
}

TEST_CASE("cuda swiglu matches the CPU within a few ulp", "[gpu][ops]") {
  struct Shape {
    int rows, f;
  };
  const Shape shapes[] = {{1000, 1536}, {37, 100}, {29, 99}};  // f = 99: the scalar path
  for (const Shape& s : shapes) {
    const std::string name = shape_name("swiglu", {{"rows", s.rows}, {"f", s.f}});
    const size_t n = static_cast<size_t>(s.rows) * s.f;
    std::vector<float> u = normal(2 * n, 31, 3.0f);
    // Gates in [-40, 40] (σ stays a normal float) including the saturated ends.
    for (float& v : u) v = std::clamp(v, -40.0f, 40.0f);
    u[0] = 40.0f;
    u[1] = -40.0f;
    u[2] = -1.2785f;  // near the zero of 1 + g·(1 − σ(g)): dgate cancels there
    const std::vector<float> da = normal(n, 32);
    std::vector<float> a(n), du(2 * n);
    cpu::swiglu_forward(u.data(), s.rows, s.f, a.data());
    cpu::swiglu_backward(u.data(), da.data(), s.rows, s.f, du.data());

    DeviceArray<float> g_u(u), g_a(n), g_da(da), g_du(2 * n);
    cu::swiglu_forward(g_u.get(), s.rows, s.f, g_a.get(), nullptr);
    cu::swiglu_backward(g_u.get(), g_da.get(), s.rows, s.f, g_du.get(), nullptr);
    const std::vector<float> a1 = g_a.download(), du1 = g_du.download();
    // σ = 1/(1 + expf(−g)): CUDA's expf errs by ≤ 2 ulp, glibc's by < 1, then one addition and one
    // division, so the two σ differ by ≤ ~5.5 eps relative; a = (g·σ)·up adds two roundings per
    // side: |Δa| ≤ 16·eps·|a|. dup = da·g·σ likewise. dgate = (da·up)·(σ·(1 + g·(1 − σ))): an error
    // δ in σ moves 1 + g·(1 − σ) by |g|·δ, which can cancel (near g ≈ −1.28), so the bound is
    // absolute in the factor's magnitude: |Δdgate| ≤ 16·eps·|da·up|·σ·(1 + |g|).
    std::vector<double> ba(n), bdu(2 * n);
    for (int r = 0; r < s.rows; ++r) {
      for (int j = 0; j < s.f; ++j) {
        const size_t i = static_cast<size_t>(r) * s.f + j, ig = static_cast<size_t>(r) * 2 * s.f + j, iu = ig + s.f;
        const double g = u[ig], sig = 1.0 / (1.0 + std::exp(-g));
        ba[i] = 16 * kEps * std::fabs(a[i]);
        bdu[ig] = 16 * kEps * std::fabs(static_cast<double>(da[i]) * u[iu]) * sig * (1.0 + std::fabs(g));
        bdu[iu] = 16 * kEps * std::fabs(static_cast<double>(da[i]) * g * sig);
      }
    }
    require_within(name + " forward", a1, to_double(a), ba);
    require_within(name + " backward", du1, to_double(du), bdu);
    cu::swiglu_forward(g_u.get(), s.rows, s.f, g_a.get(), nullptr);
    cu::swiglu_backward(g_u.get(), g_da.get(), s.rows, s.f, g_du.get(), nullptr);
    require_same_bits(name + " forward", a1, g_a.download());
    require_same_bits(name + " backward", du1, g_du.download());
  }
}

TEST_CASE("cuda cross-entropy matches the CPU within its bound, fused in place or not", "[gpu][ops]") {
  struct Shape {
    int rows, vocab;
  };
  const Shape shapes[] = {{1000, 256}, {37, 50257}, {5, 1}};
  for (const Shape& s : shapes) {
    const std::string name = shape_name("cross_entropy", {{"rows", s.rows}, {"vocab", s.vocab}});
    const size_t n = static_cast<size_t>(s.rows) * s.vocab;
    std::vector<float> z = normal(n, 41, 3.0f);
    for (int j = 0; j < s.vocab; ++j) z[j] += 50.0f;  // a row far from zero: the max must be subtracted
    std::vector<int32_t> targets(s.rows);
    std::mt19937_64 rng(42);
    for (int32_t& t : targets) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(s.vocab));
    const float scale = 1.0f / static_cast<float>(s.rows);
    std::vector<float> loss(s.rows), dz(n);
    cpu::cross_entropy(z.data(), targets.data(), s.rows, s.vocab, loss.data(), dz.data(), scale);

    // The bound. S = Σ exp(z − m): the CPU's recursive sum of V terms and the GPU's online sums
    // (V/256 terms and rescalings per thread, then 13 combining levels), each term or rescale with
    // a ≤ 2-ulp expf, differ by at most (V + 64)·eps relative; log, the max's addition and the
    // target's subtraction add a few roundings of |m|, |lse| and |z_t|:
    //   |Δloss| ≤ tol_lse + 8·eps·|z_t|, tol_lse = (V + 64)·eps + 8·eps·(|m| + |lse|).
    // dz_j = scale·exp(z_j − lse): relative error tol_lse + 2·eps·|z_j − lse| (the subtraction) +
    // 8·eps (expf, the product); at the target one more rounding of the subtraction of scale.
    std::vector<double> bl(s.rows), bz(n), ref_z = to_double(dz);
    for (int r = 0; r < s.rows; ++r) {
      const float* zr = z.data() + static_cast<size_t>(r) * s.vocab;
      double m = zr[0];
      for (int j = 1; j < s.vocab; ++j) m = std::max<double>(m, zr[j]);
      double sum = 0.0;
      for (int j = 0; j < s.vocab; ++j) sum += std::exp(zr[j] - m);
      const double lse = m + std::log(sum);
      const double tol_lse = (s.vocab + 64) * kEps + 8 * kEps * (std::fabs(m) + std::fabs(lse));
      bl[r] = tol_lse + 8 * kEps * std::fabs(zr[targets[r]]);
      for (int j = 0; j < s.vocab; ++j) {
        const double p = std::exp(zr[j] - lse);
        bz[static_cast<size_t>(r) * s.vocab + j] =
            scale * (p * (tol_lse + 2 * kEps * std::fabs(zr[j] - lse) + 8 * kEps) + (j == targets[r] ? 2 * kEps : 0.0));
      }
    }

    DeviceArray<float> g_z(z), g_loss(s.rows), g_dz(n);
    DeviceArray<int32_t> g_t(targets);
    cu::cross_entropy(g_z.get(), g_t.get(), s.rows, s.vocab, g_loss.get(), g_dz.get(), scale, nullptr);
    const std::vector<float> loss1 = g_loss.download(), dz1 = g_dz.download();
    require_within(name + " loss", loss1, to_double(loss), bl);
    require_within(name + " dlogits", dz1, ref_z, bz);
    // Loss only.
    cu::cross_entropy(g_z.get(), g_t.get(), s.rows, s.vocab, g_loss.get(), nullptr, scale, nullptr);
    require_same_bits(name + " loss without dlogits", loss1, g_loss.download());
    // Fused in place: the logits buffer becomes the gradient; same bits as out of place.
    cu::cross_entropy(g_z.get(), g_t.get(), s.rows, s.vocab, g_loss.get(), g_z.get(), scale, nullptr);
    require_same_bits(name + " loss in place", loss1, g_loss.download());
    require_same_bits(name + " dlogits in place", dz1, g_z.download());
  }
}

// The attention reference in double (ops<double>), and the comparison against it.
struct AttentionRef {
  std::vector<double> out, lse, dqkv;
};

// The GPU's fp32 result must be as close to the exact (fp64) result as the CPU's fp32 result is, up
// to a factor: both are fp32 evaluations of the same formulas with reductions of length head_dim
// (scores, dP) and T (softmax sums, outputs, gradients), whose worst-case bounds (γ_hd amplified
// by exp, plus γ_T) are far looser than either's actual error. The GPU sums in another order
// (sequential dots, online softmax rescaling) and with a 2-ulp expf, so it may err a few times
// more than the CPU: allow 8× the CPU's own largest error over the tensor plus 64 eps of the
// tensor's largest magnitude (a floor for tensors the CPU happens to get almost exactly).
void require_as_accurate(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& cpu,
                         const std::vector<double>& exact) {
  double err_cpu = 0.0, scale = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    err_cpu = std::max(err_cpu, std::fabs(cpu[i] - exact[i]));
    scale = std::max(scale, std::fabs(exact[i]));
  }
  const double tol = 8 * err_cpu + 64 * kEps * scale;
  std::printf("[ops] %-48s cpu fp32 max error %.3e, tolerance %.3e\n", what.c_str(), err_cpu, tol);
  require_within(what + " vs fp64", gpu, exact, std::vector<double>(exact.size(), tol));
}

TEST_CASE("cuda attention matches the fp64 reference as closely as the CPU does", "[gpu][ops]") {
  struct Shape {
    int batch, seq, heads, hd;
  };
  const Shape shapes[] = {{2, 100, 3, 64}, {1, 67, 2, 128}, {3, 33, 2, 32}, {1, 257, 1, 64}, {2, 1, 2, 64}};
  cu::Workspace ws;
  for (const Shape& s : shapes) {
    const std::string name =
        shape_name("attention", {{"B", s.batch}, {"T", s.seq}, {"H", s.heads}, {"hd", s.hd}});
    const int d = s.heads * s.hd, rows = s.batch * s.seq;
    const size_t nq = static_cast<size_t>(rows) * 3 * d, no = static_cast<size_t>(rows) * d;
    const size_t nl = static_cast<size_t>(s.batch) * s.heads * s.seq;
    const std::vector<float> qkv = normal(nq, 51), dout = normal(no, 52);

    std::vector<float> out(no), lse(nl), dqkv(nq);
    cpu::attention_forward(qkv.data(), s.batch, s.seq, s.heads, s.hd, out.data(), lse.data());
    cpu::attention_backward(qkv.data(), lse.data(), dout.data(), s.batch, s.seq, s.heads, s.hd, dqkv.data());
    AttentionRef ref{std::vector<double>(no), std::vector<double>(nl), std::vector<double>(nq)};
    const std::vector<double> qkv64 = to_double(qkv), dout64 = to_double(dout);
    cpu::attention_forward(qkv64.data(), s.batch, s.seq, s.heads, s.hd, ref.out.data(), ref.lse.data());
    cpu::attention_backward(qkv64.data(), ref.lse.data(), dout64.data(), s.batch, s.seq, s.heads, s.hd,
                              ref.dqkv.data());

    DeviceArray<float> g_qkv(qkv), g_out(no), g_lse(nl), g_dout(dout), g_dqkv(nq);
    cu::attention_forward(g_qkv.get(), s.batch, s.seq, s.heads, s.hd, g_out.get(), g_lse.get(), nullptr);
    const std::vector<float> out1 = g_out.download(), lse1 = g_lse.download();
    require_as_accurate(name + " out", out1, out, ref.out);
    require_as_accurate(name + " lse", lse1, lse, ref.lse);
    // The backward from the GPU's own lse, as the engine will run it.
    cu::attention_backward(g_qkv.get(), g_lse.get(), g_dout.get(), s.batch, s.seq, s.heads, s.hd, g_dqkv.get(), ws,
                           nullptr);
    const std::vector<float> dqkv1 = g_dqkv.download();
    require_as_accurate(name + " dqkv", dqkv1, dqkv, ref.dqkv);

    cu::attention_forward(g_qkv.get(), s.batch, s.seq, s.heads, s.hd, g_out.get(), g_lse.get(), nullptr);
    require_same_bits(name + " out", out1, g_out.download());
    require_same_bits(name + " lse", lse1, g_lse.download());
    cu::attention_backward(g_qkv.get(), g_lse.get(), g_dout.get(), s.batch, s.seq, s.heads, s.hd, g_dqkv.get(), ws,
                           nullptr);
    require_same_bits(name + " dqkv", dqkv1, g_dqkv.download());
  }
}

TEST_CASE("cuda fp64 sums match the CPU gradient norm", "[gpu][ops]") {
  cu::Workspace ws;
  for (size_t n : {size_t{1}, size_t{100}, size_t{1000003}}) {
    std::vector<float> g = normal(n, 61, 1e-3f);
    for (size_t i = 0; i < n; i += 1001) g[i] *= 1e4f;
    DeviceArray<float> dg(g);
    DeviceArray<double> out(2);
    cu::sum_squares_f64(dg.get(), n, out.get(), ws, nullptr);
    cu::sum_f64(dg.get(), n, out.get() + 1, ws, nullptr);
    const std::vector<double> r = out.download();
    double sq = 0.0, sum = 0.0, abs_sum = 0.0;  // the CPU's order: index order, in double
    for (float v : g) {
      sq += static_cast<double>(v) * v;
      sum += v;
      abs_sum += std::fabs(v);
    }
    // Squares of floats are exact in double; each side is a sum of n terms with error ≤ n·2⁻⁵³·Σ|terms|.
    const double u64 = 0x1p-53;
    INFO("n = " << n << ": gpu " << r[0] << " / " << r[1] << ", cpu " << sq << " / " << sum);
    CHECK(std::fabs(r[0] - sq) <= 2 * n * u64 * sq);
    CHECK(std::fabs(r[1] - sum) <= 2 * n * u64 * abs_sum);
    const double norm = fp4::run::global_grad_norm(g.data(), n);
    CHECK(std::fabs(std::sqrt(r[0]) - norm) <= (n + 2) * u64 * norm);
    std::printf("[ops] sum_squares_f64 n=%-8zu relative difference from the CPU %.3e\n", n,
                sq > 0 ? std::fabs(r[0] - sq) / sq : 0.0);
    cu::sum_squares_f64(dg.get(), n, out.get(), ws, nullptr);
    cu::sum_f64(dg.get(), n, out.get() + 1, ws, nullptr);
    const std::vector<double> r2 = out.download();
    CHECK(std::memcmp(r.data(), r2.data(), 2 * sizeof(double)) == 0);
  }
}

TEST_CASE("cuda AdamW matches the engine run AdamW bit for bit", "[gpu][ops]") {
  const size_t n = 100003;
  const std::vector<fp4::run::ParamRange> ranges = {{0, 40000, true}, {40000, 768, false}, {40768, n - 40768, true}};
  std::vector<cu::AdamWRange> g_ranges;
  for (const auto& r : ranges) g_ranges.push_back({r.offset, r.size, r.decay});
  const cu::AdamWRanges dev_ranges(g_ranges, n);

  for (double wd : {0.1, 0.0}) {
    fp4::run::AdamWHyper h;
    h.lr = 3e-3;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.eps = 1e-8;
    h.weight_decay = wd;
    std::vector<float> params = normal(n, 71, 0.02f);
    fp4::run::AdamW cpu(n);
    DeviceArray<float> p(params), m(std::vector<float>(n, 0.0f)), v(std::vector<float>(n, 0.0f)), grads(n);
    // Steps 1-3, then a jump to step 1000 (bias corrections near 1); a clip factor on step 2, and
    // gradients tiny enough on step 3 for ε to matter.
    const int64_t steps[] = {1, 2, 3, 1000};
    const float clip[] = {1.0f, 0.37f, 1.0f, 1.0f};
    const float gscale[] = {1.0f, 3.0f, 1e-7f, 1.0f};
    for (int i = 0; i < 4; ++i) {
      const std::string name = "adamw wd=" + std::to_string(wd) + " t=" + std::to_string(steps[i]);
      const std::vector<float> g = normal(n, 80 + i, gscale[i]);
      cpu.step(params.data(), g.data(), ranges, h, steps[i], clip[i]);
      grads.upload(g);
      const cu::AdamWConstants c = cu::adamw_constants(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, steps[i]);
      cu::adamw_step(p.get(), grads.get(), m.get(), v.get(), dev_ranges, c, clip[i], nullptr);
      require_bits(name + " params", p.download(), params);
      require_bits(name + " m", m.download(), cpu.m());
      require_bits(name + " v", v.download(), cpu.v());
    }
  }
  // Element-wise and bit-identical to the CPU, so a second run gives the same bits by the above.
}

// C = alpha·op(A)·op(B) + beta·C on bf16 operands against cpu::gemm on the same values in fp32.
// Products of two bf16 values are exact in fp32, so each side errs only in its k − 1 additions and
// the alpha/beta step: ≤ γ_{k+1} (u = eps/2) for IEEE round-to-nearest accumulation. Tensor cores
// may align and truncate rather than round inside their adders (u up to eps), so allow
// 2·(k + 2)·eps·(|alpha|·(|A||B|)_ij + |beta·C0_ij|); a bf16 output adds its own rounding, at most
// half a bf16 ulp, i.e. 2⁻⁸ relative (bf16's unit roundoff), so |bf16(x) − cpu| ≤ 2⁻⁸·|x| + bound
// ≤ 2⁻⁸·(|C_ij| + bound) + bound: tight, values just above a power of two reach it.
void check_gemm(cu::Gemm& gemm, bool ta, bool tb, int m, int n, int k, float alpha, float beta, bool out_bf16,
                uint64_t seed) {
  const std::string name = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " m=" + std::to_string(m) +
                           " n=" + std::to_string(n) + " k=" + std::to_string(k) + (beta != 0 ? " beta" : "") +
                           (out_bf16 ? " bf16 out" : "");
  const size_t na = static_cast<size_t>(m) * k, nb = static_cast<size_t>(k) * n, nc = static_cast<size_t>(m) * n;
  std::vector<float> a = normal(na, seed), b = normal(nb, seed + 1), c0 = normal(nc, seed + 2);
  std::vector<bf16_t> ab(na), bb(nb), cb(nc);
  for (size_t i = 0; i < na; ++i) a[i] = fp4::bf16_to_float(ab[i] = fp4::float_to_bf16(a[i]));
  for (size_t i = 0; i < nb; ++i) b[i] = fp4::bf16_to_float(bb[i] = fp4::float_to_bf16(b[i]));
  if (out_bf16)
    for (size_t i = 0; i < nc; ++i) c0[i] = fp4::bf16_to_float(cb[i] = fp4::float_to_bf16(c0[i]));
  std::vector<float> c = c0;
  fp4::cpu::gemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, c.data());
  std::vector<float> abs_a(na), abs_b(nb), mag(nc);
  for (size_t i = 0; i < na; ++i) abs_a[i] = std::fabs(a[i]);
  for (size_t i = 0; i < nb; ++i) abs_b[i] = std::fabs(b[i]);
  fp4::cpu::gemm(ta, tb, m, n, k, 1.0f, abs_a.data(), abs_b.data(), 0.0f, mag.data());
  std::vector<double> bound(nc);
  for (size_t i = 0; i < nc; ++i) {
    bound[i] = 2.0 * (k + 2) * kEps * (1.001 * std::fabs(alpha) * mag[i] + std::fabs(beta * c0[i]));
    if (out_bf16) bound[i] += 0x1p-8 * (std::fabs(c[i]) + bound[i]);
  }

  DeviceArray<bf16_t> ga(ab), gb(bb);
  cu::GemmShape shape;
  shape.trans_a = ta;
  shape.trans_b = tb;
  shape.m = m;
  shape.n = n;
  shape.k = k;
  std::vector<float> got1, got2;
  for (int run = 0; run < 2; ++run) {
    if (out_bf16) {
      DeviceArray<bf16_t> gc(cb);
      gemm.matmul(shape, alpha, ga.get(), gb.get(), beta, gc.get(), nullptr);
      const std::vector<bf16_t> r = gc.download();
      std::vector<float> f(nc);
      for (size_t i = 0; i < nc; ++i) f[i] = fp4::bf16_to_float(r[i]);
      (run == 0 ? got1 : got2) = f;
    } else {
      DeviceArray<float> gc(c0);
      gemm.matmul(shape, alpha, ga.get(), gb.get(), beta, gc.get(), nullptr);
      (run == 0 ? got1 : got2) = gc.download();
    }
  }
  require_within(name, got1, to_double(c), bound);
  require_same_bits(name, got1, got2);
}

TEST_CASE("cuda gemm matches kernels/cpu/gemm on bf16 operands, every transpose", "[gpu][ops]") {
  cu::Gemm gemm;
  struct Shape {
    int m, n, k;
  };
  // A d_model-768 linear with a non-power-of-two token count, a vocab-256 head, and odd sizes
  // (rows not 16-byte aligned).
  const Shape shapes[] = {{127, 768, 768}, {1000, 256, 768}, {64, 256, 100}, {3, 17, 33}};
  uint64_t seed = 100;
  for (const Shape& s : shapes)
    for (int t = 0; t < 4; ++t) check_gemm(gemm, t & 1, t & 2, s.m, s.n, s.k, 1.0f, 0.0f, false, seed += 3);
  const size_t plans = gemm.cached_plans();
  check_gemm(gemm, false, true, 127, 768, 768, 1.0f, 0.0f, false, 7);  // a cached shape
  CHECK(gemm.cached_plans() == plans);
  for (int t = 0; t < 4; ++t) {
    check_gemm(gemm, t & 1, t & 2, 96, 160, 192, 0.75f, 0.5f, false, seed += 3);
    check_gemm(gemm, t & 1, t & 2, 96, 160, 192, 1.0f, 0.0f, true, seed += 3);
    check_gemm(gemm, t & 1, t & 2, 96, 160, 192, 0.75f, 0.5f, true, seed += 3);
  }
}

TEST_CASE("cuda gemm batched with strides and leading dimensions matches per-item products", "[gpu][ops]") {
  // Attention-style: batch of 3 items; A is the right half of each row of a [batch·m, 2k] buffer
  // (lda = 2k, an offset pointer), B dense [n, k] per item (trans_b: S = Q·Kᵀ), C with ldc = n + 8.
  const int batch = 3, m = 65, n = 64, k = 64;
  const int64_t lda = 2 * k, ldc = n + 8;
  std::vector<float> abuf = normal(static_cast<size_t>(batch) * m * lda, 201), b = normal(static_cast<size_t>(batch) * n * k, 202);
  std::vector<bf16_t> abuf_b(abuf.size()), b_b(b.size());
  for (size_t i = 0; i < abuf.size(); ++i) abuf[i] = fp4::bf16_to_float(abuf_b[i] = fp4::float_to_bf16(abuf[i]));
  for (size_t i = 0; i < b.size(); ++i) b[i] = fp4::bf16_to_float(b_b[i] = fp4::float_to_bf16(b[i]));
  DeviceArray<bf16_t> ga(abuf_b), gb(b_b);
  const std::vector<float> c_init(static_cast<size_t>(batch) * m * ldc, -7.0f);  // padding must survive
  DeviceArray<float> gc(c_init);
  cu::Gemm gemm;
  cu::GemmShape shape;
  shape.trans_b = true;
  shape.m = m;
  shape.n = n;
  shape.k = k;
  shape.lda = lda;
  shape.ldc = ldc;
  shape.batch = batch;
  shape.stride_a = m * lda;
  shape.stride_b = static_cast<int64_t>(n) * k;
  shape.stride_c = m * ldc;
  gemm.matmul(shape, 0.125f, ga.get() + k, gb.get(), 0.0f, gc.get(), nullptr);
  const std::vector<float> got = gc.download();
  for (int it = 0; it < batch; ++it) {
    std::vector<float> a(static_cast<size_t>(m) * k), c(static_cast<size_t>(m) * n), abs_a(a.size()), abs_b(static_cast<size_t>(n) * k), mag(c.size());
    for (int i = 0; i < m; ++i)
      for (int p = 0; p < k; ++p) a[static_cast<size_t>(i) * k + p] = abuf[(static_cast<size_t>(it) * m + i) * lda + k + p];
    const float* bi = b.data() + static_cast<size_t>(it) * n * k;
    fp4::cpu::gemm(false, true, m, n, k, 0.125f, a.data(), bi, 0.0f, c.data());
    for (size_t i = 0; i < a.size(); ++i) abs_a[i] = std::fabs(a[i]);
    for (size_t i = 0; i < abs_b.size(); ++i) abs_b[i] = std::fabs(bi[i]);
    fp4::cpu::gemm(false, true, m, n, k, 0.125f, abs_a.data(), abs_b.data(), 0.0f, mag.data());
    std::vector<float> g(c.size());
    std::vector<double> bound(c.size());
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < ldc; ++j) {
        const float v = got[(static_cast<size_t>(it) * m + i) * ldc + j];
        if (j >= n) {
          CHECK(v == -7.0f);
          continue;
        }
        g[static_cast<size_t>(i) * n + j] = v;
        bound[static_cast<size_t>(i) * n + j] = 2.0 * (k + 2) * kEps * 1.001 * mag[static_cast<size_t>(i) * n + j];
      }
    }
    require_within("gemm batched item " + std::to_string(it), g, to_double(c), bound);
  }
  gemm.matmul(shape, 0.125f, ga.get() + k, gb.get(), 0.0f, gc.get(), nullptr);
  require_same_bits("gemm batched", got, gc.download());
}

TEST_CASE("cuda gemm with device-side alpha and beta equals the host-scalar gemm bit for bit", "[gpu][ops]") {
  // The quantized linears' products (fprop NT, dgrad NN, the wgrad shape TN) with beta = 0, alpha
  // the product of two tensor scales formed on the device by Gemm::scale_product: bit for bit.
  // With beta = 1 (the engine's wgrad) cuBLASLt's device-scalar epilogue rounds differently: there
  // only deterministic and within the two epilogue roundings,
  // |diff| <= 4·eps·(|C_host| + |C0|) (each side rounds alpha·acc and the sum once at most).
  struct Case {
    bool ta, tb;
    int m, n, k;
    float beta;
  };
  const Case cases[] = {{false, true, 1000, 768, 768, 0.0f}, {false, false, 1000, 768, 256, 0.0f},
                        {true, false, 256, 768, 1000, 0.0f}, {true, false, 256, 768, 1000, 1.0f},
                        {false, true, 33, 17, 64, 1.0f}};
  cu::Gemm gemm;
  const float s_a = 0.0371f, s_b = 1.93f;
  const float host_alpha = s_a * s_b;
  DeviceArray<float> scalars(std::vector<float>{s_a, s_b, 0.0f, 0.0f, 1.0f});
  cu::Gemm::scale_product(scalars.get() + 0, scalars.get() + 1, scalars.get() + 2, nullptr);
  const std::vector<float> sc = scalars.download();
  REQUIRE(bits(sc[2]) == bits(host_alpha));
  cu::Gemm::scale_product(scalars.get() + 0, nullptr, scalars.get() + 2, nullptr);  // one-level b: s_b = 1
  REQUIRE(bits(scalars.download()[2]) == bits(s_a));
  cu::Gemm::scale_product(scalars.get() + 0, scalars.get() + 1, scalars.get() + 2, nullptr);
  uint64_t seed = 900;
  for (const Case& c : cases) {
    const std::string name = std::string("gemm device scalars ") + (c.ta ? "T" : "N") + (c.tb ? "T" : "N") +
                             " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                             (c.beta != 0 ? " beta" : "");
    const size_t na = static_cast<size_t>(c.m) * c.k, nb = static_cast<size_t>(c.k) * c.n,
                 nc = static_cast<size_t>(c.m) * c.n;
    std::vector<float> a = normal(na, seed++), b = normal(nb, seed++), c0 = normal(nc, seed++);
    std::vector<bf16_t> ab(na), bb(nb);
    for (size_t i = 0; i < na; ++i) ab[i] = fp4::float_to_bf16(a[i]);
    for (size_t i = 0; i < nb; ++i) bb[i] = fp4::float_to_bf16(b[i]);
    DeviceArray<bf16_t> ga(ab), gb(bb);
    DeviceArray<float> host_c(c0), dev_c(c0);
    gemm.gemm(c.ta, c.tb, c.m, c.n, c.k, host_alpha, ga.get(), gb.get(), c.beta, host_c.get(), nullptr);
    gemm.gemm_device_scalars(c.ta, c.tb, c.m, c.n, c.k, scalars.get() + 2, ga.get(), gb.get(),
                             scalars.get() + (c.beta != 0 ? 4 : 3), dev_c.get(), nullptr);
    const std::vector<float> host = host_c.download(), dev = dev_c.download();
    if (c.beta == 0.0f) {
      require_bits(name, dev, host);
      continue;
    }
    std::vector<double> bound(nc);
    for (size_t i = 0; i < nc; ++i) bound[i] = 4.0 * kEps * (std::fabs(host[i]) + std::fabs(c0[i]));
    require_within(name + " vs host", dev, to_double(host), bound);
    dev_c.upload(c0);
    gemm.gemm_device_scalars(c.ta, c.tb, c.m, c.n, c.k, scalars.get() + 2, ga.get(), gb.get(), scalars.get() + 4,
                             dev_c.get(), nullptr);
    require_same_bits(name, dev, dev_c.download());
  }
}

TEST_CASE("cuda gemm split-K in fp32 matches one fp32 gemm within the summation bound, deterministically",
          "[gpu][ops]") {
  // The LM head's weight gradient (dW [V, d] += dlogitsᵀ · hf, K = 8192 rows, 32 chunks) and an odd
  // shape with padded leading dimensions and a non-power-of-two chunk count (chunks of 32 columns,
  // so every chunk's operands start 16-byte aligned, as cuBLASLt's batched kernels expect).
  // Bound: both sides sum k fp32 products (each rounded, or fused) in different orders, each within
  // γ_{k+1}·(|alpha|·(|A||B|)_ij + |beta·C0_ij|) of the exact value; allow twice the unit roundoff
  // per step as for the bf16 GEMM, 2·(k + 2)·eps·(…), with |A||B| itself from an fp32 GEMM (×1.001).
  struct Case {
    bool ta, tb;
    int m, n, k, chunks;
    int64_t lda, ldb, ldc;
    float alpha, beta;
  };
  const Case cases[] = {{true, false, 256, 768, 8192, 32, 0, 0, 0, 1.0f, 1.0f},
                        {false, true, 37, 45, 96, 3, 100, 104, 50, 0.5f, 0.0f},
                        {false, false, 64, 96, 512, 8, 0, 0, 0, 1.0f, 1.0f}};
  cu::Gemm gemm;
  uint64_t seed = 950;
  for (const Case& c : cases) {
    const std::string name = std::string("gemm split-K ") + (c.ta ? "T" : "N") + (c.tb ? "T" : "N") +
                             " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                             " chunks=" + std::to_string(c.chunks);
    const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
    const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
    const int64_t lda = c.lda ? c.lda : a_cols, ldb = c.ldb ? c.ldb : b_cols, ldc = c.ldc ? c.ldc : c.n;
    std::vector<float> a = normal(static_cast<size_t>(a_rows * lda), seed++, 0.01f);
    std::vector<float> b = normal(static_cast<size_t>(b_rows * ldb), seed++);
    std::vector<float> c0 = normal(static_cast<size_t>(c.m * ldc), seed++);
    std::vector<float> abs_a(a.size()), abs_b(b.size());
    for (size_t i = 0; i < a.size(); ++i) abs_a[i] = std::fabs(a[i]);
    for (size_t i = 0; i < b.size(); ++i) abs_b[i] = std::fabs(b[i]);
    DeviceArray<float> ga(a), gb(b), gabs_a(abs_a), gabs_b(abs_b);
    DeviceArray<float> plain(c0), split1(c0), split2(c0), mag(static_cast<size_t>(c.m * ldc));
    DeviceArray<float> partials(static_cast<size_t>(c.chunks) * c.m * c.n);
    cu::GemmShape shape;
    shape.trans_a = c.ta;
    shape.trans_b = c.tb;
    shape.m = c.m;
    shape.n = c.n;
    shape.k = c.k;
    shape.lda = lda;
    shape.ldb = ldb;
    shape.ldc = ldc;
    gemm.matmul(shape, c.alpha, ga.get(), gb.get(), c.beta, plain.get(), nullptr);
    gemm.matmul(shape, 1.0f, gabs_a.get(), gabs_b.get(), 0.0f, mag.get(), nullptr);
    gemm.matmul_split_k(shape, c.chunks, c.alpha, ga.get(), gb.get(), c.beta, split1.get(), partials.get(), nullptr);
    gemm.matmul_split_k(shape, c.chunks, c.alpha, ga.get(), gb.get(), c.beta, split2.get(), partials.get(), nullptr);
    const std::vector<float> p = plain.download(), s1 = split1.download(), s2 = split2.download(), mg = mag.download();
    std::vector<float> got;
    std::vector<double> ref, bound;
    for (int i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        const size_t e = static_cast<size_t>(i * ldc + j);
        if (j >= c.n) {  // padding between rows: untouched
          CHECK(bits(s1[e]) == bits(c0[e]));
          continue;
        }
        got.push_back(s1[e]);
        ref.push_back(p[e]);
        bound.push_back(2.0 * (c.k + 2) * kEps * (1.001 * std::fabs(c.alpha) * mg[e] + std::fabs(c.beta * c0[e])));
      }
    }
    require_within(name + " vs one gemm", got, ref, bound);
    require_same_bits(name, s1, s2);
    // The sum's documented order, on the host from the partials the calls left (each call's
    // products are the same bits): beta·C0 (0 when beta is 0), then chunk 0, 1, ... in turn.
    const std::vector<float> parts = partials.download();
    const size_t plane = static_cast<size_t>(c.m) * c.n;
    std::vector<float> order_got, order_want;
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        const size_t e = static_cast<size_t>(i * ldc + j), pe = static_cast<size_t>(i) * c.n + j;
        float acc = c.beta == 0.0f ? 0.0f : c.beta * c0[e];
        for (int q = 0; q < c.chunks; ++q) acc += parts[q * plane + pe];
        order_got.push_back(s1[e]);
        order_want.push_back(acc);
      }
    }
    require_bits(name + " = beta·C0 + partials in chunk order", order_got, order_want);
  }
}

TEST_CASE("cuda gemm split-K on bf16 operands (the weight gradients) matches one gemm, with a device alpha",
          "[gpu][ops]") {
  // The block linears' weight-gradient shape dW [m, n] += alpha·(dY [k, m]ᵀ · X [k, n]) with a long
  // K (a micro-batch's rows) and a small output. Against one cuBLASLt GEMM with the host alpha:
  // both sides sum k products in different orders, bound 2·(k + 2)·eps·(|alpha|·(|A||B|) + |C0|)
  // as for the fp32 split-K above. Exact checks of the form: with a device alpha the result is
  // C0 + alpha·S bit for bit, S being the same call's plain sum of partials (beta = 0, no alpha);
  // and two calls give the same bits.
  struct Case {
    int m, n, k, chunks;
  };
  const Case cases[] = {{384, 128, 16384, 32}, {1024, 128, 16384, 32}, {96, 64, 2048, 4}};
  cu::Gemm gemm;
  const float alpha = 0.0371f * 1.93f;
  DeviceArray<float> scalar(std::vector<float>{alpha});
  uint64_t seed = 970;
  for (const Case& c : cases) {
    const std::string name = "gemm split-K bf16 TN m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                             " k=" + std::to_string(c.k) + " chunks=" + std::to_string(c.chunks);
    const size_t na = static_cast<size_t>(c.k) * c.m, nb = static_cast<size_t>(c.k) * c.n,
                 nc = static_cast<size_t>(c.m) * c.n;
    std::vector<float> a = normal(na, seed++, 0.01f), b = normal(nb, seed++), c0 = normal(nc, seed++);
    std::vector<bf16_t> ab(na), bb(nb);
    std::vector<float> abs_a(na), abs_b(nb);
    for (size_t i = 0; i < na; ++i) {
      ab[i] = fp4::float_to_bf16(a[i]);
      abs_a[i] = std::fabs(fp4::bf16_to_float(ab[i]));
    }
    for (size_t i = 0; i < nb; ++i) {
      bb[i] = fp4::float_to_bf16(b[i]);
      abs_b[i] = std::fabs(fp4::bf16_to_float(bb[i]));
    }
    DeviceArray<bf16_t> ga(ab), gb(bb);
    DeviceArray<float> gabs_a(abs_a), gabs_b(abs_b), mag(nc);
    DeviceArray<float> plain(c0), split1(c0), split2(c0), sum(nc);
    DeviceArray<float> partials(static_cast<size_t>(c.chunks) * nc);
    cu::GemmShape shape;
    shape.trans_a = true;
    shape.m = c.m;
    shape.n = c.n;
    shape.k = c.k;
    gemm.gemm(true, false, c.m, c.n, c.k, alpha, ga.get(), gb.get(), 1.0f, plain.get(), nullptr);
    gemm.matmul(shape, 1.0f, gabs_a.get(), gabs_b.get(), 0.0f, mag.get(), nullptr);
    gemm.matmul_split_k(shape, c.chunks, scalar.get(), ga.get(), gb.get(), 1.0f, split1.get(), partials.get(), nullptr);
    gemm.matmul_split_k(shape, c.chunks, scalar.get(), ga.get(), gb.get(), 1.0f, split2.get(), partials.get(), nullptr);
    gemm.matmul_split_k(shape, c.chunks, nullptr, ga.get(), gb.get(), 0.0f, sum.get(), partials.get(), nullptr);
    const std::vector<float> p = plain.download(), s1 = split1.download(), s2 = split2.download(),
                             sm = sum.download(), mg = mag.download();
    std::vector<double> bound(nc);
    std::vector<float> form(nc);
    for (size_t e = 0; e < nc; ++e) {
      bound[e] = 2.0 * (c.k + 2) * kEps * (1.001 * std::fabs(alpha) * mg[e] + std::fabs(c0[e]));
      const float scaled = alpha * sm[e];
      form[e] = c0[e] + scaled;
    }
    require_within(name + " vs one gemm", s1, to_double(p), bound);
    require_bits(name + " = C0 + alpha * sum of partials", s1, form);
    require_same_bits(name, s1, s2);
    // The plain sum in chunk order on the host, from the partials the last call left.
    const std::vector<float> parts = partials.download();
    std::vector<float> order(nc);
    for (size_t e = 0; e < nc; ++e) {
      float acc = 0.0f;
      for (int q = 0; q < c.chunks; ++q) acc += parts[q * nc + e];
      order[e] = acc;
    }
    require_bits(name + " sum of partials in chunk order", sm, order);
  }
}

// ---- Fused bf16 stores (ops.cuh's StoreOut and round_* flags) --------------------------------
// A fused store must give exactly what the separate passes give: the fp32 output equals
// round_to_bf16 of the plain op's output (or that output itself without rounding), the bf16 side
// output equals float_to_bf16 of the fp32 output, and a round_* input flag equals running the plain
// op on the rounded input. Every comparison is bit for bit, with and without rounding.

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = fp4::round_to_bf16(x);
  return v;
}

// `fused` (the fp32 output) and `copy` (its bf16 side output, if any) against the plain output.
void require_stored(const std::string& what, const std::vector<float>& fused, const std::vector<bf16_t>* copy,
                    const std::vector<float>& plain, bool round) {
  require_bits(what + (round ? " rounded" : " unrounded"), fused, round ? rounded(plain) : plain);
  if (copy == nullptr) return;
  REQUIRE(copy->size() == fused.size());
  std::vector<float> got(fused.size()), want(fused.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    got[i] = fp4::bf16_to_float((*copy)[i]);
    want[i] = fp4::bf16_to_float(fp4::float_to_bf16(fused[i]));
  }
  require_bits(what + " bf16 copy", got, want);
}

TEST_CASE("cuda ops' fused bf16 stores equal separate rounding and conversion passes bit for bit", "[gpu][ops]") {
  cu::Workspace ws;
  const int rows = 130, d = 192, f = 160, vocab = 50;
  const size_t n = static_cast<size_t>(rows) * d, nf = static_cast<size_t>(rows) * f;
  const float eps = 1e-5f;

  {  // round_to_bf16 with its copy
    std::vector<float> x = normal(n, 101);
    x[0] = NAN;
    x[1] = INFINITY;
    x[2] = 3.3895314e38f;  // rounds to infinity
    x[3] = 1.0f + 0x1p-8f;  // a tie
    DeviceArray<float> g(x);
    DeviceArray<bf16_t> c(n);
    cu::round_to_bf16(g.get(), n, c.get(), nullptr);
    const std::vector<bf16_t> copy = c.download();
    require_stored("round_to_bf16 + copy", g.download(), &copy, x, true);
  }

  for (const bool round : {true, false}) {
    auto store = [&](bf16_t* copy) {
      cu::StoreOut s;
      s.round = round;
      s.bf16 = copy;
      return s;
    };
    DeviceArray<bf16_t> c(2 * nf + 3 * n);  // wide enough for every copy below

    // residual_add: out's store, b's pending store; also in place (out = a).
    const std::vector<float> a = normal(n, 102), b = normal(n, 103, 3.0f);
    DeviceArray<float> g_a(a), g_b(b), g_b_in(round ? rounded(b) : b), g_out(n);
    cu::residual_add(g_a.get(), g_b_in.get(), g_out.get(), n, nullptr);
    const std::vector<float> sum = g_out.download();
    cu::residual_add(g_a.get(), g_b.get(), g_out.get(), n, nullptr, store(c.get()), round);
    std::vector<bf16_t> copy = c.download();
    copy.resize(n);
    require_stored("residual_add", g_out.download(), &copy, sum, round);
    require_bits("residual_add leaves b", g_b.download(), b);
    cu::residual_add(g_a.get(), g_b.get(), g_a.get(), n, nullptr, store(nullptr), round);
    require_stored("residual_add in place", g_a.download(), nullptr, sum, round);

    // embedding_forward (an out-of-range token gives a NaN row either way)
    std::vector<int32_t> tokens(rows);
    for (int r = 0; r < rows; ++r) tokens[r] = (r * 7) % vocab;
    tokens[5] = vocab;
    const std::vector<float> table = normal(static_cast<size_t>(vocab) * d, 104);
    DeviceArray<float> g_table(table), g_emb(n);
    DeviceArray<int32_t> g_tokens(tokens);
    cu::embedding_forward(g_table.get(), vocab, g_tokens.get(), rows, d, g_emb.get(), nullptr);
    const std::vector<float> emb = g_emb.download();
    cu::embedding_forward(g_table.get(), vocab, g_tokens.get(), rows, d, g_emb.get(), nullptr, store(c.get()));
    copy = c.download();
    copy.resize(n);
    require_stored("embedding_forward", g_emb.download(), &copy, emb, round);

    // rmsnorm forward (y's store) and backward (dx's store, dy's pending store)
    const std::vector<float> x = normal(n, 105, 2.0f, 0.1f), gain = normal(d, 106, 0.1f, 1.0f);
    const std::vector<float> dy = normal(n, 107), dgain0 = normal(d, 108, 0.5f);
    DeviceArray<float> g_x(x), g_gain(gain), g_y(n), g_rstd(rows), g_dy(dy), g_dy_in(round ? rounded(dy) : dy),
        g_dx(n), g_dgain(dgain0);
    cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, eps, g_y.get(), g_rstd.get(), nullptr);
    const std::vector<float> y = g_y.download(), rstd = g_rstd.download();
    cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, eps, g_y.get(), g_rstd.get(), nullptr, store(c.get()));
    copy = c.download();
    copy.resize(n);
    require_stored("rmsnorm_forward y", g_y.download(), &copy, y, round);
    require_bits("rmsnorm_forward rstd (stored y)", g_rstd.download(), rstd);
    cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy_in.get(), rows, d, g_dx.get(), g_dgain.get(), ws,
                         nullptr);
    const std::vector<float> dx = g_dx.download(), dgain = g_dgain.download();
    g_dgain.upload(dgain0);
    cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_dx.get(), g_dgain.get(), ws,
                         nullptr, store(c.get()), round);
    copy = c.download();
    copy.resize(n);
    require_stored("rmsnorm_backward dx", g_dx.download(), &copy, dx, round);
    require_bits("rmsnorm_backward dgain (round_dy)", g_dgain.download(), dgain);
    require_bits("rmsnorm_backward leaves dy", g_dy.download(), dy);

    // swiglu forward (a's store; u's store in place) and backward (du's store, da's pending store)
    std::vector<float> u = normal(2 * nf, 109, 3.0f);
    const std::vector<float> da = normal(nf, 110);
    DeviceArray<float> g_u(u), g_u_in(round ? rounded(u) : u), g_sa(nf), g_da(da), g_da_in(round ? rounded(da) : da),
        g_du(2 * nf);
    cu::swiglu_forward(g_u_in.get(), rows, f, g_sa.get(), nullptr);
    const std::vector<float> act = g_sa.download();
    cu::swiglu_forward(g_u_in.get(), rows, f, g_sa.get(), nullptr, store(c.get()));
    copy = c.download();
    copy.resize(nf);
    require_stored("swiglu_forward a", g_sa.download(), &copy, act, round);
    if (round) {
      cu::swiglu_forward_round_u(g_u.get(), rows, f, g_sa.get(), nullptr, store(c.get()));
      copy = c.download();
      copy.resize(nf);
      require_stored("swiglu_forward_round_u a", g_sa.download(), &copy, act, round);
      require_bits("swiglu_forward_round_u u in place", g_u.download(), rounded(u));
    }
    cu::swiglu_backward(g_u_in.get(), g_da_in.get(), rows, f, g_du.get(), nullptr);
    const std::vector<float> du = g_du.download();
    cu::swiglu_backward(g_u_in.get(), g_da.get(), rows, f, g_du.get(), nullptr, store(c.get()), round);
    copy = c.download();
    copy.resize(2 * nf);
    require_stored("swiglu_backward du", g_du.download(), &copy, du, round);
    require_bits("swiglu_backward leaves da", g_da.download(), da);

    // RoPE over the packed qkv buffer: store, rope(q), rope(k), store, bf16 copy in one pass.
    struct RopeShape {
      int batch, seq, heads, hd;
    };
    // head_dim 6 and 2 (not a multiple of 4): the one-pair-per-thread path.
    for (const RopeShape& s : {RopeShape{2, 65, 3, 64}, RopeShape{1, 17, 2, 32}, RopeShape{2, 9, 3, 6},
                               RopeShape{1, 5, 1, 2}}) {
      const std::string name = shape_name("rope_qkv", {{"B", s.batch}, {"T", s.seq}, {"H", s.heads}, {"hd", s.hd}});
      const cu::RopeTable tbl(s.seq, s.hd, 10000.0);
      const int dm = s.heads * s.hd;
      const size_t nq = static_cast<size_t>(s.batch) * s.seq * 3 * dm;
      REQUIRE(nq <= 2 * nf + 3 * n);
      const std::vector<float> qkv = normal(nq, 111, 2.0f);
      for (const bool backward : {false, true}) {
        const auto rope = backward ? cu::rope_backward : cu::rope_forward;
        DeviceArray<float> g(qkv);
        DeviceArray<bf16_t> gc(nq);
        if (round) cu::round_to_bf16(g.get(), nq, nullptr);
        rope(g.get(), s.batch, s.seq, s.heads, s.hd, 3 * dm, tbl, nullptr);
        rope(g.get() + dm, s.batch, s.seq, s.heads, s.hd, 3 * dm, tbl, nullptr);
        const std::vector<float> plain = g.download();  // rounded once more by require_stored
        g.upload(qkv);
        if (backward) {
          cu::rope_backward_qkv(g.get(), s.batch, s.seq, s.heads, s.hd, tbl, nullptr, store(gc.get()));
        } else {
          cu::rope_forward_qkv(g.get(), s.batch, s.seq, s.heads, s.hd, tbl, nullptr, store(gc.get()));
        }
        copy = gc.download();
        require_stored(name + (backward ? " backward" : " forward"), g.download(), &copy, plain, round);
      }
    }

    // The fused attention's output store (lse unchanged).
    {
      const int batch = 2, seq = 128, heads = 2, hd = 64, dm = heads * hd;
      const size_t nq = static_cast<size_t>(batch) * seq * 3 * dm, no = static_cast<size_t>(batch) * seq * dm;
      const std::vector<float> qkv = normal(nq, 112);
      DeviceArray<float> g_qkv(qkv), g_out(no), g_lse(static_cast<size_t>(batch) * heads * seq);
      DeviceArray<bf16_t> g_qkvb(nq), gc(no);
      cu::float_to_bf16(g_qkv.get(), g_qkvb.get(), nq, nullptr);
      cu::flash_attention_forward(g_qkvb.get(), batch, seq, heads, hd, g_out.get(), g_lse.get(), nullptr);
      const std::vector<float> out = g_out.download(), lse = g_lse.download();
      cu::flash_attention_forward_stored(g_qkvb.get(), batch, seq, heads, hd, g_out.get(), g_lse.get(),
                                         store(gc.get()), nullptr);
      copy = gc.download();
      require_stored("flash_attention_forward_stored out", g_out.download(), &copy, out, round);
      require_bits("flash_attention_forward_stored lse", g_lse.download(), lse);
    }
  }
}

// ---- Vector and scalar paths ---------------------------------------------------------------
// The element-wise ops use 16-byte accesses only when the shape and every pointer allow them
// (kernels/cuda/ops_common.cuh). A buffer placed one element past an allocation's start is
// misaligned, which forces the scalar paths; both paths must give the same bits (and the CPU's,
// where the op is bit-identical to it).

// n values of T at `offset` elements into a device allocation.
template <class T>
class OffsetBuffer {
 public:
  OffsetBuffer(size_t n, size_t offset) : buf_(n + offset), n_(n), offset_(offset) {}
  OffsetBuffer(const std::vector<T>& h, size_t offset) : OffsetBuffer(h.size(), offset) {
    FP4_CUDA_CHECK(cudaMemcpy(get(), h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* get() { return buf_.get() + offset_; }
  std::vector<T> download() const {
    const std::vector<T> all = buf_.download();
    return std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(offset_), all.end());
  }

 private:
  DeviceArray<T> buf_;
  size_t n_, offset_;
};

std::vector<float> bf16_values(const std::vector<bf16_t>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = fp4::bf16_to_float(h[i]);
  return v;
}

TEST_CASE("cuda element-wise ops give the same bits on their vector and scalar paths", "[gpu][ops]") {
  cu::Workspace ws;
  for (const bool round : {false, true}) {
    auto stored = [&](std::vector<float> v) { return round ? rounded(v) : v; };
    auto copy_of = [](const std::vector<float>& v) {
      std::vector<float> c(v.size());
      for (size_t i = 0; i < v.size(); ++i) c[i] = fp4::bf16_to_float(fp4::float_to_bf16(v[i]));
      return c;
    };
    for (const size_t off : {size_t{0}, size_t{1}, size_t{4}}) {
      // offset 1: the scalar paths; 4: 16-byte fp32 but only 8-byte bf16 alignment (the four-wide
      // bf16 paths); 0: the widest paths
      const std::string tag = " offset " + std::to_string(off) + (round ? " rounded" : "");
      {  // residual_add (n % 4 == 3: the vector path's tail too), the conversions, round with copy
        const size_t n = 1003;
        const std::vector<float> a = normal(n, 201), b = normal(n, 202, 3.0f);
        std::vector<float> sum(n);
        for (size_t i = 0; i < n; ++i) sum[i] = a[i] + (round ? fp4::round_to_bf16(b[i]) : b[i]);
        OffsetBuffer<float> g_a(a, off), g_b(b, off), g_out(n, off);
        OffsetBuffer<bf16_t> g_c(n, off);
        cu::residual_add(g_a.get(), g_b.get(), g_out.get(), n, nullptr, cu::StoreOut{round, g_c.get()}, round);
        const std::vector<float> out = g_out.download();
        require_bits("residual_add" + tag, out, stored(sum));
        require_bits("residual_add bf16 copy" + tag, bf16_values(g_c.download()), copy_of(out));

        OffsetBuffer<float> g_x(a, off), g_y(n, off);
        cu::float_to_bf16(g_x.get(), g_c.get(), n, nullptr);
        require_bits("float_to_bf16" + tag, bf16_values(g_c.download()), copy_of(a));
        cu::bf16_to_float(g_c.get(), g_y.get(), n, nullptr);
        require_bits("bf16_to_float" + tag, g_y.download(), copy_of(a));
        cu::round_to_bf16(g_x.get(), n, nullptr);
        require_bits("round_to_bf16" + tag, g_x.download(), rounded(a));
        OffsetBuffer<float> g_z(b, off);
        cu::round_to_bf16(g_z.get(), n, g_c.get(), nullptr);
        require_bits("round_to_bf16 + copy" + tag, g_z.download(), rounded(b));
        require_bits("round_to_bf16 copy" + tag, bf16_values(g_c.download()), rounded(b));
      }
      // rmsnorm, against the CPU: y's store and copy, dx's store and dy's pending store
      for (const auto& [rows, d] : {std::pair{33, 768}, std::pair{20, 100}, std::pair{17, 13}}) {
        const std::string name = shape_name("rmsnorm", {{"rows", rows}, {"d", d}}) + tag;
        const size_t n = static_cast<size_t>(rows) * d;
        const std::vector<float> x = normal(n, 211, 2.0f, 0.1f), gain = normal(d, 212, 0.1f, 1.0f), dy = normal(n, 213);
        std::vector<float> y(n), rstd(rows), dx(n), dgain(d, 0.0f);
        cpu::rmsnorm_forward(x.data(), gain.data(), rows, d, 1e-5f, y.data(), rstd.data());
        const std::vector<float> dy_in = stored(dy);
        cpu::rmsnorm_backward(x.data(), gain.data(), rstd.data(), dy_in.data(), rows, d, dx.data(), dgain.data());
        // gain always misaligned (a parameter inside the flat buffer may be): the aligned run takes
        // the vector path with 4-byte gain loads.
        OffsetBuffer<float> g_x(x, off), g_gain(gain, 1), g_y(n, off), g_rstd(rows, off), g_dy(dy, off),
            g_dx(n, off), g_dgain(std::vector<float>(d, 0.0f), off);
        OffsetBuffer<bf16_t> g_c(n, off);
        cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, g_y.get(), g_rstd.get(), nullptr,
                            cu::StoreOut{round, g_c.get()});
        const std::vector<float> gy = g_y.download();
        require_bits(name + " y", gy, stored(y));
        require_bits(name + " y bf16 copy", bf16_values(g_c.download()), copy_of(gy));
        require_bits(name + " rstd", g_rstd.download(), rstd);
        cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_dx.get(), g_dgain.get(),
                             ws, nullptr, cu::StoreOut{round, g_c.get()}, round);
        const std::vector<float> gdx = g_dx.download();
        require_bits(name + " dx", gdx, stored(dx));
        require_bits(name + " dx bf16 copy", bf16_values(g_c.download()), copy_of(gdx));
        require_bits(name + " dgain (one chunk)", g_dgain.download(), dgain);
      }
    }
    // swiglu and RoPE: the misaligned (scalar) run against the aligned (vector) one.
    {
      const int rows = 21, f = 160;
      const size_t n = static_cast<size_t>(rows) * f;
      const std::vector<float> u = normal(2 * n, 221, 3.0f), da = normal(n, 222);
      std::vector<float> got[2][4];  // [offset][a, a's copy, u after round_u, du]
      for (const size_t off : {size_t{0}, size_t{1}}) {
        OffsetBuffer<float> g_u(u, off), g_a(n, off), g_da(da, off), g_du(2 * n, off);
        OffsetBuffer<bf16_t> g_c(2 * n, off);
        cu::swiglu_forward_round_u(g_u.get(), rows, f, g_a.get(), nullptr, cu::StoreOut{round, g_c.get()});
        got[off][0] = g_a.download();
        got[off][1] = bf16_values(g_c.download());
        got[off][1].resize(n);  // a's copy: the first n
        got[off][2] = g_u.download();
        cu::swiglu_backward(g_u.get(), g_da.get(), rows, f, g_du.get(), nullptr, cu::StoreOut{round, g_c.get()}, round);
        got[off][3] = g_du.download();
        require_bits("swiglu_backward du bf16 copy" + std::string(off ? " misaligned" : ""),
                     bf16_values(g_c.download()), copy_of(got[off][3]));
      }
      require_bits("swiglu_forward_round_u a, scalar = vector", got[1][0], got[0][0]);
      require_bits("swiglu_forward_round_u a copy, scalar = vector", got[1][1], got[0][1]);
      require_bits("swiglu_forward_round_u u, scalar = vector", got[1][2], got[0][2]);
      require_bits("swiglu_forward_round_u u", got[0][2], rounded(u));
      require_bits("swiglu_backward du, scalar = vector", got[1][3], got[0][3]);
    }
    {
      const int batch = 2, seq = 33, heads = 3, hd = 64, dm = heads * hd;
      const size_t nq = static_cast<size_t>(batch) * seq * 3 * dm;
      const cu::RopeTable tbl(seq, hd, 10000.0);
      const std::vector<float> qkv = normal(nq, 231, 2.0f);
      for (const bool backward : {false, true}) {
        std::vector<float> got[2][2];
        for (const size_t off : {size_t{0}, size_t{1}}) {
          OffsetBuffer<float> g(qkv, off);
          OffsetBuffer<bf16_t> gc(nq, off);
          if (backward) {
            cu::rope_backward_qkv(g.get(), batch, seq, heads, hd, tbl, nullptr, cu::StoreOut{round, gc.get()});
          } else {
            cu::rope_forward_qkv(g.get(), batch, seq, heads, hd, tbl, nullptr, cu::StoreOut{round, gc.get()});
          }
          got[off][0] = g.download();
          got[off][1] = bf16_values(gc.download());
        }
        const std::string name =
            std::string(backward ? "rope_backward_qkv" : "rope_forward_qkv") + (round ? " rounded" : "");
        require_bits(name + ", scalar = vector", got[1][0], got[0][0]);
        require_bits(name + " copy, scalar = vector", got[1][1], got[0][1]);
        require_bits(name + " copy", got[0][1], copy_of(got[0][0]));
      }
    }
  }
}

// dgain's documented order (ops.cuh): per column, chunks of kRmsnormRowChunk rows summed in row
// order from 0, then the chunk sums in chunk order from 0, then one addition into dgain. Emulated
// in fp32 on the CPU, with more than 128 chunks (the GPU adds the chunk sums in pieces of 128).
// ---- bf16-held activations ---------------------------------------------------------------------
// With bf16 storage the engine keeps stored activations in bf16 (engine/cuda_model/cuda_model.h,
// LayerActs): the GEMMs whose outputs are stored write bf16, the ops read bf16 inputs, and outputs
// nothing reads in fp32 are written only as their bf16 copies. Each form must give the bits of the
// fp32 form it replaces, on the vector and the scalar (misaligned) paths.

std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp4::float_to_bf16(v[i]);
  return h;
}

TEST_CASE("cuda gemm's bf16 output is its fp32 output rounded, host and device alpha", "[gpu][ops]") {
  struct Case {
    bool ta, tb;
    int m, n, k;
  };
  // The block linears' fprop (NT) and dgrad (NN) at the first study's d6 shape, and odd sizes.
  const Case cases[] = {{false, true, 16384, 1152, 384}, {false, false, 16384, 384, 1024},
                        {false, true, 1000, 768, 256}, {false, false, 33, 17, 64}, {false, true, 130, 24, 40}};
  cu::Gemm gemm;
  DeviceArray<float> scalars(std::vector<float>{0.0371f * 1.93f, 0.0f});
  uint64_t seed = 1500;
  for (const Case& c : cases) {
    const std::string name = std::string("gemm bf16 out ") + (c.ta ? "T" : "N") + (c.tb ? "T" : "N") +
                             " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
    const size_t na = static_cast<size_t>(c.m) * c.k, nb = static_cast<size_t>(c.k) * c.n,
                 nc = static_cast<size_t>(c.m) * c.n;
    DeviceArray<bf16_t> ga(to_bf16(normal(na, seed++))), gb(to_bf16(normal(nb, seed++)));
    DeviceArray<float> c32(nc);
    DeviceArray<bf16_t> c16(nc);
    gemm.gemm(c.ta, c.tb, c.m, c.n, c.k, 1.0f, ga.get(), gb.get(), 0.0f, c32.get(), nullptr);
    gemm.gemm(c.ta, c.tb, c.m, c.n, c.k, 1.0f, ga.get(), gb.get(), 0.0f, c16.get(), nullptr);
    require_bits(name, bf16_values(c16.download()), rounded(c32.download()));
    gemm.gemm_device_scalars(c.ta, c.tb, c.m, c.n, c.k, scalars.get(), ga.get(), gb.get(), scalars.get() + 1,
                             c32.get(), nullptr);
    gemm.gemm_device_scalars(c.ta, c.tb, c.m, c.n, c.k, scalars.get(), ga.get(), gb.get(), scalars.get() + 1,
                             c16.get(), nullptr);
    require_bits(name + " device alpha", bf16_values(c16.download()), rounded(c32.download()));
  }
}

TEST_CASE("cuda ops on bf16-held inputs and bf16-only outputs equal their fp32 forms bit for bit", "[gpu][ops]") {
  cu::Workspace ws;
  // offset 1: the scalar paths; 4: 8-byte but not 16-byte bf16 alignment (the four-wide paths)
  for (const size_t off : {size_t{0}, size_t{1}, size_t{4}}) {
    const std::string tag = " offset " + std::to_string(off);
    const cu::StoreOut none{};
    {  // residual_add with a bf16 b: the fp32 call with b's pending store
      const size_t n = 1003;
      const std::vector<float> a = normal(n, 1601), b = normal(n, 1602, 3.0f);
      OffsetBuffer<float> g_a(a, off), g_b(b, off), g_out(n, off), g_ref(n, off);
      OffsetBuffer<bf16_t> g_b16(to_bf16(b), off), g_c(n, off), g_cref(n, off);
      cu::residual_add(g_a.get(), g_b.get(), g_ref.get(), n, nullptr, cu::StoreOut{true, g_cref.get()}, true);
      cu::residual_add(g_a.get(), g_b16.get(), g_out.get(), n, nullptr, cu::StoreOut{true, g_c.get()});
      require_bits("residual_add bf16 b" + tag, g_out.download(), g_ref.download());
      require_bits("residual_add bf16 b copy" + tag, bf16_values(g_c.download()), bf16_values(g_cref.download()));
    }
    {  // rmsnorm_forward without its fp32 y: the same copy and rstd
      const int rows = 130, d = 192;
      const size_t n = static_cast<size_t>(rows) * d;
      const std::vector<float> x = normal(n, 1603, 2.0f, 0.1f), gain = normal(d, 1604, 0.1f, 1.0f);
      OffsetBuffer<float> g_x(x, off), g_gain(gain, off), g_y(n, off), g_rstd(rows, off), g_rstd2(rows, off);
      OffsetBuffer<bf16_t> g_c(n, off), g_c2(n, off);
      cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, g_y.get(), g_rstd.get(), nullptr,
                          cu::StoreOut{true, g_c.get()});
      cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, nullptr, g_rstd2.get(), nullptr,
                          cu::StoreOut{true, g_c2.get()});
      require_bits("rmsnorm_forward copy only" + tag, bf16_values(g_c2.download()), bf16_values(g_c.download()));
      require_bits("rmsnorm_forward copy only rstd" + tag, g_rstd2.download(), g_rstd.download());
      CHECK_THROWS_AS(cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, nullptr, g_rstd2.get(), nullptr,
                                          none),
                      std::invalid_argument);
    }
    for (const int d : {192, 13000}) {  // rmsnorm_backward_add (d 13000: the direct kernels, no tile)
      const int rows = 37;
      const size_t n = static_cast<size_t>(rows) * d;
      const std::string dt = tag + " d=" + std::to_string(d);
      const std::vector<float> x = normal(n, 1610, 2.0f, 0.1f), gain = normal(d, 1611, 0.1f, 1.0f),
                               dy = normal(n, 1612), res = normal(n, 1613, 0.5f), dgain0 = normal(d, 1614);
      OffsetBuffer<float> g_x(x, off), g_gain(gain, off), g_rstd(rows, off), g_dy(dy, off), g_tmp(n, off),
          g_ref(n, off), g_res(res, off), g_dgain(dgain0, off), g_dgain2(dgain0, off);
      OffsetBuffer<bf16_t> g_c(n, off), g_c2(n, off);
      cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, g_tmp.get(), g_rstd.get(), nullptr);
      cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_tmp.get(), g_dgain.get(), ws,
                           nullptr, cu::StoreOut{}, true);
      cu::residual_add(g_res.get(), g_tmp.get(), g_ref.get(), n, nullptr, cu::StoreOut{true, g_c.get()});
      cu::rmsnorm_backward_add(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_res.get(), g_res.get(),
                               g_dgain2.get(), ws, nullptr, cu::StoreOut{true, g_c2.get()}, true);  // in place
      require_bits("rmsnorm_backward_add dx" + dt, g_res.download(), g_ref.download());
      require_bits("rmsnorm_backward_add copy" + dt, bf16_values(g_c2.download()), bf16_values(g_c.download()));
      require_bits("rmsnorm_backward_add dgain" + dt, g_dgain2.download(), g_dgain.download());
      // dy held in bf16: the fp32 call with round_dy
      OffsetBuffer<bf16_t> g_dy16(to_bf16(dy), off), g_c3(n, off);
      OffsetBuffer<float> g_res3(res, off), g_dgain3(dgain0, off);
      cu::rmsnorm_backward_add(g_x.get(), g_gain.get(), g_rstd.get(), g_dy16.get(), rows, d, g_res3.get(),
                               g_res3.get(), g_dgain3.get(), ws, nullptr, cu::StoreOut{true, g_c3.get()});
      require_bits("rmsnorm_backward_add bf16 dy dx" + dt, g_res3.download(), g_ref.download());
      require_bits("rmsnorm_backward_add bf16 dy copy" + dt, bf16_values(g_c3.download()), bf16_values(g_c.download()));
      require_bits("rmsnorm_backward_add bf16 dy dgain" + dt, g_dgain3.download(), g_dgain.download());
    }
    for (const int d : {192, 13000, 36}) {  // the residual stream in bf16 (d 36: d % 8 != 0, the 4-byte staging)
      const int rows = 37;
      const size_t n = static_cast<size_t>(rows) * d;
      const std::string dt = tag + " d=" + std::to_string(d);
      const std::vector<float> x = rounded(normal(n, 1620, 2.0f, 0.1f)), b = rounded(normal(n, 1621)),
                               gain = normal(d, 1622, 0.1f, 1.0f), dy = normal(n, 1623), res = normal(n, 1624, 0.5f),
                               dgain0 = normal(d, 1625);
      OffsetBuffer<float> g_x(x, off), g_b(b, off), g_gain(gain, off), g_dy(dy, off), g_out(n, off), g_y(n, off),
          g_y2(n, off), g_rstd(rows, off), g_rstd2(rows, off), g_res(res, off), g_res2(res, off), g_dg(dgain0, off),
          g_dg2(dgain0, off);
      OffsetBuffer<bf16_t> g_x16(to_bf16(x), off), g_b16(to_bf16(b), off), g_dy16(to_bf16(dy), off), g_c(n, off),
          g_c2(n, off);
      cu::residual_add(g_x.get(), g_b.get(), g_out.get(), n, nullptr, cu::StoreOut{true, g_c.get()});
      cu::residual_add(g_x16.get(), g_b16.get(), nullptr, n, nullptr, cu::StoreOut{true, g_c2.get()});
      require_bits("residual_add bf16 a, b" + dt, bf16_values(g_c2.download()), bf16_values(g_c.download()));
      cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, g_y.get(), g_rstd.get(), nullptr,
                          cu::StoreOut{true, g_c.get()});
      cu::rmsnorm_forward(g_x16.get(), g_gain.get(), rows, d, 1e-5f, g_y2.get(), g_rstd2.get(), nullptr,
                          cu::StoreOut{true, g_c2.get()});
      require_bits("rmsnorm_forward bf16 x" + dt, g_y2.download(), g_y.download());
      require_bits("rmsnorm_forward bf16 x copy" + dt, bf16_values(g_c2.download()), bf16_values(g_c.download()));
      require_bits("rmsnorm_forward bf16 x rstd" + dt, g_rstd2.download(), g_rstd.download());
      cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_y.get(), g_dg.get(), ws, nullptr,
                           cu::StoreOut{true, g_c.get()}, true);
      cu::rmsnorm_backward(g_x16.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_y2.get(), g_dg2.get(), ws,
                           nullptr, cu::StoreOut{true, g_c2.get()}, true);
      require_bits("rmsnorm_backward bf16 x dx" + dt, g_y2.download(), g_y.download());
      require_bits("rmsnorm_backward bf16 x copy" + dt, bf16_values(g_c2.download()), bf16_values(g_c.download()));
      require_bits("rmsnorm_backward bf16 x dgain" + dt, g_dg2.download(), g_dg.download());
      cu::rmsnorm_backward_add(g_x.get(), g_gain.get(), g_rstd.get(), g_dy16.get(), rows, d, g_res.get(), g_res.get(),
                               g_dg.get(), ws, nullptr, cu::StoreOut{true, g_c.get()});
      cu::rmsnorm_backward_add(g_x16.get(), g_gain.get(), g_rstd.get(), g_dy16.get(), rows, d, g_res2.get(),
                               g_res2.get(), g_dg2.get(), ws, nullptr, cu::StoreOut{true, g_c2.get()});
      require_bits("rmsnorm_backward_add bf16 x dx" + dt, g_res2.download(), g_res.download());
      require_bits("rmsnorm_backward_add bf16 x copy" + dt, bf16_values(g_c2.download()), bf16_values(g_c.download()));
      require_bits("rmsnorm_backward_add bf16 x dgain" + dt, g_dg2.download(), g_dg.download());
      // The residual gradient held in bf16, in place: the fp32 form's copy. Its values are bf16
      // (rounded residual values in, the rounded sum out), so the fp32 form starts from them too.
      const std::vector<float> res16 = rounded(res);
      OffsetBuffer<float> g_res4(res16, off), g_dg4(dgain0, off);
      OffsetBuffer<bf16_t> g_c4(n, off), g_resb(to_bf16(res16), off);
      DeviceArray<float> g_dg5(dgain0);
      cu::rmsnorm_backward_add(g_x16.get(), g_gain.get(), g_rstd.get(), g_dy16.get(), rows, d, g_res4.get(),
                               g_res4.get(), g_dg4.get(), ws, nullptr, cu::StoreOut{true, g_c4.get()});
      cu::rmsnorm_backward_add(g_x16.get(), g_gain.get(), g_rstd.get(), g_dy16.get(), rows, d, g_resb.get(),
                               g_dg5.get(), ws, nullptr);
      require_bits("rmsnorm_backward_add bf16 residual" + dt, bf16_values(g_resb.download()),
                   bf16_values(g_c4.download()));
      require_bits("rmsnorm_backward_add bf16 residual dgain" + dt, g_dg5.download(), g_dg4.download());
      // The final norm's backward into its bf16 copy alone (no fp32 dx)
      OffsetBuffer<bf16_t> g_c5(n, off);
      cu::rmsnorm_backward(g_x16.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, nullptr, g_dg2.get(), ws,
                           nullptr, cu::StoreOut{true, g_c5.get()}, true);
      cu::rmsnorm_backward(g_x16.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_y2.get(), g_dg2.get(), ws,
                           nullptr, cu::StoreOut{true, g_c2.get()}, true);
      require_bits("rmsnorm_backward bf16 copy only" + dt, bf16_values(g_c5.download()), bf16_values(g_c2.download()));
    }
    {  // embedding_forward into its bf16 copy only
      const int rows = 50, d = 24, vocab = 17;
      std::vector<int32_t> tokens(rows);
      for (int r = 0; r < rows; ++r) tokens[r] = (r * 5) % vocab;
      tokens[3] = vocab;  // out of range: NaN either way
      const std::vector<float> table = normal(static_cast<size_t>(vocab) * d, 1626);
      DeviceArray<float> g_table(table), g_out(static_cast<size_t>(rows) * d);
      DeviceArray<int32_t> g_tokens(tokens);
      OffsetBuffer<bf16_t> g_c(static_cast<size_t>(rows) * d, off), g_c2(static_cast<size_t>(rows) * d, off);
      cu::embedding_forward(g_table.get(), vocab, g_tokens.get(), rows, d, g_out.get(), nullptr,
                            cu::StoreOut{true, g_c.get()});
      cu::embedding_forward(g_table.get(), vocab, g_tokens.get(), rows, d, nullptr, nullptr,
                            cu::StoreOut{true, g_c2.get()});
      require_bits("embedding_forward copy only" + tag, bf16_values(g_c2.download()), bf16_values(g_c.download()));
    }
    for (const int f : {160, 161}) {  // swiglu: f % 4 != 0 takes the scalar path too
      const int rows = 70;
      const size_t nu = static_cast<size_t>(rows) * 2 * f, na = static_cast<size_t>(rows) * f;
      const std::string ft = tag + " f=" + std::to_string(f);
      const std::vector<float> u = normal(nu, 1605, 2.0f), da = normal(na, 1606);
      OffsetBuffer<float> g_u(u, off), g_a(na, off), g_da(da, off), g_du(nu, off);
      OffsetBuffer<bf16_t> g_u16(to_bf16(u), off), g_da16(to_bf16(da), off), g_ac(na, off), g_ac2(na, off),
          g_duc(nu, off), g_duc2(nu, off);
      cu::swiglu_forward_round_u(g_u.get(), rows, f, g_a.get(), nullptr, cu::StoreOut{true, g_ac.get()});
      cu::swiglu_forward(g_u16.get(), rows, f, nullptr, nullptr, cu::StoreOut{true, g_ac2.get()});
      require_bits("swiglu_forward bf16 u" + ft, bf16_values(g_ac2.download()), bf16_values(g_ac.download()));
      // g_u now holds the rounded u, as the fp32 engine kept it
      cu::swiglu_backward(g_u.get(), g_da.get(), rows, f, g_du.get(), nullptr, cu::StoreOut{true, g_duc.get()}, true);
      cu::swiglu_backward(g_u16.get(), g_da16.get(), rows, f, nullptr, nullptr, cu::StoreOut{true, g_duc2.get()});
      require_bits("swiglu_backward bf16 u, da" + ft, bf16_values(g_duc2.download()), bf16_values(g_duc.download()));
      CHECK_THROWS_AS(cu::swiglu_forward(g_u16.get(), rows, f, nullptr, nullptr, none), std::invalid_argument);
    }
  }
  // RoPE in place on bf16, forward and backward, against the fp32 form with its store and copy:
  // head_dim 64 and 8 take the 16-byte in-place kernel, 68 and 6 the general one's vector and
  // scalar paths, and an 8-byte offset (a buffer not 16-byte aligned) the general vector path.
  // NaNs of both kinds sit in q, k and v: float_to_bf16 quiets a signaling one, and the in-place
  // kernel, which rewrites v only then, must do the same.
  for (const int hd : {64, 8, 68, 6}) {
    for (const size_t off : {size_t{0}, size_t{4}}) {
      for (const bool backward : {false, true}) {
        const int batch = 2, seq = 40, heads = 3, dm = heads * hd;
        const size_t nq = static_cast<size_t>(batch) * seq * 3 * dm;
        const cu::RopeTable tbl(seq, hd, 10000.0);
        std::vector<bf16_t> h16 = to_bf16(normal(nq, 1607, 2.0f));
        const bf16_t nans[] = {0x7f81, 0xff85, 0x7fc0, 0xffc3};  // signaling, signaling, quiet, quiet
        for (size_t j = 0; j < 12; ++j) h16[(j * 7919 + 13) % nq] = nans[j % 4];
        h16[static_cast<size_t>(2 * dm) + 1] = 0x7f81;  // in v of row 0
        h16[nq - 1] = 0xff85;                           // in v of the last row
        const std::vector<float> h32 = bf16_values(h16);  // the same values (and NaN payloads) in fp32
        DeviceArray<float> g(h32);
        DeviceArray<bf16_t> g_ref(nq);
        OffsetBuffer<bf16_t> g16(h16, off);
        const std::string name = std::string(backward ? "rope_backward_qkv" : "rope_forward_qkv") +
                                 " bf16 in place hd=" + std::to_string(hd) + " offset " + std::to_string(off);
        if (backward) {
          cu::rope_backward_qkv(g.get(), batch, seq, heads, hd, tbl, nullptr, cu::StoreOut{true, g_ref.get()});
          cu::rope_backward_qkv(g16.get(), batch, seq, heads, hd, tbl, g16.get(), nullptr);
        } else {
          cu::rope_forward_qkv(g.get(), batch, seq, heads, hd, tbl, nullptr, cu::StoreOut{true, g_ref.get()});
          cu::rope_forward_qkv(g16.get(), batch, seq, heads, hd, tbl, nullptr);
        }
        const std::vector<bf16_t> got = g16.download(), want = g_ref.download();
        REQUIRE(want[static_cast<size_t>(2 * dm) + 1] == 0x7fc1);  // the signaling NaN in v, quieted
        require_bits(name, bf16_values(got), bf16_values(want));
      }
    }
  }
  {  // the fused attention: forward without its fp32 output, backward from the bf16 output
    const int batch = 2, seq = 128, heads = 2, hd = 64, dm = heads * hd;
    const size_t nq = static_cast<size_t>(batch) * seq * 3 * dm, no = static_cast<size_t>(batch) * seq * dm,
                 nl = static_cast<size_t>(batch) * heads * seq;
    DeviceArray<bf16_t> g_qkv(to_bf16(normal(nq, 1608))), g_dout(to_bf16(normal(no, 1609))), g_c(no), g_c2(no);
    DeviceArray<float> g_out(no), g_lse(nl), g_lse2(nl), g_dqkv(nq), g_dqkv2(nq);
    cu::flash_attention_forward_stored(g_qkv.get(), batch, seq, heads, hd, g_out.get(), g_lse.get(),
                                       cu::StoreOut{true, g_c.get()}, nullptr);
    cu::flash_attention_forward_stored(g_qkv.get(), batch, seq, heads, hd, nullptr, g_lse2.get(),
                                       cu::StoreOut{true, g_c2.get()}, nullptr);
    require_bits("flash forward copy only", bf16_values(g_c2.download()), bf16_values(g_c.download()));
    require_bits("flash forward copy only lse", g_lse2.download(), g_lse.download());
    cu::Workspace ws_a, ws_b;
    cu::flash_attention_backward(g_qkv.get(), g_out.get(), g_lse.get(), g_dout.get(), batch, seq, heads, hd,
                                 g_dqkv.get(), ws_a, nullptr);
    cu::flash_attention_backward(g_qkv.get(), g_c2.get(), g_lse.get(), g_dout.get(), batch, seq, heads, hd,
                                 g_dqkv2.get(), ws_b, nullptr);
    require_bits("flash backward from the bf16 output", g_dqkv2.download(), g_dqkv.download());
    DeviceArray<bf16_t> g_dqkv16(nq);
    cu::Workspace ws_c;
    cu::flash_attention_backward(g_qkv.get(), g_c2.get(), g_lse.get(), g_dout.get(), batch, seq, heads, hd,
                                 g_dqkv16.get(), ws_c, nullptr);
    require_bits("flash backward, bf16 dqkv", bf16_values(g_dqkv16.download()), rounded(g_dqkv.download()));
    // RoPE's backward from that bf16 dqkv, in place: the fp32 form with its store and copy
    const cu::RopeTable tbl(seq, hd, 10000.0);
    DeviceArray<bf16_t> g_ref(nq);
    cu::rope_backward_qkv(g_dqkv.get(), batch, seq, heads, hd, tbl, nullptr, cu::StoreOut{true, g_ref.get()});
    cu::rope_backward_qkv(g_dqkv16.get(), batch, seq, heads, hd, tbl, g_dqkv16.get(), nullptr);
    require_bits("rope_backward_qkv bf16 in place", bf16_values(g_dqkv16.download()), bf16_values(g_ref.download()));
  }
}

TEST_CASE("cuda rmsnorm dgain follows its documented summation order bit for bit", "[gpu][ops]") {
  const int rows = 8300, d = 40, chunk = cu::kRmsnormRowChunk;
  const size_t n = static_cast<size_t>(rows) * d;
  const std::vector<float> x = normal(n, 241, 2.0f, 0.1f), gain = normal(d, 242, 0.1f, 1.0f), dy = normal(n, 243);
  const std::vector<float> dgain0 = normal(d, 244);
  cu::Workspace ws;
  for (const bool round : {false, true}) {
    DeviceArray<float> g_x(x), g_gain(gain), g_y(n), g_rstd(rows), g_dy(dy), g_dx(n), g_dgain(dgain0);
    cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, g_y.get(), g_rstd.get(), nullptr);
    cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_dx.get(), g_dgain.get(), ws,
                         nullptr, {}, round);
    const std::vector<float> rstd = g_rstd.download();
    std::vector<float> want = dgain0;
    for (int j = 0; j < d; ++j) {
      float total = 0.0f;
      for (int r0 = 0; r0 < rows; r0 += chunk) {
        float sum = 0.0f;
        for (int r = r0; r < std::min(rows, r0 + chunk); ++r) {
          const size_t i = static_cast<size_t>(r) * d + j;
          const float dyi = round ? fp4::round_to_bf16(dy[i]) : dy[i];
          const float xhat = x[i] * rstd[r];
          sum += dyi * xhat;
        }
        total += sum;
      }
      want[j] += total;
    }
    require_bits(std::string("rmsnorm dgain rows=8300 d=40") + (round ? " round_dy" : ""), g_dgain.download(), want);
  }
}

TEST_CASE("cuda ops at training sizes match the CPU", "[gpu][ops]") {
  // A d12-sized micro-batch: 8 sequences of 1024 tokens, d_model 768, 12 heads of 64, byte vocab.
  // (bench/ops_bench.cpp times the same ops at this size.)
  const int B = 8, T = 1024, H = 12, hd = 64, d = H * hd, rows = B * T, V = 256;
  const size_t nd = static_cast<size_t>(rows) * d;
  cu::Workspace ws;
  {  // Embedding backward: long runs of repeated tokens, bit-identical to the CPU.
    std::vector<int32_t> tokens(rows);
    std::mt19937_64 rng(301);
    std::exponential_distribution<double> expo(0.05);
    for (int32_t& t : tokens) t = static_cast<int32_t>(std::min<double>(V - 1, std::floor(expo(rng))));
    const std::vector<float> dout = normal(nd, 302), dtable0 = normal(static_cast<size_t>(V) * d, 303);
    std::vector<float> dtable = dtable0;
    cpu::embedding_backward(tokens.data(), dout.data(), rows, d, dtable.data());
    DeviceArray<int32_t> g_tokens(tokens);
    DeviceArray<float> g_dout(dout), g_dtable(dtable0);
    cu::embedding_backward(g_tokens.get(), g_dout.get(), rows, d, V, g_dtable.get(), ws, nullptr);
    require_bits("embedding backward rows=8192 d=768 vocab=256", g_dtable.download(), dtable);
  }
  {  // RMSNorm forward and backward.
    const std::vector<float> x = normal(nd, 311), gain = normal(d, 312, 0.1f, 1.0f), dy = normal(nd, 313);
    std::vector<float> y(nd), rstd(rows), dx(nd), dgain(d, 0.0f);
    cpu::rmsnorm_forward(x.data(), gain.data(), rows, d, 1e-5f, y.data(), rstd.data());
    cpu::rmsnorm_backward(x.data(), gain.data(), rstd.data(), dy.data(), rows, d, dx.data(), dgain.data());
    DeviceArray<float> g_x(x), g_gain(gain), g_y(nd), g_rstd(rows), g_dy(dy), g_dx(nd), g_dgain(d);
    cu::rmsnorm_forward(g_x.get(), g_gain.get(), rows, d, 1e-5f, g_y.get(), g_rstd.get(), nullptr);
    cu::rmsnorm_backward(g_x.get(), g_gain.get(), g_rstd.get(), g_dy.get(), rows, d, g_dx.get(), g_dgain.get(), ws,
                         nullptr);
    require_bits("rmsnorm y rows=8192 d=768", g_y.download(), y);
    require_bits("rmsnorm dx rows=8192 d=768", g_dx.download(), dx);
  }
  {  // Attention: one sequence of 1024 against the fp64 reference.
    const int b1 = 1, h1 = 2, d1 = h1 * hd;
    const size_t nq = static_cast<size_t>(b1) * T * 3 * d1, no = static_cast<size_t>(b1) * T * d1,
                 nl = static_cast<size_t>(b1) * h1 * T;
    const std::vector<float> qkv = normal(nq, 321), dout = normal(no, 322);
    std::vector<float> out(no), lse(nl), dqkv(nq);
    cpu::attention_forward(qkv.data(), b1, T, h1, hd, out.data(), lse.data());
    cpu::attention_backward(qkv.data(), lse.data(), dout.data(), b1, T, h1, hd, dqkv.data());
    std::vector<double> out64(no), lse64(nl), dqkv64(nq);
    const std::vector<double> qkv64 = to_double(qkv), dout64 = to_double(dout);
    cpu::attention_forward(qkv64.data(), b1, T, h1, hd, out64.data(), lse64.data());
    cpu::attention_backward(qkv64.data(), lse64.data(), dout64.data(), b1, T, h1, hd, dqkv64.data());
    DeviceArray<float> g_qkv(qkv), g_out(no), g_lse(nl), g_dout(dout), g_dqkv(nq);
    cu::attention_forward(g_qkv.get(), b1, T, h1, hd, g_out.get(), g_lse.get(), nullptr);
    cu::attention_backward(g_qkv.get(), g_lse.get(), g_dout.get(), b1, T, h1, hd, g_dqkv.get(), ws, nullptr);
    require_as_accurate("attention T=1024 out", g_out.download(), out, out64);
    require_as_accurate("attention T=1024 lse", g_lse.download(), lse, lse64);
    require_as_accurate("attention T=1024 dqkv", g_dqkv.download(), dqkv, dqkv64);
  }
}

TEST_CASE("cuda ops reject bad shapes with std::invalid_argument", "[gpu][ops]") {
  cu::Workspace ws;
  DeviceArray<float> buf(1024);
  CHECK_THROWS_AS(cu::attention_forward(buf.get(), 1, 4, 1, 130, buf.get(), buf.get(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cu::attention_forward(buf.get(), 1, 4, 1, 63, buf.get(), buf.get(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cu::rmsnorm_forward(buf.get(), buf.get(), 0, 8, 1e-5f, buf.get(), buf.get(), nullptr),
                  std::invalid_argument);
  // no output at all: neither dx nor its bf16 copy
  CHECK_THROWS_AS(cu::rmsnorm_backward(buf.get(), buf.get(), buf.get(), buf.get(), 4, 8, nullptr, buf.get(), ws, nullptr),
                  std::invalid_argument);
  const cu::RopeTable table(8, 16, 10000.0);
  CHECK_THROWS_AS(cu::rope_forward(buf.get(), 1, 4, 1, 16, 16, table, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cu::rope_forward(buf.get(), 1, 8, 2, 16, 16, table, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cu::RopeTable(8, 15, 10000.0), std::invalid_argument);
  CHECK_THROWS_AS(cu::AdamWRanges({{0, 10, true}, {11, 5, false}}, 16), std::invalid_argument);
  CHECK_THROWS_AS(cu::AdamWRanges({{0, 10, true}}, 16), std::invalid_argument);
  CHECK_THROWS_AS(cu::adamw_constants(1e-3, 0.9, 0.95, 1e-8, 0.0, 0), std::invalid_argument);
  CHECK_THROWS_AS(cu::cross_entropy(buf.get(), nullptr, 0, 10, buf.get(), nullptr, 1.0f, nullptr),
                  std::invalid_argument);
  cu::Gemm gemm(0);
  DeviceArray<bf16_t> h(1024);
  CHECK_THROWS_AS(gemm.gemm(false, false, 0, 4, 4, 1.0f, h.get(), h.get(), 0.0f, buf.get(), nullptr),
                  std::invalid_argument);
  cu::GemmShape bad;
  bad.m = bad.n = bad.k = 8;
  bad.lda = 4;
  CHECK_THROWS_AS(gemm.matmul(bad, 1.0f, h.get(), h.get(), 0.0f, buf.get(), nullptr), std::invalid_argument);
  try {
    cu::attention_forward(buf.get(), 1, 4, 1, 130, buf.get(), buf.get(), nullptr);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.find("head_dim = 130") != std::string::npos);
  }
}

}  // namespace
