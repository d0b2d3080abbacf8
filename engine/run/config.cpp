// config.cpp — reading, validating and resolving a run config (see config.h, docs/train.md).
#include "engine/run/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "base/files.h"
#include "base/parse_number.h"
#include "base/sha256.h"
#include "base/strict_json.h"
#include "base/user_error.h"
#include "engine/data/data_source.h"
#include "engine/data/manifest.h"
#include "engine/data/synthetic_spec.h"
#include "engine/model/model_shape.h"
#include "engine/quantized_linear.h"

namespace fp4::run {

namespace {

using nlohmann::json;

// Every message starts with the file and names the field: "run.json: train.lr must be > 0, got -1".
struct Where {
  const std::string& file;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    throw UserError(file + ": " + field + " " + what);
  }
};

// One section of the config (an object), with its known keys: an unknown key is refused rather
// than ignored, because a misspelled field silently taking its default is a wrong experiment.
class Section {
 public:
  Section(const Where& w, const json* obj, std::string name, std::set<std::string> known)
      : w_(w), obj_(obj), name_(std::move(name)) {
    if (obj_ == nullptr) return;
    if (!obj_->is_object()) w_.bad(name_, "must be an object, got " + obj_->dump());
    for (auto it = obj_->begin(); it != obj_->end(); ++it)
      if (!known.count(it.key()))
        w_.bad(field(it.key()), fmt::format("is not a known key ({} has: {})", name_, fmt::join(known, ", ")));
  }

  std::string field(const std::string& key) const { return name_ + "." + key; }
  bool has(const char* key) const { return obj_ != nullptr && obj_->contains(key); }
  const json& at(const char* key) const { return obj_->at(key); }

  std::optional<int64_t> integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = at(key);
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        w_.bad(field(key), "is too large, got " + v.dump());
      return v.get<int64_t>();
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      // 1e8 tokens is a natural way to write an integer; 1.5 steps is not.
      const double d = v.get<double>();
      if (d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    w_.bad(field(key), "must be an integer, got " + v.dump());
  }

  std::optional<uint64_t> unsigned_integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = at(key);
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) {
      if (v.get<int64_t>() < 0) w_.bad(field(key), "must be >= 0, got " + v.dump());
      return static_cast<uint64_t>(v.get<int64_t>());
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (d == std::floor(d) && d >= 0 && d < 9.0e15) return static_cast<uint64_t>(d);
    }
    w_.bad(field(key), "must be a non-negative integer, got " + v.dump());
  }

  std::optional<double> number(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = at(key);
    if (!v.is_number()) w_.bad(field(key), "must be a number, got " + v.dump());
    return v.get<double>();
  }

  std::optional<std::string> string(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = at(key);
    if (!v.is_string()) w_.bad(field(key), "must be a string, got " + v.dump());
    return v.get<std::string>();
  }

  std::optional<bool> boolean(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = at(key);
    if (!v.is_boolean()) w_.bad(field(key), "must be true or false, got " + v.dump());
    return v.get<bool>();
  }

  int small_int(const char* key, int fallback) const {
    const auto v = integer(key);
    if (!v) return fallback;
    if (*v > std::numeric_limits<int>::max() || *v < std::numeric_limits<int>::min())
      w_.bad(field(key), fmt::format("is out of range, got {}", *v));
    return static_cast<int>(*v);
  }

 private:
  const Where& w_;
  const json* obj_;
  std::string name_;
};

const json* child(const json& root, const char* key) {
  return root.contains(key) ? &root.at(key) : nullptr;
}

void require_positive(const Where& w, const std::string& field, int64_t v) {
  if (v <= 0) w.bad(field, fmt::format("must be > 0, got {}", v));
}
void require_non_negative(const Where& w, const std::string& field, int64_t v) {
  if (v < 0) w.bad(field, fmt::format("must be >= 0, got {}", v));
}

// Sizes beyond any model this tool trains: refused as typos before any arithmetic or allocation
// depends on them (whether a size that passes fits the machine is the trainer's memory check).
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
constexpr int64_t kMaxDModel = int64_t{1} << 16;
constexpr int64_t kMaxDff = int64_t{1} << 18;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxMicroTokens = (int64_t{1} << 31) - 1;  // rows of a micro-batch are an int
constexpr int64_t kMaxEvalTokens = (int64_t{1} << 31) - 1;
void require_at_most(const Where& w, const std::string& field, int64_t v, int64_t max, const char* why) {
  if (v > max) w.bad(field, fmt::format("must be at most {} ({}), got {}", max, why, v));
}

