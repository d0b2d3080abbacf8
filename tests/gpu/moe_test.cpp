// [gpu] The CUDA MoE steps (kernels/cuda/moe.cuh) against the CPU reference: the router
// (kernels/cpu/router.h) within a few ulp with the same choices; the dispatch plan, gather, combine,
// gate gradients, experts' dY and the dX sum bit for bit against the reference's operations
// (engine/model/moe_block.cpp's order: groups in ascending token index, each token's experts in
// ascending index, the first term assigned).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/router.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe.cuh"

namespace {

namespace cu = fp4::cuda;
namespace cpu = fp4::cpu;
using fp4::cuda::DeviceArray;

std::vector<float> normal(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

void require_bits(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& ref) {
  REQUIRE(gpu.size() == ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) bad += bits(gpu[i]) != bits(ref[i]);
  std::printf("[moe] %-40s %zu of %zu differ\n", what.c_str(), bad, gpu.size());
  INFO(what);
  REQUIRE(bad == 0);
}

// |gpu − cpu| ≤ ulps · eps · max(|cpu|, floor): CUDA's expf/logf against glibc's.
void require_close(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& ref,
                   double ulps, double floor = 1e-6) {
  REQUIRE(gpu.size() == ref.size());
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double bound = ulps * 0x1p-23 * std::max(std::fabs(static_cast<double>(ref[i])), floor);
    const double diff = std::fabs(static_cast<double>(gpu[i]) - ref[i]);
    worst = std::max(worst, diff / bound);
    bad += !(diff <= bound);
  }
  std::printf("[moe] %-40s worst diff/bound %.3f\n", what.c_str(), worst);
  INFO(what);
  REQUIRE(bad == 0);
}

struct Case {
  int rows, E, K, S, d, pad;
  bool sigmoid, renormalize;
};

}  // namespace

