// test_fit_trend.cpp — the weighted trend of a contrast with scale (fit/trend.h): the weighted line
// against the values results/second-study/stats.py gives; on points whose noise differs between
// sizes the weighted slope recovers the true one where the unweighted line is pulled off by the
// noisiest point, and over many draws its error is the smaller; the leave-one-out and both
// bootstraps are computed and seeded.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "fit/trend.h"

using Catch::Matchers::WithinRel;

TEST_CASE("trend: the weighted line of stats.py, by hand", "[fit][trend]") {
  // stats.weighted_slope([0, 1, 2], [0.1, 0.35, 0.4], [0.05, 0.1, 0.2]).
  const fp4::fit::WeightedLine l = fp4::fit::weighted_line({0, 1, 2}, {0.1, 0.35, 0.4}, {0.05, 0.1, 0.2});
  CHECK_THAT(l.slope, WithinRel(0.1954545454545454, 1e-12));
  CHECK_THAT(l.intercept, WithinRel(0.1060606060606061, 1e-12));
  CHECK_THAT(l.se, WithinRel(0.07977240352174657, 1e-12));
  CHECK_THAT(l.ci.lo, WithinRel(0.039103507591725956, 1e-12));
  CHECK_THAT(l.ci.hi, WithinRel(0.3518055833173649, 1e-12));
  // Equal weights: the ordinary least-squares line (stats.ols_slope gives 0.15).
  CHECK_THAT(fp4::fit::weighted_line({0, 1, 2}, {0.1, 0.35, 0.4}, {1, 1, 1}).slope, WithinRel(0.15, 1e-12));
  CHECK(std::isnan(fp4::fit::weighted_line({1, 1}, {0, 1}, {1, 1}).slope));
  CHECK(std::isnan(fp4::fit::weighted_line({0, 1}, {0, 1}, {1, 0}).slope));
}

TEST_CASE("trend: weights from the seed variance recover a known slope that the unweighted line misses",
          "[fit][trend]") {
  // True slope 1 per decade; the largest size is five times noisier than the others per seed.
  const double truth = 1.0;
  const std::vector<double> x = {0, 1, 2, 3};
  const std::vector<double> sd = {0.1, 0.1, 0.1, 2.0};
  std::mt19937_64 rng(3);
  std::normal_distribution<double> unit(0, 1);
  double weighted_error = 0, unweighted_error = 0;
  const int draws = 400;
  fp4::fit::Trend last;
  for (int k = 0; k < draws; ++k) {
    std::vector<fp4::fit::TrendPoint> points;
    for (size_t i = 0; i < x.size(); ++i) {
      fp4::fit::TrendPoint p{"p" + std::to_string(i), x[i], {}};
      for (int s = 0; s < 6; ++s) p.values.push_back(truth * x[i] + sd[i] * unit(rng));
      points.push_back(p);
    }
    last = fp4::fit::fit_trend(points, k == 0 ? 2000 : 0, 1);
    if (k == 0) {
      REQUIRE(last.leave_one_out.size() == 4);
      CHECK(last.seed_bootstrap.known());
      CHECK(last.cluster_bootstrap.known());
      CHECK(last.seed_bootstrap.contains(last.weighted.slope));
      // Seeded: the same intervals again.
      const fp4::fit::Trend again = fp4::fit::fit_trend(points, 2000, 1);
      CHECK(again.seed_bootstrap.lo == last.seed_bootstrap.lo);
      CHECK(again.cluster_bootstrap.hi == last.cluster_bootstrap.hi);
      // Four points resampled four at a time: some resamples draw one point only and are dropped.
      CHECK(last.cluster_replicates_dropped > 0);
    }
    weighted_error += std::fabs(last.weighted.slope - truth);
    unweighted_error += std::fabs(last.unweighted_slope - truth);
  }
  INFO("mean |error|: weighted " << weighted_error / draws << ", unweighted " << unweighted_error / draws);
  CHECK(weighted_error < 0.5 * unweighted_error);
  CHECK(weighted_error / draws < 0.05);

  // One example, by hand: the noisy largest point lies 2 above the line.
  std::vector<fp4::fit::TrendPoint> example = {{"a", 0, {-0.01, 0.01}}, {"b", 1, {0.99, 1.01}}, {"c", 2, {1.99, 2.01}},
                                               {"d", 3, {3.0, 7.0}}};
  const fp4::fit::Trend t = fp4::fit::fit_trend(example, 0);
  CHECK(std::fabs(t.weighted.slope - 1) < 1e-3);
  CHECK(t.unweighted_slope > 1.5);  // (OLS through 0, 1, 2, 5: 1.6)
  CHECK_THAT(t.unweighted_slope, WithinRel(1.6, 1e-12));
}
