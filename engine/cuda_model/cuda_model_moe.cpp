// cuda_model_moe.cpp — CudaModel's MoE blocks (cuda_model.h; docs/model.md, "The MoE block's
// passes"): engine/model/moe_block.cpp step for step, with kernels/cuda/moe.cuh's routing, dispatch
// and combine and the experts' quantized GEMMs. Keep the two in step when either changes.
//
// The expert GEMMs of one linear run as one grouped call (kernels/cuda/grouped_gemm.cuh) or, by
// experts_grouped's rule, one cuBLASLt call per group. Each group's X and dY copies are quantized
// over the group's own rows, their SR draws keyed by the group's tokens (quantize_fused's source_rows,
// bit-identical to cpu::quantize's); the expert weights' copies are made once per optimizer step
// and kept, as the dense linears' (weight_copy: weight slots draw with micro-step 0, so the copy is
// the same at every use).
//
// Where the CPU model keeps an fp32 buffer of bf16 values, this one keeps bf16 (the GEMMs write
// bf16 outputs, rounded once: LinearOut) and converts to fp32 (exactly) where moe.cuh's kernels
// read fp32; an fp32 result the CPU stores is rounded by float_to_bf16 into its bf16 buffer.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/linear_sites.h"
#include "engine/cuda_model/cuda_model.h"
#include "engine/cuda_model/cuda_model_internal.h"
#include "engine/quantized_linear.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/router.h"

