// transformer.h — the model the trainer trains: parameters, forward, hand-written backward.
//
// Per block (pre-norm, no biases):
//   h  = RMSNorm(x; attn_norm)            qkv = linear(h; qkv)            [linear id 4·block + 0]
//   q, k = RoPE(q), RoPE(k)               o = causal attention(q, k, v)
//   x' = x + linear(o; attn_out)                                          [4·block + 1]
//   h' = RMSNorm(x'; mlp_norm)            u = linear(h'; mlp_in) = gate | up   [4·block + 2]
//   x'' = x' + linear(silu(gate)·up; mlp_out)                             [4·block + 3]
// then logits = RMSNorm(x; final_norm) · lm_headᵀ and the cross-entropy against the next tokens.
//
// Every block linear runs its three GEMMs through engine/quantized_linear under the recipe (the
// bf16 operands: X as stored, the bf16 copy of the fp32 master weight, dY as bf16; fp32 results;
// straight-through backward). Nothing else is quantized: the embedding, LM head, attention core,
// norms, RoPE, SwiGLU and loss compute in fp32 (NUMERICS.md §1).
//
// Storage (the GPU's bf16 storage points), in Storage::bf16 mode rounded to bf16 where a GPU stores
// bf16: the embedding output, every norm output, the qkv output before and after RoPE, the
// attention output, each linear's output, the residual stream after each addition, the SwiGLU
// output, and every gradient flowing between layers (dX of each linear and op). Kept in fp32: the
// master weights and their gradients, the norms' 1/rms and attention's log-sum-exp (per-row
// statistics), the logits and their gradient (a fused LM-head + loss), the norm gains (used at
// fp32). The LM head multiplies the bf16-rounded hidden state by the bf16-rounded head weights.
// Storage::fp32 rounds nothing (the block linears still take bf16 operands: that is their API).
//
// Determinism: for a given machine, two identical calls give bit-identical losses and gradients
// whatever the OpenMP thread count (every reduction has a fixed order; kernels/cpu/gemm.h is
// thread-count independent). A model owns its workspace: call it from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_shape.h"
#include "kernels/cpu/ops.h"
#include "engine/quantized_linear.h"
#include "engine/recipe.h"