// "model.moe": starts from the preset's MoE part (if the preset names one) and overrides it field by
// field; a preset without experts needs moe.experts and moe.top_k. Defaults: d_ff_expert by
// default_d_ff_expert, renormalize when top_k > 1, softmax scores, every = 1, no shared experts,
// balance_coef 0.01, z_coef 0.001 (docs/model.md says why).
model::MoeShape read_moe(const Where& w, const json* j, const ModelConfig& m) {
  const Section s(w, j, "model.moe",
                  {"experts", "top_k", "d_ff_expert", "shared", "every", "score", "renormalize", "balance_coef",
                   "z_coef"});
  model::MoeShape moe = m.moe;
  if (j == nullptr) return moe;
  if (!moe.enabled() && (!s.has("experts") || !s.has("top_k")))
    w.bad("model.moe", "needs moe.experts and moe.top_k (or a preset \"d<L>-e<E>k<K>\")");
  moe.n_experts = s.small_int("experts", moe.n_experts);
  require_positive(w, "model.moe.experts", moe.n_experts);
  require_at_most(w, "model.moe.experts", moe.n_experts, model::kMaxExperts, "experts per MoE block");
  const bool k_given = s.has("top_k");
  moe.top_k = s.small_int("top_k", moe.top_k);
  if (moe.top_k < 1 || moe.top_k > moe.n_experts)
    w.bad("model.moe.top_k", fmt::format("must be between 1 and model.moe.experts ({}), got {}", moe.n_experts, moe.top_k));
  // A preset's width follows its top-k; a new top_k without a width takes the rule's width for it.
  const int width = k_given || moe.d_ff_expert == 0 ? model::default_d_ff_expert(m.d_ff, moe.top_k) : moe.d_ff_expert;
  moe.d_ff_expert = s.small_int("d_ff_expert", width);
  require_positive(w, "model.moe.d_ff_expert", moe.d_ff_expert);
  require_at_most(w, "model.moe.d_ff_expert", moe.d_ff_expert, kMaxDff, "2^18");
  moe.n_shared = s.small_int("shared", moe.n_shared);
  require_non_negative(w, "model.moe.shared", moe.n_shared);
  require_at_most(w, "model.moe.shared", moe.n_shared, model::kMaxExperts, "experts per MoE block");
  moe.every = s.small_int("every", moe.every == 0 ? 1 : moe.every);
  if (moe.every < 1 || moe.every > m.n_layers)
    w.bad("model.moe.every", fmt::format("must be between 1 and model.n_layers ({}), got {}", m.n_layers, moe.every));
  const std::string score = s.string("score").value_or(model::router_score_name(moe.score));
  if (score == "softmax") moe.score = model::RouterScore::softmax;
  else if (score == "sigmoid") moe.score = model::RouterScore::sigmoid;
  else w.bad("model.moe.score", "must be \"softmax\" or \"sigmoid\", got \"" + score + "\"");
  moe.renormalize = s.boolean("renormalize").value_or(moe.top_k > 1);
  if (!m.moe.enabled()) {
    moe.balance_coef = model::kDefaultBalanceCoef;
    moe.z_coef = model::kDefaultZCoef;
  }
  moe.balance_coef = s.number("balance_coef").value_or(moe.balance_coef);
  if (!(moe.balance_coef >= 0) || !std::isfinite(moe.balance_coef))
    w.bad("model.moe.balance_coef", fmt::format("must be a finite number >= 0, got {}", moe.balance_coef));
  moe.z_coef = s.number("z_coef").value_or(moe.z_coef);
  if (!(moe.z_coef >= 0) || !std::isfinite(moe.z_coef))
    w.bad("model.moe.z_coef", fmt::format("must be a finite number >= 0, got {}", moe.z_coef));
  return moe;
}

