// test_fit_stored.cpp — the stored-fit API (fit/stored_fit.h) that the report generator reads fits
// through: the JSON round trip through a real store, which row read_fits picks, evaluation of the
// laws at any (N, D) with exact hand-computed values, percentile bands from the stored replicates,
// paired gaps, compatibility with rows that lack keys, and errors that name the row and column.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fit/laws.h"
#include "fit/statistics.h"
#include "fit/stored_fit.h"
#include "store/schema.h"
#include "store/store.h"
#include "tests/sql_test_helpers.h"
#include "tests/test_support.h"

using fp4::fit::BootstrapSample;
using fp4::fit::Estimate;
using fp4::fit::LawParameters;
using fp4::fit::StoredFit;
using fp4::store::Store;
using fp4::test::ScratchDir;

namespace {

// Parameters with exact arithmetic at (N, D) = (100, 1000): A/N^α = 1, B/D^β = 1.
LawParameters exact_params() {
  LawParameters p;
  p.E = 1.5;
  p.A = 100;
  p.alpha = 1;
  p.B = 1000;
  p.beta = 1;
  return p;
}

// A precision fit over bf16 and ufp4 with everything filled in, as `fp4lab fit` would store it.
StoredFit sample_precision_fit() {
  StoredFit f;
  f.law = "precision";
  f.scope = "joint";
  f.input_hash = std::string(64, 'a');
  f.options.n_kind = "nonembedding";
  f.options.huber_delta = 1e-3;
  f.options.bootstrap = 4;
  f.options.seed = 18446744073709551615ull;  // the largest seed survives JSON
  f.options.gamma = true;
  f.options.targets = {{1.5e9, 1e11}, {3e8, 6e9}};
  f.options.recipes = {"bf16", "ufp4"};
  f.options.baseline = "bf16";
  f.options.source = "store";
  f.options.data_hash = std::string(64, 'b');
  f.point = exact_params();
  f.point.gamma = 2;
  f.point.rho_n = {{"bf16", 1.0}, {"ufp4", 0.5}};
  f.point.rho_d = {{"bf16", 1.0}, {"ufp4", 0.25}};
  f.replicates_asked = 4;
  for (int k : {0, 1, 3}) {  // replicate 2 failed
    BootstrapSample s;
    s.replicate = k;
    s.params = f.point;
    s.params.E += 0.01 * k;
    s.params.rho_n["ufp4"] = 0.5 + 0.1 * k;
    f.samples.push_back(s);
  }
  f.parameters = {{"E", "", 1.5, {1.49, 1.52}},       {"A", "", 100, {90, 110}},
                  {"B", "", 1000, {900, 1100}},       {"alpha", "", 1, {0.9, 1.1}},
                  {"beta", "", 1, {0.95, 1.05}},      {"a", "", 0.5, {0.45, 0.55}},
                  {"b", "", 0.5, {0.45, 0.55}},       {"gamma", "", 2, {1.9, 2.1}},
                  {"rho_N", "bf16", 1, {1, 1}},       {"rho_D", "bf16", 1, {1, 1}},
                  {"rho_N", "ufp4", 0.5, {0.4, 0.8}}, {"rho_D", "ufp4", 0.25, {fp4::fit::kNaN, fp4::fit::kNaN}}};
  f.objective = 1.25e-3;
  f.n_points = 2;
  f.optimizer = {"Ceres Solver 2.1.0", "trust region", 4500, 4400, 17, 23, "CONVERGENCE", "done", 0.5, 1.25e-3};
  f.residuals = {{"id-1", "d1-ufp4", "ufp4", 100, 1000, 3.1, 3.0, std::log(3.1 / 3.0)},
                 {"", "row 2", "bf16", 200, 2000, 2.9, fp4::fit::kNaN, fp4::fit::kNaN}};
  f.held_out.done = true;
  f.held_out.held_out_n = 200;
  f.held_out.recipes = {{"bf16", {{"id-2", "d2-bf16", 200, 2000, 2.9, 2.95, 2.95 / 2.9 - 1}}, 0.017, 0.017}};
  f.excluded = {{"id-3", "d3-ufp4", "ufp4", "diverged", "state diverged"}};
  f.predictions = {{{1.5e9, 1e11}, "bf16", {2.0, {1.9, 2.1}}, {}},
                   {{1.5e9, 1e11}, "ufp4", {2.02, {1.92, 2.12}}, {0.01, {0.005, 0.015}}}};
  fp4::fit::RecipeGap g;
  g.recipe = "ufp4";
  g.baseline = "bf16";
  g.observed = {{100, 1000, 2, 0.01, 0.002, 0.0086, 0.0114, {-0.008, 0.028}}};
  g.fitted = {{100, 1000, {0.011, {0.009, 0.013}}}};
  g.slope = {{-0.001, {-0.003, 0.001}}, 6};
  f.gaps = {g};
  fp4::fit::RecipeComparison c;
  c.recipe = "ufp4";
  c.against = "e2m1";
  c.baseline = "bf16";
  c.observed = {fp4::fit::kNaN, 15, 12, -0.0024, 0.002, {-0.0035, -0.0013}};
  c.observed_by_n = {{100, 3, 3, -0.003, 0.001, {-0.0055, -0.0005}}, {200, 1, 0, 0.001, fp4::fit::kNaN, {}}};
  c.observed_points = {{100, 1000, 1, -0.003, fp4::fit::kNaN, -0.003, -0.003, {}}};
  c.fitted = {{100, 1000, {-0.0028, {-0.004, -0.0015}}}};
  c.targets = {{1.5e9, 1e11, {-0.002, {-0.005, 0.001}}}};
  c.slope = {{0.0002, {-0.001, 0.0015}}, 15};
  f.comparisons = {c};
  f.fp4lab_version = "0.1.0";
  f.created = 1700000000.5;
  return f;
}

void check_same(const StoredFit& a, const StoredFit& b) {
  CHECK(a.law == b.law);
  CHECK(a.scope == b.scope);
  CHECK(a.input_hash == b.input_hash);
  CHECK(a.options.n_kind == b.options.n_kind);
  CHECK(a.options.huber_delta == b.options.huber_delta);
  CHECK(a.options.bootstrap == b.options.bootstrap);
  CHECK(a.options.seed == b.options.seed);
  CHECK(a.options.gamma == b.options.gamma);
  CHECK(a.options.targets == b.options.targets);
  CHECK(a.options.recipes == b.options.recipes);
  CHECK(a.options.baseline == b.options.baseline);
  CHECK(a.options.source == b.options.source);
  CHECK(a.options.data_hash == b.options.data_hash);
  CHECK(a.point == b.point);
  CHECK(a.replicates_asked == b.replicates_asked);
  REQUIRE(a.samples.size() == b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) {
    CHECK(a.samples[i].replicate == b.samples[i].replicate);
    CHECK(a.samples[i].params == b.samples[i].params);
  }
  REQUIRE(a.parameters.size() == b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    INFO(a.parameters[i].name << " " << a.parameters[i].recipe);
    CHECK(a.parameters[i].name == b.parameters[i].name);
    CHECK(a.parameters[i].recipe == b.parameters[i].recipe);
    // a and b are derived from alpha and beta when read: compare with the stored point's.
    CHECK(a.parameters[i].value == b.parameters[i].value);
    CHECK(std::isnan(a.parameters[i].ci.lo) == std::isnan(b.parameters[i].ci.lo));
    if (a.parameters[i].ci.known()) {
      CHECK(a.parameters[i].ci.lo == b.parameters[i].ci.lo);
      CHECK(a.parameters[i].ci.hi == b.parameters[i].ci.hi);
    }
  }
  CHECK(a.objective == b.objective);
  CHECK(a.n_points == b.n_points);
  CHECK(a.optimizer.library == b.optimizer.library);
  CHECK(a.optimizer.starts_tried == b.optimizer.starts_tried);
  CHECK(a.optimizer.starts_succeeded == b.optimizer.starts_succeeded);
  CHECK(a.optimizer.best_start == b.optimizer.best_start);
  CHECK(a.optimizer.iterations == b.optimizer.iterations);
  CHECK(a.optimizer.termination == b.optimizer.termination);
  CHECK(a.optimizer.final_cost == b.optimizer.final_cost);
  REQUIRE(a.residuals.size() == b.residuals.size());
  for (size_t i = 0; i < a.residuals.size(); ++i) {
    CHECK(a.residuals[i].run_id == b.residuals[i].run_id);
    CHECK(a.residuals[i].run_name == b.residuals[i].run_name);
    CHECK(a.residuals[i].recipe == b.residuals[i].recipe);
    CHECK(a.residuals[i].n == b.residuals[i].n);
    CHECK(a.residuals[i].observed == b.residuals[i].observed);
    CHECK(std::isnan(a.residuals[i].fitted) == std::isnan(b.residuals[i].fitted));
  }
  CHECK(a.held_out.done == b.held_out.done);
  CHECK(a.held_out.held_out_n == b.held_out.held_out_n);
  REQUIRE(a.held_out.recipes.size() == b.held_out.recipes.size());
  CHECK(a.held_out.recipes[0].points[0].predicted == b.held_out.recipes[0].points[0].predicted);
  CHECK(a.held_out.recipes[0].max_abs_rel_error == b.held_out.recipes[0].max_abs_rel_error);
  REQUIRE(a.excluded.size() == b.excluded.size());
  CHECK(a.excluded[0].reason == b.excluded[0].reason);
  CHECK(a.excluded[0].state == b.excluded[0].state);
  REQUIRE(a.predictions.size() == b.predictions.size());
  for (size_t i = 0; i < a.predictions.size(); ++i) {
    CHECK(a.predictions[i].target == b.predictions[i].target);
    CHECK(a.predictions[i].recipe == b.predictions[i].recipe);
    CHECK(a.predictions[i].loss.value == b.predictions[i].loss.value);
    CHECK(a.predictions[i].loss.ci.hi == b.predictions[i].loss.ci.hi);
    CHECK(std::isnan(a.predictions[i].gap.value) == std::isnan(b.predictions[i].gap.value));
  }
  REQUIRE(a.gaps.size() == b.gaps.size());
  CHECK(a.gaps[0].recipe == b.gaps[0].recipe);
  CHECK(a.gaps[0].observed[0].seeds == b.gaps[0].observed[0].seeds);
  CHECK(a.gaps[0].observed[0].ci.lo == b.gaps[0].observed[0].ci.lo);
  CHECK(a.gaps[0].fitted[0].gap.value == b.gaps[0].fitted[0].gap.value);
  CHECK(a.gaps[0].slope.per_decade.ci.hi == b.gaps[0].slope.per_decade.ci.hi);
  CHECK(a.gaps[0].slope.points == b.gaps[0].slope.points);
  REQUIRE(a.comparisons.size() == b.comparisons.size());
  for (size_t i = 0; i < a.comparisons.size(); ++i) {
    const auto &x = a.comparisons[i], &y = b.comparisons[i];
    CHECK(x.recipe == y.recipe);
    CHECK(x.against == y.against);
    CHECK(x.baseline == y.baseline);
    CHECK(std::isnan(x.observed.n) == std::isnan(y.observed.n));
    CHECK(x.observed.points == y.observed.points);
    CHECK(x.observed.wins == y.observed.wins);
    CHECK(x.observed.mean == y.observed.mean);
    CHECK(x.observed.sd == y.observed.sd);
    CHECK(x.observed.ci.lo == y.observed.ci.lo);
    CHECK(x.observed.ci.hi == y.observed.ci.hi);
    REQUIRE(x.observed_by_n.size() == y.observed_by_n.size());
    CHECK(x.observed_by_n[0].n == y.observed_by_n[0].n);
    CHECK(x.observed_by_n[0].ci.hi == y.observed_by_n[0].ci.hi);
    CHECK(x.observed_by_n[1].wins == y.observed_by_n[1].wins);
    CHECK_FALSE(y.observed_by_n[1].ci.known());
    REQUIRE(x.observed_points.size() == y.observed_points.size());
    CHECK(x.observed_points[0].d == y.observed_points[0].d);
    CHECK(x.observed_points[0].mean == y.observed_points[0].mean);
    REQUIRE(x.fitted.size() == y.fitted.size());
    CHECK(x.fitted[0].gap.ci.lo == y.fitted[0].gap.ci.lo);
    REQUIRE(x.targets.size() == y.targets.size());
    CHECK(x.targets[0].n == y.targets[0].n);
    CHECK(x.targets[0].gap.value == y.targets[0].gap.value);
    CHECK(x.slope.per_decade.ci.hi == y.slope.per_decade.ci.hi);
    CHECK(x.slope.points == y.slope.points);
  }
  CHECK(a.fp4lab_version == b.fp4lab_version);
  CHECK(a.created == b.created);
}

}  // namespace

