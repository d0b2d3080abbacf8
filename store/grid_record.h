// grid_record.h — a study as its TOMLs declare it, in plain records: the grids, their points and
// their [fit] tables. sweeps/ reads the TOMLs into these once per command (sweeps/study.h);
// Store::record_grid writes a grid, and fit/ and reports/ take the study from here. They live in
// store/ because fit/ and reports/ see only store/ and base/ (ARCHITECTURE.md's arrows): a
// description that named a sweep spec would drag the engine in with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4::store {

// One grid point as a grid records it: the run it names (inserted as pending when new) and this
// grid's name and axis values for it.
struct GridPointRecord {
  std::string id, name;
  std::string config_json;        // the canonical resolved config (the hashed bytes)
  std::string match_key, recipe, model;
  bool baseline = false;
  int64_t n_params = 0, n_params_nonembedding = 0, tokens = 0;
  uint64_t seed = 0;
  double flops_per_token = 0;
  int64_t n_params_active_nonembedding = 0;  // = n_params_nonembedding for a dense model
  std::map<std::string, std::string> axes;  // axis name → this point's value as text
};

// A grid's [fit] table (docs/fit.md "Options") as the TOML gives it. The study reader validates
// it (sweeps/spec.cpp, with the TOML's line and column in its errors) and fit/ applies it under the
// command's flags (fit/fit_study.h); nobody else reads its keys. An unset key keeps fit's default.
struct FitTable {
  std::vector<std::string> laws;                 // "chinchilla", "precision"; empty: not set
  std::optional<std::string> n;                  // "nonembedding" or "total"
  std::optional<int64_t> bootstrap;              // >= 0
  std::optional<uint64_t> seed;
  std::optional<double> huber_delta;             // > 0
  std::optional<bool> gamma;
  std::optional<std::vector<std::pair<double, double>>> targets;  // (N, D), each > 0
  bool operator==(const FitTable&) const = default;
};
// A grid's [compare] table (docs/statistics.md "The [compare] table"): the paired contrasts
// `fp4lab fit` tests over seeds. A contrast "A - B" compares recipe A with recipe B (d = (L_A -
// L_B) / L̄_bf16 per seed); a family is a set of contrasts whose tests (each contrast at each grid
// point with two or more paired seeds) share one Holm adjustment per metric. Validated by the study
// reader (sweeps/spec.cpp); empty `present`: no table, fit/ uses its defaults and says so.
inline constexpr const char* kContrastMetrics[] = {"final_eval", "train_tail"};  // every metric, in test order
struct CompareFamily {
  std::string name;
  std::vector<std::pair<std::string, std::string>> contrasts;  // (A, B)
  // The metrics the family is tested on, as `metrics = [...]` lists them (kContrastMetrics' names);
  // empty: the table does not say, and the family is tested on every metric (the default).
  std::vector<std::string> metrics;
  bool operator==(const CompareFamily&) const = default;
};
struct CompareTable {
  bool present = false;
  std::vector<std::pair<std::string, std::string>> primary;    // the pre-registered contrasts
  std::vector<CompareFamily> families;
  bool operator==(const CompareTable&) const = default;
};

// The table as the store keeps it (grids.fit_json): its keys as the TOML names them, {} when none.
nlohmann::json fit_table_json(const FitTable& table);

// A grid as its TOML declares it (docs/sweeps.md).
struct GridRecord {
  std::string text_hash;          // SHA-256 of text: one row per distinct text
  std::string name;               // [sweep] name
  std::filesystem::path file, base_dir, run_root;
  std::filesystem::path store;    // [sweep] store, resolved against base_dir
  std::string text;               // the TOML text, byte for byte
  FitTable fit;
  CompareTable compare;
  std::map<std::string, std::string> recipe_bases;  // [recipes.NAME] base = "PRESET": NAME → PRESET
  std::vector<std::string> axis_names;  // declaration order
  std::vector<GridPointRecord> points;  // grid order
};

// A study: the grid given (its TOML) and the grids beside it that share its store (a study's main
// grid, its noise floor, ablation and probe grids: results/first-study/).
struct DeclaredStudy {
  GridRecord main;
  std::vector<GridRecord> others;       // by file name; read only where a command needs them (report)
  std::vector<std::string> unreadable;  // "file: why" of the TOMLs beside it that did not parse
  // The true entropy rate (nats/token) of each synthetic data source the main grid trains on, by
  // the source as its configs write it: no model's loss can go below it, so the report sets the
  // fitted irreducible loss E beside it. Filled only where the grids beside it are read (the
  // report); a corpus has no known rate and no entry.
  std::map<std::string, double> entropy_rates;
};

}  // namespace fp4::store
