// cuda_model.h — the transformer of engine/model/transformer.h on the GPU: the same parameters
// (layout, initialization), the same forward and backward, the same bf16 storage points, the same
// recipe applied to the block linears. Only the order of fp32 sums differs (cuBLASLt's GEMMs, the
// CUDA ops' reductions), so losses and gradients follow the CPU model's within rounding
// (docs/train.md, "The CUDA backend", states the tolerances the tests hold it to).
//
// What runs where:
//   - the block linears: bf16 operands (X as stored, the bf16 copy of the fp32 master weights, dY
//     as bf16), fp32 accumulation in cuBLASLt (kernels/cuda/gemm.cuh). Under a quantized recipe
//     each slot's operand is first quantized by kernels/cuda/quantize/quantize.cuh's fused quantizer, which
//     is bit-identical to the CPU reference and uses the very QuantSpecs engine/quantized_linear
//     builds (site_slot_spec: seeds, Philox streams, steps, RHT signs), and the GEMM multiplies the
//     dequantized copies with alpha = the product of the two tensor scales (e4m3x2), as the CPU does,
//     formed on the device and passed to cuBLASLt as a device pointer (no host round trip; for the
//     weight gradient's beta = 1 product cuBLASLt's device-scalar epilogue rounds alpha·acc + C in
//     its own way, deterministic, see linear_backward);
//   - the LM head: forward as a bf16 GEMM (its operands are bf16-valued on the CPU too), backward
//     as fp32 GEMMs (the logits' gradient stays fp32, as on the CPU); the weight gradient, a long-K
//     product with few output tiles, runs as a deterministic split-K (Gemm::matmul_split_k);
//   - everything else: kernels/cuda/ops.cuh, fp32 arithmetic with round_to_bf16 where
//     transformer.cpp calls store(): fused into the op that writes (StoreOut) or next reads
//     (round_* flags) the buffer, which also writes the bf16 copy the next GEMM needs; a stored
//     value nothing needs in fp32 is kept in bf16 only (LayerActs), the GEMMs writing such outputs
//     in bf16 directly; run() marks each store;
//   - the shrinkage probe (probe()): the training pass's forward and dX backward, every slot's
//     copy measured by kernels/cuda/quant_metrics.cuh where it is made; only the metrics' fp64
//     sums come to the host;
//   - an MoE block (cuda_model_moe.cpp; docs/model.md, "The MoE block's passes"): the router in
//     fp32 (fp32 GEMMs with the fp32 master weights), kernels/cuda/moe.cuh's routing, dispatch,
//     combine and their backward, and one quantized GEMM per expert group (a loop over the experts:
//     the first correct version, not a fast one), each group's X and dY copies quantized over the
//     group's own rows with the SR draws keyed by its tokens (quantize_fused's source_rows). The
//     dispatch sizes the GEMMs on the host, so a pass of an MoE model waits for the GPU once per
//     MoE block and never runs as a CUDA graph.
// Deterministic: no atomics anywhere (ops.cuh; gemm.cuh's split-K adds its partials in a fixed order
// with a chunk count fixed by the shape), so two identical calls
// give identical bits on the same GPU model.
//
// Plain C++: it calls only the host APIs of kernels/cuda (no nvcc needed). One stream, owned here;
// every method returns with the stream's work enqueued or, where it hands a value to the host
// (a loss, a norm, a copy-out), finished. Call from one thread at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/model/transformer.h"
#include "kernels/cpu/quant_metrics.h"
#include "kernels/cuda/cuda_common.cuh"  // DeviceArray, FP4_CUDA_CHECK
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/grouped_gemm.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/quant_metrics.cuh"
#include "kernels/cuda/quantize/quantize.cuh"

