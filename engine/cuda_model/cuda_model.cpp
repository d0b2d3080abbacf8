// cuda_model.cpp — see cuda_model.h: construction, the parameters, and the block linears of a
// training pass (their quantized copies, kept weight copies and GEMMs). The passes themselves are
// cuda_model_passes.cpp, their CUDA graphs cuda_model_graphs.cpp, the shrinkage probe
// cuda_model_probe.cpp.
#include "engine/cuda_model/cuda_model.h"
#include "engine/cuda_model/cuda_model_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/linear_sites.h"
#include "base/numerics_identity.h"
#include "base/user_error.h"
#include "engine/quantized_linear.h"

namespace fp4::cuda_model {

namespace {

// Throws UserError (the run's bad input: exit 2) when no device can be used.
void require_device() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky error state a failed query may leave
    throw UserError(std::string("device \"cuda\": no CUDA device is visible (") +
                    (err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found 0 devices") +
                    "): run on a machine with a GPU or use device \"cpu\"");
  }
}

}  // namespace

CudaModel::CudaModel(const model::ModelShape& config, const engine::Recipe& recipe, std::vector<int> bf16_layers)
    : host_(config, recipe, bf16_layers, model::Storage::bf16) {
  require_device();
  if (config.head_dim > cuda::kMaxHeadDim)
    throw UserError("model: head_dim = " + std::to_string(config.head_dim) +
                    " is above the CUDA attention kernel's limit " + std::to_string(cuda::kMaxHeadDim) +
                    ": use more heads or device \"cpu\"");
  // The host model never runs a pass: drop its gradient buffer.
  host_.grads().clear();
  host_.grads().shrink_to_fit();
  const int L = config.n_layers;
  keep_bf16_.assign(L, false);
  for (int b : host_.bf16_layers()) keep_bf16_[b] = true;
  n_params_ = host_.params().size();
  // Every view by name (param_layout's names): a dense model's are its fixed indices.
  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < views().size(); ++i)
      if (views()[i].name == name) return static_cast<int>(i);
    return -1;
  };
  tok_emb_ = find("tok_emb");
  final_norm_ = find("final_norm");
  lm_head_ = find("lm_head");
  block_index_.assign(L, BlockIndex{});
  for (int b = 0; b < L; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    BlockIndex& bi = block_index_[b];
    bi.attn_norm = find(p + "attn_norm");
    bi.qkv = find(p + "qkv");
    bi.attn_out = find(p + "attn_out");
    bi.mlp_norm = find(p + "mlp_norm");
    bi.mlp_in = find(p + "mlp_in");
    bi.mlp_out = find(p + "mlp_out");
    if (!model::is_moe_block(config, b)) continue;
    bi.router = find(p + "router");
    const int E = config.moe.n_experts;
    for (int j = 0; j < E + config.moe.n_shared; ++j) {
      const std::string e = p + (j < E ? "experts." + std::to_string(j) : "shared." + std::to_string(j - E)) + ".";
      bi.expert_in.push_back(find(e + "mlp_in"));
      bi.expert_out.push_back(find(e + "mlp_out"));
    }
  }

  FP4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<cuda::Gemm>();
  params_.reserve(n_params_);
  grads_.reserve(n_params_);
  w_bf16_.reserve(n_params_);
  tensor_scales_.reserve(4);
  scalars_.reserve(4);
  nonfinite_.reserve(1);
  loss_sum_.reserve(1);
  static const float kScalars[4] = {0.0f, 1.0f, 1.0f, 1.0f};  // beta 0, beta 1, the fprop/dgrad and wgrad alpha slots
  FP4_CUDA_CHECK(cudaMemcpyAsync(scalars_.get(), kScalars, sizeof(kScalars), cudaMemcpyHostToDevice, stream_));
  FP4_CUDA_CHECK(cudaMemsetAsync(params_.get(), 0, n_params_ * sizeof(float), stream_));
  FP4_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, n_params_ * sizeof(float), stream_));
  pending_loss_.reserve(kPendingSlots);
  pending_flags_.reserve(kPendingSlots);
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const char* graphs = std::getenv("FP4LAB_CUDA_GRAPHS");
  graphs_on_ = (graphs == nullptr || std::strcmp(graphs, "0") != 0) && !config.moe.enabled();
  const char* grouped_env = config.moe.enabled() ? std::getenv("FP4LAB_MOE_GROUPED_WGRAD") : nullptr;
  if (grouped_env != nullptr) {
    const std::string v(grouped_env);
    if (v != "0" && v != "1")
      throw std::invalid_argument("FP4LAB_MOE_GROUPED_WGRAD = \"" + v +
                                  "\" is neither 0 nor 1: unset it (the default, 0), or set 1 to give each MoE "
                                  "linear's expert weight gradients one grouped call");
    grouped_wgrad_ = v == "1";
  }
}

