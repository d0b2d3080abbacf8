// trainer.h — one training run, start to finish: `fp4lab train --config run.json --dir DIR`.
//
// The loop, for each optimizer step s = 1..S (the random streams see step index s − 1):
//   grads = 0; for each of the A micro-steps: the next micro-batch of the train stream, forward
//   and backward adding (1/A)·∂loss/∂θ; the loss is the mean of the A micro-batch losses.
//   A non-finite loss or a quantizer's non-finite flag ends the run as diverged.
//   global gradient norm (fp64, buffer order) → clip factor → AdamW with lr(s − 1) → train row.
//   Then, when due: evaluation (every eval.every steps and at the last), the shrinkage probe
//   (every probe.every steps), a checkpoint (every checkpoint.every steps, at the last, and when
//   asked to stop). Evaluation and the probe also run once before the first step of a fresh run.
// The loop runs on the backend the config's `device` names (backend.h): "cpu" (engine/model) or
// "cuda" (engine/cuda_model, in builds with CUDA).
// Everything the run writes goes into DIR (run_dir.h lists the files; docs/train.md their
// contents). A resumed run continues from the newest valid checkpoint and produces the same bits
// as a run that was never interrupted: nothing it computes depends on the wall clock, the thread
// count or the process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/run/config.h"
#include "engine/run/ranks.h"

namespace fp4::run {

struct TrainOptions {
  std::filesystem::path config;          // the run's JSON config
  std::filesystem::path dir;             // the run directory
  bool resume = false;                   // continue the run in `dir` (from scratch if it has none)
  int64_t stop_after = -1;               // act as if SIGTERM arrived during this step (tests)
  std::string device;                    // non-empty: overrides the config's device (--device)
  int64_t gpus = 0;                      // > 0: overrides the config's gpus (--gpus)
  // Set: this process is one rank of a data-parallel run (ranks.h; rank 0 alone writes DIR).
  std::optional<RankInfo> rank;
  bool echo = true;                      // copy train.log's lines to stderr
  double heartbeat_interval_s = 5.0;
};

enum class Outcome : uint8_t { succeeded, diverged, interrupted };

struct TrainResult {
  Outcome outcome = Outcome::succeeded;
  int64_t step = 0;      // steps completed
  std::string reason;    // diverged: why
  int signal = 0;        // interrupted: the signal (SIGTERM for stop_after)
};

// Exit codes of `fp4lab train` (docs/train.md): 0 succeeded, 3 diverged, 128 + signal when
// interrupted (130 SIGINT, 143 SIGTERM: the run is resumable). Bad input (exit 2) and failures
// (exit 1) are exceptions: UserError before anything is written into DIR, and
// std::runtime_error once the run has started (status.json then says "failed").
constexpr int kExitDiverged = 3;
int exit_code(const TrainResult& r);

// The device a run trains on: `device_flag` (--device) when given; else the config's "device" when
// its file named one (config.device_named); else "cuda" when this build has CUDA and a GPU is
// visible, "cpu" otherwise. Sets config.device (part of the config, so of its hash) and returns how
// it was chosen, for the log.
std::string pick_device(RunConfig& config, const std::string& device_flag);

// The config as the run would train it: loaded, the device picked, --gpus applied, and checked
// for the GPUs it names (gpus_error once the device is known; with gpus > 1, a build with NCCL and
// at least that many visible GPUs). Throws UserError. `fp4lab train` asks it whether to start
// ranks (rank_launcher.h) or to train in this process.
RunConfig planned_config(const TrainOptions& options);

// Runs (or resumes) the run, or with options.rank its share of a data-parallel one: every rank
// runs the same loop on its micro-batches (data_split.h), the gradients are summed over the ranks
// after the last micro-step (TrainBackend::all_reduce), and every rank takes the same optimizer
// step; rank 0 alone writes the run directory. A config with gpus > 1 needs options.rank (the
// launcher's children have it). SIGTERM and SIGINT are caught for the duration: the current step
// finishes, a checkpoint is written, and the result says interrupted; a second signal of the
// same kind kills the process at once.
TrainResult train(const TrainOptions& options);

}  // namespace fp4::run