ModelConfig read_model(const Where& w, const json* j) {
  const Section s(w, j, "model", {"preset", "n_layers", "d_model", "n_heads", "head_dim", "d_ff", "seq_len", "moe"});
  if (j == nullptr) w.bad("model", "is required (e.g. {\"preset\": \"d2\"})");
  ModelConfig m;
  m.preset = s.string("preset").value_or("custom");
  if (m.preset != "custom") {
    try {
      check_model_preset(m.preset);
    } catch (const UserError& e) {
      w.bad("model.preset", e.what());
    }
    const model::ModelShape p = model::model_preset(m.preset);
    m.n_layers = p.n_layers;
    m.d_model = p.d_model;
    m.head_dim = p.head_dim;
    m.n_heads = p.n_heads;
    m.d_ff = p.d_ff;
    m.moe = p.moe;
  } else if (!s.has("n_layers") || !s.has("d_model")) {
    w.bad("model", "needs a preset (\"d<L>\", e.g. \"d2\") or both n_layers and d_model");
  }
  m.n_layers = s.small_int("n_layers", m.n_layers);
  m.d_model = s.small_int("d_model", m.d_model);
  m.head_dim = s.small_int("head_dim", m.head_dim);
  m.seq_len = s.small_int("seq_len", m.seq_len);
  require_positive(w, "model.n_layers", m.n_layers);
  require_positive(w, "model.d_model", m.d_model);
  require_positive(w, "model.head_dim", m.head_dim);
  require_positive(w, "model.seq_len", m.seq_len);
  require_at_most(w, "model.seq_len", m.seq_len, kMaxSeqLen, "a context of 2^20 tokens");
  require_at_most(w, "model.d_model", m.d_model, kMaxDModel, "2^16");
  require_at_most(w, "model.head_dim", m.head_dim, kMaxHeadDim, "a head of 1024 features");
  if (m.head_dim % 2 != 0)
    w.bad("model.head_dim", fmt::format("must be even (RoPE rotates pairs of features), got {}", m.head_dim));
  if (!s.has("n_heads") && m.d_model % m.head_dim != 0)
    w.bad("model.d_model", fmt::format("({}) is not a multiple of model.head_dim ({}): change one or set model.n_heads",
                                       m.d_model, m.head_dim));
  m.n_heads = s.small_int("n_heads", m.d_model / m.head_dim);
  require_positive(w, "model.n_heads", m.n_heads);
  if (static_cast<int64_t>(m.n_heads) * m.head_dim != m.d_model)
    w.bad("model.n_heads", fmt::format("× model.head_dim must equal model.d_model ({} × {} ≠ {})",
                                       m.n_heads, m.head_dim, m.d_model));
  m.d_ff = s.small_int("d_ff", default_d_ff(m.d_model));
  require_positive(w, "model.d_ff", m.d_ff);
  require_at_most(w, "model.d_ff", m.d_ff, kMaxDff, "2^18");
  m.moe = read_moe(w, s.has("moe") ? &s.at("moe") : nullptr, m);
  // The model's own limits (e.g. the layer count the random-stream packing allows).
  const model::ModelShape shape = m.shape(model::ModelShape{}.vocab_size);  // the data's vocabulary comes later
  if (const std::string e = model::config_error(shape); !e.empty())
    throw UserError(w.file + ": " + e);
  return m;
}

engine::Recipe read_recipe(const Where& w, const json* j) {
  if (j == nullptr) return engine::recipe_preset("bf16");
  try {
    return engine::recipe_from_json(*j);
  } catch (const UserError& e) {
    w.bad("recipe:", e.what());
  } catch (const json::exception& e) {
    // recipe_from_json reads some fields with get<>(), which throws type errors of its own.
    w.bad("recipe:", std::string("a field has the wrong type (") + e.what() + ")");
  }
}

