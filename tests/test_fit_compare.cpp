// test_fit_compare.cpp — two quantized recipes against each other (docs/fit.md "Recipe against
// recipe"): the paired difference d = gap_A - gap_B of runs that share N, D and seed. On synthetic
// losses where the recipes' gaps are set by hand, the observed difference's interval must find a
// known difference and must not invent one between identical recipes; the fitted difference must be
// computed replicate by replicate from the same bootstrap as the gaps, identically on any thread
// count; a fit with one quantized recipe has no comparison, says so in one line, and is no error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fit/fit_output.h"
#include "fit/fitter.h"
#include "fit/synthetic_data.h"
#include "store/store.h"
#include "tests/fit_test_helpers.h"
#include "tests/test_support.h"

using fp4::fit::FitData;
using fp4::fit::FitRequest;
using fp4::fit::Law;
using fp4::fit::RecipeComparison;
using fp4::fit::StoredFit;
using fp4::test::count_of;

namespace {

// The first study's shape (5 N × 3 D) with two seeds: 30 matched points. Every recipe's clean loss
// is the baseline's times (1 + gap): its BF16-relative gap is `gaps[recipe]` at every grid point, so
// the true difference of two recipes is the difference of their gaps. Each run gets its own 0.1%
// multiplicative noise, the baseline's included.
FitData data_with_gaps(const std::map<std::string, double>& gaps, uint64_t seed) {
  fp4::fit::SyntheticGrid g = fp4::test::first_study_grid(seed, 0.001, 2);
  for (const auto& [recipe, gap] : gaps) g.rho[recipe] = {1.0, 1.0};
  FitData data = fp4::fit::synthetic_data(g);
  for (fp4::fit::FitPoint& p : data.points)
    if (p.recipe != "bf16") p.loss *= 1 + gaps.at(p.recipe);
  return data;
}

// The joint law only, on a coarse start grid (the comparison, not the search, is under test).
FitRequest precision_request(int64_t bootstrap) {
  FitRequest r;
  r.laws = {Law::precision};
  r.bootstrap = bootstrap;
  r.held_out = false;
  r.grid = fp4::test::coarse_start_grid();
  return r;
}

StoredFit fit_precision(const FitData& data, const FitRequest& request) {
  const auto fits = fp4::fit::run_fits(data, request, fp4::fit::plan_fits(data, request));
  REQUIRE(fits.size() == 1);
  REQUIRE(fits[0].law == "precision");
  return fits[0];
}

const RecipeComparison& comparison(const StoredFit& f, const std::string& a, const std::string& b) {
  for (const RecipeComparison& c : f.comparisons)
    if (c.recipe == a && c.against == b) return c;
  FAIL("no comparison " << a << " - " << b);
  return f.comparisons.front();
}

const fp4::fit::TargetPrediction& prediction(const StoredFit& f, const fp4::fit::Target& t, const std::string& r) {
  for (const auto& p : f.predictions)
    if (p.target == t && p.recipe == r) return p;
  FAIL("no prediction for " << r);
  return f.predictions.front();
}

}  // namespace

