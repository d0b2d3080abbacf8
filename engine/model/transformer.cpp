// transformer.cpp — see transformer.h. The forward and backward passes are written out step by
// step in run(), each step followed by store() where a GPU would write bf16.
#include "engine/model/transformer.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <type_traits>

#include "base/linear_sites.h"

namespace fp4::model {

namespace {

// FNV-1a, 32 bits: a parameter tensor's name → its Philox stream for initialization.
uint32_t fnv1a32(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 16777619u;
  }
  return h;
}

constexpr uint32_t kInitTag = 0x494E4954u;  // "INIT"

// Standard normal for element i of the tensor with stream `stream` (see init_params()).
double init_normal(uint64_t seed, uint32_t stream, uint64_t i) {
  const Philox4 r = philox4x32_10(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), stream,
                                  kInitTag, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const double u1 = (static_cast<double>(r.w[0] >> 8) + 1.0) * 0x1p-24;  // (0, 1]: log is finite
  const double u2 = static_cast<double>(r.w[1] >> 8) * 0x1p-24;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

template <typename T>
void add(const T* a, const T* b, T* out, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace

const char* storage_name(Storage s) { return s == Storage::bf16 ? "bf16" : "fp32"; }

std::vector<ParamView> param_layout(const ModelShape& c) {
  std::vector<ParamView> v;
  int64_t offset = 0;
  auto add_view = [&](std::string name, std::vector<int64_t> shape, ParamKind kind, int linear_id) {
    int64_t size = 1;
    for (int64_t s : shape) size *= s;
    v.push_back(ParamView{std::move(name), std::move(shape), offset, size, kind, linear_id});
    offset += size;
  };
  const int64_t d = c.d_model, f = c.d_ff, vocab = c.vocab_size;
  add_view("tok_emb", {vocab, d}, ParamKind::embedding, -1);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    add_view(p + "attn_norm", {d}, ParamKind::norm_gain, -1);
    add_view(p + kLinearNames[0], {3 * d, d}, ParamKind::linear, linear_site(i, 0));
    add_view(p + kLinearNames[1], {d, d}, ParamKind::linear, linear_site(i, 1));
    add_view(p + "mlp_norm", {d}, ParamKind::norm_gain, -1);
    if (!is_moe_block(c, i)) {
      add_view(p + kLinearNames[2], {2 * f, d}, ParamKind::linear, linear_site(i, 2));
      add_view(p + kLinearNames[3], {d, f}, ParamKind::linear, linear_site(i, 3));
      continue;
    }
    const int64_t fe = c.moe.d_ff_expert;
    add_view(p + "router", {c.moe.n_experts, d}, ParamKind::router, -1);
    for (int j = 0; j < c.moe.n_experts + c.moe.n_shared; ++j) {
      const std::string e = p + (j < c.moe.n_experts ? "experts." + std::to_string(j)
                                                     : "shared." + std::to_string(j - c.moe.n_experts)) + ".";
      add_view(e + kLinearNames[2], {2 * fe, d}, ParamKind::linear, static_cast<int>(expert_linear_site(c, i, j, 2)));
      add_view(e + kLinearNames[3], {d, fe}, ParamKind::linear, static_cast<int>(expert_linear_site(c, i, j, 3)));
    }
  }
  add_view("final_norm", {d}, ParamKind::norm_gain, -1);
  add_view("lm_head", {vocab, d}, ParamKind::lm_head, -1);
  return v;
}

// ---- Construction ------------------------------------------------------------------------------

template <typename T>
BasicModel<T>::BasicModel(const ModelShape& config, const engine::Recipe& recipe,
                          std::vector<int> bf16_layers, Storage storage)
    : config_(config), recipe_(recipe), bf16_layers_(std::move(bf16_layers)), storage_(storage) {
  validate(config_);
  if (std::string e = engine::recipe_error(recipe_); !e.empty())
    throw std::invalid_argument("model: recipe " + recipe_.name + ": " + e);
  if (std::is_same_v<T, double> && recipe_.quantized)
    throw std::invalid_argument("model: the double-precision reference model runs only a recipe "
                                "that quantizes nothing (bf16), got " + recipe_.name);
  const int L = config_.n_layers;
  keep_bf16_.assign(L, false);
  for (int b : bf16_layers_) {
    if (b < 0 || b >= L)
      throw std::invalid_argument("model: bf16 layer " + std::to_string(b) + " is out of range (0.." +
                                  std::to_string(L - 1) + ")");
    keep_bf16_[b] = true;
  }

  // Every block's four linears have the same shapes: check K and N once (T, blocked only in the
  // wgrad GEMM, is checked per micro-batch).
  if (std::string e = shape_error(0); !e.empty()) throw std::invalid_argument("model: " + e);

  views_ = param_layout(config_);
  params_.assign(views_.back().offset + views_.back().size, T(0));
  grads_.assign(params_.size(), T(0));
  int next = 1;  // tok_emb, then each block's tensors in param_layout's order
  for (int b = 0; b < L; ++b) {
    BlockViews v;
    v.attn_norm = next;
    v.qkv = next + 1;
    v.attn_out = next + 2;
    v.mlp_norm = next + 3;
    next += 4;
    if (!is_moe_block(config_, b)) {
      v.mlp_in = next++;
      v.mlp_out = next++;
    } else {
      v.router = next++;
      for (int j = 0; j < config_.moe.n_experts + config_.moe.n_shared; ++j) {
        v.expert_in.push_back(next++);
        v.expert_out.push_back(next++);
      }
    }
    blocks_.push_back(std::move(v));
  }
  tok_emb_ = 0;
  final_norm_ = next;
  lm_head_ = next + 1;
}

template <typename T>
const ParamView& BasicModel<T>::view(std::string_view name) const {
  for (const ParamView& v : views_)
    if (v.name == name) return v;
  throw std::invalid_argument("model: no parameter named \"" + std::string(name) + "\"");
}

template <typename T>
void BasicModel<T>::init_params(uint64_t seed) {
  const double out_scale = 1.0 / std::sqrt(2.0 * config_.n_layers);
  for (const ParamView& v : views_) {
    T* p = params_.data() + v.offset;
    if (v.kind == ParamKind::norm_gain) {
      for (int64_t i = 0; i < v.size; ++i) p[i] = T(1);
      continue;
    }
    // attn_out and every mlp_out (the dense MLP's and each expert's) write into the residual stream.
    const auto ends_with = [&](std::string_view tail) {
      return v.name.size() >= tail.size() && v.name.compare(v.name.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool output_proj = v.kind == ParamKind::linear && (ends_with(".attn_out") || ends_with(".mlp_out"));
    const double std = 0.02 * (output_proj ? out_scale : 1.0);
    const uint32_t stream = fnv1a32(v.name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < v.size; ++i)
      p[i] = static_cast<T>(static_cast<float>(std * init_normal(seed, stream, static_cast<uint64_t>(i))));
  }
}

template <typename T>
void BasicModel<T>::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

// ---- Helpers -----------------------------------------------------------------------------------

template <typename T>
void BasicModel<T>::store(T* p, size_t n) const {
  if (storage_ != Storage::bf16) return;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(round_to_bf16(static_cast<float>(p[i])));
}

engine::LinearSite linear_site_at(const engine::Recipe& recipe, bool keep_bf16, const StepContext& ctx, int block,
                                  int position) {
  return {.recipe = &recipe, .keep_bf16 = keep_bf16, .linear_id = linear_site(block, position), .seed = ctx.seed,
          .step = ctx.step, .micro_step = ctx.micro_step};
}

template <typename T>
engine::LinearSite BasicModel<T>::site(const StepContext& ctx, int block, int pos) const {
  return linear_site_at(recipe_, keep_bf16_[block], ctx, block, pos);
}

namespace {

void to_bf16(const float* x, size_t n, std::vector<bf16_t>& out) {
  out.resize(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i]);
}

}  // namespace

template <typename T>
bool BasicModel<T>::linear_fwd(const engine::LinearSite& s, int view, const T* x, int rows, T* y) {
  const ParamView& w = views_[view];
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]);
  if constexpr (std::is_same_v<T, float>) {
    to_bf16(x, static_cast<size_t>(rows) * k, xb_);
    const bf16_t* wb = w_bf16_.data() + w.offset;
    if (probe_) {
      (*probe_)(s, engine::Slot::fprop_x, xb_.data(), rows, k);
      (*probe_)(s, engine::Slot::fprop_w, wb, n, k);
    }
    return engine::linear_forward(s, xb_.data(), wb, rows, k, n, y);
  } else {
    (void)s;
    cpu::matmul<T>(false, true, rows, n, k, T(1), x, param(w), T(0), y);
    return true;
  }
}

template <typename T>
bool BasicModel<T>::linear_bwd(const engine::LinearSite& s, int view, const T* x, const T* dy, int rows,
                               int dw_rows, T* dx, T* grads) {
  const ParamView& w = views_[view];
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]);
  if constexpr (std::is_same_v<T, float>) {
    to_bf16(x, static_cast<size_t>(dw_rows) * k, xb_);
    to_bf16(dy, static_cast<size_t>(dw_rows) * n, dyb_);
    const bf16_t* wb = w_bf16_.data() + w.offset;
    if (probe_) {
      (*probe_)(s, engine::Slot::dgrad_dy, dyb_.data(), rows, n);
      (*probe_)(s, engine::Slot::dgrad_w, wb, n, k);
      (*probe_)(s, engine::Slot::wgrad_dy, dyb_.data(), dw_rows, n);
      (*probe_)(s, engine::Slot::wgrad_x, xb_.data(), dw_rows, k);
    }
    if (dw_rows == rows)
      return engine::linear_backward(s, xb_.data(), wb, dyb_.data(), rows, k, n, dx, grads + w.offset);
    // An expert's padded group: dgrad over its rows, wgrad over whole blocks of them.
    const bool dgrad_ok = engine::linear_backward(s, xb_.data(), wb, dyb_.data(), rows, k, n, dx, nullptr);
    const bool wgrad_ok = engine::linear_backward(s, xb_.data(), wb, dyb_.data(), dw_rows, k, n, nullptr,
                                                  grads + w.offset);
    return dgrad_ok && wgrad_ok;
  } else {
    (void)s;
    cpu::matmul<T>(false, false, rows, k, n, T(1), dy, param(w), T(0), dx);
    cpu::matmul<T>(true, false, n, k, dw_rows, T(1), dy, x, T(1), grads + w.offset);
    return true;
  }
}