namespace fp4::cuda_model {

using cuda::DeviceArray;  // grows on demand (reserve), frees itself

// ---- The shrinkage probe (NUMERICS.md §8; CudaModel::probe) ----

struct ProbeOutcome {
  double loss = 0.0;        // the pass's mean loss, as forward_backward would return it
  bool nonfinite = false;   // a quantizer met a NaN/Inf, or the loss is not finite
  std::vector<engine::ProbedSlot> slots;  // in the order the CPU model's probe reports them (probe())
};

// What one slot's measurement read, all device memory, valid only during the observer's call and
// ordered on `stream` (synchronize it before reading): the bf16 source [rows, cols] as the linear
// received it, the slot's spec, the dequantized copy the pass's GEMM multiplies, its codes and its
// tensor scale (one float).
struct ProbedCopy {
  const bf16_t* source = nullptr;
  int rows = 0, cols = 0;
  QuantSpec spec;
  const bf16_t* dequant = nullptr;
  const uint8_t* codes = nullptr;
  const float* tensor_scale = nullptr;
  cudaStream_t stream = nullptr;
};
// Called once per measured slot during probe(), as the CPU model's ProbeFn is: for tests and tools
// that hold the GPU's copies against the CPU reference.
using ProbeObserver = std::function<void(const engine::LinearSite& site, engine::Slot slot, const ProbedCopy& copy)>;

class CudaModel {
 public:
  // As model::Model's constructor (the same checks and one-line errors), plus: throws
  // UserError when no CUDA device is visible. Parameters start at zero.
  CudaModel(const model::ModelShape& config, const engine::Recipe& recipe, std::vector<int> bf16_layers);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const model::ModelShape& config() const { return host_.config(); }
  const engine::Recipe& recipe() const { return host_.recipe(); }
  const std::vector<model::ParamView>& views() const { return host_.views(); }
  size_t n_params() const { return n_params_; }

  // model::Model::init_params on the host (identical weights), then uploaded.
  void init_params(uint64_t seed);
  // Host copies in and out (checkpoints, tests). params_from_host's size must be n_params().
  void params_from_host(const std::vector<float>& params);
  std::vector<float> params_to_host() const;
  std::vector<float> grads_to_host() const;

  void zero_grads();
  // One training pass, finished: enqueue_forward_backward() then finish_forward_backward().
  model::PassResult forward_backward(const model::Batch& batch, const model::StepContext& ctx, float grad_scale = 1.0f);
  // A training pass that does not wait: the kernels are enqueued (through a CUDA graph where one
  // serves, see PassGraph) and the call returns as soon as `batch` is staged, so the host prepares
  // the next micro-step while the GPU still runs this one. finish_forward_backward() waits once and
  // returns the results of every pass enqueued since its last call, in order. Same bits as passes
  // run one at a time: the same kernels in the same order on one stream.
  void enqueue_forward_backward(const model::Batch& batch, const model::StepContext& ctx, float grad_scale = 1.0f);
  std::vector<model::PassResult> finish_forward_backward();
  // How many training passes ran as a CUDA graph launch (tests: the graphs are really used).
  uint64_t graph_launches() const { return graph_launches_; }
  // How many cuBLASLt plans (GEMM shapes) the model has made so far, over all its cuBLASLt
  // wrappers (tests: an MoE model's shapes stay few while its routing changes).
  size_t gemm_plans() const;
  // The side streams an MoE model's expert weight gradients run on (0: none, all on stream()).
  int expert_wgrad_streams() const { return static_cast<int>(wgrad_streams_.size()); }
  // The numerics identity of the bits this model trains in (base/numerics_identity.h):
  // kNumericsIdentity, or the grouped-weight-gradient opt-in's for an MoE model.
  int numerics_identity() const;
  model::EvalResult evaluate(const model::Batch& batch, const model::StepContext& ctx = {});

  // Device buffers of n_params() floats, for the optimizer (which runs on stream()). Whoever
  // writes params() must call params_changed() so the next pass remakes the bf16 weight copy.
  float* params() { return params_.get(); }
  float* grads() { return grads_.get(); }
  const float* grads() const { return grads_.get(); }
  void params_changed() { weights_stale_ = true; }
  cudaStream_t stream() const { return stream_; }

  // The shrinkage probe on the GPU: one forward and backward over `batch` like forward_backward()
  // with grad_scale 1 (the CPU model's probe()), in which every quantized slot of every block
  // linear is quantized by the same CUDA quantizers and QuantSpecs as in training (asked for its
  // codes as well) and measured on the device (kernels/cuda/quant_metrics.cuh); the measured
  // copies are the ones the pass's GEMMs multiply. It computes no parameter gradient and leaves
  // the gradients, the weights and the kept weight copies as they were, so training after a probe
  // is bit for bit training without it. Slots come in the CPU probe's order: the forward's blocks
  // in order (fprop_x, fprop_w per linear), then the backward's in reverse (dgrad_dy, dgrad_w,
  // wgrad_dy, wgrad_x per linear, mlp_out first). One synchronization, at the end.
  ProbeOutcome probe(const model::Batch& batch, const model::StepContext& ctx, const ProbeObserver& observer = {});

