// backend.h — what the training loop needs from a device: the model's passes, the global gradient
// norm, the AdamW step, and the state a checkpoint holds. The trainer (trainer.cpp) runs the same
// loop over either backend; `device` in the config picks one:
//   "cpu":  engine/model's Model and run::AdamW (the reference; its bits are the CPU tests' bits);
//   "cuda": engine/cuda_model's CudaModel with the AdamW and fp64 norm of kernels/cuda/ops.cuh
//           (built only with CUDA: engine/cuda_model/cuda_backend.h).
// Every backend is deterministic: the same calls give the same bits (on the same kind of device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/numerics_identity.h"
#include "engine/model/transformer.h"
#include "engine/quantized_linear.h"
#include "engine/recipe.h"
#include "engine/run/optimizer.h"

namespace fp4::run {

// The optimizer's and the model's state, as a checkpoint stores it (fp32, the parameter layout).
struct TrainState {
  std::vector<float> params, adam_m, adam_v;
};

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;

  virtual const char* device() const = 0;  // "cpu", "cuda"
  // The numerics identity of the bits this backend trains in, which the run records
  // (base/numerics_identity.h): the build's, unless an opt-in of the backend changes them.
  virtual int numerics() const { return kNumericsIdentity; }
  virtual const model::ModelShape& config() const = 0;
  virtual const std::vector<model::ParamView>& views() const = 0;
  virtual size_t n_params() const = 0;

  // A fresh start (model::Model::init_params's weights, zero moments) or a checkpoint's state.
  virtual void init(uint64_t seed) = 0;
  virtual void load_state(TrainState state) = 0;  // sizes must be n_params()
  virtual TrainState save_state() = 0;

  virtual void zero_grads() = 0;
  virtual model::PassResult forward_backward(const model::Batch& batch, const model::StepContext& ctx,
                                             float grad_scale) = 0;
  virtual model::EvalResult evaluate(const model::Batch& batch, const model::StepContext& ctx) = 0;
  // A micro-step's training pass whose result may come later (the trainer's path): enqueue_pass()
  // starts it, finish_passes() returns the results of every pass enqueued since its last call, in
  // order. The default runs each pass at once (forward_backward); the CUDA backend enqueues them
  // back to back, so the host reads and uploads micro-batch k+1 while the GPU trains on k.
  virtual void enqueue_pass(const model::Batch& batch, const model::StepContext& ctx, float grad_scale) {
    finished_passes_.push_back(forward_backward(batch, ctx, grad_scale));
  }
  virtual std::vector<model::PassResult> finish_passes() { return std::exchange(finished_passes_, {}); }
  // sqrt(Σ g²), the squares summed in fp64 in a fixed order (optimizer.h's global_grad_norm on the
  // CPU, ops.cuh's sum_squares_f64 on the GPU).
  virtual double grad_norm() = 0;
  // One AdamW update of every parameter (ranges from views(): norm gains do not decay).
  virtual void adamw_step(const AdamWHyper& h, int64_t t, float clip_scale) = 0;

  // The shrinkage probe: one forward and backward over `batch` with the current weights and ctx's
  // random numbers, every quantized slot of every block linear quantized as in training and
  // measured; no training state changes (gradients, weights, moments). Slots in the CPU model's
  // probe order (model::Model::probe): forward blocks in order, fprop_x then fprop_w per linear;
  // then backward blocks in reverse, dgrad_dy, dgrad_w, wgrad_dy, wgrad_x per linear. The CPU
  // measures with kernels/cpu/quant_metrics.h, the GPU on the device with
  // kernels/cuda/quant_metrics.cuh (the same copies, bit for bit; metrics within docs/probe.md's
  // tolerance).
  virtual std::vector<engine::ProbedSlot> probe(const model::Batch& batch, const model::StepContext& ctx) = 0;

  // Device memory high-water mark in bytes, or -1 where it means nothing (the CPU).
  virtual int64_t peak_device_bytes() { return -1; }

  // Data parallelism over the GPUs of one host (docs/train.md, "Several GPUs"). connect_ranks
  // joins the communicator of `world` ranks whose NCCL unique id (hex) rank 0 drew, giving up after
  // timeout_s; afterwards all_reduce sums the gradient buffer (fp32) and `scalars` (fp64) over all
  // ranks in place, so every rank holds the same sums. A rank that dies, or a collective that does
  // not complete within timeout_s, aborts the communicator and throws std::runtime_error.
  // Backends without it (the CPU's) throw std::logic_error: the config refuses such runs first.
  virtual void connect_ranks(const std::string& nccl_id, int world, int rank, double timeout_s);
  virtual void all_reduce(std::span<double> scalars);

 private:
  std::vector<model::PassResult> finished_passes_;  // the default enqueue_pass's results
};

// The decay ranges AdamW needs: one per tensor, norm gains exempt.
std::vector<ParamRange> param_ranges(const std::vector<model::ParamView>& views);

std::unique_ptr<TrainBackend> make_cpu_backend(const model::ModelShape& config, const engine::Recipe& recipe,
                                               std::vector<int> bf16_layers);

}  // namespace fp4::run
