// statistics.h — the few statistics the fits report: percentile intervals of bootstrap replicates,
// Student-t intervals of a mean over seeds, and a least-squares line.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

namespace fp4::fit {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A two-sided interval; both ends NaN when there is nothing to estimate it from.
struct Interval {
  double lo = kNaN, hi = kNaN;
  bool known() const { return !std::isnan(lo) && !std::isnan(hi); }
  bool contains(double x) const { return lo <= x && x <= hi; }
};

// A value with its 95% interval.
struct Estimate {
  double value = kNaN;
  Interval ci;
};

// The p-quantile (0 <= p <= 1) of `sorted` (ascending, no NaN) by linear interpolation between
// order statistics: h = (n-1)·p, x[floor h] + (h - floor h)·(x[floor h + 1] - x[floor h]) — numpy's
// and R's default ("type 7"). NaN for an empty vector.
double quantile_sorted(const std::vector<double>& sorted, double p);

// The central `level` percentile interval of `values` (NaN entries are dropped first: a replicate
// whose prediction is not finite does not count). Both ends NaN when fewer than 2 values remain.
Interval percentile_interval(std::vector<double> values, double level = 0.95);

// The two-sided 95% Student-t quantile t_{0.975, df} (df >= 1): exact table values to df = 30,
// the Cornish-Fisher expansion above (error below 1e-4).
double student_t975(int df);

// Mean, sample standard deviation (n-1; NaN for one value) and the 95% t interval of the mean
// (NaN for one value) of `values`.
struct MeanSpread {
  double mean = kNaN, sd = kNaN, min = kNaN, max = kNaN;
  Interval ci;
};
MeanSpread mean_spread(const std::vector<double>& values);

// Ordinary least squares y = intercept + slope·x. NaN when fewer than 2 distinct x.
struct Line {
  double intercept = kNaN, slope = kNaN;
};
Line least_squares_line(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace fp4::fit
