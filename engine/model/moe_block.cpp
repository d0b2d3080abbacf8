// moe_block.cpp — the model's mixture-of-experts block (docs/model.md, "Mixture of experts"), the
// BasicModel members declared in transformer.h that run it. Written out step by step like
// transformer.cpp's run(), each step followed by store() where a GPU would write bf16.
//
// Forward, for R tokens h [R, d] (mlp_norm's output, bf16-stored):
//   logits = h · W_routerᵀ in fp32 from the fp32 master weights (the router is never quantized);
//   scores, the top-k choice and the gates (kernels/cpu/router.h);
//   expert j's group: the tokens that chose it in ascending token index (every token for a shared
//   expert), gathered into x_j and padded with zero rows to a multiple of the recipe's wgrad block;
//   u_j = mlp_in_j(x_j), a_j = silu(gate)·up, y_j = mlp_out_j(a_j), each a quantized linear under
//   the recipe with the expert's own Philox site and the tokens as its SR source rows;
//   out[t] = Σ over t's experts in ascending index (routed, then shared) of gate · y_j[t].
// Backward: dy_j = gate · dout (per group row), dgate = dout[t] · y_j[t], the experts' linears
// backward, dh[t] = Σ over t's experts in the same order of dx_j[t], plus the router's dlogits · W.
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <type_traits>

#include "engine/model/transformer.h"
#include "kernels/cpu/router.h"

namespace fp4::model {

template <typename T>
int BasicModel<T>::wgrad_row_multiple(int block) const {
  if (!recipe_.quantized || keep_bf16_[block]) return 1;
  int m = 1;
  for (int i = 0; i < engine::kSlotCount; ++i) {
    const engine::Slot slot = static_cast<engine::Slot>(i);
    if (engine::slot_operand(slot) == Operand::w) continue;
    const QuantSpec q = engine::slot_quant_spec(recipe_.slots[i], slot);
    if (q.tile_2d) m = std::lcm(m, q.block);
    if (q.along == BlockAlong::column) m = std::lcm(m, cpu::axis_multiple(q));  // 128 for docs/recipes.md's groups
  }
  return m;
}

template <typename T>
bool BasicModel<T>::moe_forward(const StepContext& ctx, int block, const T* h, T* out) {
  const MoeShape& m = config_.moe;
  const int E = m.n_experts, K = m.top_k, J = m.n_experts + m.n_shared, fe = m.d_ff_expert;
  const int d = config_.d_model, R = rows_;
  const bool sigmoid = m.score == RouterScore::sigmoid;
  MoeActs& A = moe_acts_[block];
  const BlockViews& v = blocks_[block];
  bool ok = true;

  // The router, in fp32.
  A.logits.resize(static_cast<size_t>(R) * E);
  A.scores.resize(static_cast<size_t>(R) * E);
  A.gates.resize(static_cast<size_t>(R) * K);
  A.chosen.resize(static_cast<size_t>(R) * K);
  A.slot.resize(static_cast<size_t>(R) * K);
  A.lse.resize(R);
  cpu::matmul<T>(false, true, R, E, d, T(1), h, param(views_[v.router]), T(0), A.logits.data());
  cpu::router_forward(A.logits.data(), R, E, K, sigmoid, m.renormalize, A.scores.data(), A.chosen.data(),
                      A.gates.data(), A.lse.data());
  cpu::RouterLosses losses = cpu::router_losses(A.scores.data(), A.chosen.data(), A.lse.data(), R, E, K, sigmoid);
  A.stats = MoeLayerStats{block, std::move(losses.counts), losses.balance, losses.z};

  // Dispatch: the groups, in ascending token index (a serial pass: the order is the contract).
  A.experts.resize(J);
  for (ExpertActs& ex : A.experts) {
    ex.tokens.clear();
    ex.choice.clear();
  }
  for (int t = 0; t < R; ++t)
    for (int c = 0; c < K; ++c) {
      const size_t i = static_cast<size_t>(t) * K + c;
      ExpertActs& ex = A.experts[A.chosen[i]];
      A.slot[i] = static_cast<int32_t>(ex.tokens.size());
      ex.tokens.push_back(t);
      ex.choice.push_back(static_cast<int32_t>(i));
    }
  for (int j = E; j < J; ++j) {
    A.experts[j].tokens.resize(R);
    std::iota(A.experts[j].tokens.begin(), A.experts[j].tokens.end(), 0);
  }

  // The experts.
  const int pad = wgrad_row_multiple(block);
  for (int j = 0; j < J; ++j) {
    ExpertActs& ex = A.experts[j];
    ex.rows = static_cast<int>(ex.tokens.size());
    ex.padded = (ex.rows + pad - 1) / pad * pad;
    for (int i = ex.rows; i < ex.padded; ++i) ex.tokens.push_back(R + (i - ex.rows));
    if (ex.rows == 0) continue;
    ex.x.assign(static_cast<size_t>(ex.padded) * d, T(0));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < ex.rows; ++r)
      std::copy_n(h + static_cast<size_t>(ex.tokens[r]) * d, d, ex.x.data() + static_cast<size_t>(r) * d);
    engine::LinearSite s_in = site(ctx, block, 2), s_out = site(ctx, block, 3);
    s_in.linear_id = expert_linear_site(config_, block, j, 2);
    s_out.linear_id = expert_linear_site(config_, block, j, 3);
    s_in.source_rows = s_out.source_rows = ex.tokens.data();
    ex.u.resize(static_cast<size_t>(ex.rows) * 2 * fe);
    ok &= linear_fwd(s_in, v.expert_in[j], ex.x.data(), ex.rows, ex.u.data());
    store(ex.u.data(), ex.u.size());
    ex.a.assign(static_cast<size_t>(ex.padded) * fe, T(0));
    cpu::swiglu_forward(ex.u.data(), ex.rows, fe, ex.a.data());
    store(ex.a.data(), static_cast<size_t>(ex.rows) * fe);
    ex.y.resize(static_cast<size_t>(ex.rows) * d);
    ok &= linear_fwd(s_out, v.expert_out[j], ex.a.data(), ex.rows, ex.y.data());
    store(ex.y.data(), ex.y.size());
  }