 private:
  // What a block keeps for its backward pass. The model stores activations in bf16 (the CPU
  // model's Storage::bf16, the only storage a run config allows), and a stored value
  // (transformer.cpp's store()) is kept in bf16 where nothing needs its fp32 form: an fp32 buffer
  // would hold exactly the bf16 values, at twice the bytes to write and read. So the MLP's gate|up
  // is ub (its GEMM writes bf16, swiglu reads bf16) and, with the fused attention, q|k|v is qkvb
  // only (RoPE in place) and the attention output attb only; qkv and att (fp32) serve the fp32
  // reference attention. The norms' and SwiGLU's outputs exist only as the bf16 copies the next
  // linear multiplies (h1b, h2b, ab): their fp32 values are read by nothing. The residual stream
  // too (residb_, x_midb).
  struct LayerActs {
    DeviceArray<float> rstd1, qkv, lse, att, rstd2;
    DeviceArray<bf16_t> h1b, qkvb, attb, h2b, ub, ab, x_midb;
  };
  // A linear's output: fp32 (`f32`) or, where the model stores it, bf16 (`bf16`), which the GEMM
  // writes directly: its fp32 result rounded once by the epilogue, the same bits as an fp32 output
  // and a store (cuda::Gemm::gemm's bf16 overload). Exactly one is set.
  struct LinearOut {
    float* f32 = nullptr;
    bf16_t* bf16 = nullptr;
  };

  void prepare(const model::Batch& batch);  // sizes buffers, uploads tokens, remakes bf16 weights
  // One pass over the prepared batch, waited for: its loss sum and whether it stayed finite.
  double run(const model::StepContext& ctx, bool backward, float grad_scale, bool* finite);
  // The kernels of one pass, enqueued on stream_ without waiting: the loss sum lands in loss_sum_,
  // the quantizers' flag in nonfinite_ (the weight copies' in weight_flags_).
  void enqueue_pass(const model::StepContext& ctx, bool backward, float grad_scale);
  // enqueue_pass(ctx, true, grad_scale), through a CUDA graph where one serves.
  void launch_training_pass(const model::StepContext& ctx, float grad_scale);
  bool weight_copies_stale() const;  // some weight copy predates the current weights
  // Waits for the pending passes and appends their results to harvested_.
  void harvest_pending();
  void store(float* p, size_t n);  // round_to_bf16: transformer.cpp's store()
  // An op's output store: rounded to bf16, with an optional bf16 copy.
  cuda::StoreOut store_out(bf16_t* copy = nullptr) const;
  engine::LinearSite site(const model::StepContext& ctx, int block, int pos) const;
  const model::ParamView& weight_view(int block, int pos) const;
  // xb / dyb: the bf16 copy of the linear's X / dY, written by its producer in the same pass that
  // stored the fp32 value (run() keeps them per layer), so the linears convert nothing.
  void linear_forward(const model::StepContext& ctx, int block, int pos, const bf16_t* xb, LinearOut y);
  void linear_backward(const model::StepContext& ctx, int block, int pos, const bf16_t* xb, const bf16_t* dyb,
                       LinearOut dx);
  // C = op(A) · op(B) (alpha 1, beta 0) into a LinearOut.
  void plain_gemm(bool trans_a, bool trans_b, int m, int n, int k, const bf16_t* a, const bf16_t* b, LinearOut c);
  // The GEMM's alpha for two slots: nullptr when neither has a two-level scale (alpha = 1, as on
  // the CPU), else `slot` (a device float) after a one-thread kernel has written the product of the
  // two tensor scales into it (a one-level slot's scale counting as 1).
  const float* alpha_of(const QuantSpec& a, const float* ts_a, const QuantSpec& b, const float* ts_b, float* slot);
  // A weight slot's quantized copy (fprop_w or dgrad_w of one block linear) and its tensor scale.
  // Made on first use after each weight change and kept: weight slots draw with micro-step 0
  // (engine/quantized_linear.h), so every micro-step of an optimizer step quantizes the same tensor
  // with the same spec, and the copy made for the first one serves the others bit for bit. Remade
  // when the weights or the spec change (an evaluation at another step). Marks the copy used, so
  // the pass reports its non-finite flag (run()).
  struct WeightCopy {
    DeviceArray<bf16_t> dequant;
    QuantSpec spec;
    uint64_t version = 0;  // weights_version_ it was made from; 0: never made
  };
  // weight_copies_[index] of the weight `w` (its view), made or reused as above.
  const bf16_t* weight_copy(size_t index, const model::ParamView& w, const QuantSpec& spec,
                            const float** tensor_scale);
  // The index of a block linear's copy, then of an MoE expert linear's (pos 2: mlp_in, 3:
  // mlp_out), which follow every block linear's: the expert weights are kept quantized through an
  // optimizer step as the dense ones are.
  size_t dense_copy_index(int block, int pos, engine::Slot slot) const;
  size_t expert_copy_index(int block, int expert, int pos, engine::Slot slot) const;
  size_t weight_copy_count() const;
  // C = alpha · op(A) · op(B) (beta = 0) with alpha from alpha_of: a host 1 or a device pointer.
  void quantized_gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* alpha, const bf16_t* a,
                      const bf16_t* b, LinearOut c);
  const float* param(int view) const { return params_.get() + views()[view].offset; }
  float* grad(int view) { return grads_.get() + views()[view].offset; }
  // A norm gain's gradient: grad(view), or during a probe a scratch vector nobody reads.
  float* gain_grad(int view) { return probe_ != nullptr ? probe_dgain_.get() : grad(view); }

