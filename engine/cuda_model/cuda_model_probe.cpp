// cuda_model_probe.cpp — CudaModel's shrinkage probe (cuda_model.h, NUMERICS.md §8): a pass whose
// quantized linears measure every slot's copy on the device.
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

using detail::backward_specs;
using detail::copy_out;
using detail::quantize_copies;

// ---- The shrinkage probe --------------------------------------------------------------------------

void CudaModel::measure(const engine::LinearSite& s, engine::Slot slot, const bf16_t* src, int rows, int cols,
                        const cuda::CopyOut& copy) {
  const size_t i = static_cast<size_t>(s.linear_id) * engine::kSlotCount + static_cast<size_t>(slot);
  cuda::slot_metric_sums(src, rows, cols, copy.spec, copy.dequant, copy.codes, copy.tensor_scale,
                         probe_sums_.get() + i, ws_metrics_, stream_);
  probe_->order.emplace_back(s.linear_id, slot);
  if (probe_->observer != nullptr && *probe_->observer) {
    ProbedCopy c;
    c.source = src;
    c.rows = rows;
    c.cols = cols;
    c.spec = copy.spec;
    c.dequant = copy.dequant;
    c.codes = copy.codes;
    c.tensor_scale = copy.tensor_scale;
    c.stream = stream_;
    (*probe_->observer)(s, slot, c);
  }
}

const bf16_t* CudaModel::probe_weight_copy(const engine::LinearSite& s, int block, int pos, engine::Slot slot,
                                           const QuantSpec& spec, const float** tensor_scale) {
  const model::ParamView& w = weight_view(block, pos);
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]);
  const bf16_t* src = w_bf16_.get() + w.offset;
  // One buffer serves every weight slot in turn: the GEMM that read the previous copy is earlier
  // on the stream than this quantization.
  cuda::CopyOut out = copy_out(spec, probe_w_.get(), probe_w_ts_.get());
  out.codes = probe_w_codes_.get();
  quantize_copies(src, n, k, &out, nullptr, nonfinite_.get(), ws_quant_, stream_);
  measure(s, slot, src, n, k, out);
  *tensor_scale = probe_w_ts_.get();
  return probe_w_.get();
}

void CudaModel::probe_linear_forward(const engine::LinearSite& s, int block, int pos, const bf16_t* xb, LinearOut y) {
  const model::ParamView& w = weight_view(block, pos);
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]), t = rows_;
  float* ts = tensor_scales_.get();
  const QuantSpec sx = engine::site_slot_spec(s, engine::Slot::fprop_x);
  const QuantSpec sw = engine::site_slot_spec(s, engine::Slot::fprop_w);
  cuda::CopyOut cx = copy_out(sx, q_a_.get(), ts + 0);
  cx.codes = probe_codes_a_.get();
  quantize_copies(xb, t, k, &cx, nullptr, nonfinite_.get(), ws_quant_, stream_);
  measure(s, engine::Slot::fprop_x, xb, t, k, cx);
  const float* ts_w = nullptr;
  const bf16_t* qw = probe_weight_copy(s, block, pos, engine::Slot::fprop_w, sw, &ts_w);
  const float* alpha = alpha_of(sx, ts + 0, sw, ts_w, scalars_.get() + 2);
  quantized_gemm(false, true, t, n, k, alpha, q_a_.get(), qw, y);
}

