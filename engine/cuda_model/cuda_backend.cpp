// cuda_backend.cpp — see cuda_backend.h.
#include "engine/cuda_model/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <span>
#include <string>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "base/user_error.h"
#include "engine/cuda_model/cuda_model.h"
#ifdef FP4LAB_HAVE_NCCL
#include "engine/cuda_model/nccl_comm.h"
#endif

namespace fp4::cuda_model {

namespace {

std::vector<cuda::AdamWRange> device_ranges(const std::vector<model::ParamView>& views) {
  std::vector<cuda::AdamWRange> out;
  for (const run::ParamRange& r : run::param_ranges(views)) out.push_back({r.offset, r.size, r.decay});
  return out;
}

class CudaBackend final : public run::TrainBackend {
 public:
  CudaBackend(const model::ModelShape& config, const engine::Recipe& recipe, std::vector<int> bf16_layers)
      : model_(config, recipe, std::move(bf16_layers)),
        ranges_(device_ranges(model_.views()), model_.n_params()) {
    m_.reserve(model_.n_params());
    v_.reserve(model_.n_params());
    norm_.reserve(1);
    zero_moments();
    sample_memory();
  }

  const char* device() const override { return "cuda"; }
  int numerics() const override { return model_.numerics_identity(); }
  const model::ModelShape& config() const override { return model_.config(); }
  const std::vector<model::ParamView>& views() const override { return model_.views(); }
  size_t n_params() const override { return model_.n_params(); }

  void init(uint64_t seed) override {
    model_.init_params(seed);
    zero_moments();
  }
  void load_state(run::TrainState s) override {
    const size_t n = n_params();
    if (s.params.size() != n || s.adam_m.size() != n || s.adam_v.size() != n)
      throw std::invalid_argument("cuda backend: a state of the wrong size");
    model_.params_from_host(s.params);
    FP4_CUDA_CHECK(cudaMemcpyAsync(m_.get(), s.adam_m.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream()));
    FP4_CUDA_CHECK(cudaMemcpyAsync(v_.get(), s.adam_v.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream()));
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  run::TrainState save_state() override {
    run::TrainState s;
    s.params = model_.params_to_host();
    s.adam_m.resize(n_params());
    s.adam_v.resize(n_params());
    FP4_CUDA_CHECK(cudaMemcpyAsync(s.adam_m.data(), m_.get(), n_params() * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream()));
    FP4_CUDA_CHECK(cudaMemcpyAsync(s.adam_v.data(), v_.get(), n_params() * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream()));
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return s;
  }

  void zero_grads() override { model_.zero_grads(); }
  model::PassResult forward_backward(const model::Batch& batch, const model::StepContext& ctx,
                                     float grad_scale) override {
    return model_.forward_backward(batch, ctx, grad_scale);
  }
  void enqueue_pass(const model::Batch& batch, const model::StepContext& ctx, float grad_scale) override {
    model_.enqueue_forward_backward(batch, ctx, grad_scale);
  }
  std::vector<model::PassResult> finish_passes() override { return model_.finish_forward_backward(); }
  model::EvalResult evaluate(const model::Batch& batch, const model::StepContext& ctx) override {
    return model_.evaluate(batch, ctx);
  }
  double grad_norm() override {
    double sum = 0.0;
    cuda::sum_squares_f64(model_.grads(), n_params(), norm_.get(), ws_, stream());
    FP4_CUDA_CHECK(cudaMemcpyAsync(&sum, norm_.get(), sizeof(double), cudaMemcpyDeviceToHost, stream()));
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return std::sqrt(sum);
  }
  void adamw_step(const run::AdamWHyper& h, int64_t t, float clip) override {
    const cuda::AdamWConstants c = cuda::adamw_constants(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, t);
    cuda::adamw_step(model_.params(), model_.grads(), m_.get(), v_.get(), ranges_, c, clip, stream());
    model_.params_changed();
    sample_memory();  // after a whole step every buffer of the run exists
  }
  std::vector<engine::ProbedSlot> probe(const model::Batch& batch, const model::StepContext& ctx) override {
    return model_.probe(batch, ctx).slots;
  }
  int64_t peak_device_bytes() override {
    sample_memory();
    return peak_;
  }

#ifdef FP4LAB_HAVE_NCCL
  void connect_ranks(const std::string& nccl_id, int world, int rank, double timeout_s) override {
    comm_ = std::make_unique<NcclComm>(nccl_id, world, rank, timeout_s);
  }
  void all_reduce(std::span<double> scalars) override {
    if (!comm_) throw std::logic_error("cuda backend: all_reduce before connect_ranks");
    scalars_.reserve(std::max<size_t>(1, scalars.size()));
    FP4_CUDA_CHECK(cudaMemcpyAsync(scalars_.get(), scalars.data(), scalars.size_bytes(), cudaMemcpyHostToDevice,
                                   stream()));
    comm_->all_reduce(model_.grads(), n_params(), scalars_.get(), scalars.size(), stream());
    FP4_CUDA_CHECK(cudaMemcpyAsync(scalars.data(), scalars_.get(), scalars.size_bytes(), cudaMemcpyDeviceToHost,
                                   stream()));
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
#endif

 private:
  cudaStream_t stream() const { return model_.stream(); }
  void zero_moments() {
    FP4_CUDA_CHECK(cudaMemsetAsync(m_.get(), 0, n_params() * sizeof(float), stream()));
    FP4_CUDA_CHECK(cudaMemsetAsync(v_.get(), 0, n_params() * sizeof(float), stream()));
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  // Device memory in use (cudaMemGetInfo: the whole device, so the CUDA context and anything else
  // on the GPU count too). Every buffer is allocated on first use and kept, so sampling after each
  // step sees the high-water mark.
  void sample_memory() {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) peak_ = std::max<int64_t>(peak_, static_cast<int64_t>(total - free));
  }

  CudaModel model_;
  cuda::AdamWRanges ranges_;
  DeviceArray<float> m_, v_;
  DeviceArray<double> norm_;
  cuda::Workspace ws_;
  int64_t peak_ = 0;
#ifdef FP4LAB_HAVE_NCCL
  std::unique_ptr<NcclComm> comm_;     // data parallelism only (connect_ranks)
  DeviceArray<double> scalars_;        // all_reduce's fp64 values
#endif
};

}  // namespace

bool cuda_device_visible() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();  // clear the error state a failed query may leave
    return false;
  }
  return devices > 0;
}

int cuda_device_count() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return devices;
}

void select_cuda_device(int index) {
  const int n = cuda_device_count();
  if (index < 0 || index >= n)
    throw UserError(fmt::format("LOCAL_RANK={}: this process sees {} GPU(s) (CUDA_VISIBLE_DEVICES={}); a rank "
                                "trains on GPU LOCAL_RANK, so give it a GPU of that index or run fewer ranks",
                                index, n, std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES")
                                                                              : "unset"));
  FP4_CUDA_CHECK(cudaSetDevice(index));
}

bool nccl_built() {
#ifdef FP4LAB_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string nccl_unique_id() {
#ifdef FP4LAB_HAVE_NCCL
  return NcclComm::unique_id_hex();
#else
  throw std::logic_error("nccl_unique_id: this fp4lab was built without NCCL");
#endif
}

double cuda_free_memory() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<double>(free_bytes);
}

std::unique_ptr<run::TrainBackend> make_cuda_backend(const model::ModelShape& config, const engine::Recipe& recipe,
                                                     std::vector<int> bf16_layers) {
  return std::make_unique<CudaBackend>(config, recipe, std::move(bf16_layers));
}

}  // namespace fp4::cuda_model
