// sweeps_test_helpers.h — what the orchestrator tests share: tiny grids on the synthetic source,
// and running `fp4lab sweep ...` as a child process that a test can kill at any moment.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/child_process.h"
#include "tests/test_support.h"

namespace fp4::test {

// A grid of tiny runs (d1 at sequence length 32, a few dozen steps, a checkpoint every 5 steps; on
// the CPU unless `device` names another) declared in `dir`/<name>.toml with the store <name>.db and the run root <name>-runs.
struct TinyGrid {
  std::string grid;                    // the [grid] table's lines
  std::string data = kTinyRunData;
  std::string executor;                // more [executor] lines
  std::string device;                  // non-empty: [sweep] device (runs on "cuda" want a CUDA build)
};
inline std::filesystem::path write_tiny_grid(const std::filesystem::path& dir, const std::string& name,
                                             const TinyGrid& g) {
  const std::string text =
      "[sweep]\n"
      "name = \"" + name + "\"\n"
      "store = \"" + name + ".db\"\n"
      "run_root = \"" + name + "-runs\"\n" +
      (g.device.empty() ? "" : "device = \"" + g.device + "\"\n") +
      "[data]\n"
      "source = \"" + g.data + "\"\n"
      "[model]\n"
      "preset = \"d1\"\n"
      "seq_len = 32\n"
      "[train]\n"
      "batch_tokens = 128\n"
      "micro_batch = 2\n"
      "lr = 3e-3\n"
      "[eval]\n"
      "every = 10\n"
      "tokens = 128\n"
      "[checkpoint]\n"
      "every = 5\n"
      "[executor]\n"
      "cpu_jobs = 2\n"
      "threads_per_job = 1\n" + g.executor +
      "[grid]\n" + g.grid + "\n";
  const std::filesystem::path path = dir / (name + ".toml");
  spit(path, text);
  return path;
}
inline std::filesystem::path write_tiny_grid(const std::filesystem::path& dir, const std::string& name,
                                             const std::string& grid) {
  TinyGrid g;
  g.grid = grid;
  return write_tiny_grid(dir, name, g);
}

// A stand-in trainer (FP4LAB_TRAINER; argv: train --config DIR/run.json --dir DIR --resume --quiet)
// that writes the CUDA_VISIBLE_DEVICES it was given to DIR/gpu.txt, holds its slot 0.3 s, and
// succeeds.
inline void write_gpu_recording_trainer(const std::filesystem::path& path) {
  write_script(path,
               "#!/bin/sh\n"
               "printf '%s' \"$CUDA_VISIBLE_DEVICES\" > \"$5/gpu.txt\"\n"
               "sleep 0.3\n"
               "printf '{\"state\": \"succeeded\", \"step\": 10}' > \"$5/status.json\"\n");
}

// `fp4lab ARGS...` started in the background (argument vector, no shell), output to `log`.
inline pid_t start_fp4lab(const std::vector<std::string>& args, const std::filesystem::path& log) {
  fp4::SpawnRequest r;
  r.argv.push_back(FP4LAB_BINARY);
  r.argv.insert(r.argv.end(), args.begin(), args.end());
  r.output = log;
  return fp4::spawn(r);
}

inline int wait_fp4lab(pid_t pid) { return fp4::wait_child(pid).shell_code(); }

}  // namespace fp4::test
