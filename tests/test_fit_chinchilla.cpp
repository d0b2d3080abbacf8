// test_fit_chinchilla.cpp — the chinchilla law against Epoch AI's replication of Hoffmann et al.'s
// Approach 3 (SCIENCE.md "Validation"; tests/data/README.md says where the points come from): the
// fit of the 240 points must land within 0.1% of Epoch's summed Huber objective, within 0.005 of
// their α and β, and within 2% of their A, B and E. Also: the start grid is SCIENCE.md's, and a fit
// is the same bits for any thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "fit/fit_data.h"
#include "fit/fitter.h"
#include "fit/stored_fit.h"
#include "store/store.h"
#include "tests/fit_test_helpers.h"

using fp4::fit::FitRequest;
using fp4::fit::Law;
using fp4::fit::StoredFit;

namespace {

const std::filesystem::path kEpochPoints = std::filesystem::path(FP4LAB_SOURCE_DIR) / "tests/data/chinchilla_epoch.csv";

// Epoch AI's grid fit (data_analysis.ipynb cell 18; SCIENCE.md "Validation").
constexpr double kEpochE = 1.817, kEpochA = 478, kEpochB = 2.14e3, kEpochAlpha = 0.347, kEpochBeta = 0.367;
constexpr double kEpochObjective = 1.0183e-3;

StoredFit fit_epoch(int threads, int64_t bootstrap) {
  const fp4::fit::FitData data = fp4::fit::load_csv_data(kEpochPoints);
  FitRequest request;
  request.laws = {Law::chinchilla};
  request.bootstrap = bootstrap;
  request.held_out = false;
  request.threads = threads;
  const auto plan = fp4::fit::plan_fits(data, request);
  auto fits = fp4::fit::run_fits(data, request, plan);
  REQUIRE(fits.size() == 1);
  return fits[0];
}

}  // namespace

TEST_CASE("fit chinchilla: the start grid is SCIENCE.md's 4,500 points, a slowest and beta fastest", "[fit]") {
  const auto g = fp4::fit::StartGrid::hoffmann();
  CHECK(g.size() == 4500);
  CHECK(g.start(0) == std::vector<double>{0, 0, -1, 0, 0});
  CHECK(g.start(1) == std::vector<double>{0, 0, -1, 0, 0.5});
  CHECK(g.start(4499) == std::vector<double>{25, 25, 1, 2, 2});
  CHECK(g.start(750) == std::vector<double>{5, 0, -1, 0, 0});  // 6·5·5·5 starts per value of a
}

TEST_CASE("fit chinchilla: Epoch AI's 240 Chinchilla points give Epoch's Approach 3 fit", "[fit][fit_chinchilla]") {
  const fp4::fit::FitData data = fp4::fit::load_csv_data(kEpochPoints);
  REQUIRE(data.points.size() == 240);
  const StoredFit f = fit_epoch(0, 0);
  const auto& p = f.point;
  INFO("E " << p.E << " A " << p.A << " B " << p.B << " alpha " << p.alpha << " beta " << p.beta << " objective "
            << f.objective);
  CHECK(std::fabs(f.objective / kEpochObjective - 1) < 1e-3);
  CHECK(std::fabs(p.alpha - kEpochAlpha) < 0.005);
  CHECK(std::fabs(p.beta - kEpochBeta) < 0.005);
  CHECK(std::fabs(p.A / kEpochA - 1) < 0.02);
  CHECK(std::fabs(p.B / kEpochB - 1) < 0.02);
  CHECK(std::fabs(p.E / kEpochE - 1) < 0.02);
  CHECK(f.optimizer.starts_tried == 4500);
  CHECK(f.n_points == 240);
  CHECK(f.residuals.size() == 240);
  CHECK(f.parameter("a")->value == Approx(p.beta / (p.alpha + p.beta)));
}

TEST_CASE("fit chinchilla: the same bits on one thread and on two, bootstrap included", "[fit][fit_chinchilla]") {
  // A subset keeps this quick: every fourth point (60), a coarse grid, 20 replicates.
  const fp4::fit::FitData all = fp4::fit::load_csv_data(kEpochPoints);
  fp4::fit::FitData data = all;
  data.points.clear();
  for (size_t i = 0; i < all.points.size(); i += 4) data.points.push_back(all.points[i]);
  FitRequest request;
  request.laws = {Law::chinchilla};
  request.bootstrap = 20;
  request.grid.a = {0, 10, 20};
  request.grid.b = {0, 10, 20};
  request.grid.e = {0};
  request.grid.alpha = {0.5};
  request.grid.beta = {0.5};
  const auto [one, two] = fp4::test::fit_on_one_and_two_threads(data, request, fp4::fit::plan_fits(data, request));
  auto a = fp4::fit::to_record(one), b = fp4::fit::to_record(two);
  CHECK(a.params_json == b.params_json);
  CHECK(a.intervals_json == b.intervals_json);
  CHECK(a.quality_json == b.quality_json);
  CHECK(a.predictions_json == b.predictions_json);
  CHECK(one.samples.size() == 20);
  CHECK(one.held_out.done);
}
