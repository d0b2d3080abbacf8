// run_dir.cpp — see run_dir.h.
#include "engine/run/run_dir.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "base/clock.h"
#include "base/files.h"

namespace fp4::run {

void write_status(const std::filesystem::path& path, nlohmann::json status) {
  status["time"] = unix_time_s();
  const std::string text = status.dump(2) + "\n";
  write_file_atomic(path, {text});
}

nlohmann::json read_status(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nullptr;
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const std::exception&) {
    return nullptr;
  }
}

TrainLog::TrainLog(const std::filesystem::path& path, bool echo) : echo_(echo) {
  if (path.empty()) return;  // a rank other than 0 of a multi-GPU run: nothing is written
  f_ = std::fopen(path.c_str(), "ab");
  if (f_ == nullptr) throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
}

TrainLog::~TrainLog() {
  if (f_ != nullptr) std::fclose(f_);
}

void TrainLog::line(const std::string& message) {
  if (f_ == nullptr) return;
  std::fprintf(f_, "%s %s\n", utc_timestamp().c_str(), message.c_str());
  std::fflush(f_);
  if (echo_) std::fprintf(stderr, "%s\n", message.c_str());
}

void TrainLog::warn(const std::string& message) {
  if (f_ == nullptr) return;
  const bool echo = echo_;
  echo_ = false;
  line("warning: " + message);
  echo_ = echo;
  std::fprintf(stderr, "fp4lab: warning: %s\n", message.c_str());
}

}  // namespace fp4::run
