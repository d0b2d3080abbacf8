// cuda_backend.h — the trainer's "cuda" device (engine/run/backend.h): CudaModel, AdamW and the
// fp64 gradient norm of kernels/cuda/ops.cuh, the moments in device memory. Built only with CUDA
// (FP4LAB_HAVE_CUDA); this header itself needs no CUDA headers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/run/backend.h"

namespace fp4::cuda_model {

// Whether a CUDA device is visible to this process (cudaGetDeviceCount finds one): the trainer's
// pick when neither the config nor --device names a device.
bool cuda_device_visible();
// How many CUDA devices this process sees (0 when it cannot ask).
int cuda_device_count();
// cudaSetDevice(index) for a rank of a data-parallel run (LOCAL_RANK), before any other CUDA
// call of the run; UserError when the process sees no GPU of that index.
void select_cuda_device(int index);
// Whether this build has NCCL (FP4LAB_HAVE_NCCL), so data parallelism; and rank 0's draw of the
// run's NCCL unique id, as hex (std::logic_error without NCCL).
bool nccl_built();
std::string nccl_unique_id();
// Bytes free on the current device (cudaMemGetInfo), 0 when it cannot be asked.
double cuda_free_memory();

// Throws UserError (one line, exit 2) when no CUDA device is visible, and as
// model::Model's constructor for a bad configuration.
std::unique_ptr<run::TrainBackend> make_cuda_backend(const model::ModelShape& config, const engine::Recipe& recipe,
                                                     std::vector<int> bf16_layers);

}  // namespace fp4::cuda_model