TEST_CASE("fit laws: hand-computed values of chinchilla, precision and Quartet's form", "[fit][fit_stored]") {
  LawParameters p = exact_params();
  CHECK(fp4::fit::law_loss(p, 1, 1, 100, 1000) == 3.5);  // 1.5 + 1 + 1
  CHECK(fp4::fit::law_loss(p, 0.5, 1, 100, 1000) == 4.5);  // A/(50) = 2
  CHECK(fp4::fit::law_loss(p, 1, 0.25, 100, 1000) == 6.5);  // B/(250) = 4
  p.gamma = 2;
  CHECK(fp4::fit::law_loss(p, 1, 1, 100, 1000) == 5.5);    // 1.5 + (1 + 1)^2
  CHECK(fp4::fit::law_loss(p, 0.5, 1, 100, 1000) == 10.5); // 1.5 + (2 + 1)^2
  p.alpha = 0.25;
  p.beta = 0.75;
  CHECK(fp4::fit::allocation_exponent_a(p) == 0.75);
  CHECK(fp4::fit::allocation_exponent_b(p) == 0.25);
  CHECK(fp4::fit::parse_law("precision") == fp4::fit::Law::precision);
  CHECK_THROWS_WITH(fp4::fit::parse_law("hoffmann"), Catch::Contains("\"chinchilla\""));
}

