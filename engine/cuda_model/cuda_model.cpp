// cuda_model.cpp — see cuda_model.h. run() is transformer.cpp's run() step for step, with the CPU
// ops replaced by kernels/cuda's and store() where the CPU model calls store() (most of them fused
// into the op that writes or next reads the buffer: run() marks each one); keep the two in step
// when either changes. One deliberate difference: attention uses the fused bf16 kernel where
// the shape allows (use_flash), which rounds P and dS to bf16 for its tensor-core products, as
// FlashAttention does; the fp32 reference kernel (the CPU's math) serves every other shape.
#include "engine/cuda_model/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/linear_sites.h"
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

CudaModel::CudaModel(const model::ModelShape& config, const engine::Recipe& recipe, std::vector<int> bf16_layers,
                     model::Storage storage)
    : host_(config, recipe, bf16_layers, storage), storage_(storage) {
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
  tok_emb_ = 0;
  final_norm_ = 1 + 6 * L;
  lm_head_ = 2 + 6 * L;

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
  graphs_on_ = graphs == nullptr || std::strcmp(graphs, "0") != 0;
}

CudaModel::~CudaModel() {
  for (PassGraph& g : pass_graphs_)
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);  // best effort, as below
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

void CudaModel::store(float* p, size_t n) {
  if (storage_ == model::Storage::bf16) cuda::round_to_bf16(p, n, stream_);
}

cuda::StoreOut CudaModel::store_out(bf16_t* copy) const {
  cuda::StoreOut s;
  s.round = storage_ == model::Storage::bf16;
  s.bf16 = copy;
  return s;
}

engine::LinearSite CudaModel::site(const model::StepContext& ctx, int block, int pos) const {
  engine::LinearSite s;
  s.recipe = &host_.recipe();
  s.keep_bf16 = keep_bf16_[block];
  s.linear_id = linear_site(block, pos);
  s.seed = ctx.seed;
  s.step = ctx.step;
  s.micro_step = ctx.micro_step;
  return s;
}

const model::ParamView& CudaModel::weight_view(int block, int pos) const {
  // The layout (param_layout): tok_emb, then per block attn_norm, qkv, attn_out, mlp_norm, mlp_in,
  // mlp_out.
  static constexpr int kOffsetInBlock[4] = {1, 2, 4, 5};
  return views()[1 + 6 * block + kOffsetInBlock[pos]];
}

namespace {

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
                     unsigned* flag, cuda::Workspace& ws, cudaStream_t stream) {
  auto row = [](const cuda::CopyOut* c) { return c != nullptr && c->spec.along == BlockAlong::row ? c : nullptr; };
  auto col = [](const cuda::CopyOut* c) { return c != nullptr && c->spec.along == BlockAlong::column ? c : nullptr; };
  if (b != nullptr && a->spec.along == b->spec.along) {
    cuda::quantize_fused(src, rows, cols, row(a), col(a), flag, ws, stream);
    cuda::quantize_fused(src, rows, cols, row(b), col(b), flag, ws, stream);
    return;
  }
  const cuda::CopyOut* r = row(a) ? row(a) : row(b);
  const cuda::CopyOut* c = col(a) ? col(a) : col(b);
  cuda::quantize_fused(src, rows, cols, r, c, flag, ws, stream);
}

// How many K chunks a block linear's weight gradient is cut into (Gemm::matmul_split_k). Each CTA
// of a GEMM owns an output tile and walks all of K, and a small model's weights [m, n] are a few
// tiles while K is the micro-batch's token count (16384 in the first study): a d2 model's wgrad
// GEMMs kept 3 to 8 of the H200's 132 SMs busy and took two thirds of its step. K is cut so that
// the product has at most 512 tile-sized pieces of work, in chunks of at least 512 rows; outputs of
// 64 tiles or more (128×128) fill the GPU as they are and stay one GEMM. A function of the shape
// alone, so the order of the fp32 sums is fixed too.
int wgrad_chunks(int m, int n, int k) {
  const int tiles = ((m + 127) / 128) * ((n + 127) / 128);
  if (tiles >= 64) return 1;
  int chunks = 32;
  while (chunks > 1 && (tiles * chunks > 512 || k % chunks != 0 || k / chunks < 512)) chunks /= 2;
  return chunks;
}

