// ops.cuh — the CUDA counterparts of the transformer's non-GEMM operations (engine/model/ops.h is
// the CPU reference, with the formulas), the bf16 conversions, the residual add, AdamW and the
// global gradient norm.
//
// Conventions, the same as the reference: fp32 values, row-major, rows are tokens (sequence b's
// token t at row b·T + t). Backward functions overwrite their input gradients and add (+=) into
// parameter gradients. Rounding to bf16 for storage stays the caller's business (round_to_bf16).
// Every pointer is device memory; every function only checks its arguments on the host and
// enqueues work on `stream` (asynchronous; a RopeTable is built synchronously). Errors: a bad shape
// throws std::invalid_argument (one line) before anything is launched; CUDA errors throw
// std::runtime_error via FP4_CUDA_CHECK.
//
// Determinism: no floating-point atomics anywhere. Every sum runs in an order fixed by the shape
// alone (never by the device, the SM count or the timing), so two calls give identical bits.
// Bit-identical to the CPU reference (same operations in the same order; IEEE division and square
// root, no contraction into FMAs: the build passes --fmad=false): embedding forward and backward,
// rmsnorm forward and its dx (the 8-lane order of ops.h's dot()), RoPE, the residual add, the bf16
// conversions and AdamW. Within a stated tolerance (different summation orders, or CUDA's expf/logf
// against glibc's): rmsnorm's dgain, SwiGLU, cross-entropy, attention and the sums of squares.
//
// Plain C++ on the host side, like quantize.cuh: callable from .cpp files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/quantize.cuh"  // FP4_CUDA_CHECK, Workspace
#include "kernels/numerics.h"         // bf16_t

namespace fp4::cuda {

// ---- bf16 storage ------------------------------------------------------------------------------
// Round-to-nearest-even, NaN kept quiet (numerics.h's float_to_bf16, the CPU's rounding).
void float_to_bf16(const float* x, bf16_t* y, size_t n, cudaStream_t stream);
void bf16_to_float(const bf16_t* x, float* y, size_t n, cudaStream_t stream);
// x[i] = round_to_bf16(x[i]): the fp32 buffer holds exactly the values a bf16 buffer would.
void round_to_bf16(float* x, size_t n, cudaStream_t stream);

// ---- Residual add: out[i] = a[i] + b[i] (out may be a or b) ------------------------------------
void residual_add(const float* a, const float* b, float* out, size_t n, cudaStream_t stream);

// ---- Embedding -------------------------------------------------------------------------------
// out[r] = table[tokens[r]], table [vocab, d]. A token outside [0, vocab) yields a row of NaNs
// (the run then diverges loudly instead of reading out of bounds).
void embedding_forward(const float* table, int vocab, const int32_t* tokens, int rows, int d,
                       float* out, cudaStream_t stream);
// dtable[tokens[r]] += dout[r], rows in order: each table element adds its rows one at a time in
// row order, exactly the CPU's sequence of additions. The rows are first sorted by (token, row)
// with a rank computation (no atomics, O(rows²) token comparisons: fine for micro-batches of tens
// of thousands of tokens). `workspace` holds 2·rows int32 of scratch; calls sharing it must be
// ordered on one stream. Tokens outside [0, vocab) are skipped.
void embedding_backward(const int32_t* tokens, const float* dout, int rows, int d, int vocab,
                        float* dtable, Workspace& workspace, cudaStream_t stream);

// ---- RMSNorm: rstd = 1 / sqrt(mean(x²) + eps), y = (x · rstd) · gain ---------------------------
void rmsnorm_forward(const float* x, const float* gain, int rows, int d, float eps, float* y,
                     float* rstd, cudaStream_t stream);
// dx = rstd · (g − x̂ · mean(g ⊙ x̂)), g = dy ⊙ gain, x̂ = x·rstd; dgain += Σ_rows dy ⊙ x̂.
// dgain's sum over rows runs in two fixed passes: partial sums over chunks of kRmsnormRowChunk
// rows (rows in order), then the partials in chunk order, then one addition into dgain.
// `workspace` holds ceil(rows / kRmsnormRowChunk)·d floats of scratch.
constexpr int kRmsnormRowChunk = 64;
void rmsnorm_backward(const float* x, const float* gain, const float* rstd, const float* dy, int rows,
                      int d, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream);

// ---- RoPE ------------------------------------------------------------------------------------
// The cos/sin table of ops.h (pair i at position t rotates by t·base^(−2i/head_dim)), computed on
// the host in double exactly as fp4::model::rope_table<float> does, rounded once to fp32 and
// uploaded (synchronously) into device memory this object owns.
class RopeTable {
 public:
  RopeTable(int seq_len, int head_dim, double base);
  ~RopeTable();
  RopeTable(const RopeTable&) = delete;
  RopeTable& operator=(const RopeTable&) = delete;

  int seq_len() const { return seq_len_; }
  int head_dim() const { return head_dim_; }
  const float* cos() const { return cos_; }  // device, [seq_len, head_dim/2]
  const float* sin() const { return sin_; }