TEST_CASE("fit statistics: percentiles (type 7), t intervals, least squares", "[fit][fit_stored]") {
  std::vector<double> v;
  for (int k = 0; k <= 100; ++k) v.push_back(1 + k / 100.0);
  const fp4::fit::Interval ci = fp4::fit::percentile_interval(v);
  CHECK(ci.lo == Approx(1.025).epsilon(1e-14));
  CHECK(ci.hi == Approx(1.975).epsilon(1e-14));
  CHECK(fp4::fit::quantile_sorted({1, 2, 3, 4}, 0.5) == 2.5);
  CHECK(fp4::fit::quantile_sorted({1, 2, 3, 4}, 1.0) == 4);
  CHECK_FALSE(fp4::fit::percentile_interval({1.0}).known());
  CHECK(fp4::fit::percentile_interval({fp4::fit::kNaN, 1.0, 3.0}).lo == Approx(1.05));  // NaN dropped
  const auto m = fp4::fit::mean_spread({1, 2, 3});
  CHECK(m.mean == 2);
  CHECK(m.sd == 1);
  CHECK(m.ci.hi - m.mean == Approx(4.3027 / std::sqrt(3.0)));
  CHECK(std::isnan(fp4::fit::mean_spread({1}).sd));
  CHECK(fp4::fit::student_t975(31) == Approx(2.0395).margin(2e-4));
  CHECK(fp4::fit::student_t975(120) == Approx(1.9799).margin(2e-4));
  const auto line = fp4::fit::least_squares_line({0, 1, 2, 3}, {1, 3, 5, 7});
  CHECK(line.slope == Approx(2));
  CHECK(line.intercept == Approx(1));
  CHECK(std::isnan(fp4::fit::least_squares_line({1, 1}, {1, 2}).slope));
}

