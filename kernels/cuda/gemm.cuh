// gemm.cuh — the CUDA backend's matrix product: a cuBLASLt wrapper with bf16 operands and fp32
// accumulation (CUBLAS_COMPUTE_32F), fp32 or bf16 output.
//
// Convention: kernels/cpu/gemm.h's, row-major throughout. C[m,n] = alpha · op(A) · op(B) + beta · C
// with op(A) m×k and op(B) k×n; with trans_a, A is stored [k, m]; with trans_b, B is stored [n, k]
// (so trans_b gives C = A · Bᵀ, a linear layer's fprop). Leading dimensions are row strides in
// elements of the matrices as stored (0: dense). A batched product repeats the shape `batch`
// times with element strides between consecutive A, B and C matrices (attention's per-head
// products, for instance).
//
// Determinism: for each distinct shape key (transposes, sizes, strides, output type and the
// pointers' alignments) the wrapper asks cuBLASLt's heuristic once, with the reduction-scheme mask
// restricted to CUBLASLT_REDUCTION_SCHEME_NONE (no split-K: each output's dot product runs in one
// sequence, no reduction through atomics or in-place counters), takes the first algorithm whose
// configuration confirms no split-K, and reuses that algorithm (and the descriptors) for every
// later call with that key. cuBLAS gives bit-identical results for the same algorithm on the same
// GPU model, so two identical calls give identical bits.
//
// The workspace is allocated once, in the constructor. Calls on one Gemm must be ordered on one
// stream (they share the workspace) and come from one host thread at a time.
//
// Plain C++ on the host side (cuBLASLt's types stay in gemm.cu): callable from .cpp files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/numerics.h"  // bf16_t

namespace fp4::cuda {

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides of A, B, C as stored; 0 = dense
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batch items (batch > 1)
};

class Gemm {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Creates the cuBLASLt handle and allocates the workspace (synchronous).
  explicit Gemm(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C = alpha · op(A) · op(B) + beta · C, asynchronous on `stream`. With beta == 0, C is not read.
  // Throws std::invalid_argument (one line) for a bad shape, std::runtime_error when cuBLASLt
  // fails or offers no algorithm without split-K.
  void matmul(const GemmShape& shape, float alpha, const bf16_t* a, const bf16_t* b, float beta, float* c,
              cudaStream_t stream);
  void matmul(const GemmShape& shape, float alpha, const bf16_t* a, const bf16_t* b, float beta, bf16_t* c,
              cudaStream_t stream);
  // fp32 operands, fp32 output, CUBLAS_COMPUTE_32F (true fp32 products and sums: never TF32, which
  // only CUBLAS_COMPUTE_32F_FAST_TF32 would allow). For the products whose operands are fp32 in the
  // CPU reference too: the LM head's backward, where the logits' gradient stays fp32.
  void matmul(const GemmShape& shape, float alpha, const float* a, const float* b, float beta, float* c,
              cudaStream_t stream);

  // Dense, unbatched shorthand with kernels/cpu/gemm.h's argument order.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16_t* a, const bf16_t* b,
            float beta, float* c, cudaStream_t stream);
  // The same with a bf16 output: the fp32 result of the same algorithm as the fp32-output call,
  // rounded to nearest even by cuBLASLt's epilogue (where cuBLASLt accepts that algorithm for a
  // bf16 output; tests/gpu/ops_test.cpp checks the equality). For outputs the model stores as bf16
  // anyway: half the bytes written, and half read by the op that takes them.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16_t* a, const bf16_t* b,
            float beta, bf16_t* c, cudaStream_t stream);
  // The same with alpha and beta read from device memory (one float each) when the GEMM runs
  // (cuBLASLt's CUBLASLT_POINTER_MODE_DEVICE), so a scale a previous kernel computed needs no trip
  // through the host. C must be valid memory (cuBLASLt decides on the device whether *beta == 0
  // spares reading it). The plan reuses the algorithm the host-scalar call of the same shape uses
  // (checked with cublasLtMatmulAlgoCheck; should cuBLASLt reject it, the heuristic picks another,
  // still deterministic and without split-K). With *beta == 0 the result equals the host-scalar
  // call's bit for bit (tests/gpu/ops_test.cpp); with *beta != 0 the epilogue's rounding differs
  // (measured on H200 / CUDA 13: last-bit differences in about a third of the outputs).
  void gemm_device_scalars(bool trans_a, bool trans_b, int m, int n, int k, const float* alpha, const bf16_t* a,
                           const bf16_t* b, const float* beta, float* c, cudaStream_t stream);
  void gemm_device_scalars(bool trans_a, bool trans_b, int m, int n, int k, const float* alpha, const bf16_t* a,
                           const bf16_t* b, const float* beta, bf16_t* c, cudaStream_t stream);

  // Deterministic split-K for fp32 products with a long K and a small output (few tiles: the LM
  // head's weight gradient, V·d outputs over K = tokens): K is cut into `chunks` equal parts
  // (chunks must divide k), one strided-batched GEMM computes every part's alpha·op(A)·op(B) into
  // `partials` ([chunks, m, n] fp32, dense, device), then one kernel forms
  // C = (beta == 0 ? 0 : beta·C) + partial[0] + partial[1] + … + partial[chunks − 1] per element,
  // added in that order (no atomics): the same bits every call. shape.batch must be 1. Differs
  // from matmul only in the order of the fp32 sums.
  void matmul_split_k(const GemmShape& shape, int chunks, float alpha, const float* a, const float* b, float beta,
                      float* c, float* partials, cudaStream_t stream);

  // The same split-K for bf16 operands (the block linears' weight gradients dW += dYᵀ·X, whose K
  // is the micro-batch's token count and whose output is a small model's few tiles): partials
  // alpha = 1, then C = (beta == 0 ? 0 : beta·C) + partial[0] + … + partial[chunks − 1] when
  // device_alpha is null, else C = (beta == 0 ? 0 : beta·C) + (*device_alpha)·(partial[0] + … +
  // partial[chunks − 1]) (the quantized recipes' product of tensor scales, read on the device).
  void matmul_split_k(const GemmShape& shape, int chunks, const float* device_alpha, const bf16_t* a, const bf16_t* b,
                      float beta, float* c, float* partials, cudaStream_t stream);

  size_t cached_plans() const;  // distinct shape keys seen so far

  // *out = (a ? *a : 1) · (b ? *b : 1): one fp32 multiply on the device (a, b, out: device floats),
  // the product of two tensor scales as a device-side alpha for gemm_device_scalars.
  static void scale_product(const float* a, const float* b, float* out, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4::cuda
