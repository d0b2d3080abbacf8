// trend.h — how a paired contrast moves with scale (docs/statistics.md "Trends"): a weighted
// least-squares line through the grid points' mean d against log10 of the axis, each point weighted
// by 1/se² from its own seeds (a point measured over noisy seeds counts less), beside the unweighted
// line; a bootstrap that resamples the seeds within each point, a cluster bootstrap that resamples
// the points themselves, and the line refitted without each point in turn. The same weighted line
// as results/second-study/stats.py weighted_slope.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fit/statistics.h"

namespace fp4::fit {

// y = intercept + slope·x with weights 1/se² (the variances taken as known): the slope, its
// standard error √(1/Σw(x − x̄_w)²) and the normal 95% interval slope ± 1.96·se. NaN with fewer than
// two distinct x or a non-positive se.
struct WeightedLine {
  double slope = kNaN, intercept = kNaN, se = kNaN;
  Interval ci;
};
WeightedLine weighted_line(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& se);

// One point of a trend: its x (log10 of N or of C) and the per-seed values measured there.
struct TrendPoint {
  std::string label;
  double x = 0;
  std::vector<double> values;            // one per seed (at least two)
};

struct LeaveOneOut {
  std::string label;                     // the point left out
  double slope = kNaN;                   // weighted, without it
};

struct Trend {
  int64_t points = 0;
  WeightedLine weighted;
  double unweighted_slope = kNaN;
  Interval seed_bootstrap;               // 95% percentile, seeds resampled within each point
  Interval cluster_bootstrap;            // 95% percentile, points resampled with replacement
  int64_t cluster_replicates_dropped = 0;  // resamples with fewer than two distinct x (no line)
  std::vector<LeaveOneOut> leave_one_out;  // with three points or more
};

// The trend of the points' means. `replicates` bootstrap resamples from std::mt19937_64(seed).
// A resample whose seeds are all equal at a point gets that point's se floored at 1e-9 (as stats.py
// does), so that the line stays defined.
Trend fit_trend(const std::vector<TrendPoint>& points, int64_t replicates = 10000, uint64_t seed = 0);

}  // namespace fp4::fit
