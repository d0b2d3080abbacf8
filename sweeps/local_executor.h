// local_executor.h — `fp4lab sweep run`: runs a grid's missing runs on this machine.
//
// Every run is a child process (`fp4lab train --config DIR/run.json --dir DIR --resume --quiet`,
// exec'd with an argument vector, working directory = the TOML file's directory) on a slot: a GPU
// (runs_per_gpu runs may share one), or a group of [executor] gpus_per_run GPUs for a multi-GPU
// run (the visible GPUs in consecutive groups), for runs whose device is "cuda"; a CPU job otherwise. The
// orchestrator holds a lease on each run it executes (store.h), ingests metrics.jsonl into the
// store while the run progresses and once it ends, kills a child whose heartbeat falls silent for
// [executor] heartbeat_timeout_s (hung), and records the outcome:
//   exit 0 → succeeded; 3 → diverged (a result); 75 (directory busy), 130/143 or SIGKILL/SIGTERM/
//   SIGINT/SIGHUP → orphaned, resumed again (up to max_attempts interruptions per invocation);
//   anything else → failed, with the trainer's last error line.
// Idempotent: succeeded and diverged runs are never started again; orphaned runs resume from their
// last checkpoint; failed runs are retried only with --retry-failed (up to max_attempts failures).
// The first SIGINT/SIGTERM stops cleanly: no new runs, each child gets one SIGTERM (it finishes its
// step, checkpoints and exits), everything is ingested, and the command exits 128 + signal. A
// second signal kills the children at once.
// A time limit (--time-limit) starts no run that is expected to end after it (run_duration.h:
// from the runs the store has seen finish; a run nothing can be said about yet is started), and
// when it comes, stops the running ones as the first signal does; the command then exits 124 if
// runs are left.
#pragma once

#include <filesystem>
#include <ostream>
#include <vector>

#include "sweeps/spec.h"

namespace fp4::sweeps {

struct LocalRunOptions {
  std::vector<std::string> gpus;    // --gpus (gpu_list.h): overrides [executor] gpus and CUDA_VISIBLE_DEVICES
  int jobs = 0;                     // --jobs: CPU runs at once (0: [executor] cpu_jobs)
  bool retry_failed = false;
  bool mix_numerics = false;        // --mix-numerics: start runs whose twins trained under other numerics
  std::filesystem::path trainer;    // the fp4lab executable the children run (default: this one)
  double lease_ttl_s = 60;          // a lease not renewed for this long lets others take the run
  double poll_interval_s = 0.2;
  bool terminal = false;            // redraw one progress line instead of printing plain lines
  double progress_every_s = 30;     // plain progress lines (not on a terminal)
  double time_limit_s = 0;          // --time-limit: seconds from the start (0: none)
};

// `sweep run`'s exit code when the time limit left runs to do.
constexpr int kExitTimeLimit = 124;

// Returns the exit code: 0 when every run of the grid has an outcome and none failed, 1 when some
// failed (or could not be run: running elsewhere counts as not done, with a note), 128 + signal
// when stopped by SIGINT/SIGTERM, kExitTimeLimit when the time limit left runs to do.
int run_sweep_locally(const SweepSpec& spec, const LocalRunOptions& options, std::ostream& out);

}  // namespace fp4::sweeps