int CudaModel::numerics_identity() const {
  return grouped_wgrad_ ? kMoeGroupedWgradIdentityOffset + kNumericsIdentity : kNumericsIdentity;
}

CudaModel::~CudaModel() {
  for (PassGraph& g : pass_graphs_)
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);  // best effort, as below
  for (cudaStream_t s : wgrad_streams_) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  for (cudaEvent_t e : wgrad_joins_) cudaEventDestroy(e);
  if (wgrad_fork_ != nullptr) cudaEventDestroy(wgrad_fork_);
  if (stream_) {
    cudaStreamSynchronize(stream_);  // destructors must not throw: best effort
    cudaStreamDestroy(stream_);
  }
}

// ---- Parameters ----------------------------------------------------------------------------------

void CudaModel::init_params(uint64_t seed) {
  host_.init_params(seed);
  params_from_host(host_.params());
}

void CudaModel::params_from_host(const std::vector<float>& params) {
  if (params.size() != n_params_)
    throw std::invalid_argument("cuda model: " + std::to_string(params.size()) + " parameters given, the model has " +
                                std::to_string(n_params_));
  FP4_CUDA_CHECK(cudaMemcpyAsync(params_.get(), params.data(), n_params_ * sizeof(float), cudaMemcpyHostToDevice,
                                 stream_));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  weights_stale_ = true;
}

