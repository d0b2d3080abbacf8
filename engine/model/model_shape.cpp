// model_shape.cpp — see model_shape.h.
#include "engine/model/model_shape.h"

#include <cmath>
#include <optional>
#include <stdexcept>

#include "base/linear_sites.h"
#include "base/parse_number.h"
#include "base/user_error.h"
#include "kernels/numerics.h"

namespace fp4::model {

int nearest_d_ff(int d_model) {
  // 8/3·d / 64 = d / 24; adding half of 192 before the floor rounds half up.
  const int64_t m = (int64_t{8} * d_model + 96) / 192;
  return static_cast<int>(64 * (m < 1 ? 1 : m));
}

const char* router_score_name(RouterScore s) { return s == RouterScore::softmax ? "softmax" : "sigmoid"; }

bool is_moe_block(const ModelShape& c, int block) {
  return c.moe.enabled() && c.moe.every >= 1 && (block + 1) % c.moe.every == 0;
}

int moe_block_count(const ModelShape& c) {
  return c.moe.enabled() && c.moe.every >= 1 ? c.n_layers / c.moe.every : 0;
}

int default_d_ff_expert(int d_ff, int top_k) {
  const int64_t unit = int64_t{32} * (top_k < 1 ? 1 : top_k);
  const int64_t m = (int64_t{d_ff} + unit / 2) / unit;  // nearest, ties up
  return static_cast<int>(32 * (m < 1 ? 1 : m));
}

MoeShape moe_preset(int n_experts, int top_k, int d_ff) {
  MoeShape m;
  m.n_experts = n_experts;
  m.top_k = top_k;
  m.d_ff_expert = default_d_ff_expert(d_ff, top_k);
  m.renormalize = top_k > 1;
  m.balance_coef = kDefaultBalanceCoef;
  m.z_coef = kDefaultZCoef;
  return m;
}

uint32_t expert_linear_site(const ModelShape& c, int block, int expert, int position) {
  if (expert == 0) return linear_site(block, position);
  const int64_t per_block = c.moe.n_experts + c.moe.n_shared - 1;
  const int64_t m = (block + 1) / c.moe.every - 1;
  return static_cast<uint32_t>(int64_t{kLinearsPerBlock} * c.n_layers + 2 * (m * per_block + expert - 1) +
                               (position - 2));
}

namespace {

// "123" → 123 for 1 to 4 digits without a leading zero; nullopt otherwise.
std::optional<int> preset_number(const std::string& digits) {
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits[0] == '0')
    return std::nullopt;
  return parse_integer<int>(digits);
}

}  // namespace

ModelShape model_preset(const std::string& name, int vocab_size) {
  // "d<L>" or "d<L>-e<E>k<K>".
  const size_t dash = name.find('-');
  const std::string dense = name.substr(0, dash);
  const std::string moe = dash == std::string::npos ? std::string() : name.substr(dash + 1);
  const std::optional<int> layers_opt = dense.size() > 1 && dense[0] == 'd' ? preset_number(dense.substr(1)) : std::nullopt;
  std::optional<int> experts, top_k;
  if (dash != std::string::npos) {
    const size_t k = moe.find('k');
    if (moe.size() > 1 && moe[0] == 'e' && k != std::string::npos) {
      experts = preset_number(moe.substr(1, k - 1));
      top_k = preset_number(moe.substr(k + 1));
    }
  }
  if (!layers_opt || (dash != std::string::npos && (!experts || !top_k)))
    throw UserError("model preset \"" + name +
                    "\" is not d<L> or d<L>-e<E>k<K> (e.g. d4: 4 layers, d_model 256, 4 heads of 64; "
                    "d4-e8k2: the same with 8 experts, top-2)");
  const int layers = *layers_opt;
  ModelShape c;
  c.n_layers = layers;
  c.d_model = 64 * layers;
  c.n_heads = layers;
  c.head_dim = 64;
  c.d_ff = nearest_d_ff(c.d_model);
  c.vocab_size = vocab_size;
  if (experts) c.moe = moe_preset(*experts, *top_k, c.d_ff);
  validate(c);
  return c;
}

ModelShape model_explicit(int n_layers, int d_model, int n_heads, int head_dim, int d_ff,
                           int vocab_size) {
  ModelShape c;
  c.n_layers = n_layers;
  c.d_model = d_model;
  c.n_heads = n_heads;
  c.head_dim = head_dim != 0 ? head_dim : (n_heads > 0 ? d_model / n_heads : 0);
  c.d_ff = d_ff != 0 ? d_ff : nearest_d_ff(d_model);
  c.vocab_size = vocab_size;
  validate(c);
  return c;
}