template <typename T>
bool BasicModel<T>::block_linear_forward(const StepContext& ctx, int block, int pos, const T* x,
                                         int rows, T* y) {
  return linear_fwd(site(ctx, block, pos), weight_index(block, pos), x, rows, y);
}

template <typename T>
bool BasicModel<T>::block_linear_backward(const StepContext& ctx, int block, int pos, const T* x,
                                          const T* dy, int rows, T* dx, T* grads) {
  return linear_bwd(site(ctx, block, pos), weight_index(block, pos), x, dy, rows, rows, dx, grads);
}

template <typename T>
std::string BasicModel<T>::shape_error(int tokens) const {
  bool any_quantized = false;
  for (bool keep : keep_bf16_) any_quantized = any_quantized || !keep;
  if (!recipe_.quantized || !any_quantized) return {};
  const int d = config_.d_model, f = config_.d_ff;
  const int k[4] = {d, d, d, f}, n[4] = {3 * d, d, 2 * f, d};
  const char* k_name[4] = {"d_model", "d_model", "d_model", "d_ff"};
  const char* n_name[4] = {"3·d_model", "d_model", "2·d_ff", "d_model"};
  for (int p = 0; p < 4; ++p) {
    if (std::string e = engine::linear_shape_error(recipe_, tokens, k[p], n[p]); !e.empty())
      return std::string(kLinearNames[p]) + " (K = " + k_name[p] + " = " + std::to_string(k[p]) +
             ", N = " + n_name[p] + " = " + std::to_string(n[p]) + ") does not fit recipe " +
             recipe_.name + ": " + e;
  }
  if (config_.moe.enabled()) {
    // An expert's group is padded to whole blocks of tokens: only its K and N bind.
    const int fe = config_.moe.d_ff_expert;
    const int ek[2] = {d, fe}, en[2] = {2 * fe, d};
    const char* ek_name[2] = {"d_model", "d_ff_expert"};
    const char* en_name[2] = {"2·d_ff_expert", "d_model"};
    for (int p = 0; p < 2; ++p) {
      if (std::string e = engine::linear_shape_error(recipe_, 1024, ek[p], en[p]); !e.empty())
        return std::string("expert ") + kLinearNames[2 + p] + " (K = " + ek_name[p] + " = " + std::to_string(ek[p]) +
               ", N = " + en_name[p] + " = " + std::to_string(en[p]) + ") does not fit recipe " + recipe_.name +
               ": " + e;
    }
  }
  return {};
}