  // Combine: each token's experts in ascending index, routed (gated) then shared (gate 1). The
  // first term is assigned, not added to zero, so a one-expert model gives the expert's bits.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < R; ++t) {
    T* o = out + static_cast<size_t>(t) * d;
    for (int c = 0; c < K; ++c) {
      const size_t i = static_cast<size_t>(t) * K + c;
      const T gate = A.gates[i];
      const T* y = A.experts[A.chosen[i]].y.data() + static_cast<size_t>(A.slot[i]) * d;
      for (int f = 0; f < d; ++f) o[f] = c == 0 ? gate * y[f] : o[f] + gate * y[f];
    }
    for (int j = E; j < J; ++j) {
      const T* y = A.experts[j].y.data() + static_cast<size_t>(t) * d;
      for (int f = 0; f < d; ++f) o[f] += y[f];
    }
  }
  return ok;
}

template <typename T>
bool BasicModel<T>::moe_backward(const StepContext& ctx, int block, const T* h, const T* dout, T* dh, T* g,
                                 T grad_scale) {
  const MoeShape& m = config_.moe;
  const int E = m.n_experts, K = m.top_k, J = m.n_experts + m.n_shared, fe = m.d_ff_expert;
  const int d = config_.d_model, R = rows_;
  MoeActs& A = moe_acts_[block];
  const BlockViews& v = blocks_[block];
  bool ok = true;

  // ∂loss/∂gate of every choice: dout[t] · y_j[t].
  std::vector<T> dgates(static_cast<size_t>(R) * K);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < R; ++t)
    for (int c = 0; c < K; ++c) {
      const size_t i = static_cast<size_t>(t) * K + c;
      dgates[i] = cpu::dot(dout + static_cast<size_t>(t) * d,
                           A.experts[A.chosen[i]].y.data() + static_cast<size_t>(A.slot[i]) * d, d);
    }

  // The experts, each with dy = gate · dout on its rows.
  std::vector<T> dy, da, du;
  for (int j = 0; j < J; ++j) {
    ExpertActs& ex = A.experts[j];
    if (ex.rows == 0) continue;
    dy.assign(static_cast<size_t>(ex.padded) * d, T(0));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < ex.rows; ++r) {
      const T gate = j < E ? A.gates[ex.choice[r]] : T(1);
      const T* src = dout + static_cast<size_t>(ex.tokens[r]) * d;
      T* dst = dy.data() + static_cast<size_t>(r) * d;
      for (int f = 0; f < d; ++f) dst[f] = gate * src[f];
    }
    store(dy.data(), static_cast<size_t>(ex.rows) * d);
    engine::LinearSite s_in = site(ctx, block, 2), s_out = site(ctx, block, 3);
    s_in.linear_id = expert_linear_site(config_, block, j, 2);
    s_out.linear_id = expert_linear_site(config_, block, j, 3);
    s_in.source_rows = s_out.source_rows = ex.tokens.data();
    da.resize(static_cast<size_t>(ex.rows) * fe);
    ok &= linear_bwd(s_out, v.expert_out[j], ex.a.data(), dy.data(), ex.rows, ex.padded, da.data(), g);
    store(da.data(), da.size());
    du.assign(static_cast<size_t>(ex.padded) * 2 * fe, T(0));
    cpu::swiglu_backward(ex.u.data(), da.data(), ex.rows, fe, du.data());
    store(du.data(), static_cast<size_t>(ex.rows) * 2 * fe);
    ex.dx.resize(static_cast<size_t>(ex.rows) * d);
    ok &= linear_bwd(s_in, v.expert_in[j], ex.x.data(), du.data(), ex.rows, ex.padded, ex.dx.data(), g);
    store(ex.dx.data(), ex.dx.size());
  }

  // The router: dlogits from the gates and the auxiliary losses, then its weights and its input.
  std::vector<T> dlogits(static_cast<size_t>(R) * E);
  const std::vector<int64_t>& counts = A.stats.counts;
  cpu::router_backward(A.logits.data(), A.scores.data(), A.chosen.data(), A.lse.data(), dgates.data(), counts, R, E,
                       K, m.score == RouterScore::sigmoid, m.renormalize,
                       grad_scale * static_cast<T>(m.balance_coef), grad_scale * static_cast<T>(m.z_coef),
                       dlogits.data());
  const ParamView& router = views_[v.router];
  cpu::matmul<T>(true, false, E, d, R, T(1), dlogits.data(), h, T(1), g + router.offset);
  moe_dh_.resize(static_cast<size_t>(R) * d);
  cpu::matmul<T>(false, false, R, d, E, T(1), dlogits.data(), param(router), T(0), moe_dh_.data());

  // dh: each token's experts in ascending index (the first assigned), then the router's share.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < R; ++t) {
    T* o = dh + static_cast<size_t>(t) * d;
    for (int c = 0; c < K; ++c) {
      const size_t i = static_cast<size_t>(t) * K + c;
      const T* x = A.experts[A.chosen[i]].dx.data() + static_cast<size_t>(A.slot[i]) * d;
      for (int f = 0; f < d; ++f) o[f] = c == 0 ? x[f] : o[f] + x[f];
    }
    for (int j = E; j < J; ++j) {
      const T* x = A.experts[j].dx.data() + static_cast<size_t>(t) * d;
      for (int f = 0; f < d; ++f) o[f] += x[f];
    }
    const T* r = moe_dh_.data() + static_cast<size_t>(t) * d;
    for (int f = 0; f < d; ++f) o[f] += r[f];
  }
  return ok;
}

#define FP4_MOE_INSTANTIATE(T)                                                                              \
  template int BasicModel<T>::wgrad_row_multiple(int) const;                                                \
  template bool BasicModel<T>::moe_forward(const StepContext&, int, const T*, T*);                          \
  template bool BasicModel<T>::moe_backward(const StepContext&, int, const T*, const T*, T*, T*, T);
FP4_MOE_INSTANTIATE(float)
FP4_MOE_INSTANTIATE(double)
#undef FP4_MOE_INSTANTIATE

}  // namespace fp4::model