  // The probe pass in flight (null outside probe()): the quantized linears then take the probe's
  // paths below, and run() skips the other parameter gradients.
  struct ProbePass {
    const ProbeObserver* observer = nullptr;
    std::vector<std::pair<uint32_t, engine::Slot>> order;  // (linear_id, slot) as measured
  };
  ProbePass* probe_ = nullptr;
  // Enqueues the measurement of one slot's copy (quantized from `src` [rows, cols] into `copy`, its
  // codes included) into probe_sums_, and calls the observer.
  void measure(const engine::LinearSite& s, engine::Slot slot, const bf16_t* src, int rows, int cols,
               const cuda::CopyOut& copy);
  // During a probe, a weight slot's copy: quantized afresh with its codes into the probe's own
  // buffer (the kept weight copies stay as they are) and measured.
  const bf16_t* probe_weight_copy(const engine::LinearSite& s, int block, int pos, engine::Slot slot,
                                  const QuantSpec& spec, const float** tensor_scale);
  // A quantized linear's forward and backward during a probe: the training pass's copies and GEMMs,
  // each copy quantized with its codes and measured (wgrad_x from X here, not kept from the
  // forward), and no weight gradient.
  void probe_linear_forward(const engine::LinearSite& s, int block, int pos, const bf16_t* xb, LinearOut y);
  void probe_linear_backward(const engine::LinearSite& s, int block, int pos, const bf16_t* xb, const bf16_t* dyb,
                             LinearOut dx);

  // CUDA graphs of the training pass. A study's small models spend most of a pass launching
  // kernels that run for microseconds; a graph launches the whole pass at once. A pass's buffers,
  // shapes and kernels are fixed by its shape, so: the first pass of a shape runs directly (it
  // makes every buffer), the next is captured (cudaStreamCaptureModeRelaxed) and instantiated;
  // later passes replay it. Under a quantized recipe the quantizers' kernel arguments change every
  // micro-step (Philox streams, steps, RHT signs), so every pass is captured again and the
  // instantiated graph updated in place (cudaGraphExecUpdate: same topology, new arguments); a bf16
  // pass has no argument that changes and replays as captured. A graph holds raw device pointers:
  // it is used only while cuda::device_allocation_count() is the count it was made at. Two per
  // model: micro-step 0 of an optimizer step remakes the weight slots' copies, the others do not.
  // FP4LAB_CUDA_GRAPHS=0 in the environment turns them off (every pass launched kernel by kernel);
  // so does an MoE model (its dispatch waits for the host mid-pass).
  struct PassGraph {
    cudaGraphExec_t exec = nullptr;
    int rows = 0, batch = 0;
    float grad_scale = 0.0f;
    uint64_t allocations = 0;  // device_allocation_count() after the direct pass of this shape
    bool warmed = false;       // that direct pass ran
  };
  bool graphs_on_ = true;
  uint64_t graph_launches_ = 0;
  PassGraph pass_graphs_[2];  // [remakes the weight copies]
  void drop_graph(PassGraph& g);

