// mps_daemon.h — an NVIDIA MPS control daemon for the runs that share a GPU (`sweep run` with
// [executor] runs_per_gpu > 1). Without MPS, the processes on one GPU take turns (time slicing),
// so small runs that each leave most of the GPU idle gain little from sharing it; under MPS their
// kernels run at the same time (bench/RESULTS.md, "Runs sharing a GPU", has the figures).
//
// The daemon is this orchestrator's own: its pipe and log directories are private (a fresh
// directory under the system temp dir), handed to every child through CUDA_MPS_PIPE_DIRECTORY and
// CUDA_MPS_LOG_DIRECTORY, so it neither joins nor disturbs a daemon somebody else runs; it is told
// to quit when the sweep ends (the destructor). A user who already runs a daemon and has
// CUDA_MPS_PIPE_DIRECTORY set keeps theirs: nothing is started. The device's settings (compute
// mode, MIG) are never touched.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fp4::sweeps {

class MpsDaemon {
 public:
  // Starts a daemon when `nvidia-cuda-mps-control` is on PATH and CUDA_MPS_PIPE_DIRECTORY is not
  // set; `say` gets one line saying what was done and why. Never throws for a daemon that cannot
  // start: the runs then share the GPU without it, as the line says.
  explicit MpsDaemon(const std::function<void(const std::string&)>& say);
  ~MpsDaemon();
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  bool running() const { return running_; }
  // The variables a child needs to reach this daemon (empty when none runs).
  const std::vector<std::pair<std::string, std::string>>& child_env() const { return env_; }

 private:
  bool running_ = false;
  std::filesystem::path dir_;
  std::vector<std::pair<std::string, std::string>> env_;
  std::function<void(const std::string&)> say_;
};

}  // namespace fp4::sweeps