namespace fp4::model {

enum class Storage : uint8_t { bf16 = 0, fp32 = 1 };
const char* storage_name(Storage s);                 // "bf16", "fp32"

// ---- Parameters --------------------------------------------------------------------------------

enum class ParamKind : uint8_t { embedding = 0, norm_gain = 1, linear = 2, lm_head = 3, router = 4 };

// A named tensor in the flat fp32 parameter buffer; the gradient buffer has the same layout.
// Matrices are [out, in] row-major (a linear computes y = x · Wᵀ). The order of the buffer:
//   tok_emb [V, d]
//   blocks.<i>.attn_norm [d], blocks.<i>.qkv [3d, d], blocks.<i>.attn_out [d, d],
//   blocks.<i>.mlp_norm [d], blocks.<i>.mlp_in [2·d_ff, d], blocks.<i>.mlp_out [d, d_ff]  (i = 0..L-1)
//   final_norm [d]
//   lm_head [V, d]
// qkv's rows are q (0..d-1) | k | v, head h at rows h·head_dim of each; mlp_in's rows are
// gate (0..d_ff-1) | up. An MoE block (docs/model.md, "Mixture of experts") has, after mlp_norm,
//   blocks.<i>.router [E, d], then for j = 0..E-1 blocks.<i>.experts.<j>.mlp_in [2·f_e, d] and
//   .mlp_out [d, f_e], then for s = 0..S-1 blocks.<i>.shared.<s>.mlp_in and .mlp_out (same shapes).
struct ParamView {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;   // first element in the flat buffer
  int64_t size = 0;     // elements
  ParamKind kind = ParamKind::linear;
  int linear_id = -1;   // block linears: linear_site(block, position) (base/linear_sites.h);
                        // expert linears: expert_linear_site (model_shape.h)
};

std::vector<ParamView> param_layout(const ModelShape& c);

// ---- Batches -----------------------------------------------------------------------------------

// Token ids as int32 or uint16 (llm.c's shards hold uint16).
struct TokenView {
  const int32_t* i32 = nullptr;
  const uint16_t* u16 = nullptr;
  TokenView() = default;
  TokenView(const int32_t* p) : i32(p) {}   // NOLINT: implicit on purpose
  TokenView(const uint16_t* p) : u16(p) {}  // NOLINT
  int64_t operator[](size_t i) const { return i32 ? int64_t{i32[i]} : int64_t{u16[i]}; }
};

// One micro-batch: B sequences of T tokens, row-major [B, T]; targets[b·T + t] is the token that
// follows inputs[b·T + t]. Every id must lie in [0, vocab_size).
struct Batch {
  TokenView inputs, targets;
  int batch_size = 0;  // B
  int seq_len = 0;     // T
};

// Where a pass sits in training, for the recipe's random numbers (SR, per-step RHT signs).
struct StepContext {
  uint64_t seed = 0;        // the run seed
  uint32_t step = 0;        // optimizer step
  uint32_t micro_step = 0;  // micro-step within the step, at most 4095
};

// The site of the linear at `position` of `block` in a pass with context `ctx`, under `recipe`:
// what both backends' linears quantize with.
engine::LinearSite linear_site_at(const engine::Recipe& recipe, bool keep_bf16, const StepContext& ctx, int block,
                                  int position);

// One MoE block's routing in one pass (docs/model.md, "Mixture of experts").
struct MoeLayerStats {
  int block = 0;
  std::vector<int64_t> counts;  // token-to-expert assignments per routed expert (Σ = tokens · top_k)
  double balance = 0.0;         // E · Σ_i f_i · P_i, without its coefficient (1 at perfect balance)
  double z = 0.0;               // mean over tokens of (logsumexp of the router's logits)², without its coefficient
};

struct PassResult {
  double loss = 0.0;       // mean cross-entropy over the B·T tokens, nats per token
  bool nonfinite = false;  // a quantizer met a NaN/Inf, or the loss is not finite
  // MoE models: Σ over MoE blocks of balance_coef · balance + z_coef · z, the auxiliary part of the
  // objective the gradients follow (not in `loss`), and each MoE block's routing.
  double aux_loss = 0.0;
  std::vector<MoeLayerStats> moe;
};

struct EvalResult {
  double loss_sum = 0.0;   // summed cross-entropy, nats (summed per row in row order, in double)
  int64_t tokens = 0;
  bool nonfinite = false;
};

// Called once per operand slot of every block linear during probe(): the site (linear_id, recipe,
// keep_bf16, seed, step, micro_step), the slot, and that slot's bf16 operand [rows, cols] exactly
// as the linear received it (fprop_x/wgrad_x: X [T, K]; fprop_w/dgrad_w: W [N, K]; dgrad_dy/
// wgrad_dy: dY [T, N]). quantize_slot(site, slot, operand, rows, cols, true) then gives the
// quantized copy the GEMM used, with its transformed input, for NUMERICS.md §8's alpha. The
// pointer is valid only during the call. Blocks kept in bf16 are reported too (site.keep_bf16).
using ProbeFn = std::function<void(const engine::LinearSite& site, engine::Slot slot,
                                   const bf16_t* operand, int rows, int cols)>;

// ---- The model ---------------------------------------------------------------------------------

// T = float is the model (`Model`). T = double is the gradient checks' exact reference: the same
// code with every block linear multiplied in double (no bf16 operands), and it accepts only a
// recipe that quantizes nothing.
template <typename T>
class BasicModel {
 public:
  // bf16_layers: the blocks kept in bf16, usually engine::resolve_bf16_layers(recipe.bf16_layers,
  // config.n_layers). Throws std::invalid_argument (one line) for a bad config, a bad recipe, a
  // block index out of range, or a dimension that does not fit the recipe's blocks.
  // Parameters start at zero: call init_params().
  BasicModel(const ModelShape& config, const engine::Recipe& recipe, std::vector<int> bf16_layers,
             Storage storage = Storage::bf16);