// ---- Batches -----------------------------------------------------------------------------------

template <typename T>
void BasicModel<T>::check_batch(const Batch& batch, const StepContext& ctx, bool backward) const {
  const int64_t rows = int64_t{batch.batch_size} * batch.seq_len;
  if (batch.batch_size < 1 || batch.seq_len < 1)
    throw std::invalid_argument("model: a micro-batch needs B >= 1 sequences of T >= 1 tokens, got B = " +
                                std::to_string(batch.batch_size) + ", T = " + std::to_string(batch.seq_len));
  if (rows > INT_MAX / 4)
    throw std::invalid_argument("model: a micro-batch of " + std::to_string(rows) + " tokens is too large");
  if ((!batch.inputs.i32 && !batch.inputs.u16) || (!batch.targets.i32 && !batch.targets.u16))
    throw std::invalid_argument("model: a micro-batch needs both inputs and targets");
  if (ctx.micro_step > kMaxMicroStep)
    throw std::invalid_argument("model: micro_step = " + std::to_string(ctx.micro_step) +
                                " exceeds the Philox stream's limit " + std::to_string(kMaxMicroStep));
  const int64_t vocab = config_.vocab_size;
  for (int64_t i = 0; i < rows; ++i) {
    for (const TokenView* tv : {&batch.inputs, &batch.targets}) {
      const int64_t id = (*tv)[static_cast<size_t>(i)];
      if (id < 0 || id >= vocab)
        throw std::invalid_argument(std::string("model: ") + (tv == &batch.inputs ? "input" : "target") +
                                    " token " + std::to_string(id) + " at [" +
                                    std::to_string(i / batch.seq_len) + ", " + std::to_string(i % batch.seq_len) +
                                    "] is outside the vocabulary 0.." + std::to_string(vocab - 1));
    }
  }
  if (backward) {
    if (std::string e = shape_error(static_cast<int>(rows)); !e.empty())
      throw std::invalid_argument("model: a micro-batch of B·T = " + std::to_string(batch.batch_size) +
                                  "·" + std::to_string(batch.seq_len) + " tokens: " + e);
  }
}

