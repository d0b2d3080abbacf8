// store.h — the study's SQLite store (docs/sweeps.md "The store" documents every table and view
// with example queries). Every SQL statement of fp4lab is in store/; what goes in and comes out is
// plain records: no sweep spec, no engine type, so fit/ and reports/ read a store without linking
// the engine.
//
// One file per study, WAL journal, a busy timeout so that a reader (`sweep status`) or a second
// orchestrator waits instead of failing with "database is locked". Every change that touches more
// than one row runs in one transaction (BEGIN IMMEDIATE, so two writers serialize on the lock
// instead of deadlocking on an upgrade). `PRAGMA user_version` numbers the schema; opening an older
// file applies the missing migrations in order, each in its own transaction.
//
// Writers: the orchestrator processes (`sweep run`, `sweep ingest`). Trainers never open the store:
// they write their run directory, and the orchestrator ingests it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/probe_rows.h"
#include "base/user_error.h"
#include "store/grid_record.h"

struct sqlite3;

namespace fp4::store {

// The life of a run. `orphaned` is stored when an orchestrator finds a running run whose lease
// has expired (its orchestrator died); the next `sweep run` resumes it from its last checkpoint.
enum class RunState : uint8_t { pending = 0, running, succeeded, failed, diverged, orphaned };
const char* run_state_name(RunState s);            // "pending", ...
RunState parse_run_state(const std::string& text); // throws UserError

struct RunRecord {
  std::string id;
  std::string name;
  std::string config_json;        // the canonical resolved config
  std::string match_key;
  std::string recipe;             // recipe label
  bool baseline = false;
  std::string model;              // model label
  int64_t n_params = 0, n_params_nonembedding = 0, tokens = 0;
  uint64_t seed = 0;
  double flops_per_token = 0;
  RunState state = RunState::pending;
  int attempts = 0;               // attempts started
  std::string dir;                // run directory (absolute)
  std::string error;              // the last attempt's error line ("" when none)
  std::string lease_owner;        // "" when no lease
  double lease_expires = 0;       // Unix seconds
  int64_t ingested_bytes = 0;     // metrics.jsonl bytes already ingested (complete lines only)
  std::string data_fingerprint;   // what the trainer reported in its run row; "" until ingested
  // The numerics identity it trained under (base/numerics_identity.h): the trainer's run row's, or
  // for a run recorded before identities were, its latest attempt's commit's; absent: not known.
  std::optional<int> numerics;
  // The non-embedding parameters one token uses: n_params_nonembedding for a dense model, the
  // router and top_k + shared experts per MoE block for an MoE model (docs/model.md).
  int64_t n_params_active_nonembedding = 0;
};

// Where and how an attempt ran (provenance, one row per attempt).
struct Provenance {
  std::string host;
  std::string devices;            // "cpu:2" or "cuda:0"
  std::string gpu_name, gpu_driver, cuda_version;  // "" when none
  std::string git_commit;
  bool git_dirty = false;
  std::string fp4lab_version;
  nlohmann::json libraries;       // {"sqlite": "3.40.1", ...}
};

struct AttemptEnd {
  int exit_code = 0;              // the trainer's exit code; -signal when killed by a signal
  RunState state = RunState::failed;  // what the attempt left the run in
  std::string error;              // one line, "" on success
};

// One metrics.jsonl row as the store keeps it.
struct MetricRow {
  std::string key;                // "train/loss", "train/lr", "eval/loss", "eval/bpb", ...
  int64_t step = 0;
  int64_t tokens = 0;
  double value = 0;               // meaningless when is_nan
  bool is_nan = false;
};
// The shrinkage probe's rows, as the trainer writes them (their fields are listed once, there).
using ProbeRow = SlotProbeRow;            // kind "probe": one quantized slot at one step
using ProbeGemmRow = GemmProbeRow;        // kind "probe_gemm"
// A probe row with the run it belongs to, as the report reads every run's rows at once.
struct RunProbeRow {
  std::string run_id;
  ProbeRow row;                   // non-finite measurements read as NaN
};
struct RunProbeGemmRow {
  std::string run_id;
  ProbeGemmRow row;
};
// What ingesting a slice of metrics.jsonl produced.
struct MetricsBatch {
  std::vector<MetricRow> metrics;
  std::vector<ProbeRow> probes;
  std::vector<ProbeGemmRow> probe_gemms;
  nlohmann::json run_info;        // the last "run" row's fields (n_params, flops_per_token, ...), or null
  int64_t consumed_bytes = 0;     // bytes of complete lines parsed (a cut-short last line is not)
};

// One row of `fits` (docs/fit.md "The stored fit" documents the JSON columns; fit/stored_fit.h reads
// and writes them). The store keeps the text as given.
struct FitRecord {
  int64_t id = 0;
  std::string law, scope, input_hash;
  std::string params_json = "{}", intervals_json = "{}", quality_json = "{}", options_json = "{}",
              predictions_json = "{}";
  int64_t n_points = 0;
  std::string fp4lab_version;
  double created = 0;             // Unix seconds
};

// One row of `contrasts` (docs/statistics.md documents the columns; fit/contrasts.h computes them).
struct ContrastRecord {
  std::string family;
  bool primary = false;
  std::string recipe, against, baseline, metric, point, model;
  int64_t n_params_nonembedding = 0, tokens = 0;
  int64_t seeds = 0, wins = 0, baseline_seeds = 0, missing_twins = 0;
  double baseline_mean = 0, mean_pp = 0, sd_pp = 0, se_pp = 0, lo_pp = 0, hi_pp = 0;
  double p_t = 0, p_sign_flip = 0, p_holm = 0;  // NaN is stored as NULL and read back as NaN
  double sd_recipe_pp = 0, sd_against_pp = 0, correlation = 0;
  std::string sign_flip_method;
  std::string d_json = "[]";
};
// One row of `contrast_sets` with its contrasts, in position order.
struct ContrastSetRecord {
  int64_t id = 0;
  std::string grid, input_hash, source;
  std::string families_json = "[]", notes_json = "[]";
  std::string fp4lab_version;
  double created = 0;             // Unix seconds
  std::vector<ContrastRecord> contrasts;
};

// A run with its final validation loss, what a scaling-law fit reads (the final_losses view, plus
// the runs that have no eval/loss yet, so that they can be listed as excluded).
struct FinalLossRecord {
  std::string id, name, recipe, model, match_key, error;
  bool baseline = false;
  int64_t n_params = 0, n_params_nonembedding = 0, tokens = 0;
  uint64_t seed = 0;
  RunState state = RunState::pending;
  std::optional<int64_t> final_step;   // nullopt: no eval/loss recorded
  double final_loss = 0;               // NaN when the last eval/loss was not finite
  bool final_is_nan = false;           // the last eval/loss was recorded as not finite
};

// A grid as the store holds it, with the runs it links in grid order.
struct StoredGrid {
  int64_t id = 0;
  std::string name, file, base_dir, run_root, text, text_hash;
  nlohmann::json fit;                             // {} when absent or unreadable
  std::vector<std::string> axis_names;
  struct Link {
    std::string run_id;
    nlohmann::json axes;                          // this grid's axis values for the run ({} when unreadable)
  };
  std::vector<Link> links;
  double created = 0;
};

// One row of the bf16_gap view (docs/sweeps.md): a quantized run beside its BF16 run at the same
// grid point (recipe, model, D and seed). `loss` is NaN when the quantized run's final loss is not
// finite (then so is `gap`).
struct Bf16GapRow {
  std::string id, name, recipe, model, state, bf16_id, bf16_state;
  int64_t n_params_nonembedding = 0, tokens = 0, final_step = 0, bf16_step = 0;
  uint64_t seed = 0;
  double loss = 0, bf16_loss = 0, gap = 0;
};

// Every metric of every run: run id → metric key → rows by step.
using Curves = std::map<std::string, std::map<std::string, std::vector<MetricRow>>>;

// The version of the SQLite library the store runs on ("3.40.1"), for provenance.
std::string sqlite_library_version();

class Store {
 public:
  // read_if_present: read-only, but a missing file or one that holds no store yet (another
  // process is creating it right now) gives null instead of an error: what `sweep plan` and
  // `sweep status` want, since they must work before and while a sweep runs.
  // read_migrating: read-only, but a file at an older schema is first migrated by a writable open:
  // what `fp4lab fit` wants, which reads a store and may then add fits to it.
  enum class Mode { read_only, read_write, read_if_present, read_migrating };
  // Opens (read_write: creates if missing, migrates an older schema; read_only: a missing file or
  // an older schema is a UserError naming the file and what to do). A schema newer
  // than this fp4lab knows is refused either way.
  static std::unique_ptr<Store> open(const std::filesystem::path& path, Mode mode);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  static int latest_schema_version();
  int schema_version() const;
  const std::filesystem::path& path() const { return path_; }