  const ModelShape& config() const { return config_; }
  const engine::Recipe& recipe() const { return recipe_; }
  const std::vector<int>& bf16_layers() const { return bf16_layers_; }
  Storage storage() const { return storage_; }

  // Flat fp32 master weights and gradients (same layout, described by views()).
  std::vector<T>& params() { return params_; }
  const std::vector<T>& params() const { return params_; }
  std::vector<T>& grads() { return grads_; }
  const std::vector<T>& grads() const { return grads_; }
  const std::vector<ParamView>& views() const { return views_; }
  const ParamView& view(std::string_view name) const;  // throws std::invalid_argument if unknown

  // Deterministic, platform-independent initialization from a seed (docs/model.md): every matrix
  // N(0, 0.02²), attn_out and mlp_out with std 0.02/sqrt(2·n_layers), norm gains 1. Element i of
  // tensor `name` is z·std, z = sqrt(−2 ln u1)·cos(2π u2) (Box–Muller, in double, then rounded to
  // fp32) from Philox4x32-10 with key = seed, counter = (i low 32 bits, i >> 32, FNV-1a-32(name),
  // 0x494E4954 "INIT"): u1 = ((w0 >> 8) + 1)·2⁻²⁴ ∈ (0, 1], u2 = (w1 >> 8)·2⁻²⁴ ∈ [0, 1).
  void init_params(uint64_t seed);
  void zero_grads();

  // Forward and backward over one micro-batch. Adds grad_scale · ∂(mean loss)/∂θ into grads()
  // (pass 1/accumulation_steps to average over micro-steps). Returns the mean loss (nats/token).
  PassResult forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale = 1.0f);

  // Forward only: summed cross-entropy and token count. Gradients are untouched.
  EvalResult evaluate(const Batch& batch, const StepContext& ctx = {});

  // A forward and backward like forward_backward() that reports every block linear's six operands
  // to `fn` and leaves grads() untouched. Refuses an MoE model (std::invalid_argument): its
  // experts' linears are not probed yet.
  PassResult probe(const Batch& batch, const StepContext& ctx, const ProbeFn& fn);

  // The checks forward_backward() (backward = true) and evaluate() (false) run before any work:
  // throws std::invalid_argument (one line) for a bad micro-batch. For other backends of the same
  // model (engine/cuda_model), so that they refuse exactly what this one refuses.
  void validate_batch(const Batch& batch, const StepContext& ctx, bool backward) const {
    check_batch(batch, ctx, backward);
  }
  // What an MoE block's expert groups are padded to (rows, a multiple of the recipe's wgrad blocks;
  // 1 when the block's linears are not quantized): moe_block.cpp's, and the CUDA model's.
  int wgrad_row_multiple(int block) const;

 private:
  struct LayerActs {  // what a block keeps for its backward pass
    std::vector<T> h1, rstd1, qkv, lse, att, x_mid, h2, rstd2, u, a;
  };
  struct BlockViews {  // indices into views_; an MoE block has mlp_in = mlp_out = -1 and its moe part
    int attn_norm = -1, qkv = -1, attn_out = -1, mlp_norm = -1, mlp_in = -1, mlp_out = -1;
    int router = -1;
    std::vector<int> expert_in, expert_out;  // per expert j: routed 0..E-1, then shared
  };
  // What an MoE block keeps for its backward pass (moe_block.cpp). Expert j's group is the tokens
  // routed to it in ascending token index (every token for a shared expert), padded with zero rows
  // to a multiple of the recipe's wgrad block (`padded`): the wgrad GEMMs block along the tokens.
  struct ExpertActs {
    int rows = 0, padded = 0;
    std::vector<int32_t> tokens;  // [padded]: the micro-batch row of each group row (pads: rows_ + i)
    std::vector<int32_t> choice;  // [rows]: routed experts: t·k + c, the gate of each group row
    std::vector<T> x, u, a, y;    // [padded, d], [rows, 2·f_e], [padded, f_e], [rows, d]
    std::vector<T> dx;            // [rows, d]: the backward's share of dh, summed per token in expert order
  };
  struct MoeActs {
    std::vector<T> logits, scores, gates, lse;  // [R, E], [R, E], [R, k], [R]
    std::vector<int32_t> chosen, slot;          // [R, k]: expert, and the token's row in its group
    std::vector<ExpertActs> experts;            // E + S
    MoeLayerStats stats;
  };

