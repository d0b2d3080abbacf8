// stats.h — the spread of a handful of values (a grid point's seeds): what the tables print as
// "mean ± sd".
#pragma once

#include <vector>

namespace fp4::reports {

struct Spread {
  int n = 0;
  double mean = 0, sd = 0, min = 0, max = 0;  // sd: sample standard deviation (n - 1), NaN for n < 2
};
// NaN values are left out; n counts the rest (mean NaN when none).
Spread spread(const std::vector<double>& values);

}  // namespace fp4::reports
