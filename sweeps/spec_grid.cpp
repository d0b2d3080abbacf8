// spec_grid.cpp — [grid]: its axes, their expansion into resolved run configs, and run names
// (docs/sweeps.md, "The TOML spec").
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/model/model_shape.h"
#include "engine/recipe.h"
#include "engine/run/config.h"
#include "sweeps/spec_internal.h"

namespace fp4::sweeps {

namespace {

using nlohmann::json;
using namespace detail;

// A grid this large is a typo (an axis multiplied in by mistake), not a study one machine can run.
constexpr size_t kMaxPoints = 100000;

// Fields a point's run name already shows through its model label or token count; an axis over
// one of them adds no "-<axis><value>" part.
const std::set<std::string> kFieldsInBaseName = {"model.preset", "model.n_layers", "model.d_model", "train.steps"};

// The model fields a preset decides; with a model axis these come from the axis value only.
const std::vector<std::string> kModelSizeFields = {"model.preset", "model.n_layers", "model.d_model"};

struct Leaf {
  std::string path;
  Loc key_at;
  const toml::node* node;    // the array of values
  std::string with;          // a linked axis: the axis it goes with ("" otherwise)
  Loc with_at;
};

// TOML turns `train.lr = [...]` into nested tables; a quoted "train.lr" is one key. Both name the
// axis "train.lr": walk the tables down to the arrays. A table with a `with` key is a linked axis,
// {with = "<axis>", values = [...]}.
void collect_leaves(const toml::table& t, const std::string& prefix, std::vector<Leaf>& out, const SpecErrors& errors) {
  for (auto&& [key, node] : t) {
    const std::string path = dotted(prefix, key.str());
    if (node.is_table() && node.as_table()->contains("with")) {
      const toml::table& link = *node.as_table();
      const std::string k = "grid." + path;
      check_keys(link, k, {"with", "values"}, errors);
      const toml::node* values = link.get("values");
      if (values == nullptr)
        errors.fail(loc_of(node), k, "a linked axis needs values = [...], one per value of the axis it goes with");
      if (!values->is_array())
        errors.fail(loc_of(*values), k + ".values", "must be an array of values, got " + describe(*values));
      const toml::node& with = *link.get("with");
      out.push_back(Leaf{path, loc_of(key), values, read_string(with, k + ".with", errors), loc_of(with)});
    } else if (node.is_table()) {
      collect_leaves(*node.as_table(), path, out, errors);
    } else if (node.is_array()) {
      out.push_back(Leaf{path, loc_of(key), &node, {}, {}});
    } else {
      errors.fail(loc_of(node), "grid." + path,
                  "an axis must be an array of values (e.g. " + path + " = [...]), got " + describe(node));
    }
  }
}

bool before(Loc a, Loc b) { return a.line != b.line ? a.line < b.line : a.col < b.col; }

// What the axis sets in each point's config; two axes may not set the same thing.
std::vector<std::string> claims_of(const Axis& a) {
  switch (a.kind) {
    case AxisKind::model: return kModelSizeFields;
    case AxisKind::tokens:
    case AxisKind::tokens_per_param: return {"train.tokens", "token count"};
    case AxisKind::recipe: return {"recipe"};
    case AxisKind::seed: return {"train.seed"};
    case AxisKind::field:
      if (a.field == "train.steps") return {"train.steps", "token count"};
      return {a.field};
  }
  return {};
}

Axis classify(const Leaf& leaf, const SpecErrors& errors) {
  Axis a;
  a.name = leaf.path;
  a.key_at = leaf.key_at;
  const std::string key = "grid." + leaf.path;
  if (leaf.path == "model") {
    a.kind = AxisKind::model;
    a.field = "model";
  } else if (leaf.path == "tokens" || leaf.path == "train.tokens") {
    a.kind = AxisKind::tokens;
    a.field = "train.tokens";
  } else if (leaf.path == "tokens_per_param") {
    a.kind = AxisKind::tokens_per_param;
    a.field = "train.tokens";
  } else if (leaf.path == "recipe") {
    a.kind = AxisKind::recipe;
    a.field = "recipe";
  } else if (leaf.path == "seed" || leaf.path == "train.seed") {
    a.kind = AxisKind::seed;
    a.field = "train.seed";
  } else if (run_config_fields().count(leaf.path)) {
    a.kind = AxisKind::field;
    a.field = leaf.path;
  } else {
    const std::string section = leaf.path.substr(0, leaf.path.find('.'));
    const std::set<std::string> fields = section_fields(section);
    if (!fields.empty() && leaf.path.find('.') != std::string::npos)
      errors.fail(leaf.key_at, key, fmt::format("is not a field of the run config; {} has: {}", section, fmt::join(fields, ", ")));
    errors.fail(leaf.key_at, key,
                "is not a known axis; axes are model, tokens, tokens_per_param, recipe, seed, or a run config "
                "field written as a dotted key (train.lr, model.d_ff, eval.every, ...)");
  }
  return a;
}

AxisValue read_model_value(const toml::node& n, const SpecErrors& errors) {
  const std::string key = "grid.model";
  if (n.is_string()) {
    const std::string preset = n.as_string()->get();
    try {
      run::check_model_preset(preset);
    } catch (const UserError& e) {
      errors.fail(loc_of(n), key, e.what());
    }
    return AxisValue{preset, preset, loc_of(n)};
  }
  if (n.is_table()) {
    const toml::table& t = *n.as_table();
    check_keys(t, key, section_fields("model"), errors);
    json dims = json::object();
    for (auto&& [field, value] : t) {
      const std::string path = dotted("model", field.str());
      dims[std::string(field.str())] = read_field(value, path, key + "." + std::string(field.str()), errors);
    }
    if (dims.empty()) errors.fail(loc_of(n), key, "an empty table sets no model; give a preset or n_layers and d_model");
    return AxisValue{dims, dims.dump(), loc_of(n)};
  }
  errors.fail(loc_of(n), key,
              "values must be presets (\"d4\") or tables of dimensions ({n_layers = 4, d_model = 256}), got " +
                  describe(n));
}

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return number_text(v.get<double>());
  return v.dump();
}

AxisValue read_axis_value(const Axis& a, const toml::node& n, const std::map<std::string, RecipeDef>& recipes,
                          const SpecErrors& errors) {
  const std::string key = "grid." + a.name;
  switch (a.kind) {
    case AxisKind::model: return read_model_value(n, errors);
    case AxisKind::tokens: {
      const int64_t tokens = read_count(n, key, errors);
      if (tokens < 1) errors.fail(loc_of(n), key, fmt::format("must be >= 1 token, got {}", tokens));
      return AxisValue{tokens, std::to_string(tokens), loc_of(n)};
    }
    case AxisKind::tokens_per_param: {
      const double tpp = read_number(n, key, errors);
      if (!(tpp > 0)) errors.fail(loc_of(n), key, "must be > 0 tokens per parameter, got " + describe(n));
      return AxisValue{tpp, number_text(tpp), loc_of(n)};
    }
    case AxisKind::recipe: {
      const std::string name = read_string(n, key, errors);
      const auto& presets = engine::recipe_preset_names();
      if (std::find(presets.begin(), presets.end(), name) == presets.end() && !recipes.count(name)) {
        std::vector<std::string> known = presets;
        for (const auto& [custom, def] : recipes) known.push_back(custom);
        errors.fail(loc_of(n), key,
                    fmt::format("unknown recipe \"{}\"; known: {} (define custom ones under [recipes.<name>])", name,
                                fmt::join(known, ", ")));
      }
      return AxisValue{name, name, loc_of(n)};
    }
    case AxisKind::seed: {
      json seed = read_field(n, "train.seed", key, errors);
      return AxisValue{seed, seed.dump(), loc_of(n)};
    }
    case AxisKind::field: {
      json v = read_field(n, a.field, key, errors);
      return AxisValue{v, value_text(v), loc_of(n)};
    }
  }
  errors.fail(loc_of(n), key, "has an unhandled axis kind");  // unreachable
}

// The config paths whose values a point takes from this axis value (for placing engine errors).
std::vector<std::string> sourced_paths(const Axis& a, const AxisValue& v, const BaseConfig& base) {
  switch (a.kind) {
    case AxisKind::model: {
      // A preset decides every shape field the base does not set itself.
      std::vector<std::string> paths = {"model"};
      for (const std::string& f : section_fields("model")) {
        const std::string path = "model." + f;
        const bool in_value = v.value.is_object() && v.value.contains(f);
        if (in_value || (!base.origins.count(path) && f != "seq_len")) paths.push_back(path);
      }
      return paths;
    }
    case AxisKind::tokens:
    case AxisKind::tokens_per_param: return {"train.tokens", "train.steps"};
    case AxisKind::recipe: return {"recipe"};
    case AxisKind::seed: return {"train.seed"};
    case AxisKind::field: return {a.field};
  }
  return {};
}

// Identifier-like words of an engine message, in order: "train.lr", "model.d_ff", "recipe".
std::vector<std::string> message_words(const std::string& message) {
  std::vector<std::string> words;
  std::string current;
  const auto flush = [&] {
    while (!current.empty() && current.back() == '.') current.pop_back();
    if (!current.empty()) words.push_back(current);
    current.clear();
  };
  for (char c : message) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') current.push_back(c);
    else flush();
  }
  flush();
  return words;
}

