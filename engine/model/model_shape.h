// model_shape.h — the shape of fp4lab's decoder-only transformer, its size presets, and the
// counts the fitter needs (parameters, training FLOPs per token). docs/model.md states the same
// formulas with worked numbers.
//
// The model: token embedding → L × [RMSNorm → qkv → RoPE → causal attention → attention out →
// residual; RMSNorm → MLP in (gate | up) → silu(gate)·up → MLP out → residual] → RMSNorm → LM head.
// No biases anywhere; the embedding and the LM head are separate (untied) matrices.
#pragma once

#include <cstdint>
#include <string>

namespace fp4::model {

struct ModelShape {
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int head_dim = 64;         // d_model = n_heads · head_dim, always
  int d_ff = 0;              // SwiGLU hidden width; "MLP in" has 2·d_ff outputs (gate | up)
  int vocab_size = 256;      // the byte tokenizer's vocabulary
  float norm_eps = 1e-5f;    // RMSNorm: x / sqrt(mean(x²) + eps) · gain
  float rope_base = 10000.0f;
};

// The d_ff rule: the multiple of 64 nearest to 8/3 · d_model, ties (d_model ≡ 12 mod 24) going up,
// and at least 64. In integers: 64 · max(1, floor((8·d_model + 96) / 192)).
// d_model = 64·L is never a tie: 128 → 320, 256 → 704, 384 → 1024.
int nearest_d_ff(int d_model);

// Preset "d<L>" (L ≥ 1): n_layers = L, d_model = 64·L, n_heads = L, head_dim 64, d_ff by the rule.
// Throws UserError (one line) for any other name.
ModelShape model_preset(const std::string& name, int vocab_size = 256);

// Explicit dimensions. d_ff = 0 takes the rule; head_dim = 0 takes d_model / n_heads.
ModelShape model_explicit(int n_layers, int d_model, int n_heads, int head_dim, int d_ff,
                           int vocab_size = 256);

// Empty when the config is usable; otherwise one line naming the field, e.g.
// "model: d_model = 100 is not divisible by n_heads = 3".
std::string config_error(const ModelShape& c);
// Throws UserError with config_error's line when it is not empty.
void validate(const ModelShape& c);

// Parameters. Per block: two norm gains (2·d), qkv (3·d²), attention out (d²), MLP in (2·d_ff·d),
// MLP out (d·d_ff): 4·d² + 3·d·d_ff + 2·d. Non-embedding = L · per block + d (final norm gain):
// everything except the token embedding and the LM head; the norm gains DO count.
// Total = non-embedding + 2·vocab·d.
int64_t block_params(const ModelShape& c);
int64_t nonembedding_params(const ModelShape& c);
int64_t total_params(const ModelShape& c);

// Training FLOPs per token at sequence length T:
//   6·N_nonemb                  forward (2 per weight) + backward (4 per weight) of the block
//                               linears (the norm gains are counted too: < 0.1%);
// + 6·n_layers·T·d_model        the attention core: QKᵀ and P·V are each d_model multiply-adds per
//                               (query, key) pair, a causal query sees on average ~T/2 keys, so
//                               forward = 2 matmuls · 2 FLOPs · d · T/2 = 2·d·T per layer, and
//                               backward twice that (dQ, dK, dP, dV).
// Not counted: the LM head (6·vocab·d), the embedding lookup, softmax, norms, RoPE, SwiGLU's
// elementwise work, and the CPU backend's recomputation of QKᵀ in the backward pass.
double train_flops_per_token(const ModelShape& c, int seq_len);

// "L=2 d=128 H=2 hd=64 ff=320 V=256": for logs.
std::string describe(const ModelShape& c);

}  // namespace fp4::model
