// cuda_model_passes.cpp — the passes of CudaModel (cuda_model.h): buffers and weights prepared
// for a batch, and one forward (and backward) enqueued. enqueue_pass() is transformer.cpp's run()
// step for step, with the CPU ops replaced by kernels/cuda's and store() where the CPU model calls
// store() (most of them fused into the op that writes or next reads the buffer: enqueue_pass()
// marks each one); keep the two in step when either changes. One deliberate difference: attention
// uses the fused bf16 kernel where the shape allows (use_flash), which rounds P and dS to bf16 for
// its tensor-core products, as FlashAttention does; the fp32 reference kernel (the CPU's math)
// serves every other shape.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/linear_sites.h"
#include "engine/cuda_model/cuda_model.h"
#include "engine/cuda_model/cuda_model_internal.h"
#include "engine/quantized_linear.h"

namespace fp4::cuda_model {

using detail::pass_flag;
using detail::wgrad_chunks;

// ---- Passes --------------------------------------------------------------------------------------

bool CudaModel::use_flash(int seq_len) const {
  return config().head_dim == cuda::kFlashHeadDim && seq_len % cuda::kFlashBlock == 0;
}

void CudaModel::prepare(const model::Batch& batch) {
  const model::ModelShape& c = config();
  const int B = batch.batch_size, S = batch.seq_len, R = B * S;
  const int L = c.n_layers, d = c.d_model, f = c.d_ff, V = c.vocab_size;
  const size_t r = static_cast<size_t>(R);
  batch_ = B;
  seq_ = S;
  rows_ = R;

  // The tokens go up from pinned memory, so the host does not wait for the GPU here: each pass in
  // flight keeps its own slot (the pass's index among the pending ones; a pass run() waits for
  // uses the next one), and a slot is rewritten only after harvest_pending has waited for its pass.
  if (2 * r > token_slot_) {
    harvest_pending();  // the slots in flight are laid out for the smaller batch
    token_slot_ = 2 * r;
    host_tokens_.reserve(kPendingSlots * token_slot_);
  }
  int32_t* staged = host_tokens_.get() + pending_rows_.size() * token_slot_;
  for (size_t i = 0; i < r; ++i) {
    staged[i] = static_cast<int32_t>(batch.inputs[i]);
    staged[r + i] = static_cast<int32_t>(batch.targets[i]);
  }
  tokens_.reserve(2 * r);
  FP4_CUDA_CHECK(cudaMemcpyAsync(tokens_.get(), staged, 2 * r * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  if (!rope_ || rope_->seq_len() != S) {
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old table may still be in use
    rope_ = std::make_unique<cuda::RopeTable>(S, c.head_dim, c.rope_base);
  }

  if (static_cast<int>(residb_.size()) != L + 1) {
    residb_.clear();
    for (int i = 0; i <= L; ++i) residb_.push_back(std::make_unique<DeviceArray<bf16_t>>());
    acts_.clear();
    for (int i = 0; i < L; ++i) acts_.push_back(std::make_unique<LayerActs>());
  }
  const bool flash = use_flash(S);
  for (int i = 0; i <= L; ++i) residb_[i]->reserve(r * d);
  for (auto& a : acts_) {  // LayerActs says which buffers each attention kernel uses
    a->rstd1.reserve(r);
    a->lse.reserve(r * c.n_heads);
    a->rstd2.reserve(r);
    a->h1b.reserve(r * d);
    a->attb.reserve(r * d);
    a->h2b.reserve(r * d);
    a->ab.reserve(r * f);
    if (flash) {
      a->qkvb.reserve(r * 3 * d);
    } else {
      a->qkv.reserve(r * 3 * d);
      a->att.reserve(r * d);
    }
    a->x_midb.reserve(r * d);
    a->ub.reserve(r * 2 * f);
  }
  hf_.reserve(r * d);
  rstdf_.reserve(r);
  logits_.reserve(r * V);
  loss_rows_.reserve(r);
  dh_.reserve(r * d);
  dresb_.reserve(r * d);
  tmpb_.reserve(r * d);
  dab_.reserve(r * f);
  dhb_.reserve(r * d);
  if (flash) {
    dattb_.reserve(r * d);
  } else {
    datt_.reserve(r * d);
    dqkv_.reserve(r * 3 * d);
  }
  const size_t widest_k = static_cast<size_t>(std::max(d, f));           // a linear's K
  const size_t widest_n = static_cast<size_t>(std::max(3 * d, 2 * f));   // a linear's N
  dyb_.reserve(r * widest_n);
  hfb_.reserve(r * d);
  if (recipe().quantized) {  // the slots' dequantized copies
    q_a_.reserve(r * std::max(widest_k, widest_n));  // X (fprop) or dY (dgrad)
    q_c_.reserve(r * widest_n);
    q_d_.reserve(r * widest_k);
    // Each quantized linear's wgrad_x copy, kept from the forward to the backward.
    if (static_cast<int>(x_col_.size()) != kLinearsPerBlock * L) {
      x_col_.clear();
      for (int i = 0; i < kLinearsPerBlock * L; ++i) x_col_.push_back(std::make_unique<DeviceArray<bf16_t>>());
    }
    for (int l = 0; l < L; ++l)
      for (int pos = 0; pos < (model::is_moe_block(c, l) ? 2 : 4); ++pos)  // an MoE block's experts keep none
        if (!keep_bf16_[l]) x_col_[linear_site(l, pos)]->reserve(r * static_cast<size_t>(weight_view(l, pos).shape[1]));
    x_col_ts_.reserve(static_cast<size_t>(kLinearsPerBlock * L));
  }
  head_w_.reserve(static_cast<size_t>(V) * d);
  size_t wgrad_floats = 0;
  for (int pos = 0; pos < 4; ++pos) {
    if (model::is_moe_block(c, 0) && pos >= 2) continue;  // MoE experts' wgrad runs as one GEMM each
    const model::ParamView& w = weight_view(0, pos);
    const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]), chunks = wgrad_chunks(n, k, R);
    if (chunks > 1) wgrad_floats = std::max(wgrad_floats, static_cast<size_t>(chunks) * n * k);
  }
  if (wgrad_floats > 0) wgrad_partials_.reserve(wgrad_floats);
  // The LM head's weight gradient sums over all R rows into only V·d outputs: one GEMM gets a
  // handful of output tiles (a few CTAs on a GPU with over a hundred SMs). Split K = R into up to
  // 32 chunks of at least 256 rows (row_sum_chunks: a count fixed by R alone, so the summation
  // order is too).
  head_chunks_ = detail::row_sum_chunks(R);
  if (head_chunks_ > 1) head_partials_.reserve(static_cast<size_t>(head_chunks_) * V * d);

  // The weights as the GEMMs see them: bf16 copies of the fp32 masters, remade after each change
  // (so once per optimizer step: the masters do not change between micro-steps). The LM head's
  // fp32 copy holds the same bf16 values for its fp32 backward GEMM.
  const size_t weight_slots = weight_copy_count();
  if (weight_copies_.size() != weight_slots) {
    weight_copies_ = std::vector<WeightCopy>(weight_slots);
    weight_ts_.reserve(weight_slots);
    weight_flags_.reserve(weight_slots);
    pending_weight_flags_.reserve(kPendingSlots * weight_slots);
  }
  weight_used_.assign(weight_slots, 0);
  if (c.moe.enabled()) prepare_moe();
  if (weights_stale_) {
    ++weights_version_;  // every weight slot's copy is remade on its next use
    cuda::float_to_bf16(params_.get(), w_bf16_.get(), n_params_, stream_);
    const model::ParamView& head = views()[lm_head_];
    cuda::bf16_to_float(w_bf16_.get() + head.offset, head_w_.get(), static_cast<size_t>(head.size), stream_);
    weights_stale_ = false;
  }
  FP4_CUDA_CHECK(cudaMemsetAsync(nonfinite_.get(), 0, sizeof(unsigned), stream_));
}

double CudaModel::run(const model::StepContext& ctx, bool backward, float grad_scale, bool* finite) {
  enqueue_pass(ctx, backward, grad_scale);
  cudaStream_t st = stream_;
  double loss_sum = 0.0;
  unsigned flag = 0;
  std::vector<unsigned> weight_flags(weight_used_.size(), 0u);
  FP4_CUDA_CHECK(cudaMemcpyAsync(&loss_sum, loss_sum_.get(), sizeof(double), cudaMemcpyDeviceToHost, st));
  FP4_CUDA_CHECK(cudaMemcpyAsync(&flag, nonfinite_.get(), sizeof(unsigned), cudaMemcpyDeviceToHost, st));
  if (recipe().quantized)
    FP4_CUDA_CHECK(cudaMemcpyAsync(weight_flags.data(), weight_flags_.get(), weight_flags.size() * sizeof(unsigned),
                                   cudaMemcpyDeviceToHost, st));
  FP4_CUDA_CHECK(cudaStreamSynchronize(st));
  *finite = pass_flag(flag, weight_flags.data(), weight_used_) == 0 && std::isfinite(loss_sum);
  return loss_sum;
}

void CudaModel::enqueue_pass(const model::StepContext& ctx, bool backward, float grad_scale) {
  pass_backward_ = backward;  // linear_forward then makes X's weight-gradient copies too (x_col_)
  const model::ModelShape& c = config();
  const int L = c.n_layers, d = c.d_model, f = c.d_ff, V = c.vocab_size;
  const int H = c.n_heads, hd = c.head_dim, R = rows_, B = batch_, S = seq_;
  const float eps = static_cast<float>(c.norm_eps);
  const size_t r = static_cast<size_t>(R), rd = r * d;
  const int32_t* inputs = tokens_.get();
  const int32_t* targets = tokens_.get() + r;
  const auto& v = views();
  auto block_view = [&](int l, int k) { return k == 0 ? block_index_[l].attn_norm : block_index_[l].mlp_norm; };
  pass_moe_.clear();
  cudaStream_t st = stream_;

  // ---- Forward ----
  // Every store() of transformer.cpp's run() is marked "store(buf)": either the call itself or, as
  // "store(buf): <how>", fused into the op that writes the buffer (StoreOut: rounded as written) or
  // into the one op that reads it next (round_*: rounded as read, the buffer being read nowhere
  // else). Either way the same bits; the fused ops also write the bf16 copy of their output that
  // the next GEMM takes (LayerActs' h1b, qkvb, attb, h2b, ab; dyb_, hfb_), instead of a
  // float_to_bf16 pass; the per-layer copies serve the backward's GEMMs too.
  const bool flash = use_flash(S);
  cuda::embedding_forward(param(tok_emb_), V, inputs, R, d, nullptr, st, store_out(residb_[0]->get()));
  // store(resid[0]): rounded by embedding_forward (the residual stream is kept in bf16 only:
  // residb_, LayerActs::x_midb)
  // The linears whose output is stored write it in bf16 (LinearOut, LayerActs).
  auto out_f32 = [](float* p) { return LinearOut{p, nullptr}; };
  auto out_bf16 = [](bf16_t* p) { return LinearOut{nullptr, p}; };
  const LinearOut block_out = out_bf16(tmpb_.get());  // attn_out, mlp_out
  for (int l = 0; l < L; ++l) {
    LayerActs& A = *acts_[l];
    cuda::rmsnorm_forward(residb_[l]->get(), param(block_view(l, 0)), R, d, eps, nullptr, A.rstd1.get(), st,
                          store_out(A.h1b.get()));
    // store(A.h1): rounded by rmsnorm_forward, which writes only the qkv linear's bf16 X into A.h1b
    if (flash) {
      linear_forward(ctx, l, 0, A.h1b.get(), out_bf16(A.qkvb.get()));
      // store(A.qkv): by the GEMM; rope_forward(q); rope_forward(k); store(A.qkv): one pass in
      // place on A.qkvb, the fused attention's bf16 input
      cuda::rope_forward_qkv(A.qkvb.get(), B, S, H, hd, *rope_, st);
      cuda::flash_attention_forward_stored(A.qkvb.get(), B, S, H, hd, nullptr, A.lse.get(), store_out(A.attb.get()),
                                           st);
      // store(A.att): rounded by the flash kernel, which writes only the attn_out linear's X, A.attb
    } else {
      linear_forward(ctx, l, 0, A.h1b.get(), out_f32(A.qkv.get()));
      // store(A.qkv); rope_forward(q); rope_forward(k); store(A.qkv): one pass
      cuda::rope_forward_qkv(A.qkv.get(), B, S, H, hd, *rope_, st, store_out());
      cuda::attention_forward(A.qkv.get(), B, S, H, hd, A.att.get(), A.lse.get(), st);
      store(A.att.get(), rd);
      cuda::float_to_bf16(A.att.get(), A.attb.get(), rd, st);  // the attn_out linear's X
    }
    linear_forward(ctx, l, 1, A.attb.get(), block_out);
    // store(tmp): by the GEMM; store(A.x_mid): rounded by residual_add
    cuda::residual_add(residb_[l]->get(), tmpb_.get(), nullptr, rd, st, store_out(A.x_midb.get()));
    cuda::rmsnorm_forward(A.x_midb.get(), param(block_view(l, 3)), R, d, eps, nullptr, A.rstd2.get(), st,
                          store_out(A.h2b.get()));
    // store(A.h2): rounded by rmsnorm_forward, which writes only the mlp_in linear's X into A.h2b
    if (model::is_moe_block(c, l)) {
      moe_forward(ctx, l, A.h2b.get());  // store(tmp): tmpb_ holds the block's bf16 output
    } else {
      linear_forward(ctx, l, 2, A.h2b.get(), out_bf16(A.ub.get()));
      cuda::swiglu_forward(A.ub.get(), R, f, nullptr, st, store_out(A.ab.get()));
      // store(A.u): by the GEMM; store(A.a): rounded by swiglu_forward, which writes only the
      // mlp_out linear's X into A.ab
      linear_forward(ctx, l, 3, A.ab.get(), block_out);
    }
    cuda::residual_add(A.x_midb.get(), tmpb_.get(), nullptr, rd, st, store_out(residb_[l + 1]->get()));
    // store(tmp): by the GEMM; store(resid[l + 1]): rounded by residual_add
  }
  cuda::rmsnorm_forward(residb_[L]->get(), param(final_norm_), R, d, eps, hf_.get(), rstdf_.get(), st,
                        store_out(hfb_.get()));
  // store(hf_): rounded by rmsnorm_forward, which also writes its bf16 copy into hfb_
  // Logits: the bf16-valued hidden state times the bf16 head weights, fp32 accumulation.
  gemm_->gemm(false, true, R, V, d, 1.0f, hfb_.get(), w_bf16_.get() + v[lm_head_].offset, 0.0f, logits_.get(), st);
  // With a backward pass the logits' buffer becomes their gradient (fused head + loss).
  cuda::cross_entropy(logits_.get(), targets, R, V, loss_rows_.get(), backward ? logits_.get() : nullptr,
                      grad_scale / static_cast<float>(R), st);
  cuda::sum_f64(loss_rows_.get(), r, loss_sum_.get(), ws_sum_, st);

  if (backward) {
    // ---- Backward ----
    const float* dlogits = logits_.get();
    cuda::GemmShape head_grad;  // d lm_head [V, d] += dlogitsᵀ [V, R] · hf [R, d], in fp32
    head_grad.trans_a = true;
    head_grad.m = V;
    head_grad.n = d;
    head_grad.k = R;
    if (probe_ != nullptr) {
      // The probe needs only the gradients that flow into the block linears' dY: no dW anywhere.
    } else if (head_chunks_ > 1) {
      // Split-K by hand (see prepare): head_chunks_ partial products, then added to the gradient
      // in chunk order. Deterministic; differs from one GEMM only in the order of fp32 sums.
      gemm_->matmul_split_k(head_grad, head_chunks_, 1.0f, dlogits, hf_.get(), 1.0f, grad(lm_head_),
                            head_partials_.get(), st);
    } else {
      gemm_->matmul(head_grad, 1.0f, dlogits, hf_.get(), 1.0f, grad(lm_head_), st);
    }
    // dh [R, d] = dlogits [R, V] · head_w [V, d], in fp32: R·d outputs (hundreds of tiles at
    // R = 8192), so one GEMM without split-K fills the GPU.
    cuda::GemmShape head_dx;
    head_dx.m = R;
    head_dx.n = d;
    head_dx.k = V;
    gemm_->matmul(head_dx, 1.0f, dlogits, head_w_.get(), 0.0f, dh_.get(), st);
    cuda::rmsnorm_backward(residb_[L]->get(), param(final_norm_), rstdf_.get(), dh_.get(), R, d, nullptr,
                           gain_grad(final_norm_), ws_ops_, st, store_out(dresb_.get()), true);
    // store(dh_): rounded by rmsnorm_backward as it reads dh_; store(dres): rounded by
    // rmsnorm_backward, into the residual gradient dresb_, which is the mlp_out linear's bf16 dY
    for (int l = L - 1; l >= 0; --l) {
      LayerActs& A = *acts_[l];
      // dresb_ holds ∂loss/∂(block output). MLP branch.
      if (model::is_moe_block(c, l)) {
        moe_backward(ctx, l, A.h2b.get(), grad_scale);  // store(dh): dhb_ holds the block's bf16 dh
      } else {
        linear_backward(ctx, l, 3, A.ab.get(), dresb_.get(), out_bf16(dab_.get()));
        cuda::swiglu_backward(A.ub.get(), dab_.get(), R, f, nullptr, st, store_out(dyb_.get()));
        // store(da): by the GEMM; store(du): rounded by swiglu_backward, which writes only the
        // mlp_in linear's dY into dyb_
        linear_backward(ctx, l, 2, A.h2b.get(), dyb_.get(), out_bf16(dhb_.get()));
      }
      cuda::rmsnorm_backward_add(A.x_midb.get(), param(block_view(l, 3)), A.rstd2.get(), dhb_.get(), R, d,
                                 dresb_.get(), gain_grad(block_view(l, 3)), ws_ops_, st);
      // store(dh): by the GEMM; dres += the norm's dx, then store(dres): rounded as written, in
      // place in dresb_, which is the attn_out linear's dY itself
      // dresb_ holds ∂loss/∂x_mid. Attention branch.
      const bf16_t* attn_out_dy = dresb_.get();
      if (flash) {
        linear_backward(ctx, l, 1, A.attb.get(), attn_out_dy, out_bf16(dattb_.get()));
        // store(datt_): by the GEMM, into the fused kernel's bf16 dout. A.qkvb and A.attb: the
        // forward's stored q|k|v and output. The attn_out linear is done with dyb_, so the fused
        // kernel writes dq|dk|dv there, rounded as written (store(dqkv_)); rope_backward(dq),
        // rope_backward(dk) and store(dqkv_) then run in place: dyb_ is the qkv linear's dY.
        cuda::flash_attention_backward(A.qkvb.get(), A.attb.get(), A.lse.get(), dattb_.get(), B, S, H, hd, dyb_.get(),
                                       ws_flash_, st);
        cuda::rope_backward_qkv(dyb_.get(), B, S, H, hd, *rope_, dyb_.get(), st);
      } else {
        linear_backward(ctx, l, 1, A.attb.get(), attn_out_dy, out_f32(datt_.get()));
        store(datt_.get(), rd);
        cuda::attention_backward(A.qkv.get(), A.lse.get(), datt_.get(), B, S, H, hd, dqkv_.get(), ws_ops_, st);
        // store(dqkv_); rope_backward(dq); rope_backward(dk); store(dqkv_): one pass, which also
        // writes the qkv linear's dY into dyb_
        cuda::rope_backward_qkv(dqkv_.get(), B, S, H, hd, *rope_, st, store_out(dyb_.get()));
      }
      linear_backward(ctx, l, 0, A.h1b.get(), dyb_.get(), out_bf16(dhb_.get()));
      cuda::rmsnorm_backward_add(residb_[l]->get(), param(block_view(l, 0)), A.rstd1.get(), dhb_.get(), R, d,
                                 dresb_.get(), gain_grad(block_view(l, 0)), ws_ops_, st);
      // store(dh): by the GEMM; dres += the norm's dx, store(dres): rounded as written, in place in
      // dresb_, the next block's mlp_out dY itself
    }
    if (probe_ == nullptr) cuda::embedding_backward(inputs, dresb_.get(), R, d, V, grad(tok_emb_), ws_ops_, st);
  }
}

model::EvalResult CudaModel::evaluate(const model::Batch& batch, const model::StepContext& ctx) {
  host_.validate_batch(batch, ctx, false);
  prepare(batch);
  bool finite = true;
  const double sum = run(ctx, false, 0.0f, &finite);
  return model::EvalResult{sum, rows_, !finite};
}


}  // namespace fp4::cuda_model