std::vector<float> CudaModel::params_to_host() const {
  std::vector<float> out(n_params_);
  FP4_CUDA_CHECK(cudaMemcpyAsync(out.data(), params_.get(), n_params_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

std::vector<float> CudaModel::grads_to_host() const {
  std::vector<float> out(n_params_);
  FP4_CUDA_CHECK(cudaMemcpyAsync(out.data(), grads_.get(), n_params_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

void CudaModel::zero_grads() {
  FP4_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, n_params_ * sizeof(float), stream_));
}

// ---- Helpers -------------------------------------------------------------------------------------

void CudaModel::store(float* p, size_t n) { cuda::round_to_bf16(p, n, stream_); }

cuda::StoreOut CudaModel::store_out(bf16_t* copy) const {
  cuda::StoreOut s;
  s.round = true;
  s.bf16 = copy;
  return s;
}

engine::LinearSite CudaModel::site(const model::StepContext& ctx, int block, int pos) const {
  return model::linear_site_at(host_.recipe(), keep_bf16_[block], ctx, block, pos);
}

const model::ParamView& CudaModel::weight_view(int block, int pos) const {
  const BlockIndex& b = block_index_[block];
  const int view = pos == 0 ? b.qkv : pos == 1 ? b.attn_out : pos == 2 ? b.mlp_in : b.mlp_out;
  if (view < 0)  // an MoE block's MLP positions: its experts' views are in block_index_
    throw std::logic_error("cuda model: block " + std::to_string(block) + " has no linear at position " +
                           std::to_string(pos));
  return views()[view];
}

namespace detail {

// One copy of a slot: its spec, where its dequantized values and tensor scale go.
cuda::CopyOut copy_out(const QuantSpec& spec, bf16_t* dequant, float* tensor_scale) {
  cuda::CopyOut c;
  c.spec = spec;
  c.dequant = dequant;
  c.tensor_scale = tensor_scale;
  return c;
}

// Quantizes `src` into one or two copies: a row-blocked and a column-blocked copy share one fused
// pass; two copies blocked the same way take a pass each.
void quantize_copies(const bf16_t* src, int rows, int cols, const cuda::CopyOut* a, const cuda::CopyOut* b,
                     unsigned* flag, cuda::Workspace& ws, cudaStream_t stream, const int32_t* source_rows,
                     const cuda::GroupStreams* groups) {
  auto row = [](const cuda::CopyOut* c) { return c != nullptr && c->spec.along == BlockAlong::row ? c : nullptr; };
  auto col = [](const cuda::CopyOut* c) { return c != nullptr && c->spec.along == BlockAlong::column ? c : nullptr; };
  if (b != nullptr && a->spec.along == b->spec.along) {
    cuda::quantize_fused(src, rows, cols, row(a), col(a), flag, ws, stream, source_rows, groups);
    cuda::quantize_fused(src, rows, cols, row(b), col(b), flag, ws, stream, source_rows, groups);
    return;
  }
  const cuda::CopyOut* r = row(a) ? row(a) : row(b);
  const cuda::CopyOut* c = col(a) ? col(a) : col(b);
  cuda::quantize_fused(src, rows, cols, r, c, flag, ws, stream, source_rows, groups);
}

// How many K chunks a block linear's weight gradient is cut into (Gemm::matmul_split_k). Each CTA
// of a GEMM owns an output tile and walks all of K, and a small model's weights [m, n] are a few
// tiles while K is the micro-batch's token count (16384 in the first study): a d2 model's wgrad
// GEMMs kept 3 to 8 of the H200's 132 SMs busy and took two thirds of its step. K is cut so that
// the product has at most 512 tile-sized pieces of work, in chunks of at least 512 rows; outputs of
// 64 tiles or more (128×128) fill the GPU as they are and stay one GEMM. A function of the shape
// alone, so the order of the fp32 sums is fixed too.
BackwardSpecs backward_specs(const engine::LinearSite& s) {
  return {engine::site_slot_spec(s, engine::Slot::dgrad_dy), engine::site_slot_spec(s, engine::Slot::dgrad_w),
          engine::site_slot_spec(s, engine::Slot::wgrad_dy), engine::site_slot_spec(s, engine::Slot::wgrad_x)};
}

int wgrad_chunks(int m, int n, int k) {
  const int tiles = ((m + 127) / 128) * ((n + 127) / 128);
  if (tiles >= 64) return 1;
  int chunks = 32;
  while (chunks > 1 && (tiles * chunks > 512 || k % chunks != 0 || k / chunks < 512)) chunks /= 2;
  return chunks;
}

int row_sum_chunks(int rows) {
  int chunks = 32;
  while (chunks > 1 && (rows % chunks != 0 || rows / chunks < 256)) chunks /= 2;
  return chunks;
}

// A pass's non-finite flag: its quantizers' `flag`, or'ed with the flags of the weight copies it
// used (`used[i]`: copy i; a kept copy's flag counts in every pass that uses it).
unsigned pass_flag(unsigned flag, const unsigned* weight_flags, const std::vector<unsigned char>& used) {
  for (size_t i = 0; i < used.size(); ++i)
    if (used[i]) flag |= weight_flags[i];
  return flag;
}

}  // namespace detail

using detail::backward_specs;
using detail::copy_out;
using detail::quantize_copies;
using detail::wgrad_chunks;


void CudaModel::weight_gradient(int n, int k, const float* alpha, const bf16_t* dy, const bf16_t* x, float* dw) {
  const int t = rows_, chunks = wgrad_chunks(n, k, t);
  if (chunks > 1) {
    cuda::GemmShape g;  // dW [n, k] = dY [t, n]ᵀ · X [t, k]
    g.trans_a = true;
    g.m = n;
    g.n = k;
    g.k = t;
    gemm_->matmul_split_k(g, chunks, alpha, dy, x, 1.0f, dw, wgrad_partials_.get(), stream_);
  } else {
    weight_gradient_one_gemm(n, k, t, alpha, dy, x, dw);
  }
}

void CudaModel::weight_gradient_one_gemm(int n, int k, int rows, const float* alpha, const bf16_t* dy,
                                         const bf16_t* x, float* dw) {
  if (alpha == nullptr)
    gemm_->gemm(true, false, n, k, rows, 1.0f, dy, x, 1.0f, dw, stream_);
  else
    gemm_->gemm_device_scalars(true, false, n, k, rows, alpha, dy, x, scalars_.get() + 1, dw, stream_);
}

const float* CudaModel::alpha_of(const QuantSpec& a, const float* ts_a, const QuantSpec& b, const float* ts_b,
                                  float* slot) {
  const bool two_a = a.scale == ScaleMode::e4m3x2, two_b = b.scale == ScaleMode::e4m3x2;
  if (!two_a && !two_b) return nullptr;  // both tensor scales are 1, as on the CPU
  // The CPU's qa.tensor_scale * qb.tensor_scale (a one-level scale being 1), one fp32 multiply, on
  // the device: the quantizers' scales never leave it, so no host synchronization per GEMM. The
  // slot is rewritten only after the previous GEMM that read it, everything being on one stream.
  cuda::Gemm::scale_product(two_a ? ts_a : nullptr, two_b ? ts_b : nullptr, slot, stream_);
  return slot;
}

size_t CudaModel::dense_copy_index(int block, int pos, engine::Slot slot) const {
  return static_cast<size_t>(linear_site(block, pos)) * 2 + (slot == engine::Slot::dgrad_w ? 1 : 0);
}

size_t CudaModel::expert_copy_index(int block, int expert, int pos, engine::Slot slot) const {
  const model::MoeShape& m = config().moe;
  const size_t dense = static_cast<size_t>(config().n_layers) * kLinearsPerBlock * 2;
  const size_t linear = (static_cast<size_t>(block) * (m.n_experts + m.n_shared) + expert) * 2 + (pos == 3 ? 1 : 0);
  return dense + linear * 2 + (slot == engine::Slot::dgrad_w ? 1 : 0);
}

size_t CudaModel::weight_copy_count() const {
  const model::ModelShape& c = config();
  const size_t dense = static_cast<size_t>(c.n_layers) * kLinearsPerBlock * 2;
  if (!c.moe.enabled()) return dense;
  return dense + static_cast<size_t>(c.n_layers) * (c.moe.n_experts + c.moe.n_shared) * 2 * 2;
}

const bf16_t* CudaModel::weight_copy(size_t i, const model::ParamView& w, const QuantSpec& spec,
                                     const float** tensor_scale) {
  WeightCopy& c = weight_copies_[i];
  if (c.version != weights_version_ || c.spec != spec) {
    const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]);
    c.dequant.reserve(static_cast<size_t>(w.size));
    const cuda::CopyOut out = copy_out(spec, c.dequant.get(), weight_ts_.get() + i);
    FP4_CUDA_CHECK(cudaMemsetAsync(weight_flags_.get() + i, 0, sizeof(unsigned), stream_));
    quantize_copies(w_bf16_.get() + w.offset, n, k, &out, nullptr, weight_flags_.get() + i, ws_quant_, stream_);
    c.spec = spec;
    c.version = weights_version_;
  }
  weight_used_[i] = 1;
  *tensor_scale = weight_ts_.get() + i;
  return c.dequant.get();
}

void CudaModel::plain_gemm(bool trans_a, bool trans_b, int m, int n, int k, const bf16_t* a, const bf16_t* b,
                           LinearOut c) {
  if (c.bf16 != nullptr) {
    gemm_->gemm(trans_a, trans_b, m, n, k, 1.0f, a, b, 0.0f, c.bf16, stream_);
  } else {
    gemm_->gemm(trans_a, trans_b, m, n, k, 1.0f, a, b, 0.0f, c.f32, stream_);
  }
}

void CudaModel::quantized_gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* alpha, const bf16_t* a,
                               const bf16_t* b, LinearOut c) {
  if (alpha == nullptr) {
    plain_gemm(trans_a, trans_b, m, n, k, a, b, c);
  } else if (c.bf16 != nullptr) {
    gemm_->gemm_device_scalars(trans_a, trans_b, m, n, k, alpha, a, b, scalars_.get() + 0, c.bf16, stream_);
  } else {
    gemm_->gemm_device_scalars(trans_a, trans_b, m, n, k, alpha, a, b, scalars_.get() + 0, c.f32, stream_);
  }
}

void CudaModel::linear_forward(const model::StepContext& ctx, int block, int pos, const bf16_t* xb, LinearOut y) {
  const model::ParamView& w = weight_view(block, pos);
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]), t = rows_;
  const bf16_t* wb = w_bf16_.get() + w.offset;
  const engine::LinearSite s = site(ctx, block, pos);
  if (!engine::site_is_quantized(s)) {
    plain_gemm(false, true, t, n, k, xb, wb, y);
    return;
  }
  if (probe_ != nullptr) {
    probe_linear_forward(s, block, pos, xb, y);
    return;
  }
  float* ts = tensor_scales_.get();
  const QuantSpec sx = engine::site_slot_spec(s, engine::Slot::fprop_x);
  const QuantSpec sw = engine::site_slot_spec(s, engine::Slot::fprop_w);
  const cuda::CopyOut cx = copy_out(sx, q_a_.get(), ts + 0);
  // A training pass also makes the weight gradient's copy of X from this read of X, kept for the
  // backward (x_col_).
  cuda::CopyOut cxw;
  if (pass_backward_)
    cxw = copy_out(engine::site_slot_spec(s, engine::Slot::wgrad_x), x_col_[s.linear_id]->get(),
                   x_col_ts_.get() + s.linear_id);
  quantize_copies(xb, t, k, &cx, pass_backward_ ? &cxw : nullptr, nonfinite_.get(), ws_quant_, stream_);
  const float* ts_w = nullptr;
  const bf16_t* qw = weight_copy(dense_copy_index(block, pos, engine::Slot::fprop_w), w, sw, &ts_w);
  const float* alpha = alpha_of(sx, ts + 0, sw, ts_w, scalars_.get() + 2);
  quantized_gemm(false, true, t, n, k, alpha, q_a_.get(), qw, y);
}