namespace fp4::cuda_model {

using detail::backward_specs;
using detail::copy_out;
using detail::quantize_copies;

void CudaModel::prepare_moe() {
  const model::ModelShape& c = config();
  const model::MoeShape& m = c.moe;
  const int L = c.n_layers, d = c.d_model, fe = m.d_ff_expert, E = m.n_experts, K = m.top_k;
  const int J = m.n_experts + m.n_shared, R = rows_;
  const size_t r = static_cast<size_t>(R);
  int64_t cap = 0;
  for (int l = 0; l < L; ++l)
    if (model::is_moe_block(c, l))
      cap = std::max(cap, cuda::moe_dispatch_capacity(R, E, m.n_shared, K, expert_row_multiple(l)));
  const size_t g = static_cast<size_t>(cap);
  if (static_cast<int>(moe_acts_.size()) != L) {
    moe_acts_.clear();
    for (int l = 0; l < L; ++l)
      moe_acts_.push_back(model::is_moe_block(c, l) ? std::make_unique<MoeActs>() : nullptr);
  }
  for (auto& a : moe_acts_) {
    if (!a) continue;
    a->logits.reserve(r * E);
    a->scores.reserve(r * E);
    a->gates.reserve(r * K);
    a->lse.reserve(r);
    a->chosen.reserve(r * K);
    a->slot.reserve(r * K);
    a->tokens.reserve(g);
    a->choice.reserve(g);
    a->plan_dev.reserve(static_cast<size_t>(2 * J + 1));
    a->x.reserve(g * d);
    a->u.reserve(g * 2 * fe);
    a->a.reserve(g * fe);
    a->y.reserve(g * d);
  }
  moe_h_.reserve(r * d);
  moe_dgates_.reserve(r * K);
  moe_dlogits_.reserve(r * E);
  moe_router_dh_.reserve(r * d);
  router_chunks_ = detail::row_sum_chunks(R);
  if (router_chunks_ > 1) moe_router_partials_.reserve(static_cast<size_t>(router_chunks_) * E * d);
  moe_dy_.reserve(g * d);
  moe_da_.reserve(g * fe);
  moe_du_.reserve(g * 2 * fe);
  moe_dx_.reserve(g * d);
  if (recipe().quantized) {
    const size_t widest = static_cast<size_t>(std::max(d, 2 * fe));
    moe_q_a_.reserve(g * widest);
    moe_q_c_.reserve(g * widest);
    moe_q_d_.reserve(g * widest);
    moe_ts_.reserve(4);
  }
  moe_capacity_ = cap;
  if (grouped_gemm_ == nullptr) grouped_gemm_ = std::make_unique<cuda::GroupedGemm>();
  if (!wgrad_streams_made_) {
    wgrad_streams_made_ = true;
    int n = 4;
    if (const char* env = std::getenv("FP4LAB_MOE_WGRAD_STREAMS")) {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (end == env || *end != '\0' || v < 0 || v > 64)
        throw std::invalid_argument("FP4LAB_MOE_WGRAD_STREAMS = \"" + std::string(env) +
                                    "\" is not a whole number from 0 to 64: unset it, or set 1 to run every expert "
                                    "weight gradient on the model's stream");
      n = static_cast<int>(v);
    }
    n = std::min(n, E + m.n_shared);
    if (n > 1 && !grouped_wgrad_) {
      FP4_CUDA_CHECK(cudaEventCreateWithFlags(&wgrad_fork_, cudaEventDisableTiming));
      for (int i = 0; i < n; ++i) {
        cudaStream_t s = nullptr;
        FP4_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        wgrad_streams_.push_back(s);
        cudaEvent_t e = nullptr;
        FP4_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        wgrad_joins_.push_back(e);
        wgrad_gemms_.push_back(std::make_unique<cuda::Gemm>());
      }
    }
  }
  if (moe_linear_ids_.size() == 0) {
    std::vector<uint32_t> ids(static_cast<size_t>(L) * 2 * J, 0u);
    for (int l = 0; l < L; ++l)
      if (model::is_moe_block(c, l))
        for (int pos = 2; pos <= 3; ++pos)
          for (int j = 0; j < J; ++j)
            ids[(static_cast<size_t>(l) * 2 + (pos - 2)) * J + j] = model::expert_linear_site(c, l, j, pos);
    moe_linear_ids_ = DeviceArray<uint32_t>(ids);
  }
}

// ---- One expert linear of every expert over its group -------------------------------------------

bool CudaModel::experts_grouped(const model::StepContext& ctx, int block, int pos) const {
  const model::MoeShape& m = config().moe;
  const MoeActs& A = *moe_acts_[block];
  int with_rows = 0;
  for (int j = 0; j < m.n_experts + m.n_shared; ++j) with_rows += A.plan.counts[j] > 0 ? 1 : 0;
  if (with_rows < 2) return false;
  const engine::LinearSite s = site(ctx, block, pos);  // the experts' sites differ in their keys only
  if (!engine::site_is_quantized(s)) return true;
  for (int i = 0; i < engine::kSlotCount; ++i)
    if (engine::site_slot_spec(s, static_cast<engine::Slot>(i)).scale == ScaleMode::e4m3x2) return false;
  return true;
}

std::optional<QuantSpec> CudaModel::one_copy_for_all_groups(const model::StepContext& ctx, int block, int pos,
                                                             engine::Slot slot) {
  const model::MoeShape& m = config().moe;
  std::optional<QuantSpec> all;
  for (int j = 0; j < m.n_experts + m.n_shared; ++j) {
    const ExpertGroup g = expert_group(ctx, block, j);
    if (g.rows == 0) continue;
    QuantSpec q = engine::site_slot_spec(pos == 2 ? g.in : g.out, slot);
    if (!cpu::blocks_quantize_alone(q)) return std::nullopt;
    q.seed = 0;  // the SR keys, unused by a round-to-nearest copy
    q.stream = 0;
    q.step = 0;
    if (all && !(*all == q)) return std::nullopt;  // e.g. RHT signs drawn per site
    all = q;
  }
  return all;
}

bool CudaModel::quantize_all_groups(const model::StepContext& ctx, int block, int pos, engine::Slot slot,
                                    const bf16_t* x, bf16_t* dest, float* tensor_scale) {
  const std::optional<QuantSpec> spec = one_copy_for_all_groups(ctx, block, pos, slot);
  if (!spec) return false;
  const model::MoeShape& m = config().moe;
  const BlockIndex& bi = block_index_[block];
  const int k = static_cast<int>(views()[pos == 2 ? bi.expert_in[0] : bi.expert_out[0]].shape[1]);
  const cuda::CopyOut out = copy_out(*spec, dest, tensor_scale);
  quantize_copies(x, static_cast<int>(moe_acts_[block]->plan.offsets[m.n_experts + m.n_shared]), k, &out, nullptr,
                  nonfinite_.get(), ws_quant_, stream_);
  return true;
}

bool CudaModel::quantize_dy_all_groups(const model::StepContext& ctx, int block, int pos, const bf16_t* dy) {
  const model::MoeShape& m = config().moe;
  const int J = m.n_experts + m.n_shared;
  std::optional<detail::BackwardSpecs> all;
  auto same_but_linear = [](QuantSpec a, QuantSpec b) {
    a.stream = philox_stream_of_linear(a.stream, 0);
    b.stream = philox_stream_of_linear(b.stream, 0);
    return a == b;
  };
  for (int j = 0; j < J; ++j) {
    const ExpertGroup g = expert_group(ctx, block, j);
    if (g.rows == 0) continue;
    const detail::BackwardSpecs b = backward_specs(pos == 2 ? g.in : g.out);
    if (!cuda::groups_quantize_in_one_call(b.dy_d) || !cuda::groups_quantize_in_one_call(b.dy_w)) return false;
    if (all && !(same_but_linear(all->dy_d, b.dy_d) && same_but_linear(all->dy_w, b.dy_w))) return false;
    if (!all) all = b;
  }
  if (!all) return false;
  const MoeActs& A = *moe_acts_[block];
  const BlockIndex& bi = block_index_[block];
  const int n = static_cast<int>(views()[pos == 2 ? bi.expert_in[0] : bi.expert_out[0]].shape[0]);
  float* ts = moe_ts_.get();
  const cuda::CopyOut c_dy_d = copy_out(all->dy_d, moe_q_a_.get(), ts + 0), c_dy_w = copy_out(all->dy_w, moe_q_c_.get(), ts + 2);
  cuda::GroupStreams groups;
  groups.offsets = A.plan_dev.get() + J;
  groups.linear_ids = moe_linear_ids_.get() + (static_cast<size_t>(block) * 2 + (pos - 2)) * J;
  groups.count = J;
  quantize_copies(dy, static_cast<int>(A.plan.offsets[J]), n, &c_dy_d, &c_dy_w, nonfinite_.get(), ws_quant_, stream_,
                  A.tokens.get(), &groups);
  return true;
}

void CudaModel::experts_forward(const model::StepContext& ctx, int block, int pos, const bf16_t* x, bf16_t* y) {
  const model::MoeShape& m = config().moe;
  const BlockIndex& bi = block_index_[block];
  const bool grouped = experts_grouped(ctx, block, pos);
  const bool quantized = engine::site_is_quantized(site(ctx, block, pos));
  products_.clear();
  float* ts = moe_ts_.get();
  // X's copies of all groups at once where that keeps each group's bits; the padding rows between
  // groups are zero and stay zero.
  const bool all_x = quantized && quantize_all_groups(ctx, block, pos, engine::Slot::fprop_x, x, moe_q_a_.get(), ts);
  for (int j = 0; j < m.n_experts + m.n_shared; ++j) {
    const ExpertGroup g = expert_group(ctx, block, j);
    if (g.rows == 0) continue;  // no token chose it: nothing runs, no gradient
    const engine::LinearSite& s = pos == 2 ? g.in : g.out;
    const model::ParamView& w = views()[pos == 2 ? bi.expert_in[j] : bi.expert_out[j]];
    const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]);
    const bf16_t* xa = x + g.first * k;
    const bf16_t* wb = w_bf16_.get() + w.offset;
    const float* alpha = nullptr;
    if (quantized) {
      const QuantSpec sx = engine::site_slot_spec(s, engine::Slot::fprop_x);
      const QuantSpec sw = engine::site_slot_spec(s, engine::Slot::fprop_w);
      bf16_t* xq = moe_q_a_.get() + g.first * k;
      const cuda::CopyOut cx = copy_out(sx, xq, ts + 0);
      if (!all_x) quantize_copies(xa, g.rows, k, &cx, nullptr, nonfinite_.get(), ws_quant_, stream_, g.tokens);
      const float* ts_w = nullptr;
      wb = weight_copy(expert_copy_index(block, j, pos, engine::Slot::fprop_w), w, sw, &ts_w);
      alpha = alpha_of(sx, ts + 0, sw, ts_w, scalars_.get() + 2);
      xa = xq;
    }
    bf16_t* out = y + g.first * n;
    if (grouped)
      products_.push_back({xa, wb, out, g.rows, n, k});
    else
      quantized_gemm(false, true, g.rows, n, k, alpha, xa, wb, LinearOut{nullptr, out});
  }
  if (grouped) grouped_gemm_->run(false, true, products_, stream_);
}