  // Records a grid (its TOML text, hash, name, path) and its points: new runs are inserted as
  // pending with their directory grid.run_root/<id>; runs already present are left as they are
  // (only linked to this grid, with this grid's axis values). One transaction. Returns the grid's
  // row id.
  int64_t record_grid(const GridRecord& grid);
  // Every grid recorded, by id, with its links.
  std::vector<StoredGrid> grids() const;

  std::optional<RunRecord> run(const std::string& id) const;
  std::vector<RunRecord> runs() const;                            // every run, by name
  std::vector<RunRecord> runs_of_grid(const std::string& text_hash) const;

  // Leases: a run is executed only by the orchestrator holding its lease. try_lease takes it when
  // nobody holds it or the holder's lease expired (then a `running` run becomes orphaned first);
  // it marks the run running. Atomic (one transaction). Returns false when someone else holds it.
  bool try_lease(const std::string& run_id, const std::string& owner, double now, double ttl_s);
  // Extends every lease `owner` holds to now + ttl_s (the orchestrator's keep-alive).
  void renew_leases(const std::string& owner, double now, double ttl_s);
  void release_lease(const std::string& run_id, const std::string& owner);
  // Runs in `running` whose lease expired before `now` become `orphaned`; returns how many.
  int mark_orphans(double now);