  // Empty when the quantized block linears fit the recipe's blocks for a micro-batch of `tokens`
  // rows (0: K and N only); otherwise one line naming the linear and its dimensions.
  std::string shape_error(int tokens) const;
  void check_batch(const Batch& batch, const StepContext& ctx, bool backward) const;
  void prepare(const Batch& batch);  // sizes the buffers, copies tokens, makes the bf16 weights
  // Forward, then backward into `g` unless it is null. Returns the summed loss.
  double run(const StepContext& ctx, T* g, T grad_scale, bool* finite);
  void store(T* p, size_t n) const;  // rounds to bf16 in Storage::bf16 mode
  const T* param(const ParamView& v) const { return params_.data() + v.offset; }
  int weight_index(int block, int pos) const {
    const BlockViews& b = blocks_[block];
    return pos == 0 ? b.qkv : pos == 1 ? b.attn_out : pos == 2 ? b.mlp_in : b.mlp_out;
  }
  engine::LinearSite site(const StepContext& ctx, int block, int pos) const;
  // Block linear `pos` of `block`: Y = X · Wᵀ, and its backward (dX overwritten, dW added into g).
  bool block_linear_forward(const StepContext& ctx, int block, int pos, const T* x, int rows, T* y);
  bool block_linear_backward(const StepContext& ctx, int block, int pos, const T* x, const T* dy,
                             int rows, T* dx, T* g);
  // Any linear: weights views_[view], Y[rows] = X · Wᵀ; the backward's dX over `rows` rows and
  // dW (added into g) over `dw_rows` ≥ rows rows of x and dy (rows beyond `rows` are zero padding).
  bool linear_fwd(const engine::LinearSite& s, int view, const T* x, int rows, T* y);
  bool linear_bwd(const engine::LinearSite& s, int view, const T* x, const T* dy, int rows, int dw_rows, T* dx,
                  T* g);
  // The MoE block of `block` (moe_block.cpp): out [R, d] from h [R, d] (mlp_norm's output), and its
  // backward from dout into dh (overwritten) and g. moe_forward fills stats with the routing.
  bool moe_forward(const StepContext& ctx, int block, const T* h, T* out);
  bool moe_backward(const StepContext& ctx, int block, const T* h, const T* dout, T* dh, T* g, T grad_scale);

  ModelShape config_;
  engine::Recipe recipe_;
  std::vector<int> bf16_layers_;
  std::vector<bool> keep_bf16_;  // per block
  Storage storage_;
  std::vector<ParamView> views_;
  std::vector<BlockViews> blocks_;
  int tok_emb_ = 0, final_norm_ = 0, lm_head_ = 0;
  std::vector<T> params_, grads_;

  // Per-pass state, sized by prepare().
  int batch_ = 0, seq_ = 0, rows_ = 0;
  std::vector<int32_t> inputs_, targets_;
  cpu::RopeTable<T> rope_;
  std::vector<std::vector<T>> resid_;  // [i]: the residual stream entering block i; [L]: leaving
  std::vector<LayerActs> acts_;
  std::vector<MoeActs> moe_acts_;  // per block (empty for dense blocks)
  std::vector<T> hf_, rstdf_, logits_, loss_rows_, head_w_;
  std::vector<T> tmp_, dres_, dtmp_, da_, du_, dh_, datt_, dqkv_, probe_grads_;
  std::vector<bf16_t> w_bf16_, xb_, dyb_;  // bf16 operands of the block linears (T = float)
  std::vector<T> moe_dh_;                  // the router's share of dh
  const ProbeFn* probe_ = nullptr;
};

using Model = BasicModel<float>;

}  // namespace fp4::model