void CudaModel::experts_backward(const model::StepContext& ctx, int block, int pos, const bf16_t* x,
                                 const bf16_t* dy, bf16_t* dx) {
  const model::MoeShape& m = config().moe;
  const BlockIndex& bi = block_index_[block];
  const bool grouped = experts_grouped(ctx, block, pos);
  const bool quantized = engine::site_is_quantized(site(ctx, block, pos));
  products_.clear();
  float* ts = moe_ts_.get();
  // wgrad's X copies of all groups at once where that keeps each group's bits: the groups are
  // padded to whole blocks along the tokens, so no block straddles two groups.
  const bool all_x =
      quantized && quantize_all_groups(ctx, block, pos, engine::Slot::wgrad_x, x, moe_q_d_.get(), ts + 3);
  const bool all_dy = quantized && quantize_dy_all_groups(ctx, block, pos, dy);
  // The weight gradients on the side streams (wgrad_streams_ says when), after everything enqueued
  // so far: the operands above, and the previous pass's gradients they add to.
  const bool side = !wgrad_streams_.empty() && (!quantized || (all_x && all_dy));
  wgrad_products_.clear();
  if (side) {
    FP4_CUDA_CHECK(cudaEventRecord(wgrad_fork_, stream_));
    for (cudaStream_t s : wgrad_streams_) FP4_CUDA_CHECK(cudaStreamWaitEvent(s, wgrad_fork_, 0));
  }
  for (int j = 0; j < m.n_experts + m.n_shared; ++j) {
    const ExpertGroup g = expert_group(ctx, block, j);
    if (g.rows == 0) continue;
    const engine::LinearSite& s = pos == 2 ? g.in : g.out;
    const int view = pos == 2 ? bi.expert_in[j] : bi.expert_out[j];
    const model::ParamView& w = views()[view];
    const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]);
    const bf16_t* dy_d = dy + g.first * n;  // dgrad's dY, over the group's rows
    const bf16_t* dy_w = dy_d;               // wgrad's dY and X, over its padded rows
    const bf16_t* x_w = x + g.first * k;
    const bf16_t* wb = w_bf16_.get() + w.offset;
    const float *alpha_d = nullptr, *alpha_w = nullptr;
    if (quantized) {
      const auto [s_dy_d, s_w_d, s_dy_w, s_x_w] = backward_specs(s);
      bf16_t* q_dy_d = moe_q_a_.get() + g.first * n;
      bf16_t* q_dy_w = moe_q_c_.get() + g.first * n;
      bf16_t* q_x_w = moe_q_d_.get() + g.first * k;
      const cuda::CopyOut c_dy_d = copy_out(s_dy_d, q_dy_d, ts + 0), c_dy_w = copy_out(s_dy_w, q_dy_w, ts + 2);
      const cuda::CopyOut c_x_w = copy_out(s_x_w, q_x_w, ts + 3);
      // The CPU's linear_bwd quantizes dgrad's dY over the group's rows and wgrad's over the padded
      // group; here both come from one read of the padded group: dgrad's copy is blocked along each
      // row, so its rows get the same bits, and the zero padding rows change no tensor amax.
      if (!all_dy) quantize_copies(dy_d, g.padded, n, &c_dy_d, &c_dy_w, nonfinite_.get(), ws_quant_, stream_, g.tokens);
      if (!all_x) quantize_copies(x_w, g.padded, k, &c_x_w, nullptr, nonfinite_.get(), ws_quant_, stream_, g.tokens);
      const float* ts_w = nullptr;
      wb = weight_copy(expert_copy_index(block, j, pos, engine::Slot::dgrad_w), w, s_w_d, &ts_w);
      alpha_d = alpha_of(s_dy_d, ts + 0, s_w_d, ts_w, scalars_.get() + 2);
      alpha_w = alpha_of(s_dy_w, ts + 2, s_x_w, ts + 3, scalars_.get() + 3);
      dy_d = q_dy_d;
      dy_w = q_dy_w;
      x_w = q_x_w;
    }
    bf16_t* dxa = dx + g.first * k;
    float* dw = grad(view);
    if (grouped)
      products_.push_back({dy_d, wb, dxa, g.rows, k, n});  // dX = dY · W
    else
      quantized_gemm(false, false, g.rows, k, n, alpha_d, dy_d, wb, LinearOut{nullptr, dxa});
    // dW += alpha·(dYᵀ·X) over the padded group, per group (fp32, accumulated: not the grouped
    // call's form): one GEMM (no split-K), beta = 1 from device memory where alpha is a device value
    // (linear_backward says why that is deterministic). On a side stream the same call, alpha 1.
    if (grouped_wgrad_ && alpha_w == nullptr) {
      wgrad_products_.push_back({dy_w, x_w, dw, n, k, g.padded});  // dW [n, k] += dY_wᵀ · X_w, after the loop
    } else if (side && alpha_w == nullptr) {
      const size_t lane = static_cast<size_t>(j) % wgrad_streams_.size();
      wgrad_gemms_[lane]->gemm(true, false, n, k, g.padded, 1.0f, dy_w, x_w, 1.0f, dw, wgrad_streams_[lane]);
    } else {
      weight_gradient_one_gemm(n, k, g.padded, alpha_w, dy_w, x_w, dw);
    }
  }
  if (grouped) grouped_gemm_->run(false, false, products_, stream_);
  if (!wgrad_products_.empty()) grouped_gemm_->accumulate(true, false, wgrad_products_, stream_);
  if (side) {
    // Joined before anything later on stream_ can touch the operands or the gradients.
    for (size_t i = 0; i < wgrad_streams_.size(); ++i) {
      FP4_CUDA_CHECK(cudaEventRecord(wgrad_joins_[i], wgrad_streams_[i]));
      FP4_CUDA_CHECK(cudaStreamWaitEvent(stream_, wgrad_joins_[i], 0));
    }
  }
}