TEST_CASE("fit compare: a recipe built 0.3% closer to BF16 is found closer, by about 0.3%", "[fit][fit_compare]") {
  // ufp4 0.4%, nvfp4 0.6%, e2m1 0.7%: ufp4 - e2m1 = -0.3% at every grid point.
  const FitData data = data_with_gaps({{"e2m1", 0.007}, {"nvfp4", 0.006}, {"ufp4", 0.004}}, 11);
  FitRequest request = precision_request(200);
  request.targets = {{1.5e9, 1e11}, {3e7, 6e8}};
  const StoredFit f = fit_precision(data, request);

  // Every pair once, A the later name: nvfp4 - e2m1, ufp4 - e2m1, ufp4 - nvfp4.
  REQUIRE(f.comparisons.size() == 3);
  CHECK(f.comparisons[0].recipe == "nvfp4");
  CHECK(f.comparisons[0].against == "e2m1");
  CHECK(f.comparisons[1].recipe == "ufp4");
  CHECK(f.comparisons[1].against == "e2m1");
  CHECK(f.comparisons[2].recipe == "ufp4");
  CHECK(f.comparisons[2].against == "nvfp4");

  const RecipeComparison& c = comparison(f, "ufp4", "e2m1");
  CHECK(c.baseline == "bf16");
  const auto& o = c.observed;
  INFO("observed ufp4 - e2m1: " << o.mean << " [" << o.ci.lo << ", " << o.ci.hi << "] over " << o.points);
  CHECK(o.points == 30);
  CHECK(o.ci.contains(-0.003));
  CHECK(o.ci.hi < 0);
  CHECK(o.wins >= 25);  // d's noise (about 0.14%) is half the difference: a few points may go the other way
  CHECK(o.wins <= 30);
  // The mean is of the per-point differences (L_A - L_B)/L_bf16, recomputed here from the losses.
  {
    std::map<std::string, std::map<std::string, double>> loss;  // group → recipe → loss
    for (const auto& p : data.points) loss[p.group][p.recipe] = p.loss;
    double sum = 0;
    int wins = 0;
    for (auto& [group, by] : loss) {
      const double d = (by.at("ufp4") / by.at("bf16") - 1) - (by.at("e2m1") / by.at("bf16") - 1);
      sum += d;
      wins += d < 0;
    }
    CHECK(o.mean == Approx(sum / 30).epsilon(1e-12));
    CHECK(o.wins == wins);
  }
  // Per size: 5 sizes, 3 D × 2 seeds each, together every point.
  REQUIRE(c.observed_by_n.size() == 5);
  int64_t points = 0;
  for (const auto& b : c.observed_by_n) {
    CHECK(b.points == 6);
    CHECK(b.ci.known());
    points += b.points;
  }
  CHECK(points == 30);
  CHECK(c.observed_by_n.front().n == 4.0e5);
  REQUIRE(c.observed_points.size() == 15);
  REQUIRE(c.fitted.size() == 15);
  CHECK(c.observed_points[0].seeds == 2);
  // The difference is the same at every size: no trend to find.
  INFO("slope " << c.slope.per_decade.value << " [" << c.slope.per_decade.ci.lo << ", " << c.slope.per_decade.ci.hi
                << "]");
  CHECK(c.slope.points == 30);
  CHECK(c.slope.per_decade.ci.contains(0));

  // d is linear: (ufp4 - nvfp4) + (nvfp4 - e2m1) = ufp4 - e2m1, observed and fitted.
  const RecipeComparison& un = comparison(f, "ufp4", "nvfp4");
  const RecipeComparison& ne = comparison(f, "nvfp4", "e2m1");
  CHECK(un.observed.mean + ne.observed.mean == Approx(o.mean).margin(1e-15));
  CHECK(un.targets[0].gap.value + ne.targets[0].gap.value == Approx(c.targets[0].gap.value).margin(1e-15));

  // At every target: the fitted difference is exactly the difference of the printed gaps' point
  // estimates, and its interval the percentiles of the per-replicate differences.
  REQUIRE(c.targets.size() == 2);
  for (const auto& t : c.targets) {
    const fp4::fit::Target target{t.n, t.d};
    CHECK(t.gap.value == prediction(f, target, "ufp4").gap.value - prediction(f, target, "e2m1").gap.value);
    std::vector<double> per_replicate;
    for (const auto& s : f.samples) {
      auto gap = [&](const std::string& r) {
        return fp4::fit::law_loss(s.params, s.params.rho_n.at(r), s.params.rho_d.at(r), t.n, t.d) /
                   fp4::fit::law_loss(s.params, 1, 1, t.n, t.d) -
               1;
      };
      per_replicate.push_back(gap("ufp4") - gap("e2m1"));
    }
    const auto ci = fp4::fit::percentile_interval(per_replicate);
    CHECK(t.gap.ci.lo == Approx(ci.lo).margin(1e-15));
    CHECK(t.gap.ci.hi == Approx(ci.hi).margin(1e-15));
    // The same as the stored-fit API computes from the stored replicates.
    const auto again = fp4::fit::predicted_gap_difference_interval(f, "ufp4", "e2m1", t.n, t.d);
    CHECK(again.value == t.gap.value);
    CHECK(again.ci.lo == t.gap.ci.lo);
    CHECK(again.ci.hi == t.gap.ci.hi);
  }
  // On the grid, the law finds the difference too (the data are exactly a constant -0.3%).
  for (const auto& x : c.fitted) {
    INFO("fitted at N = " << x.n << ", D = " << x.d << ": " << x.gap.value);
    CHECK(x.gap.value == Approx(-0.003).margin(0.0015));
    CHECK(x.gap.ci.hi < 0);
  }

  // The table shows the law's d at the targets only; the descriptive observed d (the fit's own
  // grid points, no multiplicity adjustment) is in the CSV, as the report leaves it out (issue 32:
  // the test of A - B is the paired contrasts over seeds).
  const std::string table = fp4::fit::format_fits({f}, fp4::fit::OutputFormat::table);
  CHECK(count_of(table, "recipe comparisons, the law's d = gap_A - gap_B") == 1);
  CHECK(count_of(table, "    ufp4 - e2m1 at N = ") == 2);
  CHECK(count_of(table, "e2m1: observed ") == 0);
  CHECK(table.find("closer at ") == std::string::npos);
  CHECK(table.find("the test of A - B is the paired contrasts over seeds") != std::string::npos);
  const std::string csv = fp4::fit::format_fits({f}, fp4::fit::OutputFormat::csv);
  CHECK(count_of(csv, ",compare_observed,") == 3);
  CHECK(count_of(csv, ",compare_observed_n,") == 15);
  CHECK(count_of(csv, ",compare_observed_point,") == 45);
  CHECK(count_of(csv, ",compare_fitted,") == 45);
  CHECK(count_of(csv, ",compare_target,") == 6);
  CHECK(count_of(csv, ",compare_slope,") == 3);
  CHECK(count_of(csv, ",compare_observed,e2m1,ufp4,,,") == 1);
}