// A pass's non-finite flag: its quantizers' `flag`, or'ed with the flags of the weight copies it
// used (`used[i]`: copy i; a kept copy's flag counts in every pass that uses it).
unsigned pass_flag(unsigned flag, const unsigned* weight_flags, const std::vector<unsigned char>& used) {
  for (size_t i = 0; i < used.size(); ++i)
    if (used[i]) flag |= weight_flags[i];
  return flag;
}

}  // namespace

void CudaModel::weight_gradient(int n, int k, const float* alpha, const bf16_t* dy, const bf16_t* x, float* dw) {
  const int t = rows_, chunks = wgrad_chunks(n, k, t);
  if (chunks > 1) {
    cuda::GemmShape g;  // dW [n, k] = dY [t, n]ᵀ · X [t, k]
    g.trans_a = true;
    g.m = n;
    g.n = k;
    g.k = t;
    gemm_->matmul_split_k(g, chunks, alpha, dy, x, 1.0f, dw, wgrad_partials_.get(), stream_);
  } else if (alpha == nullptr) {
    gemm_->gemm(true, false, n, k, t, 1.0f, dy, x, 1.0f, dw, stream_);
  } else {
    gemm_->gemm_device_scalars(true, false, n, k, t, alpha, dy, x, scalars_.get() + 1, dw, stream_);
  }
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

const bf16_t* CudaModel::weight_copy(int block, int pos, engine::Slot slot, const QuantSpec& spec,
                                     const float** tensor_scale) {
  const size_t i = static_cast<size_t>(block * 4 + pos) * 2 + (slot == engine::Slot::dgrad_w ? 1 : 0);
  WeightCopy& c = weight_copies_[i];
  if (c.version != weights_version_ || c.spec != spec) {
    const model::ParamView& w = weight_view(block, pos);
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
  float* ts = tensor_scales_.get();
  const QuantSpec sx = engine::site_slot_spec(s, engine::Slot::fprop_x);
  const QuantSpec sw = engine::site_slot_spec(s, engine::Slot::fprop_w);
  cuda::CopyOut cx = copy_out(sx, q_a_.get(), ts + 0);
  if (probe_ != nullptr) cx.codes = probe_codes_a_.get();
  // A training pass also makes the weight gradient's copy of X from this read of X, kept for the
  // backward (x_col_).
  cuda::CopyOut cxw;
  const bool keep_wgrad_x = pass_backward_ && probe_ == nullptr;
  if (keep_wgrad_x)
    cxw = copy_out(engine::site_slot_spec(s, engine::Slot::wgrad_x), x_col_[s.linear_id]->get(),
                   x_col_ts_.get() + s.linear_id);
  quantize_copies(xb, t, k, &cx, keep_wgrad_x ? &cxw : nullptr, nonfinite_.get(), ws_quant_, stream_);
  if (probe_ != nullptr) measure(s, engine::Slot::fprop_x, xb, t, k, cx);
  const float* ts_w = nullptr;
  const bf16_t* qw = probe_ != nullptr ? probe_weight_copy(s, block, pos, engine::Slot::fprop_w, sw, &ts_w)
                                       : weight_copy(block, pos, engine::Slot::fprop_w, sw, &ts_w);
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
    if (probe_ == nullptr) weight_gradient(n, k, nullptr, dyb, xb, dw);  // dW += dYᵀ · X
    return;
  }
  float* ts = tensor_scales_.get();
  const QuantSpec s_dy_d = engine::site_slot_spec(s, engine::Slot::dgrad_dy);
  const QuantSpec s_w_d = engine::site_slot_spec(s, engine::Slot::dgrad_w);
  const QuantSpec s_dy_w = engine::site_slot_spec(s, engine::Slot::wgrad_dy);
  const QuantSpec s_x_w = engine::site_slot_spec(s, engine::Slot::wgrad_x);
  cuda::CopyOut c_dy_d = copy_out(s_dy_d, q_a_.get(), ts + 0);
  cuda::CopyOut c_dy_w = copy_out(s_dy_w, q_c_.get(), ts + 2), c_x_w = copy_out(s_x_w, q_d_.get(), ts + 3);
  if (probe_ != nullptr) {
    c_dy_d.codes = probe_codes_a_.get();
    c_dy_w.codes = probe_codes_c_.get();
    c_x_w.codes = probe_codes_d_.get();
  }
  // dY's two copies (dgrad's along N, wgrad's along T) come from one read of dY.
  quantize_copies(dyb, t, n, &c_dy_d, &c_dy_w, nonfinite_.get(), ws_quant_, stream_);
  // X's weight-gradient copy: made by the forward of a training pass (x_col_), here for a probe.
  const bf16_t* qx = probe_ == nullptr ? x_col_[s.linear_id]->get() : q_d_.get();
  const float* ts_x = probe_ == nullptr ? x_col_ts_.get() + s.linear_id : ts + 3;
  if (probe_ != nullptr) quantize_copies(xb, t, k, &c_x_w, nullptr, nonfinite_.get(), ws_quant_, stream_);
  if (probe_ != nullptr) measure(s, engine::Slot::dgrad_dy, dyb, t, n, c_dy_d);
  const float* ts_w = nullptr;
  const bf16_t* qw = probe_ != nullptr ? probe_weight_copy(s, block, pos, engine::Slot::dgrad_w, s_w_d, &ts_w)
                                       : weight_copy(block, pos, engine::Slot::dgrad_w, s_w_d, &ts_w);
  if (probe_ != nullptr) {
    measure(s, engine::Slot::wgrad_dy, dyb, t, n, c_dy_w);
    measure(s, engine::Slot::wgrad_x, xb, t, k, c_x_w);
  }
  const float* alpha_d = alpha_of(s_dy_d, ts + 0, s_w_d, ts_w, scalars_.get() + 2);
  quantized_gemm(false, false, t, k, n, alpha_d, q_a_.get(), qw, dx);
  if (probe_ != nullptr) return;  // the probe's wgrad copies are measured; it computes no dW
  // dW += alpha·(dYᵀ·X). Under e4m3x2 recipes alpha and beta = 1 come from device memory too, so no
  // linear waits on the host. With beta = 1 cuBLASLt's device-scalar epilogue rounds alpha·acc + C
  // differently from its host-scalar one in the last bit of some outputs (tests/gpu/ops_test.cpp):
  // still deterministic, and within the tolerance the GPU-vs-CPU tests hold (the GEMMs' sums run in
  // another order than the CPU's anyway). Its own alpha slot: dgrad's may still be pending.
  const float* alpha_w = alpha_of(s_dy_w, ts + 2, s_x_w, ts_x, scalars_.get() + 3);
  weight_gradient(n, k, alpha_w, q_c_.get(), qx, dw);
}

// ---- Passes --------------------------------------------------------------------------------------

bool CudaModel::use_flash(int seq_len) const {
  return storage_ == model::Storage::bf16 && config().head_dim == cuda::kFlashHeadDim &&
         seq_len % cuda::kFlashBlock == 0;
}

void CudaModel::prepare(const model::Batch& batch) {
  const model::ModelShape& c = config();
  const int B = batch.batch_size, S = batch.seq_len, R = B * S;
  const int L = c.n_layers, d = c.d_model, f = c.d_ff, V = c.vocab_size;
  const size_t r = static_cast<size_t>(R);
  batch_ = B;
  seq_ = S;
  rows_ = R;

  // The tokens go up from pinned memory, so the host does not wait for the GPU here: each pass in
  // flight keeps its own slot (the pass's index among the pending ones; a pass run() waits for
  // uses the next one), and a slot is rewritten only after harvest_pending has waited for its pass.
  if (2 * r > token_slot_) {
    harvest_pending();  // the slots in flight are laid out for the smaller batch
    token_slot_ = 2 * r;
    host_tokens_.reserve(kPendingSlots * token_slot_);
  }
  int32_t* staged = host_tokens_.get() + pending_rows_.size() * token_slot_;
  for (size_t i = 0; i < r; ++i) {
    staged[i] = static_cast<int32_t>(batch.inputs[i]);
    staged[r + i] = static_cast<int32_t>(batch.targets[i]);
  }
  tokens_.reserve(2 * r);
  FP4_CUDA_CHECK(cudaMemcpyAsync(tokens_.get(), staged, 2 * r * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  if (!rope_ || rope_->seq_len() != S) {
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old table may still be in use
    rope_ = std::make_unique<cuda::RopeTable>(S, c.head_dim, c.rope_base);
  }

  if (static_cast<int>(resid_.size()) != L + 1) {
    resid_.clear();
    residb_.clear();
    for (int i = 0; i <= L; ++i) {
      resid_.push_back(std::make_unique<DeviceArray<float>>());
      residb_.push_back(std::make_unique<DeviceArray<bf16_t>>());
    }
    acts_.clear();
    for (int i = 0; i < L; ++i) acts_.push_back(std::make_unique<LayerActs>());
  }
  const bool bf16 = storage_ == model::Storage::bf16, flash = use_flash(S);  // flash implies bf16
  for (int i = 0; i <= L; ++i) {
    if (bf16) {
      residb_[i]->reserve(r * d);
    } else {
      resid_[i]->reserve(r * d);
    }
  }
  for (auto& a : acts_) {  // LayerActs says which buffers each mode uses
    a->rstd1.reserve(r);
    a->lse.reserve(r * c.n_heads);
    a->rstd2.reserve(r);
    a->h1b.reserve(r * d);
    a->attb.reserve(r * d);
    a->h2b.reserve(r * d);
    a->ab.reserve(r * f);
    if (flash) {
      a->qkvb.reserve(r * 3 * d);
    } else {
      a->qkv.reserve(r * 3 * d);
      a->att.reserve(r * d);
    }
    if (bf16) {
      a->x_midb.reserve(r * d);
      a->ub.reserve(r * 2 * f);
    } else {
      a->x_mid.reserve(r * d);
      a->u.reserve(r * 2 * f);
    }
  }
  hf_.reserve(r * d);
  rstdf_.reserve(r);
  logits_.reserve(r * V);
  loss_rows_.reserve(r);
  dh_.reserve(r * d);
  if (bf16) {
    dresb_.reserve(r * d);
    tmpb_.reserve(r * d);
    dab_.reserve(r * f);
    dhb_.reserve(r * d);
  } else {
    dres_.reserve(r * d);
    tmp_.reserve(r * d);
    da_.reserve(r * f);
  }
  if (flash) {
    dattb_.reserve(r * d);
  } else {
    datt_.reserve(r * d);
    dqkv_.reserve(r * 3 * d);
  }
  const size_t widest_k = static_cast<size_t>(std::max(d, f));           // a linear's K
  const size_t widest_n = static_cast<size_t>(std::max(3 * d, 2 * f));   // a linear's N
  dyb_.reserve(r * widest_n);
  hfb_.reserve(r * d);
  if (recipe().quantized) {  // the slots' dequantized copies
    q_a_.reserve(r * std::max(widest_k, widest_n));  // X (fprop) or dY (dgrad)
    q_c_.reserve(r * widest_n);
    q_d_.reserve(r * widest_k);
    // Each quantized linear's wgrad_x copy, kept from the forward to the backward.
    if (static_cast<int>(x_col_.size()) != 4 * L) {
      x_col_.clear();
      for (int i = 0; i < 4 * L; ++i) x_col_.push_back(std::make_unique<DeviceArray<bf16_t>>());
    }
    for (int l = 0; l < L; ++l)
      for (int pos = 0; pos < 4; ++pos)
        if (!keep_bf16_[l]) x_col_[4 * l + pos]->reserve(r * static_cast<size_t>(weight_view(l, pos).shape[1]));
    x_col_ts_.reserve(static_cast<size_t>(4 * L));
  }
  head_w_.reserve(static_cast<size_t>(V) * d);
  size_t wgrad_floats = 0;
  for (int pos = 0; pos < 4; ++pos) {
    const model::ParamView& w = weight_view(0, pos);
    const int n = static_cast<int>(w.shape[0]), k = static_cast<int>(w.shape[1]), chunks = wgrad_chunks(n, k, R);
    if (chunks > 1) wgrad_floats = std::max(wgrad_floats, static_cast<size_t>(chunks) * n * k);
  }
  if (wgrad_floats > 0) wgrad_partials_.reserve(wgrad_floats);
  // The LM head's weight gradient sums over all R rows into only V·d outputs: one GEMM gets a
  // handful of output tiles (a few CTAs on a GPU with over a hundred SMs). Split K = R into up to
  // 32 chunks of at least 256 rows (a count fixed by R alone, so the summation order is too).
  head_chunks_ = 32;
  while (head_chunks_ > 1 && (R % head_chunks_ != 0 || R / head_chunks_ < 256)) head_chunks_ /= 2;
  if (head_chunks_ > 1) head_partials_.reserve(static_cast<size_t>(head_chunks_) * V * d);

  // The weights as the GEMMs see them: bf16 copies of the fp32 masters, remade after each change
  // (so once per optimizer step: the masters do not change between micro-steps). The LM head's
  // fp32 copy holds the same bf16 values for its fp32 backward GEMM.
  const size_t weight_slots = static_cast<size_t>(L) * 4 * 2;
  if (weight_copies_.size() != weight_slots) {
    weight_copies_ = std::vector<WeightCopy>(weight_slots);
    weight_ts_.reserve(weight_slots);
    weight_flags_.reserve(weight_slots);
    pending_weight_flags_.reserve(kPendingSlots * weight_slots);
  }
  weight_used_.assign(weight_slots, 0);
  if (weights_stale_) {
    ++weights_version_;  // every weight slot's copy is remade on its next use
    cuda::float_to_bf16(params_.get(), w_bf16_.get(), n_params_, stream_);
    const model::ParamView& head = views()[lm_head_];
    cuda::bf16_to_float(w_bf16_.get() + head.offset, head_w_.get(), static_cast<size_t>(head.size), stream_);
    weights_stale_ = false;
  }
  FP4_CUDA_CHECK(cudaMemsetAsync(nonfinite_.get(), 0, sizeof(unsigned), stream_));
}

double CudaModel::run(const model::StepContext& ctx, bool backward, float grad_scale, bool* finite) {
  enqueue_pass(ctx, backward, grad_scale);
  cudaStream_t st = stream_;
  double loss_sum = 0.0;
  unsigned flag = 0;
  std::vector<unsigned> weight_flags(weight_used_.size(), 0u);
  FP4_CUDA_CHECK(cudaMemcpyAsync(&loss_sum, loss_sum_.get(), sizeof(double), cudaMemcpyDeviceToHost, st));
  FP4_CUDA_CHECK(cudaMemcpyAsync(&flag, nonfinite_.get(), sizeof(unsigned), cudaMemcpyDeviceToHost, st));
  if (recipe().quantized)
    FP4_CUDA_CHECK(cudaMemcpyAsync(weight_flags.data(), weight_flags_.get(), weight_flags.size() * sizeof(unsigned),
                                   cudaMemcpyDeviceToHost, st));
  FP4_CUDA_CHECK(cudaStreamSynchronize(st));
  *finite = pass_flag(flag, weight_flags.data(), weight_used_) == 0 && std::isfinite(loss_sum);
  return loss_sum;
}

void CudaModel::enqueue_pass(const model::StepContext& ctx, bool backward, float grad_scale) {
  pass_backward_ = backward;  // linear_forward then makes X's weight-gradient copies too (x_col_)
  const model::ModelShape& c = config();
  const int L = c.n_layers, d = c.d_model, f = c.d_ff, V = c.vocab_size;
  const int H = c.n_heads, hd = c.head_dim, R = rows_, B = batch_, S = seq_;
  const float eps = static_cast<float>(c.norm_eps);
  const size_t r = static_cast<size_t>(R), rd = r * d;
  const int32_t* inputs = tokens_.get();
  const int32_t* targets = tokens_.get() + r;
  const auto& v = views();
  auto block_view = [&](int l, int k) { return 1 + 6 * l + k; };  // k: 0 attn_norm, 3 mlp_norm
  cudaStream_t st = stream_;

  // ---- Forward ----
  // Every store() of transformer.cpp's run() is marked "store(buf)": either the call itself or, as
  // "store(buf): <how>", fused into the op that writes the buffer (StoreOut: rounded as written) or
  // into the one op that reads it next (round_*: rounded as read, the buffer being read nowhere
  // else). Either way the same bits; the fused ops also write the bf16 copy of their output that
  // the next GEMM takes (LayerActs' h1b, qkvb, attb, h2b, ab; dyb_, hfb_), instead of a
  // float_to_bf16 pass; the per-layer copies serve the backward's GEMMs too.
  const bool bf16 = storage_ == model::Storage::bf16;
  const bool flash = use_flash(S);  // implies bf16
  if (bf16) {
    cuda::embedding_forward(param(tok_emb_), V, inputs, R, d, nullptr, st, store_out(residb_[0]->get()));
  } else {
    cuda::embedding_forward(param(tok_emb_), V, inputs, R, d, resid_[0]->get(), st, store_out());
  }
  // store(resid_[0]): rounded by embedding_forward (with bf16 storage the residual stream is kept
  // in bf16 only: residb_, LayerActs::x_midb)
  // With bf16 storage the linears whose output is stored write it in bf16 (LinearOut, LayerActs).
  auto out_f32 = [](float* p) { return LinearOut{p, nullptr}; };
  auto out_bf16 = [](bf16_t* p) { return LinearOut{nullptr, p}; };
  const LinearOut block_out = bf16 ? out_bf16(tmpb_.get()) : out_f32(tmp_.get());  // attn_out, mlp_out
  for (int l = 0; l < L; ++l) {
    LayerActs& A = *acts_[l];
    if (bf16) {
      cuda::rmsnorm_forward(residb_[l]->get(), param(block_view(l, 0)), R, d, eps, nullptr, A.rstd1.get(), st,
                            store_out(A.h1b.get()));
    } else {
      cuda::rmsnorm_forward(resid_[l]->get(), param(block_view(l, 0)), R, d, eps, nullptr, A.rstd1.get(), st,
                            store_out(A.h1b.get()));
    }
    // store(A.h1): rounded by rmsnorm_forward, which writes only the qkv linear's bf16 X into A.h1b
    if (flash) {
      linear_forward(ctx, l, 0, A.h1b.get(), out_bf16(A.qkvb.get()));
      // store(A.qkv): by the GEMM; rope_forward(q); rope_forward(k); store(A.qkv): one pass in
      // place on A.qkvb, the fused attention's bf16 input
      cuda::rope_forward_qkv(A.qkvb.get(), B, S, H, hd, *rope_, st);
      cuda::flash_attention_forward_stored(A.qkvb.get(), B, S, H, hd, nullptr, A.lse.get(), store_out(A.attb.get()),
                                           st);
      // store(A.att): rounded by the flash kernel, which writes only the attn_out linear's X, A.attb
    } else {
      linear_forward(ctx, l, 0, A.h1b.get(), out_f32(A.qkv.get()));
      // store(A.qkv); rope_forward(q); rope_forward(k); store(A.qkv): one pass
      cuda::rope_forward_qkv(A.qkv.get(), B, S, H, hd, *rope_, st, store_out());
      cuda::attention_forward(A.qkv.get(), B, S, H, hd, A.att.get(), A.lse.get(), st);
      store(A.att.get(), rd);
      cuda::float_to_bf16(A.att.get(), A.attb.get(), rd, st);  // the attn_out linear's X
    }
    linear_forward(ctx, l, 1, A.attb.get(), block_out);
    // store(tmp_): by the GEMM (bf16 storage); store(A.x_mid): rounded by residual_add
    if (bf16) {
      cuda::residual_add(residb_[l]->get(), tmpb_.get(), nullptr, rd, st, store_out(A.x_midb.get()));
      cuda::rmsnorm_forward(A.x_midb.get(), param(block_view(l, 3)), R, d, eps, nullptr, A.rstd2.get(), st,
                            store_out(A.h2b.get()));
    } else {
      cuda::residual_add(resid_[l]->get(), tmp_.get(), A.x_mid.get(), rd, st, store_out());
      cuda::rmsnorm_forward(A.x_mid.get(), param(block_view(l, 3)), R, d, eps, nullptr, A.rstd2.get(), st,
                            store_out(A.h2b.get()));
    }
    // store(A.h2): rounded by rmsnorm_forward, which writes only the mlp_in linear's X into A.h2b
    if (bf16) {
      linear_forward(ctx, l, 2, A.h2b.get(), out_bf16(A.ub.get()));
      cuda::swiglu_forward(A.ub.get(), R, f, nullptr, st, store_out(A.ab.get()));
      // store(A.u): by the GEMM; store(A.a): rounded by swiglu_forward, which writes only the
      // mlp_out linear's X into A.ab
    } else {
      linear_forward(ctx, l, 2, A.h2b.get(), out_f32(A.u.get()));
      cuda::swiglu_forward(A.u.get(), R, f, nullptr, st, store_out(A.ab.get()));
    }
    linear_forward(ctx, l, 3, A.ab.get(), block_out);
    if (bf16) {
      cuda::residual_add(A.x_midb.get(), tmpb_.get(), nullptr, rd, st, store_out(residb_[l + 1]->get()));
    } else {
      cuda::residual_add(A.x_mid.get(), tmp_.get(), resid_[l + 1]->get(), rd, st, store_out());
    }
    // store(tmp_): by the GEMM (bf16 storage); store(resid_[l + 1]): rounded by residual_add
  }
  if (bf16) {
    cuda::rmsnorm_forward(residb_[L]->get(), param(final_norm_), R, d, eps, hf_.get(), rstdf_.get(), st,
                          store_out(hfb_.get()));
  } else {
    cuda::rmsnorm_forward(resid_[L]->get(), param(final_norm_), R, d, eps, hf_.get(), rstdf_.get(), st,
                          store_out(hfb_.get()));
  }
  // store(hf_): rounded by rmsnorm_forward, which also writes its bf16 copy into hfb_
  // Logits: the bf16-valued hidden state times the bf16 head weights, fp32 accumulation.
  gemm_->gemm(false, true, R, V, d, 1.0f, hfb_.get(), w_bf16_.get() + v[lm_head_].offset, 0.0f, logits_.get(), st);
  // With a backward pass the logits' buffer becomes their gradient (fused head + loss).
  cuda::cross_entropy(logits_.get(), targets, R, V, loss_rows_.get(), backward ? logits_.get() : nullptr,
                      grad_scale / static_cast<float>(R), st);
  cuda::sum_f64(loss_rows_.get(), r, loss_sum_.get(), ws_sum_, st);

  if (backward) {
    // ---- Backward ----
    const float* dlogits = logits_.get();
    cuda::GemmShape head_grad;  // d lm_head [V, d] += dlogitsᵀ [V, R] · hf [R, d], in fp32
    head_grad.trans_a = true;
    head_grad.m = V;
    head_grad.n = d;
    head_grad.k = R;
    if (probe_ != nullptr) {
      // The probe needs only the gradients that flow into the block linears' dY: no dW anywhere.
    } else if (head_chunks_ > 1) {
      // Split-K by hand (see prepare): head_chunks_ partial products, then added to the gradient
      // in chunk order. Deterministic; differs from one GEMM only in the order of fp32 sums.
      gemm_->matmul_split_k(head_grad, head_chunks_, 1.0f, dlogits, hf_.get(), 1.0f, grad(lm_head_),
                            head_partials_.get(), st);
    } else {
      gemm_->matmul(head_grad, 1.0f, dlogits, hf_.get(), 1.0f, grad(lm_head_), st);
    }
    // dh [R, d] = dlogits [R, V] · head_w [V, d], in fp32: R·d outputs (hundreds of tiles at
    // R = 8192), so one GEMM without split-K fills the GPU.
    cuda::GemmShape head_dx;
    head_dx.m = R;
    head_dx.n = d;
    head_dx.k = V;
    gemm_->matmul(head_dx, 1.0f, dlogits, head_w_.get(), 0.0f, dh_.get(), st);
    if (bf16) {
      cuda::rmsnorm_backward(residb_[L]->get(), param(final_norm_), rstdf_.get(), dh_.get(), R, d, nullptr,
                             gain_grad(final_norm_), ws_ops_, st, store_out(dresb_.get()), true);
    } else {
      cuda::rmsnorm_backward(resid_[L]->get(), param(final_norm_), rstdf_.get(), dh_.get(), R, d, dres_.get(),
                             gain_grad(final_norm_), ws_ops_, st, store_out(dyb_.get()), false);
    }
    // store(dh_): rounded by rmsnorm_backward as it reads dh_; store(dres_): rounded by
    // rmsnorm_backward, which also writes the mlp_out linear's bf16 dY into dyb_ (bf16: the
    // residual gradient dresb_ is that dY)
    for (int l = L - 1; l >= 0; --l) {
      LayerActs& A = *acts_[l];
      // dres_ holds ∂loss/∂(block output). MLP branch.
      if (bf16) {
        linear_backward(ctx, l, 3, A.ab.get(), dresb_.get(), out_bf16(dab_.get()));
        cuda::swiglu_backward(A.ub.get(), dab_.get(), R, f, nullptr, st, store_out(dyb_.get()));
        // store(da_): by the GEMM; store(du_): rounded by swiglu_backward, which writes only the
        // mlp_in linear's dY into dyb_
        linear_backward(ctx, l, 2, A.h2b.get(), dyb_.get(), out_bf16(dhb_.get()));
        cuda::rmsnorm_backward_add(A.x_midb.get(), param(block_view(l, 3)), A.rstd2.get(), dhb_.get(), R, d,
                                   dresb_.get(), gain_grad(block_view(l, 3)), ws_ops_, st);
      } else {
        linear_backward(ctx, l, 3, A.ab.get(), dyb_.get(), out_f32(da_.get()));
        cuda::swiglu_backward(A.u.get(), da_.get(), R, f, nullptr, st, store_out(dyb_.get()));
        linear_backward(ctx, l, 2, A.h2b.get(), dyb_.get(), out_f32(dh_.get()));
        cuda::rmsnorm_backward_add(A.x_mid.get(), param(block_view(l, 3)), A.rstd2.get(), dh_.get(), R, d,
                                   dres_.get(), dres_.get(), gain_grad(block_view(l, 3)), ws_ops_, st,
                                   store_out(dyb_.get()));
      }
      // store(dh_): by the GEMM (bf16 storage); dres_ += the norm's dx, then store(dres_): rounded
      // as written, with the attn_out linear's dY into dyb_ (bf16: dresb_ in place, that dY itself)
      // dres_ holds ∂loss/∂x_mid. Attention branch.
      const bf16_t* attn_out_dy = bf16 ? dresb_.get() : dyb_.get();
      if (flash) {
        linear_backward(ctx, l, 1, A.attb.get(), attn_out_dy, out_bf16(dattb_.get()));
        // store(datt_): by the GEMM, into the fused kernel's bf16 dout. A.qkvb and A.attb: the
        // forward's stored q|k|v and output. The attn_out linear is done with dyb_, so the fused
        // kernel writes dq|dk|dv there, rounded as written (store(dqkv_)); rope_backward(dq),
        // rope_backward(dk) and store(dqkv_) then run in place: dyb_ is the qkv linear's dY.
        cuda::flash_attention_backward(A.qkvb.get(), A.attb.get(), A.lse.get(), dattb_.get(), B, S, H, hd, dyb_.get(),
                                       ws_flash_, st);
        cuda::rope_backward_qkv(dyb_.get(), B, S, H, hd, *rope_, dyb_.get(), st);
      } else {
        linear_backward(ctx, l, 1, A.attb.get(), attn_out_dy, out_f32(datt_.get()));
        store(datt_.get(), rd);
        cuda::attention_backward(A.qkv.get(), A.lse.get(), datt_.get(), B, S, H, hd, dqkv_.get(), ws_ops_, st);
        // store(dqkv_); rope_backward(dq); rope_backward(dk); store(dqkv_): one pass, which also
        // writes the qkv linear's dY into dyb_
        cuda::rope_backward_qkv(dqkv_.get(), B, S, H, hd, *rope_, st, store_out(dyb_.get()));
      }
      if (bf16) {
        linear_backward(ctx, l, 0, A.h1b.get(), dyb_.get(), out_bf16(dhb_.get()));
        cuda::rmsnorm_backward_add(residb_[l]->get(), param(block_view(l, 0)), A.rstd1.get(), dhb_.get(), R, d,
                                   dresb_.get(), gain_grad(block_view(l, 0)), ws_ops_, st);
      } else {
        bf16_t* next_dyb = l > 0 ? dyb_.get() : nullptr;  // the next block's mlp_out dY
        linear_backward(ctx, l, 0, A.h1b.get(), dyb_.get(), out_f32(dh_.get()));
        cuda::rmsnorm_backward_add(resid_[l]->get(), param(block_view(l, 0)), A.rstd1.get(), dh_.get(), R, d,
                                   dres_.get(), dres_.get(), gain_grad(block_view(l, 0)), ws_ops_, st,
                                   store_out(next_dyb));
      }
      // store(dh_): by the GEMM (bf16 storage); dres_ += the norm's dx, store(dres_): rounded as
      // written, with next_dyb (bf16: dresb_ in place, the next block's mlp_out dY itself)
    }
    if (probe_ == nullptr) {
      if (bf16) {
        cuda::embedding_backward(inputs, dresb_.get(), R, d, V, grad(tok_emb_), ws_ops_, st);
      } else {
        cuda::embedding_backward(inputs, dres_.get(), R, d, V, grad(tok_emb_), ws_ops_, st);
      }
    }
  }
}

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
    harvested_.push_back(model::PassResult{loss[p] / pending_rows_[p], !finite});
  }
  pending_used_.clear();
  pending_rows_.clear();
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

ProbeOutcome CudaModel::probe(const model::Batch& batch, const model::StepContext& ctx,
                              const ProbeObserver& observer) {
  host_.validate_batch(batch, ctx, true);
  prepare(batch);
  const model::ModelShape& c = config();
  const size_t r = static_cast<size_t>(rows_), d = static_cast<size_t>(c.d_model), f = static_cast<size_t>(c.d_ff);
  const size_t widest_k = std::max(d, f), widest_n = std::max(3 * d, 2 * f);
  const size_t slots = static_cast<size_t>(c.n_layers) * 4 * engine::kSlotCount;
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

model::EvalResult CudaModel::evaluate(const model::Batch& batch, const model::StepContext& ctx) {
  host_.validate_batch(batch, ctx, false);
  prepare(batch);
  bool finite = true;
  const double sum = run(ctx, false, 0.0f, &finite);
  return model::EvalResult{sum, rows_, !finite};
}

}  // namespace fp4::cuda_model