void CudaModel::probe_linear_backward(const engine::LinearSite& s, int block, int pos, const bf16_t* xb,
                                      const bf16_t* dyb, LinearOut dx) {
  const model::ParamView& w = weight_view(block, pos);
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]), t = rows_;
  float* ts = tensor_scales_.get();
  const auto [s_dy_d, s_w_d, s_dy_w, s_x_w] = backward_specs(s);
  cuda::CopyOut c_dy_d = copy_out(s_dy_d, q_a_.get(), ts + 0);
  cuda::CopyOut c_dy_w = copy_out(s_dy_w, q_c_.get(), ts + 2), c_x_w = copy_out(s_x_w, q_d_.get(), ts + 3);
  c_dy_d.codes = probe_codes_a_.get();
  c_dy_w.codes = probe_codes_c_.get();
  c_x_w.codes = probe_codes_d_.get();
  // dY's two copies from one read of dY, as in training; X's weight-gradient copy from X here.
  quantize_copies(dyb, t, n, &c_dy_d, &c_dy_w, nonfinite_.get(), ws_quant_, stream_);
  quantize_copies(xb, t, k, &c_x_w, nullptr, nonfinite_.get(), ws_quant_, stream_);
  measure(s, engine::Slot::dgrad_dy, dyb, t, n, c_dy_d);
  const float* ts_w = nullptr;
  const bf16_t* qw = probe_weight_copy(s, block, pos, engine::Slot::dgrad_w, s_w_d, &ts_w);
  measure(s, engine::Slot::wgrad_dy, dyb, t, n, c_dy_w);
  measure(s, engine::Slot::wgrad_x, xb, t, k, c_x_w);
  const float* alpha_d = alpha_of(s_dy_d, ts + 0, s_w_d, ts_w, scalars_.get() + 2);
  quantized_gemm(false, false, t, k, n, alpha_d, q_a_.get(), qw, dx);
  // The wgrad copies are measured; a probe computes no dW.
}

ProbeOutcome CudaModel::probe(const model::Batch& batch, const model::StepContext& ctx,
                              const ProbeObserver& observer) {
  if (config().moe.enabled())  // as the CPU model's probe()
    throw std::invalid_argument("model: the shrinkage probe does not measure an MoE model's expert linears yet");
  host_.validate_batch(batch, ctx, true);
  prepare(batch);
  const model::ModelShape& c = config();
  const size_t r = static_cast<size_t>(rows_), d = static_cast<size_t>(c.d_model), f = static_cast<size_t>(c.d_ff);
  const size_t widest_k = std::max(d, f), widest_n = std::max(3 * d, 2 * f);
  const size_t slots = static_cast<size_t>(c.n_layers) * kLinearsPerBlock * engine::kSlotCount;
  if (recipe().quantized) {
    probe_codes_a_.reserve(r * std::max(widest_k, widest_n));  // as q_a_, q_c_, q_d_
    probe_codes_c_.reserve(r * widest_n);
    probe_codes_d_.reserve(r * widest_k);
    const size_t widest_w = std::max(3 * d * d, 2 * f * d);  // qkv or mlp_in
    probe_w_.reserve(widest_w);
    probe_w_codes_.reserve(widest_w);
    probe_w_ts_.reserve(1);
    probe_sums_.reserve(slots);
  }
  probe_dgain_.reserve(d);
  FP4_CUDA_CHECK(cudaMemsetAsync(probe_dgain_.get(), 0, d * sizeof(float), stream_));  // added into, never read

  ProbePass pass;
  pass.observer = &observer;
  struct Reset {
    ProbePass*& p;
    ~Reset() { p = nullptr; }
  } reset{probe_};
  probe_ = &pass;
  bool finite = true;
  const double sum = run(ctx, true, 1.0f, &finite);

  ProbeOutcome out;
  out.loss = sum / rows_;
  out.nonfinite = !finite;
  if (pass.order.empty()) return out;
  std::vector<cuda::DeviceMetricSums> sums(slots);
  FP4_CUDA_CHECK(cudaMemcpyAsync(sums.data(), probe_sums_.get(), slots * sizeof(cuda::DeviceMetricSums),
                                 cudaMemcpyDeviceToHost, stream_));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (const auto& [linear_id, slot] : pass.order) {
    const size_t i = static_cast<size_t>(linear_id) * engine::kSlotCount + static_cast<size_t>(slot);
    out.slots.push_back(engine::ProbedSlot{linear_id, slot, cpu::metrics_from_sums(cuda::host_sums(sums[i]))});
  }
  return out;
}

}  // namespace fp4::cuda_model
