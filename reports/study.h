// study.h — everything a report shows that the store holds, read once: the grids and their axes,
// the runs with their states, final losses and curves, the BF16-relative gaps, the probe's rows,
// the attempts with their provenance, and the stored fits (read through fit/stored_fit.h). A
// report is rendered from a Study, so the renderers never touch SQL.
//
// Reading is read-only and works on a store that a sweep is writing right now (WAL): the report
// then shows what has finished and names what is missing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fit/stored_fit.h"
#include "sweeps/spec.h"
#include "sweeps/store.h"

namespace fp4::reports {

struct StudyGrid {
  int64_t id = 0;
  std::string name, file, base_dir, run_root, text, text_hash;
  nlohmann::json fit;                                   // the grid's [fit] table ({} when absent)
  std::vector<std::string> axis_names;                  // declaration order
  std::map<std::string, std::vector<std::string>> axis_values;  // distinct values, in grid order
  int64_t runs = 0;                                     // points recorded
  double created = 0;
};

struct StudyRun {
  sweeps::RunRecord record;
  int64_t steps = 0;                    // train.steps of its config
  int64_t batch_tokens = 0;
  std::string data_source;              // the config's data source, as written
  std::string data_fingerprint;         // what the trainer reported (metrics.jsonl's run row); "" unknown
  int64_t final_step = -1;              // the last eval/loss's step; -1: none yet
  std::optional<double> final_loss;     // that loss when finite
  bool final_is_nan = false;
  std::vector<std::string> grids;       // the grids that declare it
  nlohmann::json recipe;                // the config's resolved recipe
};

// A grid point that the TOML declares and the store does not hold yet (never recorded).
struct UnrecordedPoint {
  std::string name, recipe, model;
  int64_t n_params_nonembedding = 0, tokens = 0;
  uint64_t seed = 0;
};

// One row of the bf16_gap view (docs/sweeps.md).
struct GapRow {
  std::string id, name, recipe, model, state, bf16_id, bf16_state;
  int64_t n_params_nonembedding = 0, tokens = 0, final_step = 0, bf16_step = 0;
  uint64_t seed = 0;
  double loss = 0, bf16_loss = 0, gap = 0;  // NaN when the quantized run's loss is not finite
};

struct ProbeSlotRow {
  std::string run_id;
  sweeps::ProbeRow row;                 // non-finite measurements read as NaN
};
struct ProbeGemmRow {
  std::string run_id;
  sweeps::ProbeGemmRow row;
};

struct Study {
  std::string name;                     // the TOML's [sweep] name, else the first grid's, else the store's stem
  std::filesystem::path store_path;     // empty when the store does not exist yet
  std::filesystem::path spec_file;      // the TOML given, if any
  int schema_version = 0;
  std::vector<StudyGrid> grids;         // by id (recording order)
  std::vector<StudyRun> runs;           // by name
  std::vector<UnrecordedPoint> unrecorded;
  // run id → metric key → rows by step.
  std::map<std::string, std::map<std::string, std::vector<sweeps::MetricRow>>> curves;
  std::vector<GapRow> gaps;
  std::vector<ProbeSlotRow> probes;
  std::vector<ProbeGemmRow> probe_gemms;
  std::vector<sweeps::Store::AttemptRecord> attempts;  // every attempt, by id
  std::vector<fit::StoredFit> fits;     // the latest fit of each (law, scope): fit::read_fits
  std::string fits_error;               // why the fits could not be read ("" when they could)

  const StudyRun* run(const std::string& id) const;
  // Recipe labels of the runs, sorted.
  std::vector<std::string> recipes() const;
};

// Reads a study. `store` may be null (a TOML whose sweep has not run yet); `spec`, when given,
// adds its name and the points it declares that the store does not hold yet.
Study load_study(const sweeps::Store* store, const sweeps::SweepSpec* spec);

}  // namespace fp4::reports
