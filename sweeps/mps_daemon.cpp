// mps_daemon.cpp — see mps_daemon.h.
#include "sweeps/mps_daemon.h"

#include <stdlib.h>

#include <cstdlib>
#include <fmt/format.h>

#include "base/child_process.h"

namespace fp4::sweeps {

namespace fs = std::filesystem;

namespace {

const char* const kControl = "nvidia-cuda-mps-control";

// The control program's path when it is on PATH (spawn execs a path, not a name).
fs::path find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::string p = path;
  for (size_t start = 0; start <= p.size();) {
    const size_t colon = p.find(':', start);
    const std::string dir = p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!dir.empty()) {
      const fs::path candidate = fs::path(dir) / name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return {};
}

}  // namespace

MpsDaemon::MpsDaemon(const std::function<void(const std::string&)>& say) : say_(say) {
  if (const char* user = std::getenv("CUDA_MPS_PIPE_DIRECTORY"); user != nullptr && *user != '\0') {
    say_(fmt::format("MPS: CUDA_MPS_PIPE_DIRECTORY is set ({}): the runs use that daemon, none is started", user));
    return;
  }
  const fs::path control = find_on_path(kControl);
  if (control.empty()) {
    say_(fmt::format("MPS: {} is not on PATH: runs sharing a GPU take turns on it instead of running at once",
                     kControl));
    return;
  }
  std::string templ = (fs::temp_directory_path() / "fp4lab-mps-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) {
    say_("MPS: could not make a directory for the daemon's pipes: runs sharing a GPU take turns on it");
    return;
  }
  dir_ = templ;
  fs::create_directories(dir_ / "pipe");
  fs::create_directories(dir_ / "log");
  env_ = {{"CUDA_MPS_PIPE_DIRECTORY", (dir_ / "pipe").string()}, {"CUDA_MPS_LOG_DIRECTORY", (dir_ / "log").string()}};
  SpawnRequest start;
  start.argv = {control.string(), "-d"};
  start.env = env_;
  start.output = dir_ / "control.log";
  const ExitStatus st = wait_child(spawn(start));
  if (st.signaled || st.code != 0) {
    say_(fmt::format("MPS: {} -d failed ({}): runs sharing a GPU take turns on it", kControl, st.describe()));
    env_.clear();
    return;
  }
  running_ = true;
  say_(fmt::format("MPS: daemon started (pipes in {}) so that the runs sharing a GPU run their kernels at once; "
                   "it is stopped when the sweep ends",
                   (dir_ / "pipe").string()));
}

MpsDaemon::~MpsDaemon() {
  if (running_) {
    SpawnRequest quit;
    quit.argv = {find_on_path(kControl).string()};  // reads its commands from stdin
    quit.env = env_;
    quit.output = dir_ / "control.log";
    quit.input = "quit\n";
    try {
      const ExitStatus st = wait_child(spawn(quit));
      say_(st.signaled || st.code != 0 ? fmt::format("MPS: stopping the daemon failed ({})", st.describe())
                                       : std::string("MPS: daemon stopped"));
    } catch (const std::exception& e) {
      say_(std::string("MPS: stopping the daemon failed: ") + e.what());
    }
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

}  // namespace fp4::sweeps