  // Passes enqueued and not yet finished: pass i's loss sum, quantizer flag and weight copies'
  // flags are copied on the device into slot i (so no pass waits for the host), with its row count
  // and which weight copies it used kept here. kPendingSlots passes at most: one more waits for them.
  static constexpr size_t kPendingSlots = 64;
  DeviceArray<double> pending_loss_;
  DeviceArray<unsigned> pending_flags_, pending_weight_flags_;
  std::vector<std::vector<unsigned char>> pending_used_;
  std::vector<int> pending_rows_;
  std::vector<model::PassResult> harvested_;

  model::Model host_;  // validation, initialization, views (it never runs a pass)
  std::vector<bool> keep_bf16_;
  size_t n_params_ = 0;
  int tok_emb_ = 0, final_norm_ = 0, lm_head_ = 0;

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  cuda::Workspace ws_ops_, ws_sum_, ws_quant_;

  DeviceArray<float> params_, grads_;
  DeviceArray<bf16_t> w_bf16_;  // the bf16 copy of every parameter (the GEMMs' weights)
  bool weights_stale_ = true;
  uint64_t weights_version_ = 0;  // bumped each time w_bf16_ is remade
  // The weight slots' copies, [block][position][fprop_w, dgrad_w], with their tensor scales and
  // non-finite flags (one device word each), and which ones the pass in flight used.
  std::vector<WeightCopy> weight_copies_;
  DeviceArray<float> weight_ts_;
  DeviceArray<unsigned> weight_flags_;
  std::vector<unsigned char> weight_used_;

  // ---- The parameters' views by block (every block linear's and norm's index into views()) ----
  // Found by name (model::param_layout's), so a dense model gets the layout's fixed indices and an
  // MoE block its router and experts.
  struct BlockIndex {
    int attn_norm = -1, qkv = -1, attn_out = -1, mlp_norm = -1, mlp_in = -1, mlp_out = -1, router = -1;
    std::vector<int> expert_in, expert_out;  // routed 0..E-1, then shared
  };
  std::vector<BlockIndex> block_index_;

