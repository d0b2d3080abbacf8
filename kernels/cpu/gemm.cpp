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
