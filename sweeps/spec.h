// spec.h — a sweep declared in TOML (docs/sweeps.md has the format with a full example): parsed,
// validated strictly, and expanded into grid points, each a fully resolved run config with its id.
//
// Identity: a point's run config is resolved by engine/run/config (every default written in); its
// canonical JSON (sorted keys, shortest round-trip numbers) hashed with SHA-256 is the run id. The
// same point declared twice, in one grid or in two, is one run; labels that do not change the
// computation (the sweep's name, a custom recipe's TOML name, the order of keys or axes, how a
// number is spelled) do not change the id.
//
// Errors are the user's: each is a UserError with one line
// "file:line:col: <key>: what is wrong; what to do", thrown before anything is expanded further.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/grid_record.h"

namespace fp4::sweeps {

// [executor]: how `sweep run` schedules runs on this machine.
struct ExecutorSpec {
  std::vector<std::string> gpus;  // indices or UUIDs (gpu_list.h); empty: from --gpus or CUDA_VISIBLE_DEVICES
  int runs_per_gpu = 1;           // several small runs may share one GPU
  int gpus_per_run = 1;           // data parallelism: each run trains on this many GPUs of one host
                                  // (written into every run's config as "gpus" when not 1)
  int cpu_jobs = 1;               // concurrent runs when runs use the CPU
  int threads_per_job = 0;        // OMP_NUM_THREADS per CPU run; 0: cores / cpu_jobs (at least 1)
  int max_attempts = 3;           // attempt cap for --retry-failed
  std::string order = "largest";  // "largest" (most FLOPs first) or "declared" (grid order)
  double heartbeat_timeout_s = 60;  // a running run whose heartbeat is older is orphaned
  std::string mps = "auto";       // "auto": an MPS daemon for runs sharing a GPU when available; "off"
};

// One expanded grid point.
struct GridPoint {
  std::string id;                 // SHA-256 of `canonical`, 64 hex digits
  std::string name;               // readable, unique in the sweep: "d4-50M-ufp4-s0" (+ "-<id8>" on a clash)
  nlohmann::json config;          // the resolved run config (engine/run config_to_json)
  std::string canonical;          // its canonical dump (the hashed bytes)
  std::string match_key;          // SHA-256 of the canonical config without "recipe": runs that
                                  // differ only in their recipe share it (the BF16-relative gap)
  std::map<std::string, std::string> axes;  // axis name → this point's value as text ("recipe" → "ufp4")
  std::string recipe_label;       // the recipe's name in the TOML (a preset or a [recipes.<name>])
  bool baseline = false;          // the recipe is bf16 everywhere
  std::string model_label;        // "d4" or "L4-d256" for explicit dims
  int64_t n_params = 0;           // total
  int64_t n_params_nonembedding = 0;
  int64_t n_params_active_nonembedding = 0;  // what one token uses (MoE); = n_params_nonembedding for dense
  int64_t tokens = 0;             // D, as resolved (whole steps)
  uint64_t seed = 0;
  double flops_per_token = 0;     // the engine's count (docs/model.md)
};

struct SweepSpec {
  std::filesystem::path file;     // as given
  std::filesystem::path base_dir; // the TOML file's directory: relative paths resolve against it,
                                  // and runs execute with it as their working directory
  std::string text;               // the TOML text, byte for byte
  std::string text_hash;          // SHA-256 of text
  std::string name;               // [sweep] name
  std::filesystem::path store;    // [sweep] store, resolved against base_dir (default "<name>.db")
  std::filesystem::path run_root; // [sweep] run_root, resolved against base_dir (default "runs")
  ExecutorSpec executor;
  store::FitTable fit;            // [fit], validated (every key unset when absent)
  store::CompareTable compare;    // [compare], validated (present false when absent)
  std::map<std::string, std::string> recipe_bases;  // [recipes.NAME] base: NAME → the preset it starts from
  std::vector<std::string> axis_names;  // in declaration order
  std::vector<GridPoint> points;        // grid order: the first axis varies slowest; duplicates
                                        // (two points with one id) are merged into one
};

// How far the spec's data source is checked when it is read.
enum class DataCheck : uint8_t {
  // plan, status, ingest: a shard directory not built yet is assumed to hold bytes (a study can be
  // planned before its data exists); one that is built is opened and checked.
  plan,
  // run, slurm: runs are about to start, so the source must open as their trainers will open it.
  run,
};

// Parses and expands. `file` names the source in messages; `base_dir` resolves relative paths.
// Where the data's splits are known, every point is checked against them too (eval.tokens
// within the validation split, a shuffled stream's window within the training split).
SweepSpec parse_sweep_spec(const std::string& text, const std::filesystem::path& file,
                           const std::filesystem::path& base_dir, DataCheck check = DataCheck::plan);
// Reads the file (an unreadable file is a UserError naming it) and parses it.
SweepSpec load_sweep_spec(const std::filesystem::path& file, DataCheck check = DataCheck::plan);

// The grid as the store records it (Store::record_grid).
store::GridRecord grid_record(const SweepSpec& spec);

// "50M", "1.5B", "262k", "1000": tokens written compactly for run names.
std::string compact_count(int64_t n);

}  // namespace fp4::sweeps