TEST_CASE("stored fit: every field survives the store, and read_fits keeps the latest per law and scope",
          "[fit][fit_stored]") {
  ScratchDir dir;
  auto store = Store::open(dir / "s.db", Store::Mode::read_write);
  const StoredFit precision = sample_precision_fit();
  StoredFit chin_old;
  chin_old.law = "chinchilla";
  chin_old.scope = "bf16";
  chin_old.input_hash = "h-old";
  chin_old.point = exact_params();
  chin_old.options.data_hash = "d1";
  chin_old.created = 5;
  StoredFit chin_new = chin_old;
  chin_new.input_hash = "h-new";
  chin_new.point.E = 1.25;

  const int64_t id1 = fp4::fit::insert_fit(*store, chin_old);
  const int64_t id2 = fp4::fit::insert_fit(*store, precision);
  const int64_t id3 = fp4::fit::insert_fit(*store, chin_new);
  CHECK(id1 < id2);
  CHECK(id2 < id3);

  // A read-only reader (the report) sees the same.
  store.reset();
  auto reader = Store::open(dir / "s.db", Store::Mode::read_only);
  const auto all = fp4::fit::read_all_fits(*reader);
  REQUIRE(all.size() == 3);
  CHECK(all[0].id == id1);
  CHECK(all[2].id == id3);
  check_same(all[1], precision);
  CHECK(all[1].id == id2);

  const auto latest = fp4::fit::read_fits(*reader);
  REQUIRE(latest.size() == 2);
  CHECK(latest[0].law == "chinchilla");
  CHECK(latest[0].id == id3);
  CHECK(latest[0].point.E == 1.25);
  CHECK(latest[1].law == "precision");

  const auto found = fp4::fit::find_fit(*reader, "chinchilla", "bf16", "h-old");
  REQUIRE(found.has_value());
  CHECK(found->id == id1);
  CHECK_FALSE(fp4::fit::find_fit(*reader, "chinchilla", "ufp4", "h-old").has_value());

  // a, b are written beside alpha, beta; chinchilla rows carry no gamma or rho.
  const auto rec = reader->fits();
  const auto params = nlohmann::json::parse(rec[0].params_json);
  CHECK(params.at("a") == 0.5);
  CHECK_FALSE(params.contains("rho"));
  CHECK_FALSE(params.contains("gamma"));
  CHECK(nlohmann::json::parse(rec[1].params_json).at("rho").at("ufp4").at("rho_D") == 0.25);
}

