// trend.cpp — see trend.h.
#include "fit/trend.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace fp4::fit {

namespace {

constexpr double kZ975 = 1.959963984540054;

struct MeanSe {
  double mean = kNaN, se = kNaN;
};
MeanSe mean_se(const std::vector<double>& v) {
  MeanSe m;
  const double n = static_cast<double>(v.size());
  if (v.empty()) return m;
  double sum = 0;
  for (double x : v) sum += x;
  m.mean = sum / n;
  if (v.size() < 2) return m;
  double ss = 0;
  for (double x : v) ss += (x - m.mean) * (x - m.mean);
  m.se = std::max(std::sqrt(ss / (n - 1)), 1e-9) / std::sqrt(n);
  return m;
}

}  // namespace

WeightedLine weighted_line(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& se) {
  WeightedLine l;
  if (x.size() != y.size() || x.size() != se.size() || x.size() < 2) return l;
  double sw = 0, sx = 0, sy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(se[i] > 0)) return l;
    const double w = 1 / (se[i] * se[i]);
    sw += w;
    sx += w * x[i];
    sy += w * y[i];
  }
  const double xbar = sx / sw, ybar = sy / sw;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = 1 / (se[i] * se[i]);
    sxx += w * (x[i] - xbar) * (x[i] - xbar);
    sxy += w * (x[i] - xbar) * (y[i] - ybar);
  }
  if (!(sxx > 0)) return l;
  l.slope = sxy / sxx;
  l.intercept = ybar - l.slope * xbar;
  l.se = std::sqrt(1 / sxx);
  l.ci = {l.slope - kZ975 * l.se, l.slope + kZ975 * l.se};
  return l;
}

Trend fit_trend(const std::vector<TrendPoint>& points, int64_t replicates, uint64_t seed) {
  Trend t;
  t.points = static_cast<int64_t>(points.size());
  std::vector<double> x, y, se;
  for (const TrendPoint& p : points) {
    const MeanSe m = mean_se(p.values);
    x.push_back(p.x);
    y.push_back(m.mean);
    se.push_back(m.se);
  }
  t.weighted = weighted_line(x, y, se);
  t.unweighted_slope = least_squares_line(x, y).slope;
  if (points.size() >= 3)
    for (size_t i = 0; i < points.size(); ++i) {
      std::vector<double> xs, ys, ses;
      for (size_t j = 0; j < points.size(); ++j)
        if (j != i) xs.push_back(x[j]), ys.push_back(y[j]), ses.push_back(se[j]);
      t.leave_one_out.push_back({points[i].label, weighted_line(xs, ys, ses).slope});
    }
  if (replicates <= 0 || points.size() < 2) return t;
  std::mt19937_64 rng(seed);
  std::vector<double> seed_slopes, cluster_slopes;
  for (int64_t k = 0; k < replicates; ++k) {
    // Seeds within each point.
    std::vector<double> ys, ses;
    for (const TrendPoint& p : points) {
      std::uniform_int_distribution<size_t> pick(0, p.values.size() - 1);
      std::vector<double> sample;
      for (size_t i = 0; i < p.values.size(); ++i) sample.push_back(p.values[pick(rng)]);
      const MeanSe m = mean_se(sample);
      ys.push_back(m.mean);
      ses.push_back(m.se);
    }
    seed_slopes.push_back(weighted_line(x, ys, ses).slope);
    // Points with replacement (each with its own seeds and se).
    std::uniform_int_distribution<size_t> pick_point(0, points.size() - 1);
    std::vector<double> xc, yc, sc;
    std::set<double> distinct;
    for (size_t i = 0; i < points.size(); ++i) {
      const size_t j = pick_point(rng);
      xc.push_back(x[j]);
      yc.push_back(y[j]);
      sc.push_back(se[j]);
      distinct.insert(x[j]);
    }
    if (distinct.size() < 2) ++t.cluster_replicates_dropped;
    else cluster_slopes.push_back(weighted_line(xc, yc, sc).slope);
  }
  t.seed_bootstrap = percentile_interval(seed_slopes);
  t.cluster_bootstrap = percentile_interval(cluster_slopes);
  return t;
}

}  // namespace fp4::fit
