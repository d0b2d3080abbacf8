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
  // The clusters: each size's points, in the order the sizes first appear.
  std::vector<std::string> size_names;
  std::vector<std::vector<size_t>> members;
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string name = points[i].size.empty() ? points[i].label : points[i].size;
    const auto it = std::find(size_names.begin(), size_names.end(), name);
    if (it == size_names.end()) {
      size_names.push_back(name);
      members.push_back({i});
    } else {
      members[static_cast<size_t>(it - size_names.begin())].push_back(i);
    }
  }
  t.sizes = static_cast<int64_t>(size_names.size());
  // The line through the points of the chosen sizes (a size chosen twice counts twice); NaN with
  // fewer than two distinct x among them.
  auto line_of = [&](const std::vector<size_t>& chosen, int64_t* dropped) {
    std::vector<double> xs, ys, ses;
    std::set<double> distinct;
    for (size_t c : chosen)
      for (size_t i : members[c]) {
        xs.push_back(x[i]);
        ys.push_back(y[i]);
        ses.push_back(se[i]);
        distinct.insert(x[i]);
      }
    if (distinct.size() < 2) {
      if (dropped != nullptr) ++*dropped;
      return kNaN;
    }
    return weighted_line(xs, ys, ses).slope;
  };
  t.weighted = weighted_line(x, y, se);
  t.unweighted_slope = least_squares_line(x, y).slope;
  if (size_names.size() >= 3)
    for (size_t c = 0; c < size_names.size(); ++c) {
      std::vector<size_t> rest;
      for (size_t k = 0; k < size_names.size(); ++k)
        if (k != c) rest.push_back(k);
      t.leave_one_size_out.push_back({size_names[c], line_of(rest, nullptr)});
    }
  if (replicates <= 0 || points.size() < 2) return t;
  std::mt19937_64 rng(seed);
  std::vector<double> seed_slopes, size_slopes;
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
    // Sizes with replacement, each with all its points (their own seeds and se). One size has one
    // resample only, itself: no interval.
    if (size_names.size() < 2) continue;
    std::uniform_int_distribution<size_t> pick_size(0, size_names.size() - 1);
    std::vector<size_t> chosen;
    for (size_t i = 0; i < size_names.size(); ++i) chosen.push_back(pick_size(rng));
    const double slope = line_of(chosen, &t.size_replicates_dropped);
    if (!std::isnan(slope)) size_slopes.push_back(slope);
  }
  t.seed_bootstrap = percentile_interval(seed_slopes);
  // Drawn whatever the count, so the seed bootstrap's stream does not depend on it.
  if (t.sizes >= kMinClusterSizes) t.size_bootstrap = percentile_interval(size_slopes);
  return t;
}

}  // namespace fp4::fit