// The most specific place to blame for an engine error about one point: the axis value the message
// names, else the base key it names, else [grid], else the top of the file.
Origin culprit(const std::string& message, const std::map<std::string, Origin>& from_axes, const BaseConfig& base,
               std::optional<Loc> grid_at) {
  const std::vector<std::string> words = message_words(message);
  for (const auto* origins : {&from_axes, &base.origins}) {
    for (const std::string& word : words) {
      // "recipe.bf16_layers" is about the recipe: try the word, then its shorter dotted prefixes.
      // A word that is itself a field ("model.seq_len") is not also about its section ("model").
      for (std::string w = word;; w = w.substr(0, w.rfind('.'))) {
        if (auto it = origins->find(w); it != origins->end()) return it->second;
        if (w.find('.') == std::string::npos || run_config_fields().count(w)) break;
      }
    }
  }
  if (grid_at) return Origin{*grid_at, "grid"};
  return Origin{Loc{}, ""};
}

int64_t tokens_from_ratio(double tokens_per_param, int64_t n_nonembedding, const AxisValue& v, const SpecErrors& errors) {
  const double exact = tokens_per_param * static_cast<double>(n_nonembedding);
  if (!(exact < 9.0e18))
    errors.fail(v.at, "grid.tokens_per_param", "gives more tokens than a run can count (" + number_text(exact) + ")");
  // 20 · N must give 20·N even when the product picks up a rounding error in its last bit.
  const double nearest = std::round(exact);
  const int64_t tokens = std::fabs(exact - nearest) <= 1e-9 * exact ? static_cast<int64_t>(nearest)
                                                                     : static_cast<int64_t>(std::ceil(exact));
  return std::max<int64_t>(1, tokens);
}

