// memory_need.cpp — see memory_need.h.
#include "engine/run/memory_need.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/user_error.h"
#include "engine/model/model_shape.h"

namespace fp4::run {

namespace {

struct Shape {
  double L, d, f, H, V, rows, n, n_linear;
  double moe_row = 0;  // fp32 values per row that the MoE blocks keep beyond a dense MLP's (all blocks)
};

Shape shape_of(const RunConfig& c, uint32_t vocab) {
  const model::ModelShape m = c.model.shape(static_cast<int>(vocab));
  Shape s;
  s.L = c.model.n_layers;
  s.d = c.model.d_model;
  s.f = c.model.d_ff;
  s.H = c.model.n_heads;
  s.V = vocab;
  s.rows = static_cast<double>(c.train.micro_batch) * c.model.seq_len;
  s.n = static_cast<double>(model::total_params(m));
  s.n_linear = static_cast<double>(c.model.n_layers) * (4 * s.d * s.d + 3 * s.d * s.f);
  if (const model::MoeShape& moe = c.model.moe; moe.enabled()) {
    // Per MoE block and token: each of its k + S experts' x, u, a, y and dx (3·d + 3·f_e, padding
    // aside), and the router's logits, scores, gates and choices.
    const double used = moe.top_k + moe.n_shared, fe = moe.d_ff_expert;
    s.moe_row = model::moe_block_count(m) * (used * (3 * s.d + 3 * fe) + 2.0 * moe.n_experts + 3.0 * moe.top_k);
    s.n_linear = static_cast<double>(model::nonembedding_params(m));  // every expert's weights
  }
  return s;
}

// fp32 values one micro-batch keeps or uses as scratch, per row (token): the residual stream at
// every block boundary; per block the normed inputs, qkv, the attention output and its row
// log-sum-exps, the mid residual, the MLP's gate|up and activation; the final norm, the logits,
// and the backward pass's scratch.
double fp32_per_row(const Shape& s) {
  return (s.L + 1) * s.d + s.L * (7 * s.d + 3 * s.f + s.H + 2) + 9 * s.d + 3 * s.f + s.V + 2 + s.moe_row;
}

// The held-out set (read as uint16, kept as int32 inputs and targets) and one micro-step's batch
// (the same, plus the int32 runs it is split from).
double data_bytes(const RunConfig& c) {
  return 10.0 * static_cast<double>(c.eval.tokens) +
         14.0 * static_cast<double>(c.train.micro_batch) * (c.model.seq_len + 1);
}

}  // namespace

MemoryNeed host_memory_need(const RunConfig& c, uint32_t vocab) {
  const Shape s = shape_of(c, vocab);
  MemoryNeed need;
  need.data = data_bytes(c);
  if (c.device == "cuda") {
    // The host keeps the state only while a checkpoint is written or read: three fp32 arrays.
    need.weights = 12 * s.n;
    return need;
  }
  // fp32 parameters and gradients, their bf16 copy, AdamW's two moments, the LM head's copy, and the
  // checkpoint's copy of parameters and moments while it is written.
  need.weights = (4 + 4 + 2 + 8 + 12) * s.n + 4 * s.V * s.d;
  const double widest = std::max({3 * s.d, 2 * s.f, s.d});
  need.activations = s.rows * (4 * fp32_per_row(s) + 8 + 2 * 2 * widest);
  return need;
}

MemoryNeed device_memory_need(const RunConfig& c, uint32_t vocab) {
  const Shape s = shape_of(c, vocab);
  MemoryNeed need;
  // fp32 parameters, gradients and AdamW moments, the bf16 copy, and the quantized slots' cached
  // bf16 dequantized weights (fprop and dgrad: two per linear weight) when the recipe is 4-bit.
  need.weights = (4 + 4 + 8 + 2) * s.n + (c.recipe.quantized ? 2 * 2 * s.n_linear : 0.0) + 2 * s.V * s.d;
  const double widest = std::max({3 * s.d, 2 * s.f, s.d});
  // Per row, as engine/cuda_model/cuda_model.cpp allocates them under bf16 storage (its LayerActs),
  // counting the fp32 reference attention's buffers (qkv, att and their gradients in fp32) so that
  // the bound holds for either attention kernel: per block rstd1, rstd2, the log-sum-exps and the
  // fp32 qkv and att (4 bytes), and x_mid, h1b, h2b, attb, qkvb, ab and gate|up (2 bytes); the
  // residual stream at every block boundary (bf16), the final norm, the logits, and the backward's
  // fp32 (dres, dh, datt, dqkv) and bf16 (the linears' outputs, dY, dX) scratch; the quantizer's
  // three operand buffers, and under a 4-bit recipe every block linear's weight-gradient copy of X,
  // kept from the forward to the backward (X is d wide for qkv, attn_out and mlp_in, f for mlp_out).
  const double fp32_per_row = s.L * (s.H + 2 + 4 * s.d) + s.d + s.V + 2 + 6 * s.d;
  const double bf16_per_row = s.L * (7 * s.d + 3 * s.f) + (s.L + 1) * s.d + 3 * s.d + s.f + widest + s.d +
                              (c.recipe.quantized ? s.L * (3 * s.d + s.f) : 0.0);
  need.activations = s.rows * (4 * fp32_per_row + 2 * bf16_per_row + 8 + 2 * 3 * widest);
  need.data = 8.0 * static_cast<double>(c.train.micro_batch) * (c.model.seq_len + 1);
  need.weights += 64.0 * 1024 * 1024;  // cuBLASLt's workspace and the small per-pass buffers
  return need;
}

double available_host_memory() {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") available = kb * 1024;
  // A cgroup v2 limit (containers, Slurm jobs) may be lower than what the machine has free.
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  std::string max_text;
  double current = 0;
  if (max_file >> max_text && max_text != "max" && current_file >> current) {
    const double limit = std::stod(max_text) - current;
    if (available == 0 || limit < available) available = std::max(0.0, limit);
  }
  return available;
}

std::string format_bytes(double b) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  if (b >= 1024 * kGiB) return fmt::format("{:.1f} TiB", b / (1024 * kGiB));
  if (b >= kGiB) return fmt::format("{:.1f} GiB", b / kGiB);
  return fmt::format("{:.0f} MiB", b / (1024.0 * 1024));
}

void check_memory(const MemoryNeed& need, double available, const std::string& what, const RunConfig& c) {
  if (available <= 0 || need.total() <= available) return;
  std::string advice;
  if (need.activations >= need.weights && need.activations >= need.data)
    advice = fmt::format("lower train.micro_batch ({}) or model.seq_len ({}): a micro-batch's activations dominate "
                         "(train.batch_tokens can stay: more micro-steps per step)",
                         c.train.micro_batch, c.model.seq_len);
  else if (need.weights >= need.data)
    advice = "choose a smaller model (model.preset, or n_layers, d_model and d_ff): its weights and optimizer "
             "state dominate";
  else
    advice = fmt::format("lower eval.tokens ({}): the held-out set dominates", c.eval.tokens);
  throw UserError(fmt::format("the run needs about {} of {} (weights and optimizer {}, activations {}, data {}) and "
                              "{} is available: {}",
                              format_bytes(need.total()), what, format_bytes(need.weights),
                              format_bytes(need.activations), format_bytes(need.data), format_bytes(available),
                              advice));
}

}  // namespace fp4::run
