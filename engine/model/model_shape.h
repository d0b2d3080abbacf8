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

// How the router turns its logits z (one per routed expert) into scores (docs/model.md, "Mixture
// of experts"): softmax over the experts (Switch, GShard, Mixtral) or an independent sigmoid per
// expert (DeepSeek-V3).
enum class RouterScore : uint8_t { softmax = 0, sigmoid = 1 };
const char* router_score_name(RouterScore s);  // "softmax", "sigmoid"

// The mixture-of-experts MLP (docs/model.md, "Mixture of experts"). n_experts = 0 is the dense
// model: every block has the SwiGLU MLP of width d_ff. Otherwise block b has an MoE block instead
// of its MLP when (b + 1) % every == 0: a router (fp32, never quantized) picks top_k of n_experts
// routed SwiGLU experts of width d_ff_expert per token, and n_shared always-on experts of the same
// width are added with gate 1.
// The most experts (routed or shared) an MoE block may have: far beyond what a one-machine model
// uses, refused as a typo.
constexpr int kMaxExperts = 1024;

struct MoeShape {
  int n_experts = 0;                 // E routed experts; 0: no MoE block anywhere
  int top_k = 0;                     // experts per token, 1..E
  int d_ff_expert = 0;               // each expert's SwiGLU width (its "MLP in" has 2·d_ff_expert outputs)
  int n_shared = 0;                  // DeepSeek-style always-on experts, width d_ff_expert
  int every = 1;                     // block b is an MoE block when (b + 1) % every == 0
  RouterScore score = RouterScore::softmax;
  bool renormalize = false;          // gates divided by their sum over the token's top_k experts
  double balance_coef = 0.0;         // α of the load-balancing loss α·E·Σᵢ fᵢ·Pᵢ (per MoE block)
  double z_coef = 0.0;               // β of the router z-loss β·mean_t (logsumexp z_t)² (per MoE block)

  bool enabled() const { return n_experts > 0; }
  bool operator==(const MoeShape&) const = default;
};

struct ModelShape {
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int head_dim = 64;         // d_model = n_heads · head_dim, always
  int d_ff = 0;              // SwiGLU hidden width; "MLP in" has 2·d_ff outputs (gate | up)
  int vocab_size = 256;      // the byte tokenizer's vocabulary
  float norm_eps = 1e-5f;    // RMSNorm: x / sqrt(mean(x²) + eps) · gain
  float rope_base = 10000.0f;
  MoeShape moe;              // n_experts = 0: the dense model
};

// MoE models train on one GPU so far (their routing rows would be one rank's alone, and the
// data-parallel MoE path is untested): a config with gpus > 1 is refused with this line.
inline constexpr const char* kMoeMultiGpuRefusal =
    "MoE models (model.moe) train on one GPU so far: set gpus = 1";

// Whether block b holds an MoE block (moe.enabled() and (b + 1) % moe.every == 0).
bool is_moe_block(const ModelShape& c, int block);
int moe_block_count(const ModelShape& c);

// The default expert width for top-k routing: the dense d_ff / k rounded to the nearest multiple of
// 32 (ties up, at least 32), so that top_k experts cost the dense MLP's FLOPs (exactly when d_ff / k
// is a multiple of 32) and every recipe's block (16, 32) divides it.
int default_d_ff_expert(int d_ff, int top_k);

// The Philox site (NUMERICS.md §6: the linear id of the stream, 16 bits) of expert j's linear at
// `position` (2: MLP in, 3: MLP out) of MoE block `block`; j = 0..E-1 are the routed experts,
// E..E+S-1 the shared ones. Expert 0 takes the dense MLP's sites 4·block + position, so that a model
// of one expert at the dense width draws the dense model's random numbers; expert j ≥ 1 takes
//   4·L + 2·(m·(E + S − 1) + j − 1) + (position − 2),   m = the MoE block's index among MoE blocks,
// above every dense site. config_error refuses a shape whose sites do not fit in 16 bits.
uint32_t expert_linear_site(const ModelShape& c, int block, int expert, int position);

