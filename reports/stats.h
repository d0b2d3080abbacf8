// stats.h — the spread of a handful of values (a grid point's seeds): what the tables print as
// "mean ± sd".
#pragma once

#include <vector>

namespace fp4::reports {

struct Spread {
  int n = 0;
  double mean = 0, sd = 0, min = 0, max = 0;  // sd: sample standard deviation (n - 1), NaN for n < 2
  double lo = 0, hi = 0;                      // the 95% Student-t interval of the mean, NaN for n < 2
  bool has_interval() const { return n >= 2 && lo == lo && hi == hi; }
  // The interval's reading: +1 when it lies above 0, -1 below, 0 when it holds 0 or is unknown.
  int sign() const { return has_interval() ? (lo > 0 ? 1 : hi < 0 ? -1 : 0) : 0; }
};
// NaN values are left out; n counts the rest (mean NaN when none).
Spread spread(const std::vector<double>& values);

}  // namespace fp4::reports