// "d4" (or "d4-e8k2") when the shape is exactly the preset's, "L4-d256" (or "L4-d256-e8k2") for
// anything else.
std::string model_label(const run::ModelConfig& m) {
  if (m.preset != "custom") {
    const model::ModelShape p = model::model_preset(m.preset);
    if (p.n_layers == m.n_layers && p.d_model == m.d_model && p.n_heads == m.n_heads && p.head_dim == m.head_dim &&
        p.d_ff == m.d_ff && p.moe == m.moe)
      return m.preset;
  }
  const std::string moe = m.moe.enabled() ? fmt::format("-e{}k{}", m.moe.n_experts, m.moe.top_k) : "";
  return fmt::format("L{}-d{}{}", m.n_layers, m.d_model, moe);
}

std::string name_safe(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '+')) c = '_';
  return out;
}

// Resolves one point: builds its JSON config from the base and the axis values and lets the engine
// validate and resolve it, placing any complaint at the most specific TOML location.
class PointBuilder {
 public:
  PointBuilder(const std::vector<Axis>& axes, const BaseConfig& base, const std::map<std::string, RecipeDef>& recipes,
               std::optional<Loc> grid_at, const SpecErrors& errors)
      : axes_(axes), base_(base), recipes_(recipes), grid_at_(grid_at), errors_(errors) {}

