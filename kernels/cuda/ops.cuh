// ops.cuh — the CUDA counterparts of the transformer's non-GEMM operations (kernels/cpu/ops.h is
// the CPU reference, with the formulas), the bf16 conversions, the residual add, AdamW and the
// global gradient norm.
//
// Conventions, the same as the reference: fp32 values, row-major, rows are tokens (sequence b's
// token t at row b·T + t). Backward functions overwrite their input gradients and add (+=) into
// parameter gradients. Rounding to bf16 for storage (the model's store()) is the caller's business:
// either a separate round_to_bf16 pass, or the producing op's StoreOut option, which rounds each
// output as it is written (rounding the fp32 value a kernel computed equals rounding it afterwards,
// bit for bit) and can also write the bf16 copy a GEMM operand needs in the same pass. Some ops
// also take a pending store of an input (round_* flags): the input is rounded as it is read, which
// equals rounding the buffer first when nothing else reads it afterwards.
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

#include "kernels/adamw.h"
#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK, Workspace
#include "kernels/numerics.h"            // bf16_t

namespace fp4::cuda {

// ---- bf16 storage ------------------------------------------------------------------------------
// How an op writes its fp32 output. round: each value is rounded to bf16 (round_to_bf16) as it is
// written, bit-identical to a round_to_bf16 pass afterwards. bf16: when not null, also receives
// float_to_bf16 of each value written (same layout and count as the fp32 output), bit-identical to
// a float_to_bf16 pass afterwards. The default writes the fp32 values only. An op documented as
// taking a null fp32 output (its fp32 values read by nothing) then writes only the bf16 copy.
struct StoreOut {
  bool round = false;
  bf16_t* bf16 = nullptr;
};

// Round-to-nearest-even, NaN kept quiet (numerics.h's float_to_bf16, the CPU's rounding).
void float_to_bf16(const float* x, bf16_t* y, size_t n, cudaStream_t stream);
void bf16_to_float(const bf16_t* x, float* y, size_t n, cudaStream_t stream);
// x[i] = round_to_bf16(x[i]): the fp32 buffer holds exactly the values a bf16 buffer would.
void round_to_bf16(float* x, size_t n, cudaStream_t stream);
// The same and, in the same pass, copy[i] = float_to_bf16(x[i]) (copy: n bf16).
void round_to_bf16(float* x, size_t n, bf16_t* copy, cudaStream_t stream);

// ---- Residual add: out[i] = a[i] + b[i] (out may be a or b) ------------------------------------
// round_b: b's pending store, b[i] rounded to bf16 as it is read (b itself is left as it is).
void residual_add(const float* a, const float* b, float* out, size_t n, cudaStream_t stream,
                  StoreOut out_store = {}, bool round_b = false);
// The same with b held in bf16 (a stored buffer: the same values as its rounded fp32 form, so this
// equals the fp32 call with round_b).
void residual_add(const float* a, const bf16_t* b, float* out, size_t n, cudaStream_t stream,
                  StoreOut out_store = {});
// Both operands in bf16 (the residual stream and a linear's output, both stored): out may be null
// with out_store.bf16 set, the stream's next value then kept in bf16 only.
void residual_add(const bf16_t* a, const bf16_t* b, float* out, size_t n, cudaStream_t stream,
                  StoreOut out_store = {});

// ---- Embedding -------------------------------------------------------------------------------
// out[r] = table[tokens[r]], table [vocab, d]. A token outside [0, vocab) yields a row of NaNs
// (the run then diverges loudly instead of reading out of bounds). out may be null when
// out_store.bf16 is set (the rows kept in bf16 only).
void embedding_forward(const float* table, int vocab, const int32_t* tokens, int rows, int d,
                       float* out, cudaStream_t stream, StoreOut out_store = {});
// dtable[tokens[r]] += dout[r], rows in order: each table element adds its rows one at a time in
// row order, exactly the CPU's sequence of additions. The rows are first sorted by (token, row)
// with a rank computation (no atomics, O(rows²) token comparisons: fine for micro-batches of tens
// of thousands of tokens). `workspace` holds 2·rows int32 of scratch; calls sharing it must be
// ordered on one stream. Tokens outside [0, vocab) are skipped.
void embedding_backward(const int32_t* tokens, const float* dout, int rows, int d, int vocab,
                        float* dtable, Workspace& workspace, cudaStream_t stream);
// The same with dout held in bf16 (the residual gradient under bf16 storage): equal to the fp32
// call on its values.
void embedding_backward(const int32_t* tokens, const bf16_t* dout, int rows, int d, int vocab,
                        float* dtable, Workspace& workspace, cudaStream_t stream);

// ---- RMSNorm: rstd = 1 / sqrt(mean(x²) + eps), y = (x · rstd) · gain ---------------------------
// y_store applies to y (rstd is always fp32); y may be null when y_store.bf16 is set (the bf16
// copy alone is written).
void rmsnorm_forward(const float* x, const float* gain, int rows, int d, float eps, float* y,
                     float* rstd, cudaStream_t stream, StoreOut y_store = {});
// dx = rstd · (g − x̂ · mean(g ⊙ x̂)), g = dy ⊙ gain, x̂ = x·rstd; dgain += Σ_rows dy ⊙ x̂.
// dgain's sum over rows runs in two fixed passes: partial sums over chunks of kRmsnormRowChunk
// rows (rows in order), then the partials in chunk order, then one addition into dgain.
// `workspace` holds ceil(rows / kRmsnormRowChunk)·d floats of scratch. dx_store applies to dx (dx
// may be null when dx_store.bf16 is set: the copy alone is written); round_dy: dy's pending store,
// dy rounded to bf16 as it is read (dy itself is left as it is).
constexpr int kRmsnormRowChunk = 64;
void rmsnorm_backward(const float* x, const float* gain, const float* rstd, const float* dy, int rows,
                      int d, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream,
                      StoreOut dx_store = {}, bool round_dy = false);
// The same with the residual branch's sum fused: dx = dx_add + (the gradient above), then dx_store
// (dx may be dx_add: each element is read before it is written, by the same thread). Bit-identical
// to rmsnorm_backward into a scratch buffer followed by residual_add(dx_add, scratch, dx, ...,
// dx_store), without the scratch buffer's write and read.
void rmsnorm_backward_add(const float* x, const float* gain, const float* rstd, const float* dy, int rows, int d,
                          const float* dx_add, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream,
                          StoreOut dx_store = {}, bool round_dy = false);
// The same with dy held in bf16 (a stored gradient: equal to the fp32 call with round_dy).
void rmsnorm_backward_add(const float* x, const float* gain, const float* rstd, const bf16_t* dy, int rows, int d,
                          const float* dx_add, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream,
                          StoreOut dx_store = {});
// The norms with x held in bf16 (the residual stream under bf16 storage: its stored values, so
// these equal the fp32-x calls bit for bit): the forward, the final norm's backward (its dy, the
// LM head's fp32 dX) and the blocks' fused backward (dy in bf16 too).
void rmsnorm_forward(const bf16_t* x, const float* gain, int rows, int d, float eps, float* y, float* rstd,
                     cudaStream_t stream, StoreOut y_store = {});
void rmsnorm_backward(const bf16_t* x, const float* gain, const float* rstd, const float* dy, int rows, int d,
                      float* dx, float* dgain, Workspace& workspace, cudaStream_t stream, StoreOut dx_store = {},
                      bool round_dy = false);
void rmsnorm_backward_add(const bf16_t* x, const float* gain, const float* rstd, const bf16_t* dy, int rows, int d,
                          const float* dx_add, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream,
                          StoreOut dx_store = {});
// The blocks' fused backward with the residual gradient held in bf16 as well (its values are
// bf16: the store after each addition rounds them): residual [rows, d] += the gradient, rounded,
// in place. Bit-identical to the call above with dx_add = dx = the residual in fp32 and dx_store
// {round, copy}, the copy being the new residual.
void rmsnorm_backward_add(const bf16_t* x, const float* gain, const float* rstd, const bf16_t* dy, int rows, int d,
                          bf16_t* residual, float* dgain, Workspace& workspace, cudaStream_t stream);

// ---- RoPE ------------------------------------------------------------------------------------
// The cos/sin table of ops.h (pair i at position t rotates by t·base^(−2i/head_dim)), computed on
// the host in double exactly as fp4::cpu::rope_table<float> does, rounded once to fp32 and
// uploaded (synchronously) into device memory this object owns.
class RopeTable {
 public:
  RopeTable(int seq_len, int head_dim, double base);