// The d_ff rule: the multiple of 64 nearest to 8/3 · d_model, ties (d_model ≡ 12 mod 24) going up,
// and at least 64. In integers: 64 · max(1, floor((8·d_model + 96) / 192)).
// d_model = 64·L is never a tie: 128 → 320, 256 → 704, 384 → 1024.
int nearest_d_ff(int d_model);

// Preset "d<L>" (L ≥ 1): n_layers = L, d_model = 64·L, n_heads = L, head_dim 64, d_ff by the rule.
// Preset "d<L>-e<E>k<K>": the same dimensions with an MoE block in every layer, E routed experts,
// top-K, expert width default_d_ff_expert(d_ff, K) (the dense model's active MLP FLOPs), no shared
// experts, softmax scores, renormalized gates when K > 1, and the default loss coefficients
// (balance 0.01, z 0.001). Throws UserError (one line) for any other name.
ModelShape model_preset(const std::string& name, int vocab_size = 256);

// Explicit dimensions. d_ff = 0 takes the rule; head_dim = 0 takes d_model / n_heads.
ModelShape model_explicit(int n_layers, int d_model, int n_heads, int head_dim, int d_ff,
                           int vocab_size = 256);

// Empty when the config is usable; otherwise one line naming the field, e.g.
// "model: d_model = 100 is not divisible by n_heads = 3".
std::string config_error(const ModelShape& c);
// Throws UserError with config_error's line when it is not empty.
void validate(const ModelShape& c);

// MoE defaults (docs/model.md): Switch Transformer's α = 0.01 and ST-MoE's β = 0.001.
constexpr double kDefaultBalanceCoef = 0.01;
constexpr double kDefaultZCoef = 0.001;
// The presets' MoE part: E experts, top-K over a dense width d_ff.
MoeShape moe_preset(int n_experts, int top_k, int d_ff);

// Parameters. Per block: two norm gains (2·d), qkv (3·d²), attention out (d²), MLP in (2·d_ff·d),
// MLP out (d·d_ff): 4·d² + 3·d·d_ff + 2·d. Non-embedding = L · per block + d (final norm gain):
// everything except the token embedding and the LM head; the norm gains DO count.
// Total = non-embedding + 2·vocab·d.
// An MoE block replaces the MLP's 3·d·d_ff by a router (E·d, fp32) and (E + S) experts of
// 3·d·d_ff_expert; a token uses the router and k + S experts ("active"). For a dense model the
// active counts are the counts.
int64_t block_params(const ModelShape& c);                  // a dense block
int64_t moe_block_params(const ModelShape& c);              // an MoE block, every expert
int64_t moe_block_active_params(const ModelShape& c);       // an MoE block, what one token uses
int64_t nonembedding_params(const ModelShape& c);           // every expert counts
int64_t total_params(const ModelShape& c);
int64_t active_nonembedding_params(const ModelShape& c);    // top_k + shared experts per MoE block
int64_t active_params(const ModelShape& c);

// Training FLOPs per token at sequence length T:
//   6·N_nonemb                  forward (2 per weight) + backward (4 per weight) of the block
//                               linears (the norm gains are counted too: < 0.1%);
// + 6·n_layers·T·d_model        the attention core: QKᵀ and P·V are each d_model multiply-adds per
//                               (query, key) pair, a causal query sees on average ~T/2 keys, so
//                               forward = 2 matmuls · 2 FLOPs · d · T/2 = 2·d·T per layer, and
//                               backward twice that (dQ, dK, dP, dV).
// Not counted: the LM head (6·vocab·d), the embedding lookup, softmax, norms, RoPE, SwiGLU's
// elementwise work, and the CPU backend's recomputation of QKᵀ in the backward pass.
// For an MoE model N_nonemb is the active count (active_nonembedding_params: the router, top_k and
// the shared experts), so the FLOPs are what one token costs; the gating, the dispatch and the
// auxiliary losses are not counted.
double train_flops_per_token(const ModelShape& c, int seq_len);

// "L=2 d=128 H=2 hd=64 ff=320 V=256": for logs.
std::string describe(const ModelShape& c);

}  // namespace fp4::model