TEST_CASE("cuda MoE router, dispatch, combine and their backward match the CPU reference", "[gpu][moe]") {
  // The case of 3000 rows has more assignments than the dispatch's CTA has threads (6000 against
  // 512), so its groups are placed over several chunks; the last, a width of 45, gives dgates' dot
  // a tail after its whole octets (lanes 0-4 of the eight).
  for (const Case& k : {Case{96, 8, 2, 0, 64, 16, false, false}, Case{100, 5, 1, 1, 48, 32, false, false},
                        Case{64, 4, 3, 2, 40, 16, false, false}, Case{130, 16, 2, 0, 72, 1, false, false},
                        Case{3000, 32, 2, 1, 24, 16, false, false}, Case{77, 6, 2, 0, 45, 16, false, false}}) {
    for (bool sigmoid : {false, true}) {
      const int R = k.rows, E = k.E, K = k.K, S = k.S, d = k.d, J = E + S;
      const bool renorm = k.renormalize || K > 1;
      INFO("R " << R << " E " << E << " k " << K << " S " << S << (sigmoid ? " sigmoid" : " softmax"));
      cudaStream_t stream = nullptr;
      const std::vector<float> logits = normal(static_cast<size_t>(R) * E, 11 + R, 2.0f);

      // Router forward.
      std::vector<float> s_cpu(R * E), g_cpu(R * K), lse_cpu(R);
      std::vector<int32_t> c_cpu(R * K);
      cpu::router_forward(logits.data(), R, E, K, sigmoid, renorm, s_cpu.data(), c_cpu.data(), g_cpu.data(),
                          lse_cpu.data());
      DeviceArray<float> d_logits(logits), d_scores(R * E), d_gates(R * K), d_lse(R);
      DeviceArray<int32_t> d_chosen(R * K);
      cu::moe_router_forward(d_logits.get(), R, E, K, sigmoid, renorm, d_scores.get(), d_chosen.get(), d_gates.get(),
                             d_lse.get(), stream);
      REQUIRE(d_chosen.download() == c_cpu);  // normal logits: no two within a few ulp of each other
      require_close("scores", d_scores.download(), s_cpu, 8);
      require_close("gates", d_gates.download(), g_cpu, 16);
      require_close("lse", d_lse.download(), lse_cpu, 8);

      // Dispatch: groups in ascending token index (the reference's serial pass), padded.
      std::vector<std::vector<int32_t>> groups(J), group_choices(J);  // tokens; assignment indices (-1: shared)
      std::vector<int32_t> slot_ref(R * K);
      for (int t = 0; t < R; ++t)
        for (int c = 0; c < K; ++c) {
          slot_ref[t * K + c] = static_cast<int32_t>(groups[c_cpu[t * K + c]].size());
          groups[c_cpu[t * K + c]].push_back(t);
          group_choices[c_cpu[t * K + c]].push_back(t * K + c);
        }
      for (int j = E; j < J; ++j)
        for (int t = 0; t < R; ++t) {
          groups[j].push_back(t);
          group_choices[j].push_back(-1);
        }
      const int64_t capacity = cu::moe_dispatch_capacity(R, E, S, K, k.pad);
      DeviceArray<int32_t> d_slot(R * K), d_tokens(capacity), d_choice(capacity);
      DeviceArray<int64_t> d_scratch(2 * J + 1);
      const cu::MoeDispatch plan = cu::moe_dispatch(d_chosen.get(), R, E, S, K, k.pad, d_slot.get(), d_tokens.get(),
                                                    d_choice.get(), d_scratch.get(), stream);
      REQUIRE(d_slot.download() == slot_ref);
      std::vector<int32_t> tokens_ref, choice_ref;
      for (int j = 0; j < J; ++j) {
        CHECK(plan.counts[j] == static_cast<int64_t>(groups[j].size()));
        CHECK(plan.offsets[j] == static_cast<int64_t>(tokens_ref.size()));
        tokens_ref.insert(tokens_ref.end(), groups[j].begin(), groups[j].end());
        choice_ref.insert(choice_ref.end(), group_choices[j].begin(), group_choices[j].end());
        for (int p = 0; tokens_ref.size() % k.pad != 0; ++p) {
          tokens_ref.push_back(R + p);
          choice_ref.push_back(-1);
        }
      }
      const int64_t total = plan.offsets[J];
      REQUIRE(total == static_cast<int64_t>(tokens_ref.size()));
      REQUIRE(total <= capacity);
      std::vector<int32_t> tokens_gpu = d_tokens.download();
      tokens_gpu.resize(total);
      REQUIRE(tokens_gpu == tokens_ref);
      std::vector<int32_t> choice_gpu = d_choice.download();
      choice_gpu.resize(total);
      REQUIRE(choice_gpu == choice_ref);

      // Gather, then "expert outputs" y (any values: the combine is what is tested).
      const std::vector<float> h = normal(static_cast<size_t>(R) * d, 3);
      DeviceArray<float> d_h(h), d_x(total * d);
      cu::moe_gather(d_h.get(), d_tokens.get(), total, R, d, d_x.get(), stream);
      std::vector<float> x_ref(total * d, 0.0f);
      for (int64_t g = 0; g < total; ++g)
        if (tokens_ref[g] < R) std::copy_n(h.begin() + static_cast<int64_t>(tokens_ref[g]) * d, d, x_ref.begin() + g * d);
      require_bits("gather", d_x.download(), x_ref);
      const std::vector<float> y = normal(total * d, 5);
      const std::vector<float> gates = d_gates.download();  // the GPU's gates, so the products match
      DeviceArray<float> d_y(y), d_out(R * d), d_gates_used(gates);
      DeviceArray<int64_t> d_offsets(plan.offsets);
      cu::moe_combine(d_y.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), d_gates_used.get(), R, E, S, K, d,
                      d_out.get(), stream);
      std::vector<float> out_ref(R * d);
      for (int t = 0; t < R; ++t)
        for (int f = 0; f < d; ++f) {
          float o = 0.0f;
          for (int c = 0; c < K; ++c) {
            const int a = t * K + c;
            const float v = gates[a] * y[(plan.offsets[c_cpu[a]] + slot_ref[a]) * d + f];
            o = c == 0 ? v : o + v;
          }
          for (int j = E; j < J; ++j) o += y[(plan.offsets[j] + t) * d + f];
          out_ref[t * d + f] = o;
        }
      require_bits("combine", d_out.download(), out_ref);

      // Backward: dgates, the experts' dy, the dx sum.
      const std::vector<float> dout = normal(static_cast<size_t>(R) * d, 7);
      DeviceArray<float> d_dout(dout), d_dgates(R * K), d_dy(total * d);
      cu::moe_dgates(d_dout.get(), d_y.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), R, K, d, d_dgates.get(),
                     stream);
      std::vector<float> dg_ref(R * K);
      for (int a = 0; a < R * K; ++a)
        dg_ref[a] = cpu::dot(dout.data() + (a / K) * d, y.data() + (plan.offsets[c_cpu[a]] + slot_ref[a]) * d, d);
      require_bits("dgates", d_dgates.download(), dg_ref);
      cu::moe_expert_dy(d_dout.get(), d_tokens.get(), d_choice.get(), d_gates_used.get(), total, R, d, d_dy.get(),
                        stream);
      std::vector<float> dy_ref(total * d, 0.0f);
      for (int j = 0; j < J; ++j)
        for (size_t r = 0; r < groups[j].size(); ++r) {
          const int t = groups[j][r];
          float gate = 1.0f;
          if (j < E)
            for (int c = 0; c < K; ++c)
              if (c_cpu[t * K + c] == j) gate = gates[t * K + c];
          for (int f = 0; f < d; ++f) dy_ref[(plan.offsets[j] + r) * d + f] = gate * dout[t * d + f];
        }
      require_bits("expert dy", d_dy.download(), dy_ref);
      const std::vector<float> router_dh = normal(static_cast<size_t>(R) * d, 9, 0.01f);
      DeviceArray<float> d_rdh(router_dh), d_dh(R * d);
      cu::moe_sum_dx(d_y.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), d_rdh.get(), R, E, S, K, d,
                     d_dh.get(), stream);  // y stands in for the experts' dx
      std::vector<float> dh_ref(R * d);
      for (int t = 0; t < R; ++t)
        for (int f = 0; f < d; ++f) {
          float o = 0.0f;
          for (int c = 0; c < K; ++c) {
            const int a = t * K + c;
            const float v = y[(plan.offsets[c_cpu[a]] + slot_ref[a]) * d + f];
            o = c == 0 ? v : o + v;
          }
          for (int j = E; j < J; ++j) o += y[(plan.offsets[j] + t) * d + f];
          dh_ref[t * d + f] = o + router_dh[t * d + f];
        }
      require_bits("dx sum", d_dh.download(), dh_ref);

      // The bf16 forms (the model's: its grouped buffers, its block output and its gradients hold
      // bf16) against the fp32 forms on the same values widened, a bf16 result against the fp32
      // result rounded by float_to_bf16: the same bits.
      {
        auto to_bf16 = [](const std::vector<float>& v, std::vector<fp4::bf16_t>* b) {
          std::vector<float> widened(v.size());
          b->resize(v.size());
          for (size_t i = 0; i < v.size(); ++i) widened[i] = fp4::bf16_to_float((*b)[i] = fp4::float_to_bf16(v[i]));
          return widened;
        };
        auto widen = [](const std::vector<fp4::bf16_t>& v) {
          std::vector<float> f(v.size());
          for (size_t i = 0; i < v.size(); ++i) f[i] = fp4::bf16_to_float(v[i]);
          return f;
        };
        auto rounded = [](std::vector<float> v) {
          for (float& x : v) x = fp4::round_to_bf16(x);
          return v;
        };
        std::vector<fp4::bf16_t> hb, yb, doutb;
        const std::vector<float> hr = to_bf16(h, &hb), yr = to_bf16(y, &yb), doutr = to_bf16(dout, &doutb);
        DeviceArray<fp4::bf16_t> d_hb(hb), d_yb(yb), d_doutb(doutb), d_xb(total * d), d_dyb(total * d), d_o16(R * d);
        DeviceArray<float> d_hr(hr), d_yr(yr), d_doutr(doutr), d_xr(total * d), d_dyr(total * d), d_o32(R * d),
            d_g32(R * K), d_g16(R * K);
        cu::moe_gather(d_hb.get(), d_tokens.get(), total, R, d, d_xb.get(), stream);
        cu::moe_gather(d_hr.get(), d_tokens.get(), total, R, d, d_xr.get(), stream);
        require_bits("gather, bf16", widen(d_xb.download()), d_xr.download());
        cu::moe_combine(d_yb.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), d_gates_used.get(), R, E, S, K, d,
                        d_o16.get(), stream);
        cu::moe_combine(d_yr.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), d_gates_used.get(), R, E, S, K, d,
                        d_o32.get(), stream);
        require_bits("combine, bf16 y and out", widen(d_o16.download()), rounded(d_o32.download()));
        cu::moe_dgates(d_doutb.get(), d_yb.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), R, K, d, d_g16.get(),
                       stream);
        cu::moe_dgates(d_doutr.get(), d_yr.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), R, K, d, d_g32.get(),
                       stream);
        require_bits("dgates, bf16 dout and y", d_g16.download(), d_g32.download());
        cu::moe_expert_dy(d_doutb.get(), d_tokens.get(), d_choice.get(), d_gates_used.get(), total, R, d, d_dyb.get(),
                          stream);
        cu::moe_expert_dy(d_doutr.get(), d_tokens.get(), d_choice.get(), d_gates_used.get(), total, R, d, d_dyr.get(),
                          stream);
        require_bits("expert dy, bf16 dout and dy", widen(d_dyb.download()), rounded(d_dyr.download()));
        cu::moe_sum_dx(d_yb.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), d_rdh.get(), R, E, S, K, d,
                       d_o16.get(), stream);
        cu::moe_sum_dx(d_yr.get(), d_chosen.get(), d_slot.get(), d_offsets.get(), d_rdh.get(), R, E, S, K, d,
                       d_o32.get(), stream);
        require_bits("dx sum, bf16 dx and dh", widen(d_o16.download()), rounded(d_o32.download()));
      }

      // Router backward, from the same forward values (the GPU's scores, gates and lse).
      const std::vector<float> scores = d_scores.download(), lse = d_lse.download();
      const cpu::RouterLosses losses = cpu::router_losses(scores.data(), c_cpu.data(), lse.data(), R, E, K, sigmoid);
      std::vector<float> dz_cpu(R * E);
      cpu::router_backward(logits.data(), scores.data(), c_cpu.data(), lse.data(), dg_ref.data(), losses.counts, R, E,
                           K, sigmoid, renorm, 0.3f, 0.05f, dz_cpu.data());
      DeviceArray<int64_t> d_counts(losses.counts);
      DeviceArray<float> d_dg(dg_ref), d_dz(R * E);
      cu::moe_router_backward(d_logits.get(), d_scores.get(), d_chosen.get(), d_lse.get(), d_dg.get(), d_counts.get(),
                              R, E, K, sigmoid, renorm, 0.3f, 0.05f, d_dz.get(), stream);
      require_close("dlogits", d_dz.download(), dz_cpu, 64, 1e-4);
    }
  }
}
