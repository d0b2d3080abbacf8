// heartbeat.cpp — see heartbeat.h.
#include "engine/run/heartbeat.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/files.h"

namespace fp4::run {

Heartbeat::Heartbeat(std::filesystem::path path, double interval_s)
    : path_(std::move(path)), interval_s_(interval_s) {
  if (path_.empty()) return;
  beat();
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  if (path_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  set_phase("exited");
  beat();  // the last word: where the process stood when it left
}

namespace {
// The host name as JSON text (quoted, escaped): an orchestrator on another host sharing the
// filesystem tells a live remote trainer from a dead local one by it.
std::string host_json() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) buf[0] = '\0';
  return nlohmann::json(std::string(buf)).dump();
}
}  // namespace

void Heartbeat::beat() {
  if (path_.empty()) return;
  static const std::string host = host_json();
  const std::string line =
      fmt::format("{{\"pid\": {}, \"host\": {}, \"step\": {}, \"time\": {:.3f}, \"phase\": \"{}\"}}\n",
                  static_cast<long>(::getpid()), host, step_.load(std::memory_order_relaxed), unix_time_s(),
                  phase_.load(std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(write_mu_);
  try {
    write_file_atomic(path_, {line});
  } catch (const std::exception& e) {
    // A missed beat is not worth killing the run for; a stale heartbeat will say it.
    std::fprintf(stderr, "fp4lab: warning: %s\n", e.what());
  }
}

void Heartbeat::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto interval = std::chrono::duration<double>(interval_s_);
  while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
    lock.unlock();
    beat();
    lock.lock();
  }
}

}  // namespace fp4::run
