// heartbeat.h — proof of life for the orchestrator: `heartbeat` in the run directory, rewritten
// atomically every few seconds by a background thread, whatever the training loop is doing (a
// long evaluation or checkpoint must not look like a hung run).
//
// Content, one JSON line: {"pid": P, "host": H, "step": S, "time": T, "phase": "train"} with T in
// Unix seconds; phase is start, train, eval, probe, checkpoint, or exited (the process has left).
// The orchestrator only needs the file's mtime; the content is for people.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

namespace fp4::run {

class Heartbeat {
 public:
  // Writes the first beat at once, then one every `interval_s` seconds until destroyed, and a
  // last one with phase "exited" on destruction. An empty path beats nowhere (the ranks other than
  // 0 of a multi-GPU run: rank 0's heartbeat is the run's).
  Heartbeat(std::filesystem::path path, double interval_s = 5.0);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  // A short word for what the run is doing ("train", "eval", "probe", "checkpoint").
  void set_phase(const char* phase) { phase_.store(phase, std::memory_order_relaxed); }
  // Writes a beat now (from the calling thread).
  void beat();

 private:
  void loop();

  std::filesystem::path path_;
  double interval_s_;
  std::atomic<int64_t> step_{0};
  std::atomic<const char*> phase_{"start"};
  std::mutex mu_;
  std::mutex write_mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fp4::run
