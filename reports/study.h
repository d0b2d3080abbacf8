// study.h — everything a report shows that the store holds, read once: the grids and their axes,
// the runs with their states, final losses and curves, the BF16-relative gaps, the shrinkage
// probe's rows, the attempts with their provenance, and the stored fits (read through
// fit/stored_fit.h). All of it comes through store/'s API, so the report holds no SQL.
//
// Reading is read-only and works on a store that a sweep is writing right now (WAL): the report
// then shows what has finished and names what is missing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fit/contrasts.h"
#include "fit/stored_fit.h"
#include "store/store.h"

namespace fp4::reports {

struct StudyGrid {
  int64_t id = 0;
  std::string name, file, base_dir, run_root, text, text_hash;
  nlohmann::json fit;                                   // the grid's [fit] table ({} when absent)
  std::vector<std::string> axis_names;                  // declaration order
  std::map<std::string, std::vector<std::string>> axis_values;  // distinct values, in grid order
  int64_t runs = 0;                                     // points recorded
  std::vector<std::string> run_ids;                     // those points' run ids, grid order
  double created = 0;
};

// What groups runs (a grid point's replicates; the runs compared seed by seed): fit/contrasts.h.
using fit::comparison_key;
using fit::replicate_key;

// One grid of the study: a grid its TOMLs declare (points recorded or not), or, with --store, a
// grid the store recorded.
struct DeclaredGrid {
  std::string name, file;
  bool main = false;                                    // the grid the figures, fits and gap table are of
  std::vector<std::string> ids;                         // its points' run ids, grid order
  std::string text_hash;                                // of its TOML text ("" when unknown)
  // What its points bring to the report (from their configs, whether they ran or not):
  bool seeds_of_main = false;    // not main, and some point is a main point's replicate (another seed)
  bool noise_floor = false;      // two or more of its own points are replicates of one point
  bool ablation = false;         // some point's recipe is an ablation variant (recipe_traits.h)
  bool probes = false;           // some point has probe.every > 0
};

struct StudyRun {
  store::RunRecord record;
  int64_t steps = 0;                    // train.steps of its config
  int64_t batch_tokens = 0;
  std::string data_source;              // the config's data source, as written
  int64_t final_step = -1;              // the last eval/loss's step; -1: none yet
  std::optional<double> final_loss;     // that loss when finite
  bool final_is_nan = false;
  std::vector<std::string> grids;       // the grids that declare it
  nlohmann::json recipe;                // the config's resolved recipe
  int64_t probe_every = 0;              // the config's probe.every
  std::string replicate_key, comparison_key;
};

// A grid point that the TOML declares and the store does not hold yet (never recorded).
struct UnrecordedPoint {
  std::string id, name, recipe, model, grid;
  int64_t n_params_nonembedding = 0, tokens = 0;
  uint64_t seed = 0;
  nlohmann::json recipe_json;           // the config's resolved recipe
  int64_t probe_every = 0;
  std::string replicate_key, comparison_key;
};

// What the report needs of any point of the study, recorded in the store or not.
struct PointFacts {
  std::string id, name, recipe, model;
  nlohmann::json recipe_json;
  int64_t probe_every = 0;
  uint64_t seed = 0;
  std::string replicate_key, comparison_key;
  const StudyRun* run = nullptr;        // null: not in the store yet
};

struct Study {
  std::string name;                     // the TOML's [sweep] name, else the first grid's, else the store's stem
  std::filesystem::path store_path;     // empty when the store does not exist yet
  // The git work tree that holds the study (its TOML, else its store); empty when none does. The
  // report writes the paths inside it relative to its root (display_path).
  std::filesystem::path repo_root;
  // The store's path as the report prints it (display_path).
  std::string store_display;
  std::filesystem::path spec_file;      // the TOML given, if any
  int schema_version = 0;
  std::vector<StudyGrid> grids;         // by id (recording order)
  std::vector<DeclaredGrid> declared;   // the study's grids: the main one first
  std::vector<std::string> unreadable_specs;
  // The true entropy rate (nats/token) of each synthetic source the main grid trains on, by the
  // source as written (store::DeclaredStudy); empty with --store and for a corpus.
  std::map<std::string, double> entropy_rates;
  std::vector<StudyRun> runs;           // by name
  std::vector<UnrecordedPoint> unrecorded;  // of every declared grid, each once
  // The main grid's run ids: the TOML given; with --store, the grids with a [fit] table (every
  // run when none has one). The loss curves, the scaling figures, the fits and the gap table are
  // of these runs; the other grids add seeds (noise floor), ablations and probes.
  std::set<std::string> main_ids;
  std::string main_label;               // "first-study (results/first-study/study.toml)"
  store::Curves curves;                 // run id → metric key → rows by step
  std::vector<store::Bf16GapRow> gaps;
  std::vector<store::RunProbeRow> probes;
  std::vector<store::RunProbeGemmRow> probe_gemms;
  std::vector<store::Store::AttemptRecord> attempts;  // every attempt, by id
  std::vector<fit::StoredFit> fits;     // every stored fit, by id: fit::read_all_fits (reports/fits.h chooses)
  std::string fits_error;               // why the fits could not be read ("" when they could)
  // The latest paired contrasts `fp4lab fit` stored for this study's grid (with --store: the
  // latest of any grid); nullopt when none.
  std::optional<fit::ContrastSet> contrasts;

  const StudyRun* run(const std::string& id) const;
  bool in_main(const StudyRun& r) const { return main_ids.count(r.record.id) != 0; }
  // The main grid's runs, in run order.
  std::vector<const StudyRun*> main_runs() const;
  // The runs of the store that replicate `r` (same config but the seed), `r` included, by seed.
  std::vector<const StudyRun*> replicates(const StudyRun& r) const;
  // Every run of the store and every point not recorded yet, by id.
  std::map<std::string, PointFacts> points() const;
  // The declared grids with `flag` set (a member pointer of DeclaredGrid).
  std::vector<const DeclaredGrid*> grids_with(bool DeclaredGrid::*flag) const;
  // Recipe labels of the runs and of the points not recorded yet, sorted.
  std::vector<std::string> recipes() const;
};

// A path as the report prints it, so that a report names no machine's directories where it need
// not and its "Reproduce" commands run from the repository's root: relative to `repo_root` when it
// lies inside it, else relative to the working directory when it lies under that, else as given.
// A relative path is read against the working directory when it names a file there; otherwise (a
// path recorded in the store from another working directory) it is kept as given.
std::string display_path(const std::string& path, const std::filesystem::path& repo_root);

// Reads a study. `store` may be null (a TOML whose sweep has not run yet); `declared`, when given
// (a TOML, read with the grids beside it: sweeps/study.h), adds the study's name (the main TOML's),
// its grids and the points they declare that the store does not hold yet; null with --store.
Study load_study(const store::Store* store, const store::DeclaredStudy* declared);

}  // namespace fp4::reports