TEST_CASE("stored fit: predicted loss and its band at any (N, D), from the point and the replicates",
          "[fit][fit_stored]") {
  const StoredFit f = sample_precision_fit();
  // 1.5 + (A/(0.5·100) + B/(0.25·1000))^2 = 1.5 + (2 + 4)^2
  CHECK(fp4::fit::predicted_loss(f, "ufp4", 100, 1000) == 37.5);
  CHECK(fp4::fit::predicted_loss(f, "bf16", 100, 1000) == 5.5);
  CHECK_THROWS_AS(fp4::fit::predicted_loss(f, "nvfp4", 100, 1000), std::invalid_argument);

  // The band: replicates 0, 1, 3 give E = 1.50, 1.51, 1.53 at bf16 (rho 1): losses 5.50, 5.51, 5.53.
  const Estimate e = fp4::fit::predicted_loss_interval(f, "bf16", 100, 1000);
  CHECK(e.value == 5.5);
  CHECK(e.ci.lo == Approx(5.5 + 0.025 * 2 * 0.01).epsilon(1e-12));   // type 7 at 2.5%: 5.50 + 0.05·0.01
  CHECK(e.ci.hi == Approx(5.51 + 0.95 * 0.02).epsilon(1e-12));       // at 97.5%: h = 1.95
  // The gap inside one precision fit: point (37.5 / 5.5 - 1), band over the same replicates.
  const Estimate gap = fp4::fit::predicted_gap_interval(f, "ufp4", 100, 1000);
  CHECK(gap.value == Approx(37.5 / 5.5 - 1));
  CHECK(gap.ci.known());
  CHECK(gap.ci.lo < gap.ci.hi);
  // A difference of gaps against the baseline itself (gap 0) is the gap, replicate by replicate.
  const Estimate diff = fp4::fit::predicted_gap_difference_interval(f, "ufp4", "bf16", 100, 1000);
  CHECK(diff.value == gap.value);
  CHECK(diff.ci.lo == gap.ci.lo);
  CHECK(diff.ci.hi == gap.ci.hi);
  const Estimate none = fp4::fit::predicted_gap_difference_interval(f, "ufp4", "ufp4", 100, 1000);
  CHECK(none.value == 0);
  CHECK(none.ci.lo == 0);
  CHECK(none.ci.hi == 0);
  CHECK_THROWS_AS(fp4::fit::predicted_gap_difference_interval(f, "ufp4", "nvfp4", 100, 1000), std::invalid_argument);

  // Chinchilla fits: the scope is the only recipe; no replicates, no band.
  StoredFit c;
  c.law = "chinchilla";
  c.scope = "ufp4";
  c.point = exact_params();
  CHECK(fp4::fit::predicted_loss(c, "", 100, 1000) == 3.5);
  CHECK(fp4::fit::predicted_loss(c, "ufp4", 100, 1000) == 3.5);
  CHECK_THROWS_AS(fp4::fit::predicted_loss(c, "bf16", 100, 1000), std::invalid_argument);
  CHECK_FALSE(fp4::fit::predicted_loss_interval(c, "ufp4", 100, 1000).ci.known());
  CHECK_THROWS_AS(fp4::fit::predicted_gap_interval(c, "ufp4", 100, 1000), std::invalid_argument);
  CHECK_THROWS_AS(fp4::fit::predicted_gap_difference_interval(c, "ufp4", "bf16", 100, 1000), std::invalid_argument);
}