TrainConfig read_train(const Where& w, const json* j, const ModelConfig& model, bool synthetic_data) {
  const Section s(w, j, "train",
                  {"seed", "tokens", "steps", "batch_tokens", "micro_batch", "lr", "min_lr", "warmup_steps",
                   "schedule", "decay_fraction", "beta1", "beta2", "eps", "weight_decay", "grad_clip", "shuffle",
                   "data_seed"});
  if (j == nullptr) w.bad("train", "is required (at least train.tokens or train.steps)");
  TrainConfig t;
  t.seed = s.unsigned_integer("seed").value_or(t.seed);
  t.batch_tokens = s.integer("batch_tokens").value_or(t.batch_tokens);
  require_positive(w, "train.batch_tokens", t.batch_tokens);
  t.micro_batch = s.small_int("micro_batch", t.micro_batch);
  require_positive(w, "train.micro_batch", t.micro_batch);
  const int64_t micro_tokens = static_cast<int64_t>(t.micro_batch) * model.seq_len;
  if (micro_tokens > kMaxMicroTokens)
    w.bad("train.micro_batch", fmt::format("× model.seq_len = {} × {} = {} tokens per micro-step exceeds {}: lower "
                                           "train.micro_batch",
                                           t.micro_batch, model.seq_len, micro_tokens, kMaxMicroTokens));
  if (t.batch_tokens % micro_tokens != 0)
    w.bad("train.batch_tokens",
          fmt::format("({}) must be a multiple of train.micro_batch × model.seq_len ({} × {} = {}), so that "
                      "gradient accumulation is a whole number of micro-steps",
                      t.batch_tokens, t.micro_batch, model.seq_len, micro_tokens));
  const int64_t accum = t.batch_tokens / micro_tokens;
  if (accum > static_cast<int64_t>(kMaxMicroStep) + 1)
    w.bad("train.batch_tokens",
          fmt::format("gives {} micro-steps per step, more than the {} the random-stream packing allows "
                      "(NUMERICS.md §6): raise train.micro_batch",
                      accum, kMaxMicroStep + 1));

  const auto tokens = s.integer("tokens");
  const auto steps = s.integer("steps");
  if (!tokens && !steps) w.bad("train", "needs train.tokens (total training tokens) or train.steps");
  if (tokens) require_positive(w, "train.tokens", *tokens);
  if (steps) require_positive(w, "train.steps", *steps);
  if (tokens && steps && *tokens != *steps * t.batch_tokens)
    w.bad("train.tokens", fmt::format("({}) disagrees with train.steps × train.batch_tokens ({} × {} = {}): give one of them",
                                      *tokens, *steps, t.batch_tokens, *steps * t.batch_tokens));
  // Tokens round up to whole steps; the resolved config records the tokens actually trained on.
  t.steps = steps ? *steps : (*tokens + t.batch_tokens - 1) / t.batch_tokens;
  if (t.steps > std::numeric_limits<int32_t>::max())
    w.bad("train.steps", fmt::format("({}) exceeds 2^31 - 1 (the Philox step counter is 32 bits)", t.steps));
  t.tokens = t.steps * t.batch_tokens;

  t.lr = s.number("lr").value_or(t.lr);
  if (!(t.lr > 0)) w.bad("train.lr", fmt::format("must be > 0, got {}", t.lr));
  // lr / 10, kept to 15 significant digits so that 3e-3 gives 3e-4, not 3.0000000000000003e-4.
  t.min_lr = s.number("min_lr").value_or(std::stod(fmt::format("{:.15g}", t.lr / 10)));
  if (!(t.min_lr >= 0 && t.min_lr <= t.lr))
    w.bad("train.min_lr", fmt::format("must be between 0 and train.lr ({}), got {}", t.lr, t.min_lr));
  t.warmup_steps = s.integer("warmup_steps").value_or(t.steps / 20);
  if (t.warmup_steps < 0 || t.warmup_steps > t.steps)
    w.bad("train.warmup_steps", fmt::format("must be between 0 and train.steps ({}), got {}", t.steps, t.warmup_steps));

  const std::string schedule = s.string("schedule").value_or("cosine");
  if (schedule == "cosine") t.schedule = Schedule::cosine;
  else if (schedule == "wsd") t.schedule = Schedule::wsd;
  else w.bad("train.schedule", "must be \"cosine\" or \"wsd\", got \"" + schedule + "\"");
  if (t.schedule == Schedule::cosine) {
    if (s.has("decay_fraction"))
      w.bad("train.decay_fraction", "applies only to train.schedule \"wsd\" (the schedule is \"cosine\")");
  } else {
    t.decay_fraction = s.number("decay_fraction").value_or(t.decay_fraction);
    if (!(t.decay_fraction > 0 && t.decay_fraction <= 1))
      w.bad("train.decay_fraction", fmt::format("must be in (0, 1], got {}", t.decay_fraction));
    const int64_t decay = std::max<int64_t>(1, std::llround(t.decay_fraction * static_cast<double>(t.steps)));
    if (t.warmup_steps + decay > t.steps)
      w.bad("train.warmup_steps", fmt::format("({}) plus the decay steps ({}) exceed train.steps ({})",
                                              t.warmup_steps, decay, t.steps));
  }

  t.beta1 = s.number("beta1").value_or(t.beta1);
  if (!(t.beta1 >= 0 && t.beta1 < 1)) w.bad("train.beta1", fmt::format("must be in [0, 1), got {}", t.beta1));
  t.beta2 = s.number("beta2").value_or(t.beta2);
  if (!(t.beta2 >= 0 && t.beta2 < 1)) w.bad("train.beta2", fmt::format("must be in [0, 1), got {}", t.beta2));
  t.eps = s.number("eps").value_or(t.eps);
  if (!(t.eps > 0)) w.bad("train.eps", fmt::format("must be > 0, got {}", t.eps));
  t.weight_decay = s.number("weight_decay").value_or(t.weight_decay);
  if (!(t.weight_decay >= 0)) w.bad("train.weight_decay", fmt::format("must be >= 0, got {}", t.weight_decay));
  t.grad_clip = s.number("grad_clip").value_or(t.grad_clip);
  if (!(t.grad_clip >= 0)) w.bad("train.grad_clip", fmt::format("must be >= 0 (0 turns clipping off), got {}", t.grad_clip));

  // The data order. By default the run seed drives the permutation too, so that a seed's spread
  // includes the data order's share of the noise; train.data_seed fixes the order on its own (for
  // instance to vary only the initial weights across seeds).
  const std::string shuffle = s.string("shuffle").value_or(synthetic_data ? "none" : "sequences");
  if (shuffle == "sequences") t.shuffle = Shuffle::sequences;
  else if (shuffle == "none") t.shuffle = Shuffle::none;
  else w.bad("train.shuffle", "must be \"sequences\" or \"none\", got \"" + shuffle + "\"");
  if (synthetic_data && t.shuffle == Shuffle::sequences)
    w.bad("train.shuffle", "must be \"none\" for a synthetic source: its stream is endless and already "
                           "a fresh draw at every position, so there is nothing to permute");
  if (t.shuffle == Shuffle::none) {
    if (s.has("data_seed"))
      w.bad("train.data_seed", "applies only to train.shuffle \"sequences\" (the stream is read in file order)");
  } else {
    t.data_seed = s.unsigned_integer("data_seed").value_or(t.seed);
  }
  return t;
}

