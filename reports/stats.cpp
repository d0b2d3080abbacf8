// stats.cpp — see stats.h.
#include "reports/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fit/statistics.h"

namespace fp4::reports {

Spread spread(const std::vector<double>& values) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  Spread s{0, nan, nan, nan, nan, nan, nan};
  double sum = 0;
  for (double v : values)
    if (!std::isnan(v)) {
      sum += v;
      s.min = s.n == 0 ? v : std::min(s.min, v);
      s.max = s.n == 0 ? v : std::max(s.max, v);
      ++s.n;
    }
  if (s.n == 0) return s;
  s.mean = sum / s.n;
  if (s.n >= 2) {
    double ss = 0;
    for (double v : values)
      if (!std::isnan(v)) ss += (v - s.mean) * (v - s.mean);
    s.sd = std::sqrt(ss / (s.n - 1));
    const double half = fit::student_t975(s.n - 1) * s.sd / std::sqrt(static_cast<double>(s.n));
    s.lo = s.mean - half;
    s.hi = s.mean + half;
  }
  return s;
}

}  // namespace fp4::reports
