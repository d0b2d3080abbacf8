// nccl_comm.h — the NCCL communicator of a data-parallel run's ranks, with a watchdog: every call
// that waits (joining, a collective) polls NCCL's asynchronous error state and a deadline instead
// of blocking, so a rank whose peer died or hangs aborts the communicator and throws within the
// timeout (or as soon as NCCL notices the broken connection) rather than waiting forever. Built
// only with CUDA and NCCL (FP4LAB_HAVE_NCCL); included only by engine/cuda_model/*.cpp.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <string>

namespace fp4::cuda_model {

class NcclComm {
 public:
  // ncclGetUniqueId as hex: rank 0 draws it and hands it to the others (engine/run/ranks.h).
  static std::string unique_id_hex();

  // Joins the `world` ranks (non-blocking communicator, waited for as above). Throws
  // std::runtime_error on an NCCL error or after timeout_s.
  NcclComm(const std::string& id_hex, int world, int rank, double timeout_s);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Sums `floats` (n fp32) and `doubles` (m fp64), device buffers, over every rank in place, as one
  // NCCL group on `stream`, and waits until the stream has done it (the watchdog's wait).
  void all_reduce(float* floats, size_t n, double* doubles, size_t m, cudaStream_t stream);

 private:
  void wait_ready(const char* what);                       // while NCCL says ncclInProgress
  void wait_stream(cudaStream_t stream, const char* what); // until the stream's work is done
  void check(ncclResult_t r, const char* what);
  [[noreturn]] void fail(const std::string& why);

  ncclComm_t comm_ = nullptr;
  int world_ = 1, rank_ = 0;
  double timeout_s_ = 600;
  bool broken_ = false;  // aborted: destroy nothing further
};

}  // namespace fp4::cuda_model