// Every blocked dimension of every quantized linear must be a multiple of its slot's block
// (NUMERICS.md §1). linear_shape_error is the authority; we only find which config field is at
// fault by asking again with the other two dimensions replaced by a size every block divides.
void check_blocks(const Where& w, const RunConfig& c) {
  if (!c.recipe.quantized) return;
  std::vector<int> kept;
  try {
    kept = engine::resolve_bf16_layers(c.recipe.bf16_layers, c.model.n_layers);
  } catch (const UserError& e) {
    w.bad("recipe.bf16_layers:", e.what());
  }
  if (static_cast<int>(kept.size()) == c.model.n_layers) return;  // nothing is quantized

  constexpr int kFits = 1024;  // a multiple of every block size (16, 32) and tile
  const int64_t t = c.tokens_per_micro_step();
  const int inner = c.model.n_heads * c.model.head_dim;
  const std::string t_field = fmt::format("train.micro_batch × model.seq_len ({} × {} = {})",
                                          c.train.micro_batch, c.model.seq_len, t);
  struct Linear {
    const char* name;
    int k;
    std::string k_field;
    int n;
    std::string n_field;
  };
  const Linear linears[] = {
      {"attention output", inner, fmt::format("model.d_model = {}", inner), c.model.d_model,
       fmt::format("model.d_model = {}", c.model.d_model)},
      {"MLP output", c.model.d_ff, fmt::format("model.d_ff = {}", c.model.d_ff), c.model.d_model,
       fmt::format("model.d_model = {}", c.model.d_model)},
      {"MLP input", c.model.d_model, fmt::format("model.d_model = {}", c.model.d_model), 2 * c.model.d_ff,
       fmt::format("2 × model.d_ff = {}", 2 * c.model.d_ff)},  // gate | up
      {"qkv", c.model.d_model, fmt::format("model.d_model = {}", c.model.d_model), 3 * inner,
       fmt::format("3 × model.d_model = {}", 3 * inner)},
  };
  std::vector<Linear> all(std::begin(linears), std::end(linears));
  if (c.model.moe.enabled()) {
    // An expert's tokens are a group of the micro-batch padded to whole blocks, so only K and N bind.
    const int fe = c.model.moe.d_ff_expert;
    all.push_back({"MoE expert output", fe, fmt::format("model.moe.d_ff_expert = {}", fe), c.model.d_model,
                   fmt::format("model.d_model = {}", c.model.d_model)});
    all.push_back({"MoE expert input", c.model.d_model, fmt::format("model.d_model = {}", c.model.d_model), 2 * fe,
                   fmt::format("2 × model.moe.d_ff_expert = {}", 2 * fe)});
  }
  if (t > std::numeric_limits<int>::max()) w.bad("train.micro_batch", "× model.seq_len is too large");
  for (const Linear& l : all) {
    const std::string err = engine::linear_shape_error(c.recipe, static_cast<int>(t), l.k, l.n);
    if (err.empty()) continue;
    std::string field;
    if (!engine::linear_shape_error(c.recipe, static_cast<int>(t), kFits, kFits).empty()) field = t_field;
    else if (!engine::linear_shape_error(c.recipe, kFits, l.k, kFits).empty()) field = l.k_field;
    else field = l.n_field;
    throw UserError(w.file + ": " + field + " does not fit recipe \"" + c.recipe.name +
                    "\" (" + l.name + " layer: " + err + ")");
  }
}

}  // namespace