// ---- The block ---------------------------------------------------------------------------------

size_t CudaModel::gemm_plans() const {
  size_t plans = gemm_->cached_plans();
  for (const auto& g : wgrad_gemms_) plans += g->cached_plans();
  return plans;
}

int CudaModel::expert_row_multiple(int block) const {
  const int host = host_.wgrad_row_multiple(block);
  return host == 1 && config().moe.n_experts > 1 ? kBf16GroupRows : host;
}

int64_t CudaModel::routed_rows(const MoeActs& A) {
  int64_t rows = 0;
  for (int64_t c : A.plan.counts) rows += c;
  return rows;
}

CudaModel::ExpertGroup CudaModel::expert_group(const model::StepContext& ctx, int block, int expert) {
  const MoeActs& A = *moe_acts_[block];
  ExpertGroup g;
  g.rows = static_cast<int>(A.plan.counts[expert]);
  g.first = A.plan.offsets[expert];
  g.padded = static_cast<int>(A.plan.offsets[expert + 1] - g.first);
  g.tokens = A.tokens.get() + g.first;
  g.in = site(ctx, block, 2);
  g.out = site(ctx, block, 3);
  g.in.linear_id = model::expert_linear_site(config(), block, expert, 2);
  g.out.linear_id = model::expert_linear_site(config(), block, expert, 3);
  return g;
}