  GridPoint build(const std::vector<size_t>& index) const {
    json j = base_.config;
    std::map<std::string, Origin> from_axes;
    std::string point_text;
    GridPoint p;
    const AxisValue* ratio = nullptr;
    // Axis application order: the model axis first, so that field axes such as model.d_ff override
    // what its preset decides; tokens_per_param last, as it needs the point's model.
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t a = 0; a < axes_.size(); ++a) {
        const Axis& axis = axes_[a];
        const AxisValue& v = axis.values[index[a]];
        if ((axis.kind == AxisKind::model) != (pass == 0)) continue;
        p.axes[axis.name] = v.text;
        for (const std::string& path : sourced_paths(axis, v, base_))
          from_axes[path] = Origin{v.at, "grid." + axis.name};
        switch (axis.kind) {
          case AxisKind::model:
            if (!j.contains("model")) j["model"] = json::object();
            if (v.value.is_string()) j["model"]["preset"] = v.value;
            else j["model"].update(v.value);
            break;
          case AxisKind::tokens: j["train"]["tokens"] = v.value; break;
          case AxisKind::tokens_per_param: ratio = &v; break;
          case AxisKind::recipe: {
            const std::string name = v.value.get<std::string>();
            const auto custom = recipes_.find(name);
            j["recipe"] = custom == recipes_.end() ? json(name) : custom->second.config;
            p.recipe_label = name;
            break;
          }
          case AxisKind::seed: j["train"]["seed"] = v.value; break;
          case AxisKind::field: {
            // "train.lr" or, inside a table of its own, "model.moe.top_k".
            json* at = &j;
            for (size_t from = 0;;) {
              const size_t dot = axis.field.find('.', from);
              at = &(*at)[axis.field.substr(from, dot - from)];
              if (dot == std::string::npos) break;
              from = dot + 1;
            }
            *at = v.value;
            break;
          }
        }
      }
    }
    for (const Axis& axis : axes_) point_text += (point_text.empty() ? "" : ", ") + axis.name + " = " + p.axes[axis.name];
    if (ratio != nullptr) {
      const run::RunConfig shape_only = resolve(model_probe(j), from_axes, point_text);
      // Tokens per active parameter: for an MoE model the parameters one token uses (docs/model.md).
      const int64_t n = model::active_nonembedding_params(shape_only.model.shape(static_cast<int>(base_.vocab_size)));
      j["train"]["tokens"] = tokens_from_ratio(ratio->value.get<double>(), n, *ratio, errors_);
    }

    const run::RunConfig c = resolve(j, from_axes, point_text);
    check_against_data(c, from_axes, point_text);
    p.config = run::config_to_json(c);
    p.canonical = run::config_canonical(c);
    p.id = run::config_hash(c);
    json without_recipe = p.config;
    without_recipe.erase("recipe");
    p.match_key = sha256_hex(without_recipe.dump());  // dumped as config_canonical dumps
    if (p.recipe_label.empty()) p.recipe_label = c.recipe.name;
    p.baseline = !c.recipe.quantized;
    p.model_label = model_label(c.model);
    const model::ModelShape shape = c.model.shape(static_cast<int>(base_.vocab_size));
    p.n_params = model::total_params(shape);
    p.n_params_nonembedding = model::nonembedding_params(shape);
    p.n_params_active_nonembedding = model::active_nonembedding_params(shape);
    p.flops_per_token = model::train_flops_per_token(shape, c.model.seq_len);
    p.tokens = c.train.tokens;
    p.seed = c.train.seed;
    return p;
  }

 private:
  // A config that resolves whenever the point's model does: the model alone decides its size,
  // and the engine (not a copy of its rules here) works out the preset, n_heads and d_ff.
  static json model_probe(const json& point) {
    json probe = json::object();
    if (point.contains("model")) probe["model"] = point["model"];
    int64_t seq_len = run::ModelConfig{}.seq_len;
    if (point.contains("model") && point["model"].contains("seq_len")) seq_len = point["model"]["seq_len"].get<int64_t>();
    probe["data"] = "synthetic:markov";
    probe["train"] = {{"steps", 1}, {"micro_batch", 1}, {"batch_tokens", seq_len}};
    probe["eval"] = {{"tokens", seq_len}};
    return probe;
  }

  run::RunConfig resolve(const json& j, const std::map<std::string, Origin>& from_axes,
                         const std::string& point_text) const {
    try {
      return run::config_from_json(j, errors_.file());
    } catch (const UserError& e) {
      fail_at_culprit(e.what(), from_axes, point_text);
    } catch (const json::exception& e) {
      // The spec checks every type first, so this is a gap in those checks; still the user's input.
      fail_at_culprit(std::string("a value has the wrong type (") + e.what() + ")", from_axes, point_text);
    }
  }

  // What the trainer would refuse about this point's data, refused now, where the splits are known.
  void check_against_data(const run::RunConfig& c, const std::map<std::string, Origin>& from_axes,
                          const std::string& point_text) const {
    const uint64_t need = static_cast<uint64_t>(c.eval.tokens) + 1;
    if (base_.validation_tokens != 0 && base_.validation_tokens < need)
      fail_at_culprit(fmt::format("eval.tokens = {} needs {} validation tokens, but data.source has {}: lower "
                                  "eval.tokens",
                                  c.eval.tokens, need, base_.validation_tokens),
                      from_axes, point_text);
    const uint64_t window = static_cast<uint64_t>(c.model.seq_len) + 1;
    if (base_.train_tokens != 0 && c.train.shuffle == run::Shuffle::sequences && base_.train_tokens < window)
      fail_at_culprit(fmt::format("model.seq_len = {}: the training split of data.source ({} tokens) is shorter than "
                                  "one shuffled window of {} tokens; use a shorter seq_len or more data",
                                  c.model.seq_len, base_.train_tokens, window),
                      from_axes, point_text);
  }

  [[noreturn]] void fail_at_culprit(std::string message, const std::map<std::string, Origin>& from_axes,
                                    const std::string& point_text) const {
    const std::string prefix = errors_.file() + ": ";
    if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
    const Origin o = culprit(message, from_axes, base_, grid_at_);
    if (!point_text.empty()) message += " (grid point " + point_text + ")";
    errors_.fail(o.at, o.key, message);
  }

  const std::vector<Axis>& axes_;
  const BaseConfig& base_;
  const std::map<std::string, RecipeDef>& recipes_;
  std::optional<Loc> grid_at_;
  const SpecErrors& errors_;
};