std::string device_name_error(const std::string& device) {
  if (device == "cpu" || device == "cuda") return {};
  return "device must be \"cpu\" or \"cuda\", got \"" + device + "\"";
}

std::string device_error(const std::string& device) {
  if (std::string e = device_name_error(device); !e.empty()) return e;
#ifndef FP4LAB_HAVE_CUDA
  if (device == "cuda")
    return "device \"cuda\": this fp4lab was built without CUDA; rebuild it with the CUDA toolkit "
           "(cmake -DFP4LAB_CUDA=ON) or train with device \"cpu\"";
#endif
  return {};
}

void set_device(RunConfig& c, const std::string& device, const std::string& where) {
  if (std::string e = device_error(device); !e.empty()) throw UserError(where + ": " + e);
  c.device = device;
}

std::string gpus_error(const RunConfig& c, int64_t gpus) {
  if (gpus < 1 || gpus > kMaxGpus)
    return fmt::format("gpus must be between 1 and {}, got {}", kMaxGpus, gpus);
  if (gpus == 1) return {};
  if (c.device != "cuda")
    return fmt::format("gpus = {} needs device \"cuda\" (data parallelism runs one process per GPU), "
                       "the device is \"{}\": set device \"cuda\" or train on 1 GPU", gpus, c.device);
  if (c.model.moe.enabled()) return fmt::format("gpus = {}: {}", gpus, model::kMoeMultiGpuRefusal);
  if (c.grad_accum() % gpus != 0)
    return fmt::format("gpus = {} does not divide the {} micro-steps of a step (train.batch_tokens {} / "
                       "(train.micro_batch {} × model.seq_len {})): every GPU takes whole micro-batches, so make "
                       "train.batch_tokens a multiple of {} or choose gpus dividing {}",
                       gpus, c.grad_accum(), c.train.batch_tokens, c.train.micro_batch, c.model.seq_len,
                       gpus * c.tokens_per_micro_step(), c.grad_accum());
  return {};
}

void set_gpus(RunConfig& c, int64_t gpus, const std::string& where) {
  if (std::string e = gpus_error(c, gpus); !e.empty()) throw UserError(where + ": " + e);
  c.gpus = static_cast<int>(gpus);
}

const char* schedule_name(Schedule s) { return s == Schedule::cosine ? "cosine" : "wsd"; }
const char* shuffle_name(Shuffle s) { return s == Shuffle::sequences ? "sequences" : "none"; }

data::StreamOrder train_stream_order(const RunConfig& c) {
  if (c.train.shuffle == Shuffle::none) return data::StreamOrder::file_order();
  return data::StreamOrder::shuffled(c.train.data_seed, c.model.seq_len);
}

int default_d_ff(int d_model) { return model::nearest_d_ff(d_model); }

void check_model_preset(const std::string& full) {
  const auto fail = [&] {
    throw UserError("must be \"d<L>\" with L from 1 to 64 (e.g. \"d4\"), \"d<L>-e<E>k<K>\" (e.g. \"d4-e8k2\": "
                    "8 experts, top-2) or \"custom\", got \"" + full + "\"");
  };
  const size_t dash = full.find('-');
  const std::string preset = full.substr(0, dash);
  if (dash != std::string::npos) {
    try {
      (void)model::model_preset(full);  // the MoE part's syntax and limits
    } catch (const UserError&) {
      fail();
    }
  }
  if (preset.size() < 2 || preset.size() > 3 || preset[0] != 'd' || preset[1] == '0' ||
      preset.find_first_not_of("0123456789", 1) != std::string::npos)
    fail();
  if (parse_integer<int>(std::string_view(preset).substr(1)).value_or(0) > 64) fail();
}