TEST_CASE("fit compare: two recipes identical up to noise show no detectable difference", "[fit][fit_compare]") {
  const FitData data = data_with_gaps({{"e2m1", 0.005}, {"ufp4", 0.005}}, 12);
  const StoredFit f = fit_precision(data, precision_request(200));
  REQUIRE(f.comparisons.size() == 1);
  const RecipeComparison& c = f.comparisons[0];
  CHECK(c.recipe == "ufp4");
  CHECK(c.against == "e2m1");
  INFO("observed " << c.observed.mean << " [" << c.observed.ci.lo << ", " << c.observed.ci.hi << "]");
  CHECK(c.observed.points == 30);
  CHECK(c.observed.ci.contains(0));
  CHECK(std::fabs(c.observed.mean) < 0.001);
  const auto& t = c.targets.at(0);
  INFO("predicted " << t.gap.value << " [" << t.gap.ci.lo << ", " << t.gap.ci.hi << "]");
  CHECK(t.gap.ci.contains(0));
}

TEST_CASE("fit compare: the same bits on one thread and on two", "[fit][fit_compare]") {
  const FitData data = data_with_gaps({{"e2m1", 0.007}, {"ufp4", 0.004}}, 13);
  FitRequest request = precision_request(30);
  const auto [one, two] = fp4::test::fit_on_one_and_two_threads(data, request, fp4::fit::plan_fits(data, request));
  REQUIRE(one.comparisons.size() == 1);
  CHECK(one.comparisons[0].slope.per_decade.ci.known());
  CHECK(fp4::fit::to_record(one).predictions_json == fp4::fit::to_record(two).predictions_json);
}

TEST_CASE("fit compare: one quantized recipe has nothing to compare, says so in one line, and fits",
          "[fit][fit_compare]") {
  const FitData data = data_with_gaps({{"ufp4", 0.004}}, 14);
  const StoredFit f = fit_precision(data, precision_request(20));
  CHECK(f.comparisons.empty());
  CHECK(f.gaps.size() == 1);
  const std::string table = fp4::fit::format_fits({f}, fp4::fit::OutputFormat::table);
  CHECK(count_of(table, "recipe comparisons") == 1);
  CHECK(count_of(table, "  recipe comparisons: none (one quantized recipe, ufp4: nothing to compare it with)\n") == 1);
  const std::string csv = fp4::fit::format_fits({f}, fp4::fit::OutputFormat::csv);
  CHECK(count_of(csv, ",compare_") == 0);
  // Chinchilla fits say nothing about comparisons.
  FitRequest chin = precision_request(0);
  chin.laws = {Law::chinchilla};
  const auto fits = fp4::fit::run_fits(data, chin, fp4::fit::plan_fits(data, chin));
  REQUIRE(fits.size() == 2);
  CHECK(count_of(fp4::fit::format_fits(fits, fp4::fit::OutputFormat::table), "recipe comparisons") == 0);
}

TEST_CASE("fp4lab fit: --format json carries the comparisons of a points file with two 4-bit recipes",
          "[fit][fit_compare]") {
  fp4::test::ScratchDir dir;
  // Row k of each recipe at (n, d) is one matched point: two seeds per grid point, 30 in all.
  const FitData data = data_with_gaps({{"e2m1", 0.007}, {"ufp4", 0.004}}, 15);
  std::string csv = "recipe,n,d,loss\n";
  for (const auto& p : data.points) csv += fmt::format("{},{},{},{:.17g}\n", p.recipe, p.n, p.d, p.loss);
  fp4::test::spit(dir / "points.csv", csv);
  const auto r = fp4::test::run_fp4lab(
      "fit --points '" + (dir / "points.csv").string() + "' --law precision --bootstrap 20 --format json", dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto fits = nlohmann::json::parse(r.out)["fits"];
  REQUIRE(fits.size() == 1);
  const auto& comparisons = fits[0]["predictions"]["comparisons"];
  REQUIRE(comparisons.size() == 1);
  CHECK(comparisons[0]["recipe"] == "ufp4");
  CHECK(comparisons[0]["against"] == "e2m1");
  CHECK(comparisons[0]["observed"]["points"] == 30);
  CHECK(comparisons[0]["observed"]["hi"].get<double>() < 0);
  CHECK(comparisons[0]["observed_by_n"].size() == 5);
  CHECK(comparisons[0]["targets"].size() == 1);
  CHECK(comparisons[0]["slope"]["points"] == 30);
}