// "<model>-<tokens>-<recipe>-s<seed>" and "-<axis><value>" for every axis the rest does not show;
// names that still collide get the id's first 8 hex digits.
void assign_names(std::vector<GridPoint>& points, const std::vector<Axis>& axes) {
  std::vector<const Axis*> extra;
  std::map<std::string, int> short_uses;
  const auto short_name = [](const std::string& name) { return name.substr(name.rfind('.') + 1); };
  for (const Axis& a : axes) {
    if (a.kind != AxisKind::field || kFieldsInBaseName.count(a.field)) continue;
    extra.push_back(&a);
    ++short_uses[short_name(a.name)];
  }
  std::map<std::string, int> name_uses;
  for (GridPoint& p : points) {
    p.name = fmt::format("{}-{}-{}-s{}", p.model_label, compact_count(p.tokens), p.recipe_label, p.seed);
    for (const Axis* a : extra) {
      const std::string s = short_name(a->name);
      p.name += "-" + (short_uses[s] > 1 ? a->name : s) + name_safe(p.axes.at(a->name));
    }
    ++name_uses[p.name];
  }
  for (GridPoint& p : points)
    if (name_uses[p.name] > 1) p.name += "-" + p.id.substr(0, 8);
}

}  // namespace

namespace detail {

std::vector<Axis> read_grid(const toml::table* grid, const BaseConfig& base, const std::map<std::string, RecipeDef>& recipes,
                            const SpecErrors& errors) {
  std::vector<Axis> axes;
  if (grid == nullptr) return axes;
  std::vector<Leaf> leaves;
  collect_leaves(*grid, "", leaves, errors);
  // toml++ keeps keys sorted; the declaration order is the order of the arrays in the text.
  std::sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) { return before(loc_of(*a.node), loc_of(*b.node)); });

  std::map<std::string, const Axis*> claimed;
  size_t points = 1;
  for (const Leaf& leaf : leaves) {
    Axis a = classify(leaf, errors);
    const std::string key = "grid." + a.name;
    for (const Axis& earlier : axes)
      if (earlier.name == a.name) errors.fail(leaf.key_at, key, "is declared twice; keep one");
    const toml::array& values = *leaf.node->as_array();
    if (values.empty())
      errors.fail(loc_of(*leaf.node), key, "is empty; give at least one value, or remove the axis for the base value");
    // The limit is checked before any value is read, so a runaway axis costs only its parsing. A
    // linked axis adds no dimension (it has one value per value of another axis).
    const size_t before_this = leaf.with.empty() ? points : 1;
    if (values.size() > kMaxPoints / before_this)
      errors.fail(leaf.key_at, key,
                  fmt::format("makes the grid more than {} points ({} values here{}); split the study or shorten an axis",
                              kMaxPoints, values.size(),
                              before_this > 1 ? fmt::format(" × {} before", before_this) : ""));
    if (leaf.with.empty()) points *= values.size();
    std::map<json, Loc> seen;  // ordered by nlohmann's operator<: O(n log n) for the duplicate check
    for (const toml::node& n : values) {
      AxisValue v = read_axis_value(a, n, recipes, errors);
      // A linked axis may repeat a value (two sizes with one learning rate): its points differ by
      // the axis it goes with.
      if (leaf.with.empty())
        if (const auto [at, fresh] = seen.emplace(v.value, v.at); !fresh)
          errors.fail(v.at, key,
                      fmt::format("repeats the value {} (first at {}:{}); remove one", v.text, at->second.line,
                                  at->second.col));
      a.values.push_back(std::move(v));
    }
    axes.push_back(std::move(a));
  }
  // Links: each names another declared axis that is not linked itself, and has one value per
  // value of it.
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Leaf& leaf = leaves[i];
    if (leaf.with.empty()) continue;
    const std::string key = "grid." + leaf.path + ".with";
    size_t leader = axes.size();
    for (size_t j = 0; j < axes.size(); ++j)
      if (axes[j].name == leaf.with || (leaf.with == "tokens" && axes[j].kind == AxisKind::tokens) ||
          (leaf.with == "seed" && axes[j].kind == AxisKind::seed))
        leader = j;
    if (leader == i) errors.fail(leaf.with_at, key, "an axis cannot be linked with itself");
    if (leader == axes.size()) {
      std::vector<std::string> names;
      for (const Axis& a : axes) names.push_back(a.name);
      errors.fail(leaf.with_at, key,
                  fmt::format("names no axis of [grid] (\"{}\"); the axes are: {}", leaf.with, fmt::join(names, ", ")));
    }
    if (!leaves[leader].with.empty())
      errors.fail(leaf.with_at, key,
                  "names grid." + axes[leader].name + ", which is linked itself; link both with grid." +
                      leaves[leader].with);
    if (axes[i].values.size() != axes[leader].values.size())
      errors.fail(loc_of(*leaf.node), "grid." + leaf.path + ".values",
                  fmt::format("has {} values but grid.{} has {}: give one per value of it, in its order",
                              axes[i].values.size(), axes[leader].name, axes[leader].values.size()));
    axes[i].linked_to = static_cast<int>(leader);
  }

  for (size_t i = 0; i < axes.size(); ++i) {
    const Axis& a = axes[i];
    for (const std::string& claim : claims_of(a)) {
      if (auto it = claimed.find(claim); it != claimed.end())
        errors.fail(a.key_at, "grid." + a.name,
                    "sets " + claim + ", as grid." + it->second->name + " does already; keep one of the two axes");
      claimed[claim] = &a;
    }
  }
  // The base may not contradict an axis: a fixed train.steps beside a token axis would disagree
  // with every point but one, and a fixed layer count under a model axis would silently relabel it.
  for (const Axis& a : axes) {
    const std::vector<std::string> claims = claims_of(a);
    if (std::find(claims.begin(), claims.end(), "token count") != claims.end()) {
      const std::string other = a.field == "train.steps" ? "train.tokens" : "train.steps";
      if (auto it = base.origins.find(other); it != base.origins.end())
        errors.fail(it->second.at, it->second.key,
                    "conflicts with the axis grid." + a.name + ", which sets each point's length; remove " + other +
                        " from [train]");
    }
    if (a.kind == AxisKind::model) {
      for (const std::string& f : kModelSizeFields)
        if (auto it = base.origins.find(f); it != base.origins.end())
          errors.fail(it->second.at, it->second.key,
                      "is set by the axis grid.model for each point; remove it from [model] (or put it in the axis values)");
    }
  }
  return axes;
}

