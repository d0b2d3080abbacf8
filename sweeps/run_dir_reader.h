// run_dir_reader.h — what the orchestrator reads from a run directory (docs/train.md lists its
// files): new metric rows for the store, the outcome in status.json, the heartbeat, and the last
// error line of the trainer's output. Read-only: the trainer alone writes the directory (the
// orchestrator adds only run.json, the config it asks for, and output.log, the trainer's
// stdout/stderr).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace fp4::sweeps {

// The files the orchestrator adds to a run directory.
inline std::filesystem::path requested_config_path(const std::filesystem::path& dir) { return dir / "run.json"; }
inline std::filesystem::path output_log_path(const std::filesystem::path& dir) { return dir / "output.log"; }

// Writes DIR/run.json, the resolved config the run is asked to train (pretty-printed, as the
// trainer writes its config.json), atomically and only when its bytes differ from what is there:
// the one writer of that file, for the local executor and the Slurm job alike.
void write_requested_config(const std::filesystem::path& dir, const nlohmann::json& config);

struct IngestResult {
  int64_t offset = 0;           // metrics.jsonl bytes ingested so far (complete lines)
  int64_t rows = 0;             // rows parsed by this call
  int64_t last_step = -1;       // the last train row's step seen by this call (-1: none)
  int64_t last_tokens = 0;      // its tokens
  double tokens_per_s = 0;      // its tokens_per_s
};

// Ingests the complete lines of DIR/metrics.jsonl past `offset` into the store for `run_id` (one
// transaction, upserts: idempotent). A file shorter than `offset` (the directory was started
// over) is read again from the start. A missing file ingests nothing and gives offset 0, so the
// file a new directory gets is read from its first byte (a store carried to another machine).
IngestResult ingest_metrics_file(store::Store& store, const std::string& run_id, const std::filesystem::path& dir,
                                 int64_t offset);

// status.json's verdict: `final` is false when there is none (the run has no outcome yet).
struct RunDirOutcome {
  bool final = false;
  store::RunState state = store::RunState::pending;  // succeeded, diverged or failed when final
  std::string detail;                  // the divergence reason or the failure's error
  int64_t step = 0;
};
RunDirOutcome read_outcome(const std::filesystem::path& dir);

// The heartbeat: the file's age by its mtime (what liveness is judged by) and its phase.
struct HeartbeatInfo {
  bool exists = false;
  double age_s = 0;
  std::string phase;            // "exited" once the trainer left
  std::string host;             // the trainer's host ("" in heartbeats of older versions)
};
HeartbeatInfo read_heartbeat(const std::filesystem::path& dir);

// True when a trainer on ANOTHER host may be alive in `dir` (a shared filesystem): its heartbeat
// names another host, is younger than `timeout_s`, and is not "exited". Trainers on this host are
// judged by the directory lock instead (base/directory_lock.h), which dies with its process.
bool alive_elsewhere(const HeartbeatInfo& h, double timeout_s);

// The last line of the trainer's output that reports an error ("fp4lab: error: ...",
// "fp4lab: failed: ..."), else the last non-empty line, else "".
std::string last_error_line(const std::filesystem::path& dir);

}  // namespace fp4::sweeps
