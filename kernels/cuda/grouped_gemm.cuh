// grouped_gemm.cuh — several independent matrix products of different sizes in one library call
// (cuBLAS's cublasGemmGroupedBatchedEx): the MoE blocks' expert GEMMs, one product per expert group,
// instead of one cuBLASLt call per expert (engine/cuda_model/cuda_model_moe.cpp).
//
// Convention: gemm.cuh's, row-major throughout: C_i [m_i, n_i] = op(A_i) · op(B_i) with op(A_i)
// m_i × k_i and op(B_i) k_i × n_i; with trans_a, A_i is stored [k_i, m_i]; with trans_b, B_i is
// stored [n_i, k_i]. Leading dimensions are row strides of the matrices as stored (0: dense). All
// products of one call share the transposes; bf16 operands, fp32 accumulation
// (CUBLAS_COMPUTE_32F), the fp32 result rounded to a bf16 output. Only that form: the grouped call
// is not documented for a bf16 product into fp32 C, so the experts' weight gradients (fp32,
// accumulated) stay with gemm.cuh, one call per group.
//
// Determinism: cuBLAS gives the same bits for the same call (sizes, pointers' alignments, GPU
// model) every time; its atomics mode stays CUBLAS_ATOMICS_NOT_ALLOWED. The call is the unit:
// cuBLAS may choose its kernels from all the products together, so one product's bits can depend
// on the others' sizes (for the MoE blocks, on how many rows the other experts got),
// deterministically. The bits are not those of gemm.cuh's cuBLASLt call of the same product
// (another kernel, another order of the fp32 sums): the MoE path uses one or the other by a rule
// fixed by the shapes, never by the machine.
//
// Plain C++ on the host side (cuBLAS's types stay in grouped_gemm.cu): callable from .cpp files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/numerics.h"  // bf16_t

namespace fp4::cuda {

// One product of a grouped call: device pointers, its sizes and row strides (0: dense); C bf16
// (GroupedProduct: run, C = op(A) · op(B)) or fp32 (GroupedAccumulation: accumulate,
// C += op(A) · op(B)).
template <typename C>
struct GroupedProductInto {
  const bf16_t* a = nullptr;
  const bf16_t* b = nullptr;
  C* c = nullptr;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};
using GroupedProduct = GroupedProductInto<bf16_t>;
using GroupedAccumulation = GroupedProductInto<float>;

class GroupedGemm {
 public:
  // Creates the cuBLAS handle (synchronous).
  GroupedGemm();
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;

  // Every product's C = op(A) · op(B), asynchronous on `stream`, one library call; C is not read.
  // Products with m or n of 0 are left out; k = 0 is refused (leave such a product out). Calls on
  // one GroupedGemm must be ordered on one stream (they share the device array of operand
  // pointers) and come from one host thread at a time. Throws std::invalid_argument (one line) for
  // a bad product, std::runtime_error when cuBLAS fails.
  void run(bool trans_a, bool trans_b, const std::vector<GroupedProduct>& products, cudaStream_t stream);

  // Every product's fp32 C += op(A) · op(B) (beta 1: C is read), one library call: the MoE
  // experts' weight gradients, accumulated over micro-steps. cuBLAS's documentation does not list
  // bf16 operands into an fp32 C for the grouped call; where the library refuses it, the
  // std::runtime_error says so (bench/grouped_wgrad_bench.cu asks the library on a GPU). The same
  // rules as run otherwise.
  void accumulate(bool trans_a, bool trans_b, const std::vector<GroupedAccumulation>& products, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  // run's and accumulate's one body: Product is GroupedProduct (bf16 C, beta 0) or
  // GroupedAccumulation (fp32 C, beta 1).
  template <class Product>
  void call(bool trans_a, bool trans_b, const std::vector<Product>& products, cudaStream_t stream);
};

}  // namespace fp4::cuda
