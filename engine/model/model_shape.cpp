// model_shape.cpp — see model_shape.h.
#include "engine/model/model_shape.h"

#include <cmath>
#include <stdexcept>

#include "base/parse_number.h"
#include "base/user_error.h"
#include "kernels/numerics.h"

namespace fp4::model {

int nearest_d_ff(int d_model) {
  // 8/3·d / 64 = d / 24; adding half of 192 before the floor rounds half up.
  const int64_t m = (int64_t{8} * d_model + 96) / 192;
  return static_cast<int>(64 * (m < 1 ? 1 : m));
}

ModelShape model_preset(const std::string& name, int vocab_size) {
  const std::string digits = name.size() > 1 && name[0] == 'd' ? name.substr(1) : std::string();
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits[0] == '0')
    throw UserError("model preset \"" + name +
                    "\" is not d<L> (e.g. d4: 4 layers, d_model 256, 4 heads of 64)");
  const int layers = *parse_integer<int>(digits);  // at most 4 digits, checked above
  ModelShape c;
  c.n_layers = layers;
  c.d_model = 64 * layers;
  c.n_heads = layers;
  c.head_dim = 64;
  c.d_ff = nearest_d_ff(c.d_model);
  c.vocab_size = vocab_size;
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
  return {};
}

void validate(const ModelShape& c) {
  if (std::string e = config_error(c); !e.empty()) throw UserError(e);
}

int64_t block_params(const ModelShape& c) {
  const int64_t d = c.d_model, f = c.d_ff;
  return 4 * d * d + 3 * d * f + 2 * d;
}

int64_t nonembedding_params(const ModelShape& c) {
  return c.n_layers * block_params(c) + c.d_model;
}

int64_t total_params(const ModelShape& c) {
  return nonembedding_params(c) + 2 * int64_t{c.vocab_size} * c.d_model;
}

double train_flops_per_token(const ModelShape& c, int seq_len) {
  return 6.0 * static_cast<double>(nonembedding_params(c)) +
         6.0 * c.n_layers * static_cast<double>(seq_len) * c.d_model;
}

std::string describe(const ModelShape& c) {
  return "L=" + std::to_string(c.n_layers) + " d=" + std::to_string(c.d_model) +
         " H=" + std::to_string(c.n_heads) + " hd=" + std::to_string(c.head_dim) +
         " ff=" + std::to_string(c.d_ff) + " V=" + std::to_string(c.vocab_size);
}

}  // namespace fp4::model
