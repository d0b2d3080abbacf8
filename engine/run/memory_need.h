// memory_need.h — how much memory a run will take, worked out from its config before anything is
// allocated, so that a run too large for the machine is refused in one line (what it needs, what
// there is, what to change) instead of dying of std::bad_alloc or cudaErrorMemoryAllocation
// minutes later.
//
// The counts follow the buffers the backends allocate (engine/model/transformer.cpp's prepare(),
// engine/cuda_model/cuda_model.cpp's, the optimizers, the checkpoint's copy of the state, the
// held-out set and a step's batch); they are estimates to a few percent, not a promise: a run
// that fits by less than that may still fail.
#pragma once

#include <cstdint>
#include <string>

#include "engine/run/config.h"

namespace fp4::run {

struct MemoryNeed {
  double weights = 0;      // bytes: parameters, gradients, AdamW moments, working and checkpoint copies
  double activations = 0;  // bytes: what one micro-batch keeps for its backward pass, and its scratch
  double data = 0;         // bytes: the held-out set and one micro-step's batch
  double total() const { return weights + activations + data; }
};

// The host memory a run on `config.device` takes (for a run on "cuda": the host side only).
MemoryNeed host_memory_need(const RunConfig& config, uint32_t vocab_size);
// The device memory a run on "cuda" takes on its GPU.
MemoryNeed device_memory_need(const RunConfig& config, uint32_t vocab_size);

// Bytes this process may still allocate: MemAvailable of /proc/meminfo, or the cgroup's limit
// minus its usage when that is lower. 0 when neither can be read (then nothing is refused).
double available_host_memory();

// Throws UserError when `need` exceeds `available` (bytes; 0 = unknown, accepted): "the run
// needs about 41.3 GiB of <what> (weights 1.1 GiB, activations 40.2 GiB, data 0.0 GiB) and 21.0
// GiB is available: <advice>", the advice aimed at the largest part.
void check_memory(const MemoryNeed& need, double available, const std::string& what, const RunConfig& config);

// "340 MiB", "1.2 GiB", "21.6 TiB".
std::string format_bytes(double bytes);

}  // namespace fp4::run
