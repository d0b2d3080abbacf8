// gemm.h — the CPU backend's one matrix product, fp32 in and out.
//
// Row-major throughout: op(A) is M x K, op(B) is K x N, C is M x N. With trans_a, A is stored as
// [K, M]; with trans_b, B is stored as [N, K] (so C = A · Bᵀ, the fprop of a linear layer).
// Deterministic: the result for a given shape depends neither on the thread count (rows are cut
// into fixed-size panels and each panel is one independent product) nor on the machine's caches
// (Eigen's K blocking is planned from fixed cache sizes: gemm.cpp).
#pragma once

namespace fp4::cpu {

// The cache sizes (bytes) Eigen plans gemm's K blocking with, whatever the machine's (gemm.cpp).
inline constexpr long kGemmPlanL1 = 48L << 10, kGemmPlanL2 = 2L << 20, kGemmPlanL3 = 105L << 20;

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c);

}  // namespace fp4::cpu