template <typename T>
void BasicModel<T>::prepare(const Batch& batch) {
  const int B = batch.batch_size, S = batch.seq_len, R = B * S;
  const int L = config_.n_layers, d = config_.d_model, f = config_.d_ff, V = config_.vocab_size;
  const size_t r = static_cast<size_t>(R);
  batch_ = B;
  seq_ = S;
  rows_ = R;
  inputs_.resize(r);
  targets_.resize(r);
  for (size_t i = 0; i < r; ++i) {
    inputs_[i] = static_cast<int32_t>(batch.inputs[i]);
    targets_[i] = static_cast<int32_t>(batch.targets[i]);
  }
  if (rope_.seq_len != S) rope_ = cpu::rope_table<T>(S, config_.head_dim, config_.rope_base);

  resid_.resize(L + 1);
  for (auto& x : resid_) x.resize(r * d);
  acts_.resize(L);
  moe_acts_.resize(L);
  for (int l = 0; l < L; ++l) {
    LayerActs& a = acts_[l];
    a.h1.resize(r * d);
    a.rstd1.resize(r);
    a.qkv.resize(r * 3 * d);
    a.lse.resize(r * config_.n_heads);
    a.att.resize(r * d);
    a.x_mid.resize(r * d);
    a.h2.resize(r * d);
    a.rstd2.resize(r);
    if (!is_moe_block(config_, l)) {  // an MoE block's activations are its experts' (moe_forward)
      a.u.resize(r * 2 * f);
      a.a.resize(r * f);
    }
  }
  hf_.resize(r * d);
  rstdf_.resize(r);
  logits_.resize(r * V);
  loss_rows_.resize(r);
  for (auto* v : {&tmp_, &dres_, &dtmp_, &dh_, &datt_}) v->resize(r * d);
  da_.resize(r * f);
  du_.resize(r * 2 * f);
  dqkv_.resize(r * 3 * d);

  // The weights as the GEMMs see them this pass: bf16 copies of the fp32 masters.
  if constexpr (std::is_same_v<T, float>) to_bf16(params_.data(), params_.size(), w_bf16_);
  const ParamView& head = views_[lm_head_];
  head_w_.assign(params_.begin() + head.offset, params_.begin() + head.offset + head.size);
  store(head_w_.data(), head_w_.size());
}

// ---- The passes --------------------------------------------------------------------------------