namespace {

std::string moe_error(const ModelShape& c) {
  const MoeShape& m = c.moe;
  auto s = [](auto v) { return std::to_string(v); };
  if (m.n_experts == 0) {
    if (!(m == MoeShape{})) return "model: moe fields are set but moe.experts = 0 (no MoE block)";
    return {};
  }
  if (m.n_experts < 1 || m.n_experts > kMaxExperts)
    return "model: moe.experts = " + s(m.n_experts) + " must be between 1 and " + s(kMaxExperts);
  if (m.top_k < 1 || m.top_k > m.n_experts)
    return "model: moe.top_k = " + s(m.top_k) + " must be between 1 and moe.experts = " + s(m.n_experts);
  if (m.d_ff_expert < 1) return "model: moe.d_ff_expert = " + s(m.d_ff_expert) + " must be positive";
  if (m.n_shared < 0 || m.n_shared > kMaxExperts)
    return "model: moe.shared = " + s(m.n_shared) + " must be between 0 and " + s(kMaxExperts);
  if (m.every < 1 || m.every > c.n_layers)
    return "model: moe.every = " + s(m.every) + " must be between 1 and n_layers = " + s(c.n_layers);
  if (!(m.balance_coef >= 0.0) || !std::isfinite(m.balance_coef))
    return "model: moe.balance_coef must be a finite number >= 0";
  if (!(m.z_coef >= 0.0) || !std::isfinite(m.z_coef)) return "model: moe.z_coef must be a finite number >= 0";
  const int64_t last_site =
      int64_t{kLinearsPerBlock} * c.n_layers + 2 * int64_t{moe_block_count(c)} * (m.n_experts + m.n_shared - 1) - 1;
  if (last_site > int64_t{kMaxLinearId})
    return "model: " + s(moe_block_count(c)) + " MoE blocks of " + s(m.n_experts + m.n_shared) +
           " experts need " + s(last_site + 1) + " linear sites, more than the " + s(kMaxLinearId + 1) +
           " the random-stream packing allows (NUMERICS.md §6): use fewer experts or layers";
  return {};
}

}  // namespace

std::string config_error(const ModelShape& c) {
  auto s = [](auto v) { return std::to_string(v); };
  // Linear ids (block·4 + position) are 16 bits in the Philox stream (numerics.h).
  const int max_layers = static_cast<int>(kMaxLinearId / 4);
  if (c.n_layers < 1 || c.n_layers > max_layers)
    return "model: n_layers = " + s(c.n_layers) + " must be between 1 and " + s(max_layers);
  if (c.d_model < 1) return "model: d_model = " + s(c.d_model) + " must be positive";
  if (c.n_heads < 1) return "model: n_heads = " + s(c.n_heads) + " must be positive";
  if (c.d_model % c.n_heads != 0)
    return "model: d_model = " + s(c.d_model) + " is not divisible by n_heads = " + s(c.n_heads);
  if (c.head_dim * c.n_heads != c.d_model)
    return "model: head_dim = " + s(c.head_dim) + " times n_heads = " + s(c.n_heads) +
           " must equal d_model = " + s(c.d_model);
  if (c.head_dim % 2 != 0)
    return "model: head_dim = " + s(c.head_dim) + " must be even (RoPE rotates pairs of features)";
  if (c.d_ff < 1) return "model: d_ff = " + s(c.d_ff) + " must be positive";
  if (c.vocab_size < 2) return "model: vocab_size = " + s(c.vocab_size) + " must be at least 2";
  if (!(c.norm_eps > 0.0f) || !std::isfinite(c.norm_eps))
    return "model: norm_eps must be a positive finite number";
  if (!(c.rope_base > 1.0f) || !std::isfinite(c.rope_base))
    return "model: rope_base must be a finite number above 1";
  return moe_error(c);
}

void validate(const ModelShape& c) {
  if (std::string e = config_error(c); !e.empty()) throw UserError(e);
}

int64_t block_params(const ModelShape& c) {
  const int64_t d = c.d_model, f = c.d_ff;
  return 4 * d * d + 3 * d * f + 2 * d;
}

namespace {

// An MoE block with `experts` experts of width d_ff_expert: attention and norms as a dense block,
// the router's E·d, and 3·d·d_ff_expert per expert.
int64_t moe_block_with(const ModelShape& c, int64_t experts) {
  const int64_t d = c.d_model, fe = c.moe.d_ff_expert;
  return 4 * d * d + 2 * d + int64_t{c.moe.n_experts} * d + experts * 3 * d * fe;
}

int64_t nonembedding_with(const ModelShape& c, int64_t moe_block) {
  const int64_t moe_blocks = moe_block_count(c);
  return (c.n_layers - moe_blocks) * block_params(c) + moe_blocks * moe_block + c.d_model;
}

}  // namespace

int64_t moe_block_params(const ModelShape& c) { return moe_block_with(c, c.moe.n_experts + c.moe.n_shared); }

int64_t moe_block_active_params(const ModelShape& c) { return moe_block_with(c, c.moe.top_k + c.moe.n_shared); }

int64_t nonembedding_params(const ModelShape& c) { return nonembedding_with(c, moe_block_params(c)); }

int64_t total_params(const ModelShape& c) {
  return nonembedding_params(c) + 2 * int64_t{c.vocab_size} * c.d_model;
}

int64_t active_nonembedding_params(const ModelShape& c) { return nonembedding_with(c, moe_block_active_params(c)); }

int64_t active_params(const ModelShape& c) {
  return active_nonembedding_params(c) + 2 * int64_t{c.vocab_size} * c.d_model;
}

double train_flops_per_token(const ModelShape& c, int seq_len) {
  return 6.0 * static_cast<double>(active_nonembedding_params(c)) +
         6.0 * c.n_layers * static_cast<double>(seq_len) * c.d_model;
}

std::string describe(const ModelShape& c) {
  return "L=" + std::to_string(c.n_layers) + " d=" + std::to_string(c.d_model) +
         " H=" + std::to_string(c.n_heads) + " hd=" + std::to_string(c.head_dim) +
         " ff=" + std::to_string(c.d_ff) + " V=" + std::to_string(c.vocab_size) +
         (c.moe.enabled() ? " E=" + std::to_string(c.moe.n_experts) + " k=" + std::to_string(c.moe.top_k) +
                                " ffe=" + std::to_string(c.moe.d_ff_expert) +
                                (c.moe.n_shared ? " S=" + std::to_string(c.moe.n_shared) : "") +
                                (c.moe.every != 1 ? " every=" + std::to_string(c.moe.every) : "")
                          : "");
}

}  // namespace fp4::model