void CudaModel::linear_backward(const model::StepContext& ctx, int block, int pos, const bf16_t* xb,
                                const bf16_t* dyb, LinearOut dx) {
  const model::ParamView& w = weight_view(block, pos);
  const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]), t = rows_;
  float* dw = grads_.get() + w.offset;
  const bf16_t* wb = w_bf16_.get() + w.offset;
  const engine::LinearSite s = site(ctx, block, pos);
  if (!engine::site_is_quantized(s)) {
    plain_gemm(false, false, t, k, n, dyb, wb, dx);  // dX = dY · W
    if (probe_ == nullptr) weight_gradient(n, k, nullptr, dyb, xb, dw);  // dW += dYᵀ · X (none in a probe)
    return;
  }
  if (probe_ != nullptr) {
    probe_linear_backward(s, block, pos, xb, dyb, dx);
    return;
  }
  float* ts = tensor_scales_.get();
  const auto [s_dy_d, s_w_d, s_dy_w, s_x_w] = backward_specs(s);
  const cuda::CopyOut c_dy_d = copy_out(s_dy_d, q_a_.get(), ts + 0), c_dy_w = copy_out(s_dy_w, q_c_.get(), ts + 2);
  // dY's two copies (dgrad's along N, wgrad's along T) come from one read of dY.
  quantize_copies(dyb, t, n, &c_dy_d, &c_dy_w, nonfinite_.get(), ws_quant_, stream_);
  // X's weight-gradient copy: made by the forward of this pass (x_col_).
  const bf16_t* qx = x_col_[s.linear_id]->get();
  const float* ts_x = x_col_ts_.get() + s.linear_id;
  const float* ts_w = nullptr;
  const bf16_t* qw = weight_copy(dense_copy_index(block, pos, engine::Slot::dgrad_w), w, s_w_d, &ts_w);
  const float* alpha_d = alpha_of(s_dy_d, ts + 0, s_w_d, ts_w, scalars_.get() + 2);
  quantized_gemm(false, false, t, k, n, alpha_d, q_a_.get(), qw, dx);
  // dW += alpha·(dYᵀ·X). Under e4m3x2 recipes alpha and beta = 1 come from device memory too, so no
  // linear waits on the host. With beta = 1 cuBLASLt's device-scalar epilogue rounds alpha·acc + C
  // differently from its host-scalar one in the last bit of some outputs (tests/gpu/ops_test.cpp):
  // still deterministic, and within the tolerance the GPU-vs-CPU tests hold (the GEMMs' sums run in
  // another order than the CPU's anyway). Its own alpha slot: dgrad's may still be pending.
  const float* alpha_w = alpha_of(s_dy_w, ts + 2, s_x_w, ts_x, scalars_.get() + 3);
  weight_gradient(n, k, alpha_w, q_c_.get(), qx, dw);
}

}  // namespace fp4::cuda_model
