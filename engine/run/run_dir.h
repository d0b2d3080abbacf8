// run_dir.h — the run directory: where each file lives, status.json, and train.log.
//
//   DIR/config.json      the fully resolved config (written once, at the first start)
//   DIR/metrics.jsonl    append-only metric rows (metrics.h)
//   DIR/heartbeat        rewritten every few seconds while the process lives (heartbeat.h)
//   DIR/checkpoints/     step_<10 digits>.ckpt, the newest two (checkpoint.h)
//   DIR/status.json      written once the run has an outcome: succeeded, diverged or failed
//   DIR/train.log        human-readable progress, appended across resumes
//   DIR/rendezvous.json  multi-GPU runs only: where the ranks meet (ranks.h)
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4::run {

struct RunPaths {
  explicit RunPaths(const std::filesystem::path& d)
      : dir(d),
        config(d / "config.json"),
        metrics(d / "metrics.jsonl"),
        heartbeat(d / "heartbeat"),
        checkpoints(d / "checkpoints"),
        status(d / "status.json"),
        log(d / "train.log") {}
  std::filesystem::path dir, config, metrics, heartbeat, checkpoints, status, log;
};

// `fp4lab train` exits with this code when the directory is locked by another process: nothing was
// done, try again once that process has exited (EX_TEMPFAIL of sysexits.h).
constexpr int kExitRunDirInUse = 75;

// status.json, atomically, with "time" (Unix seconds) added.
void write_status(const std::filesystem::path& path, nlohmann::json status);
// The status if the file exists and parses, else null.
nlohmann::json read_status(const std::filesystem::path& path);

// train.log: one line per event, "YYYY-MM-DDTHH:MM:SSZ message", flushed at once. With `echo`,
// the same line also goes to stderr (the terminal, or the executor's log). An empty path writes
// nothing anywhere: the log of a rank other than 0 of a multi-GPU run (rank 0 writes the run's).
class TrainLog {
 public:
  TrainLog(const std::filesystem::path& path, bool echo);
  ~TrainLog();
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;

  void line(const std::string& message);
  // "warning: ..." into the log and, always, onto stderr.
  void warn(const std::string& message);

 private:
  std::FILE* f_ = nullptr;
  bool echo_;
};

}  // namespace fp4::run
