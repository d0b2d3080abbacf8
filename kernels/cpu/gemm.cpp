// gemm.cpp — Eigen does the cache blocking; we only cut the rows of C into fixed panels so the
// threads never change what any one output element sums, or in which order.
#define EIGEN_DONT_PARALLELIZE
#include "kernels/cpu/gemm.h"

#include <Eigen/Core>

namespace fp4::cpu {

namespace {
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor>;
using Map = Eigen::Map<RowMajor>;
constexpr int kPanelRows = 64;

// Eigen cuts K into blocks whose size it plans from the CPU's cache sizes (read from CPUID at first
// use) and adds each block's partial products into C in turn, so the bits of a product would depend
// on the machine. Eigen plans with these sizes instead, whatever the machine, which leaves the
// summation order a function of the shape alone (only the speed depends on the real caches). They
// give the plan of the machine the CPU golden bits were pinned on (bench/RESULTS.md, "Same bits
// across Hopper GPUs and commits"). Eigen keeps them process-wide: the fitter's products plan with
// them too.
const bool kFixedEigenBlocking = [] {
  Eigen::setCpuCacheSizes(kGemmPlanL1, kGemmPlanL2, kGemmPlanL3);
  return true;
}();
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  const ConstMap A(a, trans_a ? k : m, trans_a ? m : k);
  const ConstMap B(b, trans_b ? n : k, trans_b ? k : n);
  const int panels = (m + kPanelRows - 1) / kPanelRows;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < panels; ++p) {
    const int r0 = p * kPanelRows;
    const int rows = r0 + kPanelRows <= m ? kPanelRows : m - r0;
    Map C(c + static_cast<long>(r0) * n, rows, n);
    if (beta == 0.0f) C.setZero();
    else if (beta != 1.0f) C *= beta;
    if (!trans_a && !trans_b) C.noalias() += alpha * (A.middleRows(r0, rows) * B);
    else if (!trans_a && trans_b) C.noalias() += alpha * (A.middleRows(r0, rows) * B.transpose());
    else if (trans_a && !trans_b) C.noalias() += alpha * (A.middleCols(r0, rows).transpose() * B);
    else C.noalias() += alpha * (A.middleCols(r0, rows).transpose() * B.transpose());
  }
}

}  // namespace fp4::cpu
