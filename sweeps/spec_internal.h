// spec_internal.h — private to sweeps/spec*.cpp: the parsed pieces of a sweep spec that the grid
// expansion combines (spec.cpp reads the sections, spec_grid.cpp reads [grid] and expands it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "sweeps/spec.h"
#include "sweeps/spec_toml.h"

namespace fp4::sweeps::detail {

// How a run config field is written in TOML (docs/train.md has the fields themselves).
enum class FieldKind : uint8_t {
  integer,  // an integer (or an integral float)
  count,    // a token count: also "25M"-style strings
  seed,     // an integer >= 0
  number,   // any finite number
  string,
  boolean,  // true or false
  table,    // a section of its own: its fields are those under its path ("model.moe")
};

// Every field of the run config's model, train, eval, probe and checkpoint sections, by dotted
// path ("train.lr"). A test checks it against config_to_json, so it cannot drift from the engine.
const std::map<std::string, FieldKind>& run_config_fields();
// The fields of one section ("train" → {"lr", ...}; "model" → {..., "moe"}; "model.moe" → {"experts", ...}).
std::set<std::string> section_fields(const std::string& section);
// Reads the value of the field at `path` ("train.lr", "model.moe") as the run config's JSON wants
// it, refusing another type (or, in a table, an unknown key) at its location; `key` names it in
// messages ("grid.model.d_ff").
nlohmann::json read_field(const toml::node& n, const std::string& path, const std::string& key,
                          const SpecErrors& errors);

// Where a value of a point's config came from: a TOML location and the key path to name there.
struct Origin {
  Loc at;
  std::string key;  // "train.lr", "grid.recipe", "data.source"
};

// The run config every point starts from: [model], [train], [eval], [probe], [checkpoint], [data]
// and [sweep] device, as JSON, and where each field was written.
struct BaseConfig {
  nlohmann::json config = nlohmann::json::object();
  std::map<std::string, Origin> origins;  // config path ("train.lr", "model", "data", "device") → origin
  uint32_t vocab_size = 256;              // the data's vocabulary, for the parameter counts
  uint64_t train_tokens = 0;              // the data's splits, where known (0: endless or not built)
  uint64_t validation_tokens = 0;
};

// A custom recipe ([recipes.<name>]) in the form the run config's "recipe" field takes.
struct RecipeDef {
  nlohmann::json config;
  Loc at;
};

enum class AxisKind : uint8_t { model, tokens, tokens_per_param, recipe, seed, field };

struct AxisValue {
  nlohmann::json value;  // normalized: numbers typed as their field wants, tokens as an integer
  std::string text;      // for GridPoint::axes and run names
  Loc at;
};

struct Axis {
  std::string name;   // the dotted path as declared under [grid]: "recipe", "train.lr"
  AxisKind kind = AxisKind::field;
  std::string field;  // the config path it sets: "train.lr"; "train.tokens" for tokens; "train.seed" for seed
  Loc key_at;
  std::vector<AxisValue> values;
  // A linked axis ({with = "model", values = [...]}) is no dimension of its own: it takes its
  // k-th value at the points where the axis it is linked with takes its k-th (per-size learning
  // rates, say). -1: an ordinary axis.
  int linked_to = -1;
};

// Reads [grid] (nullptr: no grid) into axes in declaration order, checking every value's type,
// duplicates, and conflicts between axes and with the base config.
std::vector<Axis> read_grid(const toml::table* grid, const BaseConfig& base,
                            const std::map<std::string, RecipeDef>& recipes, const SpecErrors& errors);

// The cartesian product of the axes (the first axis varies slowest), each point resolved by the
// engine's run config; points with one id are kept once. `grid_at`: [grid]'s location, if any.
std::vector<GridPoint> expand_grid(const std::vector<Axis>& axes, const BaseConfig& base,
                                   const std::map<std::string, RecipeDef>& recipes, std::optional<Loc> grid_at,
                                   const SpecErrors& errors);

}  // namespace fp4::sweeps::detail