  // ---- MoE blocks (cuda_model_moe.cpp) ----
  // What one MoE block keeps from its forward for its backward: the router's outputs, the dispatch
  // plan (on the device and, for the GEMM shapes, on the host), and the experts' bf16 activations,
  // grouped (expert j's padded group at rows plan.offsets[j] .. offsets[j + 1]; kernels/cuda/moe.cuh).
  struct MoeActs {
    DeviceArray<float> logits, scores, gates, lse;     // [R, E], [R, E], [R, k], [R]
    DeviceArray<int32_t> chosen, slot, tokens, choice;  // [R, k], [R, k], [groups], [groups]
    DeviceArray<int64_t> plan_dev;                     // counts [J] | offsets [J + 1]
    DeviceArray<bf16_t> x, u, a, y;                    // [groups, d], [groups, 2·f_e], [groups, f_e], [groups, d]
    cuda::MoeDispatch plan;
    model::MoeLayerStats stats;
    // The router's scores, choices and lse copied to the host for the auxiliary losses: copied
    // before the dispatch's wait, read after the block's expert work is enqueued.
    cuda::PinnedArray<float> host_scores, host_lse;
    cuda::PinnedArray<int32_t> host_chosen;
  };
  std::vector<std::unique_ptr<MoeActs>> moe_acts_;  // per block (null for a dense block)
  // Shared scratch of the MoE blocks: h in fp32 [R, d] (the router's input), the router's dgates
  // [R, k], dlogits [R, E] and share of dh [R, d], the experts' grouped bf16
  // dY, da, du and dX, their quantized copies (X or dY, wgrad dY, wgrad X) and those copies'
  // tensor scales (the weights' copies are in weight_copies_). The combined output and dh go
  // straight into the bf16 tmpb_ and dhb_ (moe_combine's and moe_sum_dx's bf16 outputs).
  DeviceArray<float> moe_h_, moe_dgates_, moe_dlogits_, moe_router_dh_;
  // The router's weight gradient sums over all R rows into E·d outputs (a few tiles): a split-K
  // as the LM head's (row_sum_chunks), with its partials [chunks, E, d].
  int router_chunks_ = 1;
  DeviceArray<float> moe_router_partials_;
  // The experts' weight gradients dW_j += dY_jᵀ · X_j are independent GEMMs of a few output tiles
  // each (about 5 µs at d6): one after another on one stream they leave most of the GPU idle. So
  // they run on side streams, expert j on wgrad_streams_[j % n] with its own cuBLASLt wrapper
  // (the same workspace size as gemm_'s, so the same algorithms and bits), forked from stream_
  // once their operands exist and joined back before experts_backward returns. Only where each
  // GEMM needs nothing made per expert in between (bf16, or 4-bit copies made for all groups in
  // one call, with no device-side alpha): else they stay on stream_. FP4LAB_MOE_WGRAD_STREAMS=n in
  // the environment sets n (default 4; 1 or 0: none), read when the first MoE pass is prepared.
  // FP4LAB_MOE_GROUPED_WGRAD=1 (read by the constructor; default 0): where the experts' weight
  // gradients need no device-side alpha, all of a linear's go in one grouped call
  // (cuda::GroupedGemm::accumulate) on stream_ instead of one cuBLASLt call each. Other kernels,
  // so other bits than the default's: an opt-in for measuring it (bench/RESULTS.md, session 43),
  // whose runs record identity kMoeGroupedWgradIdentityOffset + kNumericsIdentity
  // (numerics_identity()).
  bool grouped_wgrad_ = false;
  std::vector<cuda::GroupedAccumulation> wgrad_products_;
  std::vector<cudaStream_t> wgrad_streams_;
  std::vector<std::unique_ptr<cuda::Gemm>> wgrad_gemms_;
  cudaEvent_t wgrad_fork_ = nullptr;
  std::vector<cudaEvent_t> wgrad_joins_;
  bool wgrad_streams_made_ = false;
  DeviceArray<bf16_t> moe_dy_, moe_da_, moe_du_, moe_dx_;
  DeviceArray<bf16_t> moe_q_a_, moe_q_c_, moe_q_d_;
  DeviceArray<float> moe_ts_;
  int64_t moe_capacity_ = 0;  // grouped rows the buffers hold (moe_dispatch_capacity)
  // The MoE blocks' routing of each pass in flight (appended by enqueue_pass, as pending_rows_).
  std::vector<std::vector<model::MoeLayerStats>> pending_moe_;
  std::vector<model::MoeLayerStats> pass_moe_;  // the pass being enqueued
  void prepare_moe();
  // The MoE block of `block`: tmpb_ (its output, stored) from h (mlp_norm's bf16 output); and its
  // backward from dresb_ into dhb_ (dh, stored) and the gradients.
  void moe_forward(const model::StepContext& ctx, int block, const bf16_t* h);
  void moe_backward(const model::StepContext& ctx, int block, const bf16_t* h, float grad_scale);
  // Expert j's group in the pass: its rows, its padded length, where it starts in the grouped
  // buffers, its tokens (device: the SR draws' rows), and its two linears' sites (its own Philox
  // sites, model::expert_linear_site).
  struct ExpertGroup {
    int rows = 0, padded = 0;
    int64_t first = 0;
    const int32_t* tokens = nullptr;
    engine::LinearSite in, out;
  };
  ExpertGroup expert_group(const model::StepContext& ctx, int block, int expert);
  // The multiple to which the dispatch pads each expert's group (zero rows), the rows of its
  // weight-gradient GEMM: the CPU model's wgrad_row_multiple where that is above 1 (a quantizer's
  // blocks run along the tokens there). Where it is 1 (a bf16 block) and the block routes to more
  // than one expert, kBf16GroupRows instead: the group sizes change at every micro-step, and
  // cuBLASLt's plans are made per GEMM shape (kernels/cuda/gemm.cu), so unpadded groups cost a new
  // plan, a heuristic query on the host, per group per micro-step. Zero rows add exact zeros to
  // dW; the GEMM of the padded length may still sum in another order than the unpadded one would.
  // One routed expert keeps its R rows, so that E = 1, top-1 stays the dense model bit for bit.
  static constexpr int kBf16GroupRows = 64;
  int expert_row_multiple(int block) const;
  static int64_t routed_rows(const MoeActs& A);  // the groups' rows before padding
  // One expert linear (pos 2: mlp_in, 3: mlp_out) of every expert of `block` over its group: the
  // grouped Y [total, n] = X · Wᵀ per group; and its backward, dX over each group's rows and
  // dW += dYᵀ · X over its padded rows (zero padding). Each group's copies are quantized over the
  // group's rows into its own rows of moe_q_* (SR draws keyed by its tokens), the weights' copies
  // are weight_copy's, kept through the optimizer step. The forward and dgrad products run as one
  // grouped call (cuda::GroupedGemm) where experts_grouped says so, else one cuBLASLt call per
  // group; the weight gradients (fp32, accumulated) run per group.
  void experts_forward(const model::StepContext& ctx, int block, int pos, const bf16_t* x, bf16_t* y);
  void experts_backward(const model::StepContext& ctx, int block, int pos, const bf16_t* x, const bf16_t* dy,
                        bf16_t* dx);
  // The rule, fixed by the shapes and the recipe (never by the machine): grouped when at least two
  // groups have rows and no slot of the linear has a two-level scale (e4m3x2's tensor scales are
  // device values; the grouped call takes host scalars). One group alone keeps cuBLASLt's call, so
  // one expert at the dense width is the dense model bit for bit.
  bool experts_grouped(const model::StepContext& ctx, int block, int pos) const;
  // The spec with which one quantizer call over all groups' rows gives each group's rows the bits
  // of the group's own call, or none: cpu::blocks_quantize_alone, and the same spec for every
  // expert once the SR keys are set aside (RHT signs drawn per site differ). Fewer launches.
  std::optional<QuantSpec> one_copy_for_all_groups(const model::StepContext& ctx, int block, int pos,
                                                   engine::Slot slot);
  // X [all groups' rows, k] of the linear quantized for `slot` into dest in that one call, when
  // one_copy_for_all_groups gives a spec; false (nothing done) otherwise.
  bool quantize_all_groups(const model::StepContext& ctx, int block, int pos, engine::Slot slot, const bf16_t* x,
                           bf16_t* dest, float* tensor_scale);
  // dY [all groups' rows, n] of the linear quantized for its dgrad and wgrad slots into moe_q_a_
  // and moe_q_c_ in one call, each group's SR draws keyed by its own linear's stream and its
  // tokens (quantize_fused's groups): the bits of the per-group calls. Where every group's spec
  // allows it (cuda::groups_quantize_in_one_call, the same spec but for the stream's linear id);
  // false (nothing done) otherwise. Fewer launches: one where an MoE block had one per expert.
  bool quantize_dy_all_groups(const model::StepContext& ctx, int block, int pos, const bf16_t* dy);
  // Each MoE block's expert linears' ids (model::expert_linear_site), device memory: block b's
  // position p (2, 3) at (b · 2 + p − 2) · (experts + shared); what quantize_fused's groups read.
  DeviceArray<uint32_t> moe_linear_ids_;
  std::unique_ptr<cuda::GroupedGemm> grouped_gemm_;
  std::vector<cuda::GroupedProduct> products_;  // a grouped call's, reused