void CudaModel::moe_forward(const model::StepContext& ctx, int block, const bf16_t* h) {
  const model::MoeShape& m = config().moe;
  const int E = m.n_experts, K = m.top_k, S = m.n_shared, J = E + S, fe = m.d_ff_expert;
  const int d = config().d_model, R = rows_;
  const size_t rd = static_cast<size_t>(R) * d;
  const bool sigmoid = m.score == model::RouterScore::sigmoid;
  MoeActs& A = *moe_acts_[block];
  const BlockIndex& bi = block_index_[block];
  cudaStream_t st = stream_;

  // The router, in fp32: logits = h · W_routerᵀ with the fp32 master weights.
  cuda::bf16_to_float(h, moe_h_.get(), rd, st);
  cuda::GemmShape lg;
  lg.trans_b = true;
  lg.m = R;
  lg.n = E;
  lg.k = d;
  gemm_->matmul(lg, 1.0f, moe_h_.get(), param(bi.router), 0.0f, A.logits.get(), st);
  cuda::moe_router_forward(A.logits.get(), R, E, K, sigmoid, m.renormalize, A.scores.get(), A.chosen.get(),
                           A.gates.get(), A.lse.get(), st);

  // The router's outputs for the auxiliary losses, copied to pinned host memory (no wait here).
  const size_t re = static_cast<size_t>(R) * E, rk = static_cast<size_t>(R) * K;
  A.host_scores.reserve(re);
  A.host_chosen.reserve(rk);
  A.host_lse.reserve(static_cast<size_t>(R));
  FP4_CUDA_CHECK(cudaMemcpyAsync(A.host_scores.get(), A.scores.get(), re * sizeof(float), cudaMemcpyDeviceToHost, st));
  FP4_CUDA_CHECK(
      cudaMemcpyAsync(A.host_chosen.get(), A.chosen.get(), rk * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
  FP4_CUDA_CHECK(cudaMemcpyAsync(A.host_lse.get(), A.lse.get(), R * sizeof(float), cudaMemcpyDeviceToHost, st));

  // Dispatch (the groups in ascending token index; the host learns their sizes: one wait, after
  // which the copies above have landed too).
  const int pad = expert_row_multiple(block);
  A.plan = cuda::moe_dispatch(A.chosen.get(), R, E, S, K, pad, A.slot.get(), A.tokens.get(), A.choice.get(),
                              A.plan_dev.get(), st);
  const int64_t total = A.plan.offsets[J];
  if (total > moe_capacity_)
    throw std::logic_error("cuda model: " + std::to_string(total) + " grouped rows exceed the MoE buffers' " +
                           std::to_string(moe_capacity_));

  // Gather: every group's rows (zero padding rows), from h's bf16 copy (a copy of its values).
  cuda::moe_gather(h, A.tokens.get(), total, R, d, A.x.get(), st);

  // The experts: u = mlp_in(x), a = silu(gate)·up, y = mlp_out(a), each stored in bf16 (u, y by
  // their GEMMs; a rounded by swiglu_forward, which writes a's bf16 copy only). SwiGLU runs once
  // over all groups' rows: element-wise, so each row gets its group's bits; the padding rows of u
  // are zeroed first (the GEMMs write the groups' rows only), so a's padding rows come out zero
  // (silu(0)·0), the wgrad operand's padding.
  const size_t tf = static_cast<size_t>(total) * fe;
  if (total > routed_rows(A)) FP4_CUDA_CHECK(cudaMemsetAsync(A.u.get(), 0, 2 * tf * sizeof(bf16_t), st));
  experts_forward(ctx, block, 2, A.x.get(), A.u.get());
  cuda::swiglu_forward(A.u.get(), static_cast<int>(total), fe, nullptr, st, store_out(A.a.get()));
  experts_forward(ctx, block, 3, A.a.get(), A.y.get());

  // Combine (fp32 from y's bf16 values, each token's experts in ascending index), stored (rounded
  // to bf16 by the same kernel) into the block's bf16 output tmpb_.
  cuda::moe_combine(A.y.get(), A.chosen.get(), A.slot.get(), A.plan_dev.get() + J, A.gates.get(), R, E, S, K, d,
                    tmpb_.get(), st);

  // The auxiliary losses and the expert load, on the host from the router's outputs, by the CPU
  // reference's own function (the same sums in the same order), while the GPU runs the experts.
  cpu::RouterLosses losses =
      cpu::router_losses(A.host_scores.get(), A.host_chosen.get(), A.host_lse.get(), R, E, K, sigmoid);
  A.stats = model::MoeLayerStats{block, std::move(losses.counts), losses.balance, losses.z};
  pass_moe_.push_back(A.stats);
}

void CudaModel::moe_backward(const model::StepContext& ctx, int block, const bf16_t* h, float grad_scale) {
  const model::MoeShape& m = config().moe;
  const int E = m.n_experts, K = m.top_k, S = m.n_shared, J = E + S, fe = m.d_ff_expert;
  const int d = config().d_model, R = rows_;
  const size_t rd = static_cast<size_t>(R) * d;
  MoeActs& A = *moe_acts_[block];
  const BlockIndex& bi = block_index_[block];
  const int64_t total = A.plan.offsets[J];
  cudaStream_t st = stream_;

  // dgates = dout[t] · y_j[t] (dout: dresb_, the block output's gradient, read from its bf16
  // values, widened exactly), then each group's dy = gate · dout, stored.
  cuda::moe_dgates(dresb_.get(), A.y.get(), A.chosen.get(), A.slot.get(), A.plan_dev.get() + J, R, K, d,
                   moe_dgates_.get(), st);
  cuda::moe_expert_dy(dresb_.get(), A.tokens.get(), A.choice.get(), A.gates.get(), total, R, d, moe_dy_.get(), st);

  // The experts, as the dense MLP's backward over each group: da (stored by its GEMMs), du
  // (rounded by swiglu_backward, bf16 only), dx (by its GEMMs). SwiGLU's backward runs once over
  // all rows, as the forward: da's padding rows zeroed first, so du's come out zero.
  const size_t tf = static_cast<size_t>(total) * fe;
  if (total > routed_rows(A)) FP4_CUDA_CHECK(cudaMemsetAsync(moe_da_.get(), 0, tf * sizeof(bf16_t), st));
  experts_backward(ctx, block, 3, A.a.get(), moe_dy_.get(), moe_da_.get());
  cuda::swiglu_backward(A.u.get(), moe_da_.get(), static_cast<int>(total), fe, nullptr, st, store_out(moe_du_.get()));
  experts_backward(ctx, block, 2, A.x.get(), moe_du_.get(), moe_dx_.get());

  // The router: dlogits from the gates and the auxiliary losses (scaled like the loss), then
  // dW_router += dlogitsᵀ · h and its share of dh, dlogits · W_router, all fp32.
  cuda::moe_router_backward(A.logits.get(), A.scores.get(), A.chosen.get(), A.lse.get(), moe_dgates_.get(),
                            A.plan_dev.get(), R, E, K, m.score == model::RouterScore::sigmoid, m.renormalize,
                            grad_scale * static_cast<float>(m.balance_coef), grad_scale * static_cast<float>(m.z_coef),
                            moe_dlogits_.get(), st);
  cuda::bf16_to_float(h, moe_h_.get(), rd, st);  // this block's h (the forward's buffer is shared)
  cuda::GemmShape wg;  // d W_router [E, d] += dlogitsᵀ [E, R] · h [R, d]
  wg.trans_a = true;
  wg.m = E;
  wg.n = d;
  wg.k = R;
  // One GEMM would give its few output tiles (12 CTAs at d6-e8k2) all R rows each: most of an MoE
  // step's GPU time went there. Split K as the LM head's weight gradient (deterministic: the
  // partials are added in chunk order).
  if (router_chunks_ > 1)
    gemm_->matmul_split_k(wg, router_chunks_, 1.0f, moe_dlogits_.get(), moe_h_.get(), 1.0f, grad(bi.router),
                          moe_router_partials_.get(), st);
  else
    gemm_->matmul(wg, 1.0f, moe_dlogits_.get(), moe_h_.get(), 1.0f, grad(bi.router), st);
  cuda::GemmShape dg;  // router_dh [R, d] = dlogits [R, E] · W_router [E, d]
  dg.m = R;
  dg.n = d;
  dg.k = E;
  gemm_->matmul(dg, 1.0f, moe_dlogits_.get(), param(bi.router), 0.0f, moe_router_dh_.get(), st);

  // dh: each token's experts' dX in ascending index, plus the router's share; stored (rounded to
  // bf16 by the same kernel) into the bf16 dhb_ that mlp_norm's backward reads.
  cuda::moe_sum_dx(moe_dx_.get(), A.chosen.get(), A.slot.get(), A.plan_dev.get() + J, moe_router_dh_.get(), R, E, S,
                   K, d, dhb_.get(), st);
}

}  // namespace fp4::cuda_model