  int seq_len() const { return seq_len_; }
  int head_dim() const { return head_dim_; }
  const float* cos() const { return cos_.get(); }  // device, [seq_len, head_dim/2]
  const float* sin() const { return sin_.get(); }

 private:
  int seq_len_ = 0, head_dim_ = 0;
  DeviceArray<float> cos_, sin_;
};
// Rotates in place the n_heads heads of rows b·T + t, row r at x + r·row_stride (q and k inside
// the packed qkv buffer). The table must have seq_len() == seq_len and head_dim() == head_dim.
void rope_forward(float* x, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                  const RopeTable& table, cudaStream_t stream);
// The transpose of the rotation, in place on the gradient.
void rope_backward(float* dx, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                   const RopeTable& table, cudaStream_t stream);
// The packed qkv buffer [B·T, 3·d] (d = n_heads·head_dim) in one pass, in place: with
// store.round, every element is rounded to bf16 first (the store of the projection's output),
// then q and k are rotated (forward, or the transpose for the backward) and every element is
// rounded again (the store after RoPE); store.bf16 (optional, [B·T, 3·d]) gets the final values.
// Bit-identical to round_to_bf16(qkv); rope_*(q); rope_*(k); round_to_bf16(qkv); float_to_bf16.
void rope_forward_qkv(float* qkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                      cudaStream_t stream, StoreOut store = {});
void rope_backward_qkv(float* dqkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                       cudaStream_t stream, StoreOut store = {});
// The forward on a qkv buffer held in bf16 (a stored projection output), in place: q and k rotated,
// every value rounded and written back. Bit-identical to the fp32 call with store.round on the
// buffer's values, its bf16 copy being the result.
void rope_forward_qkv(bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                      cudaStream_t stream);
// The backward on a bf16 dqkv (the fused attention's stored gradient) into `out` ([B·T, 3·d] bf16,
// the qkv linear's dY; may be dqkv): bit-identical to the fp32 call with store.round and `out` as
// its bf16 copy.
void rope_backward_qkv(const bf16_t* dqkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                       bf16_t* out, cudaStream_t stream);

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
// flash_attention.cuh's flash_attention_forward with out_store applied to out as the kernel writes
// it (out_store.bf16: [B·T, d]; lse stays fp32). Same bits as flash_attention_forward followed by
// round_to_bf16 / float_to_bf16 passes. out may be null when out_store.bf16 is set (the backward
// then takes the bf16 copy).
void flash_attention_forward_stored(const bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim,
                                    float* out, float* lse, StoreOut out_store, cudaStream_t stream);

// ---- SwiGLU: u [rows, 2·f] = gate | up; a = silu(gate) · up -----------------------------------
void swiglu_forward(const float* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store = {});
// The same preceded by u's store: u is rounded to bf16 in place as it is read (it is kept for the
// backward), bit-identical to round_to_bf16(u) followed by swiglu_forward.
void swiglu_forward_round_u(float* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store = {});
// dgate = da · up · σ(g) · (1 + g · (1 − σ(g))), dup = da · silu(g); du [rows, 2·f] overwritten.
// round_da: da's pending store, da rounded to bf16 as it is read (da itself is left as it is).
void swiglu_backward(const float* u, const float* da, int rows, int f, float* du, cudaStream_t stream,
                     StoreOut du_store = {}, bool round_da = false);
// The same with u and da held in bf16 (stored buffers: equal to swiglu_forward_round_u's rounded u
// and to round_da), for bf16 storage: u is half the bytes to keep and to read. a (forward) and du
// (backward) may be null when their store's bf16 copy is set.
void swiglu_forward(const bf16_t* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store = {});
void swiglu_backward(const bf16_t* u, const bf16_t* da, int rows, int f, float* du, cudaStream_t stream,
                     StoreOut du_store = {});

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
// kernels/adamw.h's adamw_update per element (the CPU engine's own code: the same bits).
using fp4::AdamWConstants;
// The constants of step t (1-based): fp4::make_adamw_constants. Throws std::invalid_argument for
// t < 1.
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

  size_t size() const { return n_; }
  int count() const { return count_; }
  const size_t* device_ends() const { return ends_.get(); }      // end offset of each range
  const uint8_t* device_decay() const { return decay_.get(); }   // 1 where the range decays

 private:
  size_t n_ = 0;
  int count_ = 0;
  DeviceArray<size_t> ends_;
  DeviceArray<uint8_t> decay_;
};
// One AdamW update of the whole flat buffer (params, grads, m, v: ranges.size() floats each) in
// one launch. grad_scale is the clip factor (1 leaves the gradients as they are).
void adamw_step(float* params, const float* grads, float* m, float* v, const AdamWRanges& ranges,
                const AdamWConstants& c, float grad_scale, cudaStream_t stream);

}  // namespace fp4::cuda