TEST_CASE("stored fit: a gap between two chinchilla fits pairs replicates by index, from one call only",
          "[fit][fit_stored]") {
  StoredFit q, b;
  q.law = b.law = "chinchilla";
  q.scope = "ufp4";
  b.scope = "bf16";
  q.options.data_hash = b.options.data_hash = "same";
  q.point = b.point = exact_params();
  q.point.E = 2.5;  // 4.5 against 3.5 at (100, 1000)
  // q has replicates 0, 1, 2; b has 0, 2, 3: only 0 and 2 pair.
  for (int k : {0, 1, 2}) q.samples.push_back({k, q.point});
  q.samples[1].params.E = 100;  // unpaired: must not enter the band
  for (int k : {0, 2, 3}) b.samples.push_back({k, b.point});
  b.samples[2].params.E = 100;
  const Estimate g = fp4::fit::predicted_gap_interval(q, b, 100, 1000);
  CHECK(g.value == Approx(4.5 / 3.5 - 1));
  CHECK(g.ci.lo == Approx(4.5 / 3.5 - 1));
  CHECK(g.ci.hi == Approx(4.5 / 3.5 - 1));
  b.options.data_hash = "other";
  CHECK_THROWS_WITH(fp4::fit::predicted_gap_interval(q, b, 100, 1000), Catch::Contains("cannot be paired"));
}

