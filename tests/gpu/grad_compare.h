// grad_compare.h — what the [gpu] engine tests compare the CUDA model's gradients with the CPU's by.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace fp4::test {

// ‖a − b‖ / ‖b‖ over elements [offset, offset + n), in double (b the reference; 1e-30 guards ‖b‖ = 0).
inline double rel_diff_norm(const std::vector<float>& a, const std::vector<float>& b, size_t offset, size_t n) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = offset; i < offset + n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff += d * d;
    ref += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

}  // namespace fp4::test