  // Attempts: begin counts an attempt (runs.attempts + 1) and records provenance; end stores the
  // exit code, error and the run's new state (and releases nothing: leases are separate).
  int64_t begin_attempt(const std::string& run_id, const Provenance& p, double start_time, int pid);
  void end_attempt(int64_t attempt_id, const AttemptEnd& end, double end_time);
  void set_state(const std::string& run_id, RunState s, const std::string& error);

  // Upserts a parsed batch for a run (metric (run, key, step) replaces the old value, likewise
  // probes) and advances runs.ingested_bytes to `new_offset`, in one transaction. run_info, when
  // present, updates the run's counts (n_params, flops_per_token, tokens) and data fingerprint.
  void ingest(const std::string& run_id, const MetricsBatch& batch, int64_t new_offset);
  // Forgets everything ingested for a run (a run directory that was started over).
  void reset_metrics(const std::string& run_id);

  // Reads.
  std::vector<MetricRow> metrics(const std::string& run_id, const std::string& key) const;
  int64_t metric_count(const std::string& run_id) const;
  // The last eval/loss of a run (the validation loss at the end), if any.
  std::optional<double> final_loss(const std::string& run_id) const;
  // Every metric row of the store.
  Curves curves() const;
  // The bf16_gap view, by recipe, N (non-embedding), D, seed and name.
  std::vector<Bf16GapRow> bf16_gaps() const;
  // Every probe row of the store, by run and then the row's key.
  std::vector<RunProbeRow> probes() const;
  std::vector<RunProbeGemmRow> probe_gemms() const;
  struct AttemptRecord {
    int64_t id = 0;
    std::string run_id;
    double start = 0, end = 0;     // end 0 while running
    int exit_code = 0;
    std::string error;
    Provenance provenance;
  };
  std::vector<AttemptRecord> attempts(const std::string& run_id) const;

  // Every run with its last eval/loss (nullopt final_step when it has none), by recipe, then N
  // (non-embedding), D, seed and name.
  std::vector<FinalLossRecord> final_losses() const;

  // Fits (written by `fp4lab fit`). insert_fit appends a row and returns its id (record.id is
  // ignored); fits() returns every row by id; find_fit the latest row with this law, scope and
  // input hash.
  int64_t insert_fit(const FitRecord& record);
  std::vector<FitRecord> fits() const;
  std::optional<FitRecord> find_fit(const std::string& law, const std::string& scope,
                                    const std::string& input_hash) const;

  // Paired contrasts (written by `fp4lab fit`). insert_contrast_set writes a set and its rows in one
  // transaction and returns its id (record.id is ignored; created 0: now); contrast_sets returns
  // every set by id; find_contrast_set the latest set with this grid and input hash.
  int64_t insert_contrast_set(const ContrastSetRecord& record);
  std::vector<ContrastSetRecord> contrast_sets() const;
  std::optional<ContrastSetRecord> find_contrast_set(const std::string& grid, const std::string& input_hash) const;

  // Raw access for the store's tests.
  sqlite3* handle() const { return db_; }

 private:
  Store(sqlite3* db, std::filesystem::path path);
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace fp4::store