template <typename T>
double BasicModel<T>::run(const StepContext& ctx, T* g, T grad_scale, bool* finite) {
  const int L = config_.n_layers, d = config_.d_model, f = config_.d_ff, V = config_.vocab_size;
  const int H = config_.n_heads, hd = config_.head_dim, R = rows_;
  const int B = batch_, S = seq_;
  const T eps = static_cast<T>(config_.norm_eps);
  const size_t rd = static_cast<size_t>(R) * d;
  bool ok = true;

  // ---- Forward ----
  cpu::embedding_forward(param(views_[tok_emb_]), inputs_.data(), R, d, resid_[0].data());
  store(resid_[0].data(), rd);
  for (int l = 0; l < L; ++l) {
    LayerActs& A = acts_[l];
    const BlockViews& w = blocks_[l];
    const T* x = resid_[l].data();
    cpu::rmsnorm_forward(x, param(views_[w.attn_norm]), R, d, eps, A.h1.data(), A.rstd1.data());
    store(A.h1.data(), rd);
    ok &= block_linear_forward(ctx, l, 0, A.h1.data(), R, A.qkv.data());
    store(A.qkv.data(), A.qkv.size());
    cpu::rope_forward(A.qkv.data(), B, S, H, hd, 3 * d, rope_);      // q
    cpu::rope_forward(A.qkv.data() + d, B, S, H, hd, 3 * d, rope_);  // k
    store(A.qkv.data(), A.qkv.size());
    cpu::attention_forward(A.qkv.data(), B, S, H, hd, A.att.data(), A.lse.data());
    store(A.att.data(), rd);
    ok &= block_linear_forward(ctx, l, 1, A.att.data(), R, tmp_.data());
    store(tmp_.data(), rd);
    add(x, tmp_.data(), A.x_mid.data(), rd);
    store(A.x_mid.data(), rd);
    cpu::rmsnorm_forward(A.x_mid.data(), param(views_[w.mlp_norm]), R, d, eps, A.h2.data(), A.rstd2.data());
    store(A.h2.data(), rd);
    if (is_moe_block(config_, l)) {
      ok &= moe_forward(ctx, l, A.h2.data(), tmp_.data());
    } else {
      ok &= block_linear_forward(ctx, l, 2, A.h2.data(), R, A.u.data());
      store(A.u.data(), A.u.size());
      cpu::swiglu_forward(A.u.data(), R, f, A.a.data());
      store(A.a.data(), A.a.size());
      ok &= block_linear_forward(ctx, l, 3, A.a.data(), R, tmp_.data());
    }
    store(tmp_.data(), rd);
    add(A.x_mid.data(), tmp_.data(), resid_[l + 1].data(), rd);
    store(resid_[l + 1].data(), rd);
  }
  cpu::rmsnorm_forward(resid_[L].data(), param(views_[final_norm_]), R, d, eps, hf_.data(), rstdf_.data());
  store(hf_.data(), rd);
  cpu::matmul<T>(false, true, R, V, d, T(1), hf_.data(), head_w_.data(), T(0), logits_.data());
  // With a backward pass the logits' buffer becomes their gradient (fused head + loss).
  cpu::cross_entropy(logits_.data(), targets_.data(), R, V, loss_rows_.data(), g ? logits_.data() : nullptr,
                grad_scale / static_cast<T>(R));
  double loss_sum = 0.0;
  for (int i = 0; i < R; ++i) loss_sum += static_cast<double>(loss_rows_[i]);
  ok = ok && std::isfinite(loss_sum);
  if (!g) {
    *finite = ok;
    return loss_sum;
  }

  // ---- Backward ----
  const T* dlogits = logits_.data();
  cpu::matmul<T>(true, false, V, d, R, T(1), dlogits, hf_.data(), T(1), g + views_[lm_head_].offset);
  cpu::matmul<T>(false, false, R, d, V, T(1), dlogits, head_w_.data(), T(0), dh_.data());
  store(dh_.data(), rd);
  cpu::rmsnorm_backward(resid_[L].data(), param(views_[final_norm_]), rstdf_.data(), dh_.data(), R, d,
                   dres_.data(), g + views_[final_norm_].offset);
  store(dres_.data(), rd);
  for (int l = L - 1; l >= 0; --l) {
    LayerActs& A = acts_[l];
    const BlockViews& w = blocks_[l];
    // dres_ holds ∂loss/∂(block output). MLP branch: out = x_mid + mlp_out(swiglu(mlp_in(h2))).
    if (is_moe_block(config_, l)) {
      ok &= moe_backward(ctx, l, A.h2.data(), dres_.data(), dh_.data(), g, grad_scale);
    } else {
      ok &= block_linear_backward(ctx, l, 3, A.a.data(), dres_.data(), R, da_.data(), g);
      store(da_.data(), da_.size());
      cpu::swiglu_backward(A.u.data(), da_.data(), R, f, du_.data());
      store(du_.data(), du_.size());
      ok &= block_linear_backward(ctx, l, 2, A.h2.data(), du_.data(), R, dh_.data(), g);
    }
    store(dh_.data(), rd);
    cpu::rmsnorm_backward(A.x_mid.data(), param(views_[w.mlp_norm]), A.rstd2.data(), dh_.data(), R, d,
                     dtmp_.data(), g + views_[w.mlp_norm].offset);
    add(dres_.data(), dtmp_.data(), dres_.data(), rd);
    store(dres_.data(), rd);
    // dres_ holds ∂loss/∂x_mid. Attention branch: x_mid = x + attn_out(attention(rope(qkv(h1)))).
    ok &= block_linear_backward(ctx, l, 1, A.att.data(), dres_.data(), R, datt_.data(), g);
    store(datt_.data(), rd);
    cpu::attention_backward(A.qkv.data(), A.lse.data(), datt_.data(), B, S, H, hd, dqkv_.data());
    store(dqkv_.data(), dqkv_.size());
    cpu::rope_backward(dqkv_.data(), B, S, H, hd, 3 * d, rope_);
    cpu::rope_backward(dqkv_.data() + d, B, S, H, hd, 3 * d, rope_);
    store(dqkv_.data(), dqkv_.size());
    ok &= block_linear_backward(ctx, l, 0, A.h1.data(), dqkv_.data(), R, dh_.data(), g);
    store(dh_.data(), rd);
    cpu::rmsnorm_backward(resid_[l].data(), param(views_[w.attn_norm]), A.rstd1.data(), dh_.data(), R, d,
                     dtmp_.data(), g + views_[w.attn_norm].offset);
    add(dres_.data(), dtmp_.data(), dres_.data(), rd);
    store(dres_.data(), rd);
  }
  cpu::embedding_backward(inputs_.data(), dres_.data(), R, d, g + views_[tok_emb_].offset);
  *finite = ok;
  return loss_sum;
}

