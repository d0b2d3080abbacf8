// spec.cpp — the sweep spec's sections: [sweep], [data], the run config's sections, [recipes],
// [executor] and [fit] (docs/sweeps.md, "The TOML spec"). [grid] and the expansion into points
// are in spec_grid.cpp.
#include "sweeps/spec.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

#include "base/files.h"
#include "base/format.h"
#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/recipe.h"
#include "engine/run/config.h"
#include "sweeps/gpu_list.h"
#include "sweeps/spec_internal.h"

namespace fp4::sweeps {

namespace detail {

const std::map<std::string, FieldKind>& run_config_fields() {
  using K = FieldKind;
  static const std::map<std::string, FieldKind> fields = {
      {"model.preset", K::string},       {"model.n_layers", K::integer},    {"model.d_model", K::integer},
      {"model.n_heads", K::integer},     {"model.head_dim", K::integer},    {"model.d_ff", K::integer},
      {"model.seq_len", K::integer},     {"train.seed", K::seed},           {"train.tokens", K::count},
      {"train.steps", K::integer},       {"train.batch_tokens", K::count},  {"train.micro_batch", K::integer},
      {"train.lr", K::number},           {"train.min_lr", K::number},       {"train.warmup_steps", K::integer},
      {"train.schedule", K::string},     {"train.decay_fraction", K::number}, {"train.beta1", K::number},
      {"train.beta2", K::number},        {"train.eps", K::number},          {"train.weight_decay", K::number},
      {"train.grad_clip", K::number},    {"train.shuffle", K::string},      {"train.data_seed", K::seed},
      {"eval.every", K::integer},        {"eval.tokens", K::count},
      {"probe.every", K::integer},       {"checkpoint.every", K::integer},
      // [model.moe]: the mixture-of-experts block (docs/model.md).
      {"model.moe", K::table},           {"model.moe.experts", K::integer}, {"model.moe.top_k", K::integer},
      {"model.moe.d_ff_expert", K::integer}, {"model.moe.shared", K::integer}, {"model.moe.every", K::integer},
      {"model.moe.score", K::string},    {"model.moe.renormalize", K::boolean},
      {"model.moe.balance_coef", K::number}, {"model.moe.z_coef", K::number},
  };
  return fields;
}

std::set<std::string> section_fields(const std::string& section) {
  std::set<std::string> out;
  for (const auto& [path, kind] : run_config_fields()) {
    (void)kind;
    if (path.rfind(section + ".", 0) != 0) continue;
    const std::string rest = path.substr(section.size() + 1);
    if (rest.find('.') == std::string::npos) out.insert(rest);  // a table's own fields are its own
  }
  return out;
}

nlohmann::json read_field(const toml::node& n, const std::string& path, const std::string& key,
                          const SpecErrors& errors) {
  switch (run_config_fields().at(path)) {
    case FieldKind::integer: return read_integer(n, key, errors);
    case FieldKind::count: return read_count(n, key, errors);
    case FieldKind::seed: {
      const int64_t v = read_integer(n, key, errors);
      if (v < 0) errors.fail(loc_of(n), key, fmt::format("must be >= 0, got {}", v));
      return static_cast<uint64_t>(v);
    }
    case FieldKind::number: return read_number(n, key, errors);
    case FieldKind::string: return read_string(n, key, errors);
    case FieldKind::boolean:
      if (!n.is_boolean()) errors.fail(loc_of(n), key, "must be true or false, got " + describe(n));
      return n.as_boolean()->get();
    case FieldKind::table: {
      const toml::table& t = require_table(n, key, errors);
      check_keys(t, key, section_fields(path), errors);
      nlohmann::json out = nlohmann::json::object();
      for (auto&& [k, v] : t) out[std::string(k.str())] = read_field(v, dotted(path, k.str()), dotted(key, k.str()), errors);
      return out;
    }
  }
  errors.fail(loc_of(n), key, "has an unhandled kind");  // unreachable: the switch covers every kind
}

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

// Names end up in file names (the store, run names), so they keep to a portable alphabet.
bool is_portable_name(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

fs::path resolve_against(const fs::path& base_dir, const std::string& p) {
  const fs::path path(p);
  if (path.is_absolute() || base_dir.empty()) return path.lexically_normal();
  return (base_dir / path).lexically_normal();
}

const toml::table* optional_table(const toml::table& root, const char* key, const SpecErrors& errors) {
  const toml::node* n = root.get(key);
  return n == nullptr ? nullptr : &require_table(*n, key, errors);
}

std::string require_nonempty_string(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  std::string s = read_string(n, key, errors);
  if (s.empty()) errors.fail(loc_of(n), key, "must not be empty");
  return s;
}

// A path the sweep writes and names in job scripts and logs: a newline or another control character
// in it could end a script line early, so it is refused here, where the user wrote it.
std::string require_path_string(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  std::string s = require_nonempty_string(n, key, errors);
  if (const size_t at = find_control_character(s); at != std::string::npos)
    errors.fail(loc_of(n), key,
                fmt::format("contains the control character {} (at byte {}); paths reach job scripts and logs, "
                            "so rename it without control characters",
                            control_character_name(s[at]), at));
  return s;
}

// [sweep]: the study's name and where its store and run directories live.
void read_sweep_section(const toml::table* t, const fs::path& base_dir, SweepSpec& spec, BaseConfig& base,
                        const SpecErrors& errors) {
  if (t == nullptr)
    errors.fail(Loc{}, "sweep", "the [sweep] table is required, with at least name = \"<study name>\"");
  check_keys(*t, "sweep", {"name", "store", "run_root", "device"}, errors);
  const toml::node* name = t->get("name");
  if (name == nullptr) errors.fail(loc_of(*t), "sweep.name", "is required (e.g. name = \"first-study\")");
  spec.name = read_string(*name, "sweep.name", errors);
  if (!is_portable_name(spec.name))
    errors.fail(loc_of(*name), "sweep.name",
                "must use only letters, digits, '.', '_' and '-' (it names files), got \"" + spec.name + "\"");
  std::string store = spec.name + ".db";
  if (const toml::node* n = t->get("store")) store = require_path_string(*n, "sweep.store", errors);
  spec.store = resolve_against(base_dir, store);
  std::string run_root = "runs";
  if (const toml::node* n = t->get("run_root")) run_root = require_path_string(*n, "sweep.run_root", errors);
  spec.run_root = resolve_against(base_dir, run_root);
  if (const toml::node* n = t->get("device")) {
    base.config["device"] = require_nonempty_string(*n, "sweep.device", errors);
    base.origins["device"] = Origin{loc_of(*n), "sweep.device"};
  } else {
    base.config["device"] = "cpu";
  }
}

// [data]: written into every config as given, so that identity does not depend on where the study
// lives; runs execute with base_dir as their working directory.
void read_data_section(const toml::table* t, const fs::path& base_dir, DataCheck check, BaseConfig& base,
                       const SpecErrors& errors) {
  if (t == nullptr)
    errors.fail(Loc{}, "data",
                "the [data] table is required, with source = \"<shard directory>\" or \"synthetic:markov?...\"");
  check_keys(*t, "data", {"source"}, errors);
  const toml::node* n = t->get("source");
  if (n == nullptr)
    errors.fail(loc_of(*t), "data.source", "is required: a shard directory or \"synthetic:markov?...\"");
  const std::string source = require_nonempty_string(*n, "data.source", errors);
  // Before runs start, the source must open as their trainers will open it: a missing or broken
  // shard directory is this line's error, not every run's.
  try {
    const run::DataFacts facts = run::inspect_data(source, base_dir, check == DataCheck::run);
    base.vocab_size = facts.vocab_size;
    base.train_tokens = facts.train_tokens;
    base.validation_tokens = facts.validation_tokens;
  } catch (const UserError& e) {
    errors.fail(loc_of(*n), "data.source", e.what());
  }
  base.config["data"] = source;
  base.origins["data"] = Origin{loc_of(*n), "data.source"};
}

// [model], [train], [eval], [probe], [checkpoint]: the run config's sections of the same names.
void read_run_sections(const toml::table& root, BaseConfig& base, const SpecErrors& errors) {
  for (const char* section : {"model", "train", "eval", "probe", "checkpoint"}) {
    const toml::table* t = optional_table(root, section, errors);
    if (t == nullptr) continue;
    check_keys(*t, section, section_fields(section), errors);
    json& out = base.config[section];
    out = json::object();
    for (auto&& [key, value] : *t) {
      const std::string path = dotted(section, key.str());
      out[std::string(key.str())] = read_field(value, path, path, errors);
      base.origins[path] = Origin{loc_of(value), path};
      if (value.is_table())  // [model.moe]: each of its keys is a place of its own
        for (auto&& [inner, v] : *value.as_table()) {
          const std::string inner_path = dotted(path, inner.str());
          base.origins[inner_path] = Origin{loc_of(v), inner_path};
        }
    }
    base.origins[section] = Origin{loc_of(*t), section};
  }
}

// The position of the first whole-word, case-insensitive occurrence of `word` in `text`.
size_t find_word(const std::string& text, const std::string& word) {
  const auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t p = text.find(word); p != std::string::npos; p = text.find(word, p + 1)) {
    const bool starts = p == 0 || !is_word(text[p - 1]);
    const bool ends = p + word.size() == text.size() || !is_word(text[p + word.size()]);
    if (starts && ends) return p;
  }
  return std::string::npos;
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The engine reports a recipe's faults in words ("recipe ufp4 slot wgrad_x: grid must be ...");
// this finds the TOML key those words are about: inside the slot table the message names, the key
// it mentions first; failing that, the recipe's table.
Origin locate_recipe_error(const toml::table& recipe, const std::string& prefix, const std::string& message) {
  const std::string text = lowercase(message);
  const toml::table* scope = &recipe;
  std::string scope_key = prefix;
  Origin found{loc_of(recipe), prefix};
  if (const toml::table* slots = recipe.get_as<toml::table>("slots")) {
    for (auto&& [slot, table] : *slots) {
      if (table.is_table() && text.find("slot " + std::string(slot.str())) != std::string::npos) {
        scope = table.as_table();
        scope_key = prefix + ".slots." + std::string(slot.str());
        found = Origin{loc_of(slot), scope_key};
      }
    }
  }
  size_t first = std::string::npos;
  for (auto&& [key, value] : *scope) {
    const size_t p = find_word(text, lowercase(std::string(key.str())));
    if (p < first) {
      first = p;
      found = Origin{loc_of(value), dotted(scope_key, key.str())};
    }
  }
  return found;
}

const std::set<std::string> kRecipeFields = {"base", "grid", "clip", "scale", "block", "weight_block_2d",
                                             "rht", "rht_signs", "sr", "bf16_layers", "slots",
                                             "four_over_six", "outer_block", "ms_eden", "rht_size"};
const std::set<std::string> kSlotFields = {"grid", "clip", "scale", "block", "weight_block_2d",
                                           "rht", "rht_signs", "sr", "four_over_six", "outer_block",
                                           "ms_eden", "rht_size"};

bool is_preset_recipe(const std::string& name) {
  const auto& presets = engine::recipe_preset_names();
  return std::find(presets.begin(), presets.end(), name) != presets.end();
}

// [recipes.<name>]: NUMERICS.md §7's fields; the engine checks the values, we place its complaints.
// The TOML name is a label only: it is not written into the run config, so renaming a recipe (or
// defining one equal to a preset) does not change any run's id.
std::map<std::string, RecipeDef> read_recipes(const toml::table* t, const SpecErrors& errors) {
  std::map<std::string, RecipeDef> out;
  if (t == nullptr) return out;
  for (auto&& [key, node] : *t) {
    const std::string name(key.str());
    const std::string prefix = "recipes." + name;
    if (!is_portable_name(name))
      errors.fail(loc_of(key), prefix, "a recipe name must use only letters, digits, '.', '_' and '-' (it goes into run names)");
    if (is_preset_recipe(name))
      errors.fail(loc_of(key), prefix,
                  "shadows the preset \"" + name + "\"; give the custom recipe another name");
    const toml::table& recipe = require_table(node, prefix, errors);
    check_keys(recipe, prefix, kRecipeFields, errors);
    const toml::node* base = recipe.get("base");
    if (base == nullptr)
      errors.fail(loc_of(recipe), prefix + ".base",
                  fmt::format("is required: the preset to start from ({})", fmt::join(engine::recipe_preset_names(), ", ")));
    const std::string base_name = read_string(*base, prefix + ".base", errors);
    if (!is_preset_recipe(base_name))
      errors.fail(loc_of(*base), prefix + ".base",
                  fmt::format("must be a preset ({}), got \"{}\"", fmt::join(engine::recipe_preset_names(), ", "), base_name));
    if (const toml::node* slots = recipe.get("slots")) {
      const toml::table& slot_table = require_table(*slots, prefix + ".slots", errors);
      std::set<std::string> slot_names;
      for (int i = 0; i < engine::kSlotCount; ++i) slot_names.insert(engine::slot_name(static_cast<engine::Slot>(i)));
      check_keys(slot_table, prefix + ".slots", slot_names, errors);
      for (auto&& [slot, fields] : slot_table) {
        const std::string slot_key = prefix + ".slots." + std::string(slot.str());
        check_keys(require_table(fields, slot_key, errors), slot_key, kSlotFields, errors);
      }
    }
    json config = to_json(recipe, prefix, errors);
    try {
      (void)engine::recipe_from_json(config);
    } catch (const UserError& e) {
      const Origin o = locate_recipe_error(recipe, prefix, e.what());
      errors.fail(o.at, o.key, e.what());
    } catch (const json::exception& e) {
      const Origin o = locate_recipe_error(recipe, prefix, e.what());
      errors.fail(o.at, o.key, std::string("a field has the wrong type (") + e.what() + ")");
    }
    out[name] = RecipeDef{std::move(config), loc_of(key)};
  }
  return out;
}

ExecutorSpec read_executor(const toml::table* t, const SpecErrors& errors) {
  ExecutorSpec ex;
  if (t == nullptr) return ex;
  check_keys(*t, "executor",
             {"gpus", "runs_per_gpu", "gpus_per_run", "cpu_jobs", "threads_per_job", "max_attempts", "order", "heartbeat_timeout_s",
              "mps"},
             errors);
  if (const toml::node* n = t->get("gpus")) {
    if (!n->is_array())
      errors.fail(loc_of(*n), "executor.gpus", "must be an array of GPU indices or UUIDs, got " + describe(*n));
    for (const toml::node& g : *n->as_array()) {
      if (!g.is_integer() && !g.is_string())
        errors.fail(loc_of(g), "executor.gpus", "entries must be GPU indices (0) or UUIDs (\"GPU-...\"), got " + describe(g));
      try {
        add_gpu(ex.gpus, g.is_integer() ? std::to_string(g.as_integer()->get()) : g.as_string()->get(), "executor.gpus");
      } catch (const UserError& e) {
        // add_gpu's message starts with the key; the location goes first.
        errors.fail(loc_of(g), "", e.what());
      }
    }
  }
  if (const toml::node* n = t->get("runs_per_gpu")) ex.runs_per_gpu = read_small_int(*n, "executor.runs_per_gpu", 1, errors);
  if (const toml::node* n = t->get("gpus_per_run")) {
    ex.gpus_per_run = read_small_int(*n, "executor.gpus_per_run", 1, errors);
    if (ex.gpus_per_run > run::kMaxGpus)
      errors.fail(loc_of(*n), "executor.gpus_per_run", fmt::format("must be at most {}, got {}", run::kMaxGpus, describe(*n)));
    if (ex.gpus_per_run > 1 && ex.runs_per_gpu > 1)
      errors.fail(loc_of(*n), "executor.gpus_per_run",
                  "cannot be combined with executor.runs_per_gpu > 1 (a multi-GPU run has its GPUs to itself): "
                  "set one of them to 1");
  }
  if (const toml::node* n = t->get("cpu_jobs")) ex.cpu_jobs = read_small_int(*n, "executor.cpu_jobs", 1, errors);
  if (const toml::node* n = t->get("threads_per_job"))
    ex.threads_per_job = read_small_int(*n, "executor.threads_per_job", 0, errors);
  if (const toml::node* n = t->get("max_attempts")) ex.max_attempts = read_small_int(*n, "executor.max_attempts", 1, errors);
  if (const toml::node* n = t->get("order")) {
    ex.order = read_string(*n, "executor.order", errors);
    if (ex.order != "largest" && ex.order != "declared")
      errors.fail(loc_of(*n), "executor.order",
                  "must be \"largest\" (most FLOPs first) or \"declared\" (grid order), got \"" + ex.order + "\"");
  }
  if (const toml::node* n = t->get("heartbeat_timeout_s")) {
    ex.heartbeat_timeout_s = read_number(*n, "executor.heartbeat_timeout_s", errors);
    if (!(ex.heartbeat_timeout_s > 0))
      errors.fail(loc_of(*n), "executor.heartbeat_timeout_s", "must be > 0 seconds, got " + describe(*n));
  }
  if (const toml::node* n = t->get("mps")) {
    ex.mps = read_string(*n, "executor.mps", errors);
    if (ex.mps != "auto" && ex.mps != "off")
      errors.fail(loc_of(*n), "executor.mps",
                  "must be \"auto\" (an MPS daemon for runs that share a GPU, when nvidia-cuda-mps-control is "
                  "there) or \"off\", got \"" + ex.mps + "\"");
  }
  return ex;
}

// [fit]: checked now so that a typo fails before hours of training; fit/ applies it (fit_study.h).
store::FitTable read_fit(const toml::table* t, const SpecErrors& errors) {
  store::FitTable fit;
  if (t == nullptr) return fit;
  check_keys(*t, "fit", {"law", "n", "bootstrap", "seed", "huber_delta", "targets", "gamma"}, errors);
  if (const toml::node* n = t->get("law")) {
    if (!n->is_array() || n->as_array()->empty())
      errors.fail(loc_of(*n), "fit.law", "must be a non-empty array of laws (\"chinchilla\", \"precision\"), got " + describe(*n));
    for (const toml::node& law : *n->as_array()) {
      const std::string s = read_string(law, "fit.law", errors);
      if (s != "chinchilla" && s != "precision")
        errors.fail(loc_of(law), "fit.law", "must be \"chinchilla\" or \"precision\", got \"" + s + "\"");
      if (std::find(fit.laws.begin(), fit.laws.end(), s) != fit.laws.end())
        errors.fail(loc_of(law), "fit.law", "lists \"" + s + "\" twice");
      fit.laws.push_back(s);
    }
  }
  if (const toml::node* n = t->get("n")) {
    const std::string s = read_string(*n, "fit.n", errors);
    if (s != "nonembedding" && s != "total")
      errors.fail(loc_of(*n), "fit.n", "must be \"nonembedding\" or \"total\", got \"" + s + "\"");
    fit.n = s;
  }
  if (const toml::node* n = t->get("bootstrap")) {
    const int64_t b = read_integer(*n, "fit.bootstrap", errors);
    if (b < 0) errors.fail(loc_of(*n), "fit.bootstrap", fmt::format("must be >= 0 (0: no intervals), got {}", b));
    fit.bootstrap = b;
  }
  if (const toml::node* n = t->get("seed")) {
    const int64_t s = read_integer(*n, "fit.seed", errors);
    if (s < 0) errors.fail(loc_of(*n), "fit.seed", fmt::format("must be >= 0, got {}", s));
    fit.seed = static_cast<uint64_t>(s);
  }
  if (const toml::node* n = t->get("huber_delta")) {
    const double d = read_number(*n, "fit.huber_delta", errors);
    if (!(d > 0)) errors.fail(loc_of(*n), "fit.huber_delta", "must be > 0, got " + describe(*n));
    fit.huber_delta = d;
  }
  if (const toml::node* n = t->get("gamma")) {
    if (!n->is_boolean()) errors.fail(loc_of(*n), "fit.gamma", "must be true or false, got " + describe(*n));
    fit.gamma = n->as_boolean()->get();
  }
  if (const toml::node* n = t->get("targets")) {
    if (!n->is_array())
      errors.fail(loc_of(*n), "fit.targets", "must be an array of tables {n = <params>, d = <tokens>}, got " + describe(*n));
    fit.targets.emplace();
    for (const toml::node& target : *n->as_array()) {
      const toml::table& tt = require_table(target, "fit.targets", errors);
      check_keys(tt, "fit.targets", {"n", "d"}, errors);
      double nd[2] = {0, 0};
      for (int i = 0; i < 2; ++i) {
        const char* k = i == 0 ? "n" : "d";
        const std::string key = std::string("fit.targets.") + k;
        const toml::node* v = tt.get(k);
        if (v == nullptr) errors.fail(loc_of(tt), key, "is required (e.g. {n = 1.5e9, d = 1e11})");
        nd[i] = read_number(*v, key, errors);
        if (!(nd[i] > 0)) errors.fail(loc_of(*v), key, "must be > 0, got " + describe(*v));
      }
      fit.targets->emplace_back(nd[0], nd[1]);
    }
  }
  return fit;
}

// One contrast "A - B" of [compare] (recipe names may hold '-', so the minus stands between spaces).
std::pair<std::string, std::string> read_contrast(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  const std::string s = read_string(n, key, errors);
  const size_t at = s.find(" - ");
  if (at == std::string::npos || s.find(" - ", at + 1) != std::string::npos)
    errors.fail(loc_of(n), key, "must be one contrast \"A - B\" (two recipe labels, the minus between spaces), got \"" + s + "\"");
  auto trim = [](std::string v) {
    v.erase(0, v.find_first_not_of(' '));
    v.erase(v.find_last_not_of(' ') + 1);
    return v;
  };
  std::pair<std::string, std::string> c{trim(s.substr(0, at)), trim(s.substr(at + 3))};
  if (c.first.empty() || c.second.empty() || c.first == c.second)
    errors.fail(loc_of(n), key, "must name two different recipes, \"A - B\", got \"" + s + "\"");
  return c;
}

std::vector<std::pair<std::string, std::string>> read_contrasts(const toml::node& n, const std::string& key,
                                                                const SpecErrors& errors) {
  if (!n.is_array() || n.as_array()->empty())
    errors.fail(loc_of(n), key, "must be a non-empty array of contrasts like \"ufp4 - e2m1\", got " + describe(n));
  std::vector<std::pair<std::string, std::string>> out;
  for (const toml::node& c : *n.as_array()) {
    auto contrast = read_contrast(c, key, errors);
    if (std::find(out.begin(), out.end(), contrast) != out.end())
      errors.fail(loc_of(c), key, "lists \"" + contrast.first + " - " + contrast.second + "\" twice");
    out.push_back(std::move(contrast));
  }
  return out;
}

// A family's `metrics`: which losses its contrasts are tested on, each once (a pre-registration
// names them; a test no plan declared is not run).
std::vector<std::string> read_metrics(const toml::node& n, const SpecErrors& errors) {
  const std::string key = "compare.families.metrics";
  const std::string allowed = fmt::format("\"{}\"", fmt::join(std::begin(store::kContrastMetrics), std::end(store::kContrastMetrics), "\", \""));
  if (!n.is_array() || n.as_array()->empty())
    errors.fail(loc_of(n), key, "must be a non-empty array of metrics, a subset of [" + allowed + "], got " + describe(n));
  std::vector<std::string> out;
  for (const toml::node& m : *n.as_array()) {
    const std::string name = read_string(m, key, errors);
    if (std::find(std::begin(store::kContrastMetrics), std::end(store::kContrastMetrics), name) ==
        std::end(store::kContrastMetrics))
      errors.fail(loc_of(m), key, "names an unknown metric \"" + name + "\" (known: " + allowed + ")");
    if (std::find(out.begin(), out.end(), name) != out.end())
      errors.fail(loc_of(m), key, "lists \"" + name + "\" twice");
    out.push_back(name);
  }
  return out;
}

// [compare] (docs/statistics.md): the primary contrasts and the families of contrasts that share
// a Holm adjustment; fit/ applies it (fit/contrasts.h).
store::CompareTable read_compare(const toml::table* t, const SpecErrors& errors) {
  store::CompareTable compare;
  if (t == nullptr) return compare;
  compare.present = true;
  check_keys(*t, "compare", {"primary", "families"}, errors);
  if (const toml::node* n = t->get("primary")) compare.primary = read_contrasts(*n, "compare.primary", errors);
  if (const toml::node* n = t->get("families")) {
    if (!n->is_array() || n->as_array()->empty())
      errors.fail(loc_of(*n), "compare.families",
                  "must be a non-empty array of tables {name = \"...\", contrasts = [\"A - B\", ...]}, got " + describe(*n));
    for (const toml::node& f : *n->as_array()) {
      const toml::table& ft = require_table(f, "compare.families", errors);
      check_keys(ft, "compare.families", {"name", "contrasts", "metrics"}, errors);
      const toml::node* name = ft.get("name");
      const toml::node* contrasts = ft.get("contrasts");
      if (name == nullptr) errors.fail(loc_of(ft), "compare.families.name", "is required (the family's name in the report)");
      if (contrasts == nullptr)
        errors.fail(loc_of(ft), "compare.families.contrasts", "is required (e.g. contrasts = [\"ufp4 - e2m1\"])");
      store::CompareFamily family{read_string(*name, "compare.families.name", errors),
                                  read_contrasts(*contrasts, "compare.families.contrasts", errors), {}};
      if (const toml::node* m = ft.get("metrics")) family.metrics = read_metrics(*m, errors);
      if (family.name.empty()) errors.fail(loc_of(*name), "compare.families.name", "must not be empty");
      for (const store::CompareFamily& other : compare.families)
        if (other.name == family.name)
          errors.fail(loc_of(*name), "compare.families.name", "names the family \"" + family.name + "\" twice");
      compare.families.push_back(std::move(family));
    }
  }
  if (compare.primary.empty() && compare.families.empty())
    errors.fail(loc_of(*t), "compare", "names no contrast: give primary = [\"A - B\"] and/or families = [...]");
  return compare;
}

const std::set<std::string> kTopLevelTables = {"sweep", "data",   "model",   "train",    "eval", "probe",
                                               "checkpoint", "grid", "recipes", "executor", "fit", "compare"};

}  // namespace

SweepSpec parse_sweep_spec(const std::string& text, const fs::path& file, const fs::path& base_dir, DataCheck check) {
  const std::string file_name = file.string();
  const SpecErrors errors(file_name);
  toml::table root;
  try {
    root = toml::parse(std::string_view(text), std::string_view(file_name));
  } catch (const toml::parse_error& e) {
    errors.fail(loc_of(e.source()), "", "malformed TOML: " + std::string(e.description()));
  }

  SweepSpec spec;
  spec.file = file;
  spec.base_dir = base_dir;
  spec.text = text;
  spec.text_hash = sha256_hex(text);

  check_keys(root, "", kTopLevelTables, errors);
  BaseConfig base;
  read_sweep_section(optional_table(root, "sweep", errors), base_dir, spec, base, errors);
  read_data_section(optional_table(root, "data", errors), base_dir, check, base, errors);
  read_run_sections(root, base, errors);
  const std::map<std::string, RecipeDef> recipes = read_recipes(optional_table(root, "recipes", errors), errors);
  spec.executor = read_executor(optional_table(root, "executor", errors), errors);
  if (spec.executor.gpus_per_run != 1) {
    // The run's GPU count is part of its config (other N, other bits: the all-reduce's order), so
    // it is written into every point; at 1 it is left out and every run id stays what it was.
    base.config["gpus"] = spec.executor.gpus_per_run;
    const toml::table* ex = root["executor"].as_table();
    base.origins["gpus"] = Origin{loc_of(*ex->get("gpus_per_run")), "executor.gpus_per_run"};
  }
  spec.fit = read_fit(optional_table(root, "fit", errors), errors);
  spec.compare = read_compare(optional_table(root, "compare", errors), errors);
  for (const auto& [name, def] : recipes)
    if (def.config.contains("base") && def.config["base"].is_string())
      spec.recipe_bases[name] = def.config["base"].get<std::string>();

  const toml::table* grid = optional_table(root, "grid", errors);
  const std::vector<Axis> axes = read_grid(grid, base, recipes, errors);
  for (const Axis& a : axes) spec.axis_names.push_back(a.name);
  spec.points = expand_grid(axes, base, recipes, grid ? std::optional<Loc>(loc_of(*grid)) : std::nullopt, errors);
  return spec;
}

SweepSpec load_sweep_spec(const fs::path& file, DataCheck check) {
  // A sweep spec is a page of TOML. A device, a FIFO or a directory given by mistake is refused
  // before it is opened (reading /dev/zero never ends), and so is a file too big to be a spec.
  constexpr uintmax_t kMaxSpecBytes = uintmax_t{1} << 20;
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status))
    throw UserError(file.string() + ": not a regular file; a sweep spec is a TOML file");
  if (!ec && fs::is_regular_file(status)) {
    const uintmax_t bytes = fs::file_size(file, ec);
    if (!ec && bytes > kMaxSpecBytes)
      throw UserError(fmt::format("{}: {} bytes, more than a sweep spec's limit of {} (1 MiB); is it the TOML file?",
                                  file.string(), bytes, kMaxSpecBytes));
  }
  std::string text;
  try {
    text = read_file(file);
  } catch (const std::runtime_error& e) {
    throw UserError(std::string(e.what()) + "; check the path of the sweep spec");
  }
  // Runs execute in the spec's directory; an absolute path keeps that true whatever the caller's
  // working directory is later.
  fs::path dir = fs::absolute(file, ec).parent_path();
  if (ec) dir = file.parent_path();
  return parse_sweep_spec(text, file, dir.lexically_normal(), check);
}

store::GridRecord grid_record(const SweepSpec& spec) {
  store::GridRecord g{.text_hash = spec.text_hash, .name = spec.name, .file = spec.file, .base_dir = spec.base_dir,
                      .run_root = spec.run_root, .store = spec.store, .text = spec.text, .fit = spec.fit,
                      .compare = spec.compare, .recipe_bases = spec.recipe_bases,
                      .axis_names = spec.axis_names, .points = {}};
  for (const GridPoint& p : spec.points)
    g.points.push_back({p.id, p.name, p.canonical.empty() ? p.config.dump() : p.canonical, p.match_key,
                        p.recipe_label, p.model_label, p.baseline, p.n_params, p.n_params_nonembedding, p.tokens,
                        p.seed, p.flops_per_token, p.n_params_active_nonembedding, p.axes});
  return g;
}

}  // namespace fp4::sweeps