std::vector<GridPoint> expand_grid(const std::vector<Axis>& axes, const BaseConfig& base,
                                   const std::map<std::string, RecipeDef>& recipes, std::optional<Loc> grid_at,
                                   const SpecErrors& errors) {
  size_t total = 1;
  for (const Axis& a : axes) {
    if (a.linked_to >= 0) continue;  // no dimension of its own
    total *= a.values.size();
    if (total > kMaxPoints)
      errors.fail(grid_at.value_or(Loc{}), "grid",
                  fmt::format("expands to more than {} points; split the study or shorten an axis", kMaxPoints));
  }
  const PointBuilder builder(axes, base, recipes, grid_at, errors);
  std::vector<GridPoint> points;
  std::unordered_set<std::string> ids;
  std::vector<size_t> index(axes.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    // Odometer order over the axes of their own: the last turns fastest, so the first declared
    // varies slowest. A linked axis then takes the index of the axis it goes with.
    size_t rest = n;
    for (size_t a = axes.size(); a-- > 0;) {
      if (axes[a].linked_to >= 0) continue;
      index[a] = rest % axes[a].values.size();
      rest /= axes[a].values.size();
    }
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].linked_to >= 0) index[a] = index[static_cast<size_t>(axes[a].linked_to)];
    GridPoint p = builder.build(index);
    // The same run declared twice (a custom recipe equal to a preset, say) is one run: the first wins.
    if (ids.insert(p.id).second) points.push_back(std::move(p));
  }
  assign_names(points, axes);
  return points;
}

}  // namespace detail

std::string compact_count(int64_t n) {
  if (n < 0) return "-" + compact_count(-n);
  if (n < 1000) return std::to_string(n);
  static const std::pair<double, const char*> kUnits[] = {{1e3, "k"}, {1e6, "M"}, {1e9, "B"}, {1e12, "T"}};
  size_t u = 0;
  while (u + 1 < std::size(kUnits) && static_cast<double>(n) >= kUnits[u + 1].first) ++u;
  std::string text = fmt::format("{:.3g}", static_cast<double>(n) / kUnits[u].first);
  // 999999 is 999.999k: three digits round it to 1000k, which reads better as 1M.
  if (std::stod(text) >= 1000) {
    if (u + 1 < std::size(kUnits)) ++u;
    const double scaled = static_cast<double>(n) / kUnits[u].first;
    // Past the largest unit, whole units (never an exponent: a name should read as a count).
    text = scaled >= 1000 ? fmt::format("{:.0f}", scaled) : fmt::format("{:.3g}", scaled);
  }
  return text + kUnits[u].second;
}

}  // namespace fp4::sweeps
