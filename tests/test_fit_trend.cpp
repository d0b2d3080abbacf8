// test_fit_trend.cpp — the weighted trend of a contrast with scale (fit/trend.h): the weighted line
// against the values results/second-study/stats.py gives; on points whose noise differs between
// sizes the weighted slope recovers the true one where the unweighted line is pulled off by the
// noisiest point, and over many draws its error is the smaller; the leave-one-size-out and both
// bootstraps are computed and seeded; a size with several points (token counts) is resampled and
// left out whole.
#include <catch2/catch.hpp>

#include <algorithm>
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
      // Points without a size are a size each.
      CHECK(last.sizes == 4);
      REQUIRE(last.leave_one_size_out.size() == 4);
      CHECK(last.leave_one_size_out[3].label == "p3");
      CHECK(last.seed_bootstrap.known());
      CHECK(!last.size_bootstrap.known());  // four sizes: below kMinClusterSizes, withheld
      CHECK(last.seed_bootstrap.contains(last.weighted.slope));
      // Seeded: the same intervals and the same resamples again.
      const fp4::fit::Trend again = fp4::fit::fit_trend(points, 2000, 1);
      CHECK(again.seed_bootstrap.lo == last.seed_bootstrap.lo);
      CHECK(again.size_replicates_dropped == last.size_replicates_dropped);
      // Four sizes resampled four at a time: some resamples draw one size only and are dropped.
      CHECK(last.size_replicates_dropped > 0);
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

TEST_CASE("trend: the cluster bootstrap and the leave-out take a model size with all its points", "[fit][trend]") {
  // d2 at three token counts (as the first study's d2 at 25M, 50M and 100M tokens), d3 at one: the
  // x of d2's points differ by D alone. Resampling the two sizes gives three kinds of resample:
  // {d2, d2} (d2's own line), {d2, d3} in either order (every point once: the full line), {d3, d3}
  // (one x: dropped), so about a quarter of the resamples are dropped (a bootstrap over the points
  // would draw d2's points apart and drop almost none). Every slope drawn is one of two numbers:
  // such an interval says nothing, and below kMinClusterSizes sizes it is withheld.
  const std::vector<fp4::fit::TrendPoint> two = {{"d2 25M", 0.0, {0.10, 0.14, 0.12}, "d2"},
                                                 {"d2 50M", 0.3, {0.30, 0.26, 0.31}, "d2"},
                                                 {"d2 100M", 0.6, {0.25, 0.20, 0.21}, "d2"},
                                                 {"d3 25M", 1.0, {0.90, 1.10, 1.00, 0.95}, "d3"}};
  const fp4::fit::Trend t = fp4::fit::fit_trend(two, 4000, 7);
  CHECK(t.points == 4);
  CHECK(t.sizes == 2);
  CHECK(t.leave_one_size_out.empty());  // two sizes: leaving one out leaves no trend across sizes
  const std::vector<fp4::fit::TrendPoint> d2_only(two.begin(), two.begin() + 3);
  const double d2_line = fp4::fit::fit_trend(d2_only, 0).weighted.slope, full = t.weighted.slope;
  REQUIRE(std::isfinite(d2_line));
  REQUIRE(std::fabs(d2_line - full) > 0.1);
  CHECK(!t.size_bootstrap.known());
  CHECK(fp4::fit::size_bootstrap_text(t, [](double v) { return std::to_string(v); }) ==
        "withheld (2 sizes; it needs 5 or more)");
  CHECK(t.size_replicates_dropped > 4000 / 4 - 150);
  CHECK(t.size_replicates_dropped < 4000 / 4 + 150);

  // Five sizes: the interval is given, and it spans resamples of whole sizes.
  std::vector<fp4::fit::TrendPoint> five = two;
  five.push_back({"d4 25M", 2.0, {1.9, 2.1, 2.0}, "d4"});
  five.push_back({"d5 25M", 3.0, {2.9, 3.2, 3.0}, "d5"});
  five.push_back({"d6 25M", 4.0, {4.1, 3.9, 4.0}, "d6"});
  const fp4::fit::Trend f = fp4::fit::fit_trend(five, 4000, 7);
  CHECK(f.sizes == 5);
  REQUIRE(f.size_bootstrap.known());
  CHECK(f.size_bootstrap.lo < f.size_bootstrap.hi);
  CHECK(fp4::fit::size_bootstrap_text(f, [](double v) { return std::to_string(v); })[0] == '[');

  // Three sizes: without each size in turn, all its points leave together.
  std::vector<fp4::fit::TrendPoint> three = two;
  three.push_back({"d4 25M", 2.0, {1.9, 2.1, 2.0}, "d4"});
  const fp4::fit::Trend u = fp4::fit::fit_trend(three, 0);
  CHECK(u.sizes == 3);
  REQUIRE(u.leave_one_size_out.size() == 3);
  auto slope_of = [](const std::vector<fp4::fit::TrendPoint>& pts) { return fp4::fit::fit_trend(pts, 0).weighted.slope; };
  CHECK(u.leave_one_size_out[0].label == "d2");
  CHECK_THAT(u.leave_one_size_out[0].slope, WithinRel(slope_of({three[3], three[4]}), 1e-12));
  CHECK(u.leave_one_size_out[1].label == "d3");
  CHECK_THAT(u.leave_one_size_out[1].slope, WithinRel(slope_of({three[0], three[1], three[2], three[4]}), 1e-12));
  CHECK(u.leave_one_size_out[2].label == "d4");
  CHECK_THAT(u.leave_one_size_out[2].slope, WithinRel(slope_of(two), 1e-12));

  // One size only: its points still give a line (along D), but no resample of sizes differs from
  // it, so the size bootstrap has no interval.
  const fp4::fit::Trend one = fp4::fit::fit_trend(d2_only, 500, 1);
  CHECK(one.sizes == 1);
  CHECK(std::isfinite(one.weighted.slope));
  CHECK_FALSE(one.size_bootstrap.known());
  CHECK(one.seed_bootstrap.known());
}
