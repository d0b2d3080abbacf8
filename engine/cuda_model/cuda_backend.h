// cuda_backend.h — the trainer's "cuda" device (engine/run/backend.h): CudaModel, AdamW and the
// fp64 gradient norm of kernels/cuda/ops.cuh, the moments in device memory. Built only with CUDA
// (FP4LAB_HAVE_CUDA); this header itself needs no CUDA headers.
#pragma once

#include <memory>
#include <vector>

#include "engine/run/backend.h"

namespace fp4::cuda_model {

// Whether a CUDA device is visible to this process (cudaGetDeviceCount finds one): the trainer's
// pick when neither the config nor --device names a device.
bool cuda_device_visible();
// Bytes free on the current device (cudaMemGetInfo), 0 when it cannot be asked.
double cuda_free_memory();

// Throws UserError (one line, exit 2) when no CUDA device is visible, and as
// model::Model's constructor for a bad configuration.
std::unique_ptr<run::TrainBackend> make_cuda_backend(const model::ModelConfig& config, const engine::Recipe& recipe,
                                                     std::vector<int> bf16_layers);

}  // namespace fp4::cuda_model
