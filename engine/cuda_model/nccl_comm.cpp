// nccl_comm.cpp — see nccl_comm.h.
#include "engine/cuda_model/nccl_comm.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "base/clock.h"

namespace fp4::cuda_model {

namespace {

// How long a wait sleeps between polls: short against a step's milliseconds, long enough not to
// take a CPU core from the input pipeline.
constexpr auto kPoll = std::chrono::microseconds(20);

}  // namespace

std::string NcclComm::unique_id_hex() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) throw std::runtime_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  std::string hex;
  for (size_t i = 0; i < sizeof id.internal; ++i)
    hex += fmt::format("{:02x}", static_cast<unsigned>(static_cast<unsigned char>(id.internal[i])));
  return hex;
}

NcclComm::NcclComm(const std::string& id_hex, int world, int rank, double timeout_s)
    : world_(world), rank_(rank), timeout_s_(timeout_s) {
  ncclUniqueId id;
  if (id_hex.size() != 2 * sizeof id.internal)
    throw std::runtime_error(fmt::format("rank {}: an NCCL unique id of {} hex digits, expected {}", rank,
                                         id_hex.size(), 2 * sizeof id.internal));
  for (size_t i = 0; i < sizeof id.internal; ++i)
    id.internal[i] = static_cast<char>(std::stoi(id_hex.substr(2 * i, 2), nullptr, 16));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait is ours, under the watchdog
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, world, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    comm_ = nullptr;
    throw std::runtime_error(fmt::format("rank {} of {}: ncclCommInitRankConfig: {}", rank, world, ncclGetErrorString(r)));
  }
  try {
    wait_ready("joining the other ranks");
  } catch (...) {
    comm_ = nullptr;  // aborted by fail()
    throw;
  }
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr || broken_) return;
  // Finalize flushes what is in flight; its wait is bounded like any other, and an error here is
  // past caring about (the run's outcome is decided), so the communicator is then aborted.
  try {
    check(ncclCommFinalize(comm_), "ncclCommFinalize");
    wait_ready("finalizing the communicator");
    ncclCommDestroy(comm_);
  } catch (const std::exception&) {
  }
}

void NcclComm::fail(const std::string& why) {
  if (comm_ != nullptr && !broken_) {
    broken_ = true;
    ncclCommAbort(comm_);
  }
  throw std::runtime_error(fmt::format("rank {} of {}: {}", rank_, world_, why));
}

void NcclComm::check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  fail(fmt::format("{}: {} ({})", what, ncclGetErrorString(r), ncclGetLastError(comm_)));
}

void NcclComm::wait_ready(const char* what) {
  const double start = monotonic_s();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail(fmt::format("{}: ncclCommGetAsyncError: {}", what, ncclGetErrorString(r)));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress)
      fail(fmt::format("{}: {} ({}): another rank died or lost its connection", what, ncclGetErrorString(state),
                       ncclGetLastError(comm_)));
    if (monotonic_s() - start > timeout_s_)
      fail(fmt::format("{}: no progress within {:.0f} s (FP4LAB_NCCL_TIMEOUT_S): another rank died or hangs", what,
                       timeout_s_));
    std::this_thread::sleep_for(kPoll);
  }
}

void NcclComm::wait_stream(cudaStream_t stream, const char* what) {
  const double start = monotonic_s();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) fail(fmt::format("{}: CUDA error {}", what, cudaGetErrorString(e)));
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
      fail(fmt::format("{}: {} ({}): another rank died or lost its connection", what, ncclGetErrorString(state),
                       ncclGetLastError(comm_)));
    if (monotonic_s() - start > timeout_s_)
      fail(fmt::format("{}: not complete within {:.0f} s (FP4LAB_NCCL_TIMEOUT_S): another rank died or hangs", what,
                       timeout_s_));
    std::this_thread::sleep_for(kPoll);
  }
}

void NcclComm::all_reduce(float* floats, size_t n, double* doubles, size_t m, cudaStream_t stream) {
  check(ncclGroupStart(), "ncclGroupStart");
  check(ncclAllReduce(floats, floats, n, ncclFloat32, ncclSum, comm_, stream), "ncclAllReduce (gradients)");
  if (m > 0) check(ncclAllReduce(doubles, doubles, m, ncclFloat64, ncclSum, comm_, stream), "ncclAllReduce (scalars)");
  const ncclResult_t r = ncclGroupEnd();
  check(r, "ncclGroupEnd");
  if (r == ncclInProgress) wait_ready("enqueueing the all-reduce");
  wait_stream(stream, "the gradient all-reduce");
}

}  // namespace fp4::cuda_model