template <typename T>
PassResult BasicModel<T>::forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale) {
  check_batch(batch, ctx, true);
  prepare(batch);
  bool finite = true;
  const double sum = run(ctx, grads_.data(), static_cast<T>(grad_scale), &finite);
  PassResult r;
  r.loss = sum / rows_;
  r.nonfinite = !finite;
  for (int l = 0; l < config_.n_layers; ++l) {
    if (!is_moe_block(config_, l)) continue;
    const MoeLayerStats& st = moe_acts_[l].stats;
    r.aux_loss += config_.moe.balance_coef * st.balance + config_.moe.z_coef * st.z;
    r.moe.push_back(st);
  }
  r.nonfinite = r.nonfinite || !std::isfinite(r.aux_loss);
  return r;
}

template <typename T>
EvalResult BasicModel<T>::evaluate(const Batch& batch, const StepContext& ctx) {
  check_batch(batch, ctx, false);
  prepare(batch);
  bool finite = true;
  const double sum = run(ctx, nullptr, T(0), &finite);
  return EvalResult{sum, rows_, !finite};
}

template <typename T>
PassResult BasicModel<T>::probe(const Batch& batch, const StepContext& ctx, const ProbeFn& fn) {
  if (config_.moe.enabled())
    throw std::invalid_argument("model: the shrinkage probe does not measure an MoE model's expert linears yet");
  check_batch(batch, ctx, true);
  prepare(batch);
  probe_grads_.assign(params_.size(), T(0));  // the probe leaves the real gradients alone
  struct Reset {
    const ProbeFn*& p;
    ~Reset() { p = nullptr; }
  } reset{probe_};
  probe_ = &fn;
  bool finite = true;
  const double sum = run(ctx, probe_grads_.data(), T(1), &finite);
  PassResult r;
  r.loss = sum / rows_;
  r.nonfinite = !finite;
  return r;
}

template class BasicModel<float>;
template class BasicModel<double>;

}  // namespace fp4::model