  // Per-pass state.
  int batch_ = 0, seq_ = 0, rows_ = 0;
  // inputs | targets of each pass in flight, staged for one upload: kPendingSlots slots of
  // token_slot_ values, [pending index][2·rows] (prepare)
  cuda::PinnedArray<int32_t> host_tokens_;
  size_t token_slot_ = 0;
  DeviceArray<int32_t> tokens_;          // inputs [rows] | targets [rows]
  std::unique_ptr<cuda::RopeTable> rope_;
  std::vector<std::unique_ptr<DeviceArray<bf16_t>>> residb_;  // the residual stream
  std::vector<std::unique_ptr<LayerActs>> acts_;
  DeviceArray<float> hf_, rstdf_, logits_, loss_rows_, head_w_;
  DeviceArray<float> dh_, datt_, dqkv_;  // the LM head's dX (an fp32 product); the reference attention's
  DeviceArray<bf16_t> dyb_, hfb_;  // bf16 operands: the current linear's dY, the final norm's output
  // The attn_out and mlp_out linears' outputs, the mlp_out linear's dX and the qkv and mlp_in
  // linears' dX, which the next op reads once, stored.
  DeviceArray<bf16_t> tmpb_, dab_, dhb_;
  // The residual gradient (∂loss/∂ the residual stream). Its values are bf16 (each addition into it
  // is stored, rounded), so it is kept in bf16 alone and is itself the dY of the linears that write
  // the residual stream (attn_out, mlp_out): no copy.
  DeviceArray<bf16_t> dresb_;
  // Attention: the fused bf16 tensor-core kernel (kernels/cuda/flash_attention.cuh) when the shape
  // allows it (head_dim 64, seq_len a multiple of 64; its bf16 inputs are exactly the stored
  // values); the fp32 reference kernel otherwise.
  bool use_flash(int seq_len) const;
  // The fused kernel's bf16 dout (its qkv: LayerActs::qkvb). Its dq|dk|dv go, in bf16, into dyb_
  // (the qkv linear's dY once RoPE's backward has run in place there); datt_ and dqkv_ (fp32)
  // serve the reference kernel.
  DeviceArray<bf16_t> dattb_;
  cuda::Workspace ws_flash_;
  DeviceArray<bf16_t> q_a_, q_c_, q_d_;  // dequantized copies of the activation and gradient slots
  DeviceArray<float> tensor_scales_;    // 4 floats: those slots' S_dec (index 1, a weight's, unused)
  // A training pass makes each quantized block linear's wgrad_x copy (X blocked along T, the weight
  // gradient's operand) in its forward, from the same read of X as the fprop_x copy (one fused
  // quantize call with both copies; with e4m3x2 scales one amax pass for both), and keeps it until
  // the backward's weight gradient, instead of reading X again there: [linear_site(block, position)], its
  // tensor scale (S_dec, or 1) in x_col_ts_ at the same index. Same copies, same bits: the spec is
  // the one the backward would use (site_slot_spec of the same step context). The probe keeps
  // making wgrad_x in the backward (q_d_), where it measures it in the CPU probe's order.
  std::vector<std::unique_ptr<DeviceArray<bf16_t>>> x_col_;
  DeviceArray<float> x_col_ts_;
  bool pass_backward_ = false;  // the pass being enqueued has a backward (enqueue_pass)
  // 4 floats: 0 and 1 (device-side beta values), the fprop/dgrad alpha slot, the wgrad alpha slot.
  DeviceArray<float> scalars_;
  // The LM head's weight-gradient split-K: chunk count (fixed by the row count) and partials.
  int head_chunks_ = 1;
  DeviceArray<float> head_partials_;
  // The block linears' weight gradients dW += dYᵀ·X run as a split-K too where the output is
  // small (wgrad_chunks): their partials, sized for the largest of the four linears.
  DeviceArray<float> wgrad_partials_;
  // dW [n, k] += alpha·(dYᵀ · X) over the pass's rows (alpha: a device float, or null for 1), as
  // one GEMM or a deterministic split-K.
  void weight_gradient(int n, int k, const float* alpha, const bf16_t* dy, const bf16_t* x, float* dw);
  // The same over `rows` rows as one GEMM (no split-K): weight_gradient's unsplit case, and an
  // expert group's weight gradient.
  void weight_gradient_one_gemm(int n, int k, int rows, const float* alpha, const bf16_t* dy, const bf16_t* x,
                                float* dw);
  DeviceArray<unsigned> nonfinite_;     // the quantizers' flag for this pass
  DeviceArray<double> loss_sum_;
  // The probe's buffers (allocated by the first probe): codes of the activation and gradient
  // copies (beside q_a_, q_c_, q_d_), a weight copy with its codes and tensor scale, the scratch
  // norm-gain gradient, and the sums of every slot, [linear_id][slot].
  DeviceArray<uint8_t> probe_codes_a_, probe_codes_c_, probe_codes_d_, probe_w_codes_;
  DeviceArray<bf16_t> probe_w_;
  DeviceArray<float> probe_w_ts_, probe_dgain_;
  DeviceArray<cuda::DeviceMetricSums> probe_sums_;
  cuda::Workspace ws_metrics_;
};

}  // namespace fp4::cuda_model