model::ModelShape ModelConfig::shape(int vocab_size) const {
  return {.n_layers = n_layers, .d_model = d_model, .n_heads = n_heads, .head_dim = head_dim, .d_ff = d_ff,
          .vocab_size = vocab_size, .moe = moe};
}

RunConfig config_from_json(const nlohmann::json& j, const std::string& file) {
  const Where w{file};
  if (!j.is_object()) throw UserError(file + ": the config must be a JSON object, got " + j.dump());
  static const std::set<std::string> top = {"model", "recipe", "data", "train", "eval",
                                            "probe", "checkpoint", "device", "storage", "gpus"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!top.count(it.key()))
      w.bad(it.key(), fmt::format("is not a known key (the config has: {})", fmt::join(top, ", ")));

  RunConfig c;
  c.model = read_model(w, child(j, "model"));
  c.recipe = read_recipe(w, child(j, "recipe"));
  if (!j.contains("data")) w.bad("data", "is required: a shard directory or \"synthetic:...\"");
  if (!j["data"].is_string() || j["data"].get<std::string>().empty())
    w.bad("data", "must be a non-empty string (a shard directory or \"synthetic:...\"), got " + j["data"].dump());
  c.data = j["data"].get<std::string>();
  if (data::is_synthetic_spec(c.data)) {
    // The canonical spec names every parameter, so equal sources give equal configs and hashes.
    try {
      c.data = data::canonical_synthetic_spec(data::parse_synthetic_spec(c.data));
    } catch (const UserError& e) {
      w.bad("data:", e.what());
    }
  }
  c.train = read_train(w, child(j, "train"), c.model, data::is_synthetic_spec(c.data));

  {
    const Section s(w, child(j, "eval"), "eval", {"every", "tokens"});
    c.eval.every = s.integer("every").value_or(c.eval.every);
    require_non_negative(w, "eval.every", c.eval.every);
    c.eval.tokens = s.integer("tokens").value_or(c.eval.tokens);
    require_positive(w, "eval.tokens", c.eval.tokens);
    require_at_most(w, "eval.tokens", c.eval.tokens, kMaxEvalTokens, "2^31 - 1");
    if (c.eval.tokens % c.model.seq_len != 0)
      w.bad("eval.tokens", fmt::format("({}) must be a multiple of model.seq_len ({}): the held-out set is whole sequences",
                                       c.eval.tokens, c.model.seq_len));
  }
  {
    const Section s(w, child(j, "probe"), "probe", {"every"});
    c.probe.every = s.integer("every").value_or(c.probe.every);
    require_non_negative(w, "probe.every", c.probe.every);
    if (c.probe.every > 0 && c.model.moe.enabled())
      w.bad("probe.every", "must be 0 for an MoE model: the shrinkage probe does not measure the experts' linears yet");
  }
  if (c.probe.every > 0 && c.eval.tokens < c.tokens_per_micro_step())
    w.bad("eval.tokens", fmt::format("({}) must be at least train.micro_batch × model.seq_len ({}) when the probe is on: "
                                     "it measures one micro-batch of the held-out set",
                                     c.eval.tokens, c.tokens_per_micro_step()));
  {
    const Section s(w, child(j, "checkpoint"), "checkpoint", {"every"});
    c.checkpoint.every = s.integer("every").value_or(c.checkpoint.every);
    require_non_negative(w, "checkpoint.every", c.checkpoint.every);
  }
  if (j.contains("device")) {
    if (!j["device"].is_string()) w.bad("device", "must be a string, got " + j["device"].dump());
    c.device = j["device"].get<std::string>();
    c.device_named = true;
  }
  if (std::string e = device_name_error(c.device); !e.empty()) throw UserError(w.file + ": " + e);
  if (j.contains("storage")) {
    if (!j["storage"].is_string()) w.bad("storage", "must be a string, got " + j["storage"].dump());
    c.storage = j["storage"].get<std::string>();
  }
  if (c.storage != "bf16") w.bad("storage", "must be \"bf16\", got \"" + c.storage + "\"");
  if (j.contains("gpus")) {
    const json& g = j["gpus"];
    if (!g.is_number_integer() && !(g.is_number_float() && g.get<double>() == std::floor(g.get<double>()) &&
                                    std::fabs(g.get<double>()) < 1e9))
      w.bad("gpus", "must be a whole number of GPUs, got " + g.dump());
    const int64_t n = g.is_number_float() ? static_cast<int64_t>(g.get<double>()) : g.get<int64_t>();
    // A config that names no device leaves the choice to the trainer (pick_device), which checks
    // the device again once it is known.
    RunConfig probe = c;
    if (!c.device_named) probe.device = "cuda";
    if (std::string e = gpus_error(probe, n); !e.empty()) throw UserError(w.file + ": " + e);
    c.gpus = static_cast<int>(n);
  }

  check_blocks(w, c);
  return c;
}