TEST_CASE("stored fit: rows missing keys read as defaults, malformed rows name the row and column",
          "[fit][fit_stored]") {
  fp4::store::FitRecord r;
  r.id = 7;
  r.law = "chinchilla";
  r.scope = "bf16";
  r.params_json = R"({"E": 1.5, "A": 100, "B": 1000, "alpha": 1, "beta": 1, "a": 0.5, "b": 0.5, "future": [1]})";
  const StoredFit f = fp4::fit::from_record(r);  // every other column is "{}"
  CHECK(f.point == exact_params());
  CHECK(f.samples.empty());
  CHECK(f.parameters.size() == 7);
  CHECK_FALSE(f.parameter("E")->ci.known());
  CHECK(f.parameter("a")->value == 0.5);
  CHECK(std::isnan(f.objective));
  CHECK(f.optimizer.best_start == -1);

  // A precision fit stored before comparisons existed: its predictions have no "comparisons" key.
  fp4::store::FitRecord old = fp4::fit::to_record(sample_precision_fit());
  auto predictions = nlohmann::json::parse(old.predictions_json);
  REQUIRE(predictions.contains("comparisons"));
  predictions.erase("comparisons");
  old.predictions_json = predictions.dump();
  const StoredFit before = fp4::fit::from_record(old);
  CHECK(before.comparisons.empty());
  CHECK(before.gaps.size() == 1);
  CHECK(before.predictions.size() == 2);

  r.intervals_json = "{not json";
  CHECK_THROWS_WITH(fp4::fit::from_record(r), Catch::Contains("fits row 7") && Catch::Contains("intervals_json"));
  r.intervals_json = "{}";
  r.quality_json = R"({"objective": "small"})";
  CHECK_THROWS_WITH(fp4::fit::from_record(r), Catch::Contains("quality_json") && Catch::Contains("objective"));
}

TEST_CASE("stored fit: a version-2 store's fits gain predictions_json when migrated", "[fit][fit_stored]") {
  ScratchDir dir;
  const auto path = dir / "v2.db";
  fp4::test::write_old_store(path, 2,
                             "INSERT INTO fits (law, scope, input_hash, params_json, n_points, fp4lab_version, created) "
                             "VALUES ('chinchilla', 'bf16', 'h', '{\"E\": 2}', 3, '0.1.0', 1.0)");
  auto store = Store::open(path, Store::Mode::read_write);
  CHECK(store->schema_version() == Store::latest_schema_version());
  const auto fits = fp4::fit::read_all_fits(*store);
  REQUIRE(fits.size() == 1);
  CHECK(fits[0].point.E == 2);
  CHECK(fits[0].n_points == 3);
  CHECK(fits[0].predictions.empty());
  CHECK(store->fits()[0].predictions_json == "{}");
}

TEST_CASE("stored fit: every query in docs/fit.md runs and finds the stored values", "[fit][fit_stored]") {
  const std::string doc = fp4::test::slurp(std::filesystem::path(FP4LAB_SOURCE_DIR) / "docs/fit.md");
  const std::vector<std::string> blocks = fp4::test::sql_blocks(doc);
  REQUIRE(blocks.size() >= 1);
  ScratchDir dir;
  auto store = Store::open(dir / "s.db", Store::Mode::read_write);
  fp4::fit::insert_fit(*store, sample_precision_fit());
  sqlite3* db = store->handle();
  size_t statements = 0;
  for (const std::string& block : blocks)
    for (const auto& run : fp4::test::run_statements(db, block)) {
      ++statements;
      INFO("query: " << run.sql);
      CHECK(run.rows > 0);  // each query finds something in a store holding one precision fit
    }
  CHECK(statements == 5);
  // The rho query: bf16 and ufp4, with ufp4's rho_N interval [0.4, 0.8].
  CHECK(fp4::test::query_one(db, "SELECT json_extract(f.intervals_json, '$.params.rho.' || r.key || '.rho_N') "
                                 "FROM fits AS f, json_each(f.params_json, '$.rho') AS r WHERE r.key = 'ufp4'") ==
        "[0.4,0.8]");
}