 private:
  int seq_len_ = 0, head_dim_ = 0;
  float* cos_ = nullptr;
  float* sin_ = nullptr;
};
// Rotates in place the n_heads heads of rows b·T + t, row r at x + r·row_stride (q and k inside
// the packed qkv buffer). The table must have seq_len() == seq_len and head_dim() == head_dim.
void rope_forward(float* x, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                  const RopeTable& table, cudaStream_t stream);
// The transpose of the rotation, in place on the gradient.
void rope_backward(float* dx, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                   const RopeTable& table, cudaStream_t stream);

// ---- Causal multi-head attention -------------------------------------------------------------
// ops.h's definition: qkv [B·T, 3·d] (q | k | v per row, head h at columns h·head_dim of each
// part), out [B·T, d], lse [B, H, T]. head_dim is even and at most kMaxHeadDim.
// Forward: per query, keys in tiles of 32 in order with an online softmax (running max and sum).
// Backward: p recomputed from lse; one pass per query computes Σ_j p_j dP_j (the reference's
// formula) and dq; one pass per key sums dk and dv over the queries t ≥ j in order. `workspace`
// holds B·H·T floats of scratch.
constexpr int kMaxHeadDim = 128;
void attention_forward(const float* qkv, int batch, int seq_len, int n_heads, int head_dim, float* out,
                       float* lse, cudaStream_t stream);
void attention_backward(const float* qkv, const float* lse, const float* dout, int batch, int seq_len,
                        int n_heads, int head_dim, float* dqkv, Workspace& workspace,
                        cudaStream_t stream);

// ---- SwiGLU: u [rows, 2·f] = gate | up; a = silu(gate) · up -----------------------------------
void swiglu_forward(const float* u, int rows, int f, float* a, cudaStream_t stream);
// dgate = da · up · σ(g) · (1 + g · (1 − σ(g))), dup = da · silu(g); du [rows, 2·f] overwritten.
void swiglu_backward(const float* u, const float* da, int rows, int f, float* du, cudaStream_t stream);

// ---- Cross-entropy with softmax ------------------------------------------------------------
// loss[r] = logsumexp(logits[r]) − logits[r][targets[r]]; when dlogits is not null it gets
// scale · (softmax(logits[r]) − onehot(targets[r])) and may be the logits buffer itself (fused: no
// probability buffer exists). One block per row, online max and sum in one read, a second read
// for the gradient. A target outside [0, vocab) gives a NaN loss and NaN gradient row.
void cross_entropy(const float* logits, const int32_t* targets, int rows, int vocab, float* loss,
                   float* dlogits, float scale, cudaStream_t stream);

// ---- Sums in fp64 ------------------------------------------------------------------------------
// *out (device) = Σ x[i]² (sum_squares_f64: the global gradient norm's square) or Σ x[i]
// (sum_f64: e.g. the per-row losses), each term converted to double (squares of floats are exact in
// double), summed in a fixed order: kSumBlocks blocks take fixed strided slices and reduce them
// with a fixed tree, then one block adds the partials in a fixed tree. Independent of the device.
// `workspace` holds kSumBlocks doubles.
constexpr int kSumBlocks = 512;
void sum_squares_f64(const float* x, size_t n, double* out, Workspace& workspace, cudaStream_t stream);
void sum_f64(const float* x, size_t n, double* out, Workspace& workspace, cudaStream_t stream);

// ---- AdamW -----------------------------------------------------------------------------------
// docs/train.md step 4 and engine/run/optimizer.h, bit for bit: per element, one fp32 rounding per
// operation, in the order
//   g = grad · grad_scale;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·(g·g);
//   p = p − (lr·λ)·p (decayed ranges only);  p = p − lr · ((m/c1) / (sqrt(v/c2) + ε)).
struct AdamWConstants {
  float beta1 = 0, beta2 = 0, one_minus_beta1 = 0, one_minus_beta2 = 0;
  float c1 = 0, c2 = 0, lr = 0, lr_wd = 0, eps = 0;
  bool weight_decay = false;  // λ != 0
};
// The constants of step t (1-based), computed in double and rounded once to fp32, exactly as
// fp4::run::AdamW::step does (c1 = 1 − β1^t with β1^t by repeated squaring, the same algorithm as
// fp4::run::power). Throws std::invalid_argument for t < 1.
AdamWConstants adamw_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                               int64_t t);

// A stretch of the flat parameter buffer and whether weight decay applies to it.
struct AdamWRange {
  size_t offset = 0;
  size_t size = 0;
  bool decay = true;
};
// The ranges of a flat buffer of n parameters, checked (sorted by offset, contiguous, covering
// [0, n): std::invalid_argument otherwise) and uploaded once (synchronously) to the device.
class AdamWRanges {
 public:
  AdamWRanges(const std::vector<AdamWRange>& ranges, size_t n);
  ~AdamWRanges();
  AdamWRanges(const AdamWRanges&) = delete;
  AdamWRanges& operator=(const AdamWRanges&) = delete;

  size_t size() const { return n_; }
  int count() const { return count_; }
  const size_t* device_ends() const { return ends_; }       // end offset of each range
  const uint8_t* device_decay() const { return decay_; }    // 1 where the range decays

 private:
  size_t n_ = 0;
  int count_ = 0;
  size_t* ends_ = nullptr;
  uint8_t* decay_ = nullptr;
};
// One AdamW update of the whole flat buffer (params, grads, m, v: ranges.size() floats each) in
// one launch. grad_scale is the clip factor (1 leaves the gradients as they are).
void adamw_step(float* params, const float* grads, float* m, float* v, const AdamWRanges& ranges,
                const AdamWConstants& c, float grad_scale, cudaStream_t stream);

}  // namespace fp4::cuda