RunConfig config_from_text(const std::string& text, const std::string& file) {
  // Strictly: a key given twice ("lr": 0.001, "lr": 5) is refused, not silently the last one.
  return config_from_json(parse_json_strictly(text, file), file);
}

RunConfig load_config(const std::filesystem::path& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::runtime_error& e) {
    throw UserError(e.what());
  }
  return config_from_text(text, path.string());
}

DataFacts inspect_data(const std::string& data, const std::filesystem::path& base_dir, bool must_open) {
  DataFacts facts;
  if (data::is_synthetic_spec(data)) {
    facts.vocab_size = data::parse_synthetic_spec(data).vocab;
    facts.opened = true;
    return facts;
  }
  std::filesystem::path dir(data);
  if (dir.is_relative() && !base_dir.empty()) dir = base_dir / dir;
  std::error_code ec;
  if (!must_open && !std::filesystem::exists(dir / data::kManifestName, ec)) return facts;  // not built yet
  const std::unique_ptr<data::DataSource> source = data::open_data(dir.lexically_normal().string());
  facts.vocab_size = source->vocab_size();
  facts.train_tokens = source->train_tokens();
  facts.validation_tokens = source->validation_tokens();
  facts.opened = true;
  return facts;
}

nlohmann::json config_to_json(const RunConfig& c) {
  json j;
  j["model"] = {{"preset", c.model.preset},   {"n_layers", c.model.n_layers}, {"d_model", c.model.d_model},
                {"n_heads", c.model.n_heads}, {"head_dim", c.model.head_dim}, {"d_ff", c.model.d_ff},
                {"seq_len", c.model.seq_len}};
  if (const model::MoeShape& m = c.model.moe; m.enabled())
    j["model"]["moe"] = {{"experts", m.n_experts},
                         {"top_k", m.top_k},
                         {"d_ff_expert", m.d_ff_expert},
                         {"shared", m.n_shared},
                         {"every", m.every},
                         {"score", model::router_score_name(m.score)},
                         {"renormalize", m.renormalize},
                         {"balance_coef", m.balance_coef},
                         {"z_coef", m.z_coef}};
  j["recipe"] = engine::recipe_to_json(c.recipe);
  j["data"] = c.data;
  const TrainConfig& t = c.train;
  j["train"] = {{"seed", t.seed},
                {"tokens", t.tokens},
                {"steps", t.steps},
                {"batch_tokens", t.batch_tokens},
                {"micro_batch", t.micro_batch},
                {"lr", t.lr},
                {"min_lr", t.min_lr},
                {"warmup_steps", t.warmup_steps},
                {"schedule", schedule_name(t.schedule)},
                {"beta1", t.beta1},
                {"beta2", t.beta2},
                {"eps", t.eps},
                {"weight_decay", t.weight_decay},
                {"grad_clip", t.grad_clip}};
  if (t.schedule == Schedule::wsd) j["train"]["decay_fraction"] = t.decay_fraction;
  j["train"]["shuffle"] = shuffle_name(t.shuffle);
  if (t.shuffle == Shuffle::sequences) j["train"]["data_seed"] = t.data_seed;
  j["eval"] = {{"every", c.eval.every}, {"tokens", c.eval.tokens}};
  j["probe"] = {{"every", c.probe.every}};
  j["checkpoint"] = {{"every", c.checkpoint.every}};
  j["device"] = c.device;
  j["storage"] = c.storage;
  if (c.gpus != 1) j["gpus"] = c.gpus;  // absent at 1: the run ids of 1-GPU runs predate the field
  return j;
}

std::string config_canonical(const RunConfig& c) { return config_to_json(c).dump(); }

std::string config_hash(const RunConfig& c) {
  return sha256_hex(config_canonical(c));
}

}  // namespace fp4::run
