// trend.h — how a paired contrast moves with scale (docs/statistics.md "Trends"): a weighted
// least-squares line through the grid points' mean d against log10 of the axis, each point weighted
// by 1/se² from its own seeds (a point measured over noisy seeds counts less), beside the unweighted
// line; a bootstrap that resamples the seeds within each point, a cluster bootstrap that resamples
// the model sizes (a size with several token counts brings all its points: the points of one size
// share its model, learning rate and noise, so they are not independent draws), and the line
// refitted without each size in turn. The same weighted line as results/second-study/stats.py
// weighted_slope.
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

// One point of a trend: its x (log10 of N or of C), the per-seed values measured there, and the
// model size it belongs to (one N; e.g. "d2"), the cluster the resampling and the leave-out take
// whole. An empty size makes the point a size of its own.
struct TrendPoint {
  std::string label;
  double x = 0;
  std::vector<double> values;            // one per seed (at least two)
  std::string size;
};

struct LeaveOneOut {
  std::string label;                     // the size left out (with all its points)
  double slope = kNaN;                   // weighted, without it (NaN: fewer than two distinct x left)
};

struct Trend {
  int64_t points = 0;
  int64_t sizes = 0;                     // distinct sizes among the points
  WeightedLine weighted;
  double unweighted_slope = kNaN;
  Interval seed_bootstrap;               // 95% percentile, seeds resampled within each point
  Interval size_bootstrap;               // 95% percentile, sizes resampled with replacement, each with all its
                                         // points; unknown (withheld) below kMinClusterSizes sizes
  int64_t size_replicates_dropped = 0;   // resamples with fewer than two distinct x (no line)
  std::vector<LeaveOneOut> leave_one_size_out;  // with three sizes or more, in the order sizes first appear
};

// The fewest sizes whose cluster bootstrap gives an interval. K sizes have only C(2K-1, K) distinct
// resamples (3 for two sizes, 10 for three, 35 for four), most of them the full set reweighted, so
// below five a percentile interval says more about the count than about the data: with two sizes
// it collapses onto the estimate itself. Fewer sizes leave it unknown, and the outputs say why.
constexpr int64_t kMinClusterSizes = 5;

// What a report or fit text says of the cluster bootstrap: "[lo, hi]" by `format`, or why it is withheld.
template <typename Format>
std::string size_bootstrap_text(const Trend& t, Format format) {
  if (t.size_bootstrap.known()) return "[" + format(t.size_bootstrap.lo) + ", " + format(t.size_bootstrap.hi) + "]";
  return "withheld (" + std::to_string(t.sizes) + " size" + (t.sizes == 1 ? "" : "s") + "; it needs " +
         std::to_string(kMinClusterSizes) + " or more)";
}

// The trend of the points' means. `replicates` bootstrap resamples from std::mt19937_64(seed).
// A resample whose seeds are all equal at a point gets that point's se floored at 1e-9 (as stats.py
// does), so that the line stays defined.
Trend fit_trend(const std::vector<TrendPoint>& points, int64_t replicates = 10000, uint64_t seed = 0);

}  // namespace fp4::fit
