// cuda_model_graphs.cpp — CudaModel's training passes (cuda_model.h): enqueued without waiting,
// launched through CUDA graphs where one serves (PassGraph), and finished together.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/linear_sites.h"
#include "engine/cuda_model/cuda_model.h"
#include "engine/cuda_model/cuda_model_internal.h"
#include "engine/quantized_linear.h"

namespace fp4::cuda_model {

using detail::pass_flag;

// ---- Training passes: enqueued, through CUDA graphs, finished together ------------------------------

bool CudaModel::weight_copies_stale() const {
  for (size_t i = 0; i < weight_copies_.size(); ++i)
    if (weight_copies_[i].version != weights_version_) return true;
  return false;
}

void CudaModel::drop_graph(PassGraph& g) {
  if (g.exec != nullptr) FP4_CUDA_CHECK(cudaGraphExecDestroy(g.exec));
  g = PassGraph{};
}

void CudaModel::launch_training_pass(const model::StepContext& ctx, float grad_scale) {
  if (!graphs_on_ || probe_ != nullptr) {
    enqueue_pass(ctx, true, grad_scale);
    return;
  }
  PassGraph& g = pass_graphs_[recipe().quantized && weight_copies_stale() ? 1 : 0];
  const uint64_t allocations = cuda::device_allocation_count().load(std::memory_order_relaxed);
  if (!g.warmed || g.rows != rows_ || g.batch != batch_ || g.grad_scale != grad_scale || g.allocations != allocations) {
    // A new shape, or buffers that may have moved: run directly (this pass makes what it needs),
    // and capture the next pass of the shape if nothing was allocated in between.
    drop_graph(g);
    enqueue_pass(ctx, true, grad_scale);
    g.rows = rows_;
    g.batch = batch_;
    g.grad_scale = grad_scale;
    g.allocations = cuda::device_allocation_count().load(std::memory_order_relaxed);
    g.warmed = true;
    return;
  }
  if (g.exec == nullptr || recipe().quantized) {
    cudaGraph_t graph = nullptr;
    FP4_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    try {
      enqueue_pass(ctx, true, grad_scale);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);  // leave the stream usable; the error is the one thrown
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    FP4_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    if (g.exec != nullptr) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(g.exec, graph, &info) != cudaSuccess) {
        // Another topology than the graph's (a pass that remade weight copies the other did not):
        // instantiated afresh below.
        cudaGetLastError();
        FP4_CUDA_CHECK(cudaGraphExecDestroy(g.exec));
        g.exec = nullptr;
      }
    }
    if (g.exec == nullptr) {
      const cudaError_t err = cudaGraphInstantiate(&g.exec, graph, 0);
      cudaGraphDestroy(graph);
      FP4_CUDA_CHECK(err);
    } else {
      FP4_CUDA_CHECK(cudaGraphDestroy(graph));
    }
  }
  FP4_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
  ++graph_launches_;
}

void CudaModel::enqueue_forward_backward(const model::Batch& batch, const model::StepContext& ctx, float grad_scale) {
  host_.validate_batch(batch, ctx, true);
  if (pending_rows_.size() == kPendingSlots) harvest_pending();
  prepare(batch);
  launch_training_pass(ctx, grad_scale);
  const size_t i = pending_rows_.size();
  FP4_CUDA_CHECK(cudaMemcpyAsync(pending_loss_.get() + i, loss_sum_.get(), sizeof(double), cudaMemcpyDeviceToDevice,
                                 stream_));
  FP4_CUDA_CHECK(cudaMemcpyAsync(pending_flags_.get() + i, nonfinite_.get(), sizeof(unsigned),
                                 cudaMemcpyDeviceToDevice, stream_));
  const size_t w = weight_used_.size();
  if (recipe().quantized && w > 0)
    FP4_CUDA_CHECK(cudaMemcpyAsync(pending_weight_flags_.get() + i * w, weight_flags_.get(), w * sizeof(unsigned),
                                   cudaMemcpyDeviceToDevice, stream_));
  pending_used_.push_back(weight_used_);
  pending_rows_.push_back(rows_);
  pending_moe_.push_back(std::exchange(pass_moe_, {}));
}

void CudaModel::harvest_pending() {
  const size_t n = pending_rows_.size();
  if (n == 0) return;
  const size_t w = weight_used_.size();
  std::vector<double> loss(n);
  std::vector<unsigned> flags(n), weight_flags(n * w, 0u);
  FP4_CUDA_CHECK(cudaMemcpyAsync(loss.data(), pending_loss_.get(), n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
  FP4_CUDA_CHECK(cudaMemcpyAsync(flags.data(), pending_flags_.get(), n * sizeof(unsigned), cudaMemcpyDeviceToHost,
                                 stream_));
  if (recipe().quantized && w > 0)
    FP4_CUDA_CHECK(cudaMemcpyAsync(weight_flags.data(), pending_weight_flags_.get(), n * w * sizeof(unsigned),
                                   cudaMemcpyDeviceToHost, stream_));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t p = 0; p < n; ++p) {
    const bool finite = pass_flag(flags[p], weight_flags.data() + p * w, pending_used_[p]) == 0 && std::isfinite(loss[p]);
    model::PassResult r;
    r.loss = loss[p] / pending_rows_[p];
    r.nonfinite = !finite;
    // MoE models: the auxiliary losses, as the CPU model's forward_backward sums them.
    const model::MoeShape& m = config().moe;
    for (model::MoeLayerStats& st : pending_moe_[p]) {
      r.aux_loss += m.balance_coef * st.balance + m.z_coef * st.z;
      r.moe.push_back(std::move(st));
    }
    r.nonfinite = r.nonfinite || !std::isfinite(r.aux_loss);
    harvested_.push_back(r);
  }
  pending_used_.clear();
  pending_rows_.clear();
  pending_moe_.clear();
}

std::vector<model::PassResult> CudaModel::finish_forward_backward() {
  harvest_pending();
  return std::exchange(harvested_, {});
}

model::PassResult CudaModel::forward_backward(const model::Batch& batch, const model::StepContext& ctx,
                                              float grad_scale) {
  enqueue_forward_backward(batch, ctx, grad_scale);
  std::vector<model::PassResult> done = finish_forward_backward();
  return done.back();
}

}  // namespace fp4::cuda_model
