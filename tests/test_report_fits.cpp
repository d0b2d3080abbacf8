// test_report_fits.cpp — the fitted sections, from fits stored through fit/stored_fit.h in a
// hand-built store: each recipe's law and band in the loss-vs-N figure, the parameters with their
// intervals, the residuals, the held-out check, the fitted gap at each grid point (equal to
// fit::predicted_gap_interval), the predictions at the targets beside the paper's gap, the slope's
// reading, and the precision law's rho table and figure.
#include <catch2/catch.hpp>

#include "fit/stored_fit.h"
#include "reports/format.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;
using fp4::sweeps::RunState;
using fp4::test::HtmlDom;
using fp4::test::ScratchDir;

namespace {

fp4::fit::LawParameters law(double scale, bool precision) {
  fp4::fit::LawParameters p;
  p.E = 1.8 * scale;
  p.A = 400;
  p.B = 2000;
  p.alpha = 0.35;
  p.beta = 0.37;
  if (precision) {
    p.rho_n = {{"bf16", 1.0}, {"ufp4", 0.9 * scale}};
    p.rho_d = {{"bf16", 1.0}, {"ufp4", 0.95}};
  }
  return p;
}

// A fit as `fp4lab fit` stores it, with three bootstrap replicates around the point estimate.
fp4::fit::StoredFit make_fit(const std::string& law_name, const std::string& scope, double e_scale) {
  fp4::fit::StoredFit f;
  f.law = law_name;
  f.scope = scope;
  f.input_hash = "input-" + scope;
  const bool precision = law_name == "precision";
  f.options.recipes = {"bf16", "ufp4"};
  f.options.baseline = "bf16";
  f.options.bootstrap = 3;
  f.options.targets = {{1.5e9, 1e11}};
  f.options.data_hash = "one-call";
  f.point = law(e_scale, precision);
  f.replicates_asked = 3;
  for (int k = 0; k < 3; ++k) f.samples.push_back({k, law(e_scale * (0.99 + 0.01 * k), precision)});
  for (const char* name : {"E", "A", "B", "alpha", "beta"}) {
    fp4::fit::ParameterEstimate p;
    p.name = name;
    p.value = name == std::string("E") ? f.point.E : 1.0;
    p.ci = {p.value * 0.9, p.value * 1.1};
    f.parameters.push_back(p);
  }
  if (precision)
    for (const char* name : {"rho_N", "rho_D"}) {
      fp4::fit::ParameterEstimate p;
      p.name = name;
      p.recipe = "ufp4";
      p.value = name == std::string("rho_N") ? 0.9 : 0.95;
      p.ci = {p.value - 0.02, std::min(1.0, p.value + 0.02)};
      f.parameters.push_back(p);
    }
  f.objective = 1.25e-4;
  f.n_points = 6;
  f.optimizer.termination = "CONVERGENCE";
  f.residuals.push_back({"", "a run", scope == "joint" ? "ufp4" : scope, 1e5, 1e5, 3.0, 2.99, std::log(3.0 / 2.99)});
  f.held_out.done = true;
  f.held_out.held_out_n = 2e5;
  f.held_out.recipes.push_back({scope == "joint" ? "ufp4" : scope, {{"", "big run", 2e5, 1e5, 2.5, 2.51, 0.004}}, 0.004, 0.004});
  for (const std::string& recipe : {std::string("bf16"), std::string("ufp4")}) {
    if (!precision && recipe != scope) continue;
    fp4::fit::TargetPrediction t;
    t.target = {1.5e9, 1e11};
    t.recipe = recipe;
    t.loss = {2.1, {2.05, 2.15}};
    t.gap = recipe == "bf16" ? fp4::fit::Estimate{} : fp4::fit::Estimate{0.0061, {0.003, 0.009}};
    f.predictions.push_back(t);
  }
  if (precision || scope == "ufp4") {
    fp4::fit::RecipeGap g;
    g.recipe = "ufp4";
    g.baseline = "bf16";
    g.slope = {{-0.0004, {-0.0011, 0.0003}}, 3};
    f.gaps.push_back(g);
  }
  return f;
}

}  // namespace

TEST_CASE("report with stored fits: laws, bands, parameters, residuals, fitted and predicted gaps, rho",
          "[report][report_fits]") {
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "fitted");
  std::vector<fp4::sweeps::GridPoint> points;
  for (int64_t n : {50000, 100000, 200000})
    for (const char* recipe : {"bf16", "ufp4"})
      points.push_back(h.add(fmt::format("n{}-{}", n, recipe), recipe, fmt::format("m{}", n), n, 100000, 0,
                             fmt::format("m{}", n)));
  h.record();
  for (const auto& p : points) {
    const double final = 3.0 - 0.1 * std::log10(static_cast<double>(p.n_params_nonembedding)) + (p.baseline ? 0 : 0.01);
    h.train(p, [&](int64_t s) { return final + 0.01 * (10 - s) - 0.01; }, RunState::succeeded);
  }
  std::vector<fp4::fit::StoredFit> fits = {make_fit("chinchilla", "bf16", 1.0), make_fit("chinchilla", "ufp4", 1.003),
                                          make_fit("precision", "joint", 1.0)};
  for (auto& f : fits) f.id = fp4::fit::insert_fit(h.store(), f);
  h.close();

  const auto r = fp4::test::run_report("--store '" + h.store_path().string() + "' --out '" + (dir / "out").string() + "'",
                                       dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path out = dir / "out";
  const std::string html = fp4::test::slurp(out / "report.html");
  HtmlDom dom(html);
  const std::string text = dom.text();
  CHECK(text.find("No fits in the store.") == std::string::npos);
  // These fits name no runs (as a fit of --points rows does): drawn, with a note saying so.
  CHECK(text.find("Not a fit of the main grid: the chinchilla fit (ufp4) was made of 1 points, 1 of them not runs of "
                  "the main grid") != std::string::npos);
  for (const char* figure : {"loss-vs-n", "residuals", "precision-law"}) {
    INFO(figure);
    CHECK(html.find("<figure id=\"figure-" + std::string(figure) + "\">") != std::string::npos);
    std::string error;
    CHECK(fp4::test::xml_well_formed(fp4::test::slurp(out / "figures" / (std::string(figure) + ".svg")), &error));
    INFO(error);
  }
  // The band: gnuplot draws a filled polygon for each recipe's 95% band (fill-opacity).
  CHECK(fp4::test::slurp(out / "figures" / "loss-vs-n.svg").find("fill-opacity") != std::string::npos);
  // The law's curve data equal the API's band at each N.
  const auto curves = fp4::test::read_csv(fp4::test::slurp(out / "fitted_curves.csv"));
  REQUIRE(curves.size() > 2 * 49);
  for (size_t i = 1; i < curves.size(); i += 17) {
    const auto& row = curves[i];
    const auto& f = row[0] == "precision" ? fits[2] : row[2] == "bf16" ? fits[0] : fits[1];
    const auto e = fp4::fit::predicted_loss_interval(f, row[2], std::strtod(row[4].c_str(), nullptr),
                                                     std::strtod(row[3].c_str(), nullptr));
    CHECK(std::strtod(row[5].c_str(), nullptr) == e.value);
    CHECK(std::strtod(row[6].c_str(), nullptr) == e.ci.lo);
    CHECK(std::strtod(row[7].c_str(), nullptr) == e.ci.hi);
  }

  const auto tables = dom.tables();
  auto table = [&](const std::string& prefix) -> const HtmlDom::TableData& {
    for (const auto& t : tables)
      if (t.caption.rfind(prefix, 0) == 0) return t;
    FAIL("no table " << prefix);
    return tables.front();
  };
  // Parameters with intervals: every fit, E as stored.
  const auto& params = table("Fitted parameters");
  REQUIRE(params.rows.size() == 3);
  CHECK(params.rows[0][3] == fp4::reports::fmt_number(1.8, 4) + " [" + fp4::reports::fmt_number(1.8 * 0.9, 4) + ", " +
                                 fp4::reports::fmt_number(1.8 * 1.1, 4) + "]");
  CHECK(params.rows[2][0] == "precision");
  CHECK(params.rows[2][10] == "3 of 3");
  const auto fits_csv = fp4::test::read_csv(fp4::test::slurp(out / "fits.csv"));
  int e_rows = 0, rho_rows = 0;
  for (const auto& row : fits_csv) {
    if (row[3] == "E") {
      ++e_rows;
      const double e = row[2] == "ufp4" ? 1.8 * 1.003 : 1.8;
      CHECK(std::strtod(row[5].c_str(), nullptr) == e);
      CHECK(std::strtod(row[6].c_str(), nullptr) == e * 0.9);
      CHECK(std::strtod(row[7].c_str(), nullptr) == e * 1.1);
    }
    if (row[3] == "rho_N" && row[4] == "ufp4") ++rho_rows;
  }
  CHECK(e_rows == 3);
  CHECK(rho_rows == 1);
  // The fitted gap at each grid point is the precision law's, with its interval.
  const auto& gaps = table("Observed gap");
  REQUIRE(gaps.rows.size() == 3);
  CHECK(gaps.caption.find("the precision law") != std::string::npos);
  for (const auto& row : gaps.rows) {
    const double n = row[2] == "50k" ? 5e4 : row[2] == "100k" ? 1e5 : 2e5;
    const auto e = fp4::fit::predicted_gap_interval(fits[2], "ufp4", n, 1e5);
    INFO(row[2]);
    CHECK(row[11] == fp4::reports::fmt_percent(e.value) + " [" + fp4::reports::fmt_percent(e.ci.lo) + ", " +
                         fp4::reports::fmt_percent(e.ci.hi) + "]");
  }
  // Predictions at the target, with the paper's Dense 1.5B gap for ufp4 beside ours.
  const auto& pred = table("Extrapolated loss and gap");
  bool ufp4_target = false;
  for (const auto& row : pred.rows)
    if (row[0] == "precision" && row[1] == "ufp4") {
      ufp4_target = true;
      CHECK(row[2] == "1.5B");
      CHECK(row[3] == "100B");
      CHECK(row[5] == "+0.610% [+0.300%, +0.900%]");
      CHECK(row[6] == "0.9673% (Dense 1.5B)");
    }
  CHECK(ufp4_target);
  // The slope's interval straddles 0: no trend.
  const auto& slope = table("Change of the gap per tenfold compute");
  REQUIRE(slope.rows.size() == 1);
  CHECK(slope.rows[0][1] == "-0.040% [-0.110%, +0.030%]");
  CHECK(slope.rows[0][3] == "no trend distinguishable from zero");
  // Held-out check and the precision law's multipliers.
  const auto& held = table("Held-out check");
  CHECK(held.rows.size() == 3);
  const auto& rho = table("Effective-parameter and effective-data multipliers");
  bool ufp4_rho = false;
  for (const auto& row : rho.rows)
    if (row[0] == "ufp4") {
      ufp4_rho = true;
      CHECK(row[1] == "0.9 [0.88, 0.92]");
      CHECK(row[2] == "0.95 [0.93, 0.97]");
    }
  CHECK(ufp4_rho);
}

TEST_CASE("report after fp4lab fit on a real tiny study shows the stored fits' own numbers", "[report][report_fits]") {
  // 3 widths × 3 lengths × bf16, ufp4: the fewest runs both laws accept. The fits of such tiny runs
  // are poorly determined; the test checks that the report shows what the fitter stored, whatever it is.
  ScratchDir dir;
  fp4::test::spit(dir / "fit.toml",
                  "[sweep]\nname = \"tinyfit\"\n"
                  "[data]\nsource = \"synthetic:markov?order=1&vocab=64&branch=4&seed=1\"\n"
                  "[model]\nseq_len = 32\n[train]\nbatch_tokens = 128\nmicro_batch = 2\nlr = 3e-3\n"
                  "[eval]\nevery = 100\ntokens = 128\n[checkpoint]\nevery = 100\n"
                  "[executor]\ncpu_jobs = 2\nthreads_per_job = 1\n[fit]\nbootstrap = 20\n"
                  "[grid]\nmodel = [{n_layers = 1, d_model = 64}, {n_layers = 2, d_model = 64}, {n_layers = 3, d_model = 64}]\n"
                  "tokens = [256, 384, 512]\nrecipe = [\"bf16\", \"ufp4\"]\nseed = [0]\n");
  const std::string toml = "'" + (dir / "fit.toml").string() + "'";
  auto run = fp4::test::run_fp4lab("sweep run --plain " + toml, dir.path());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  run = fp4::test::run_fp4lab("fit --plain " + toml, dir.path());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto r = fp4::test::run_report(toml, dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path out = dir / "tinyfit-report";
  HtmlDom dom(fp4::test::slurp(out / "report.html"));
  CHECK(dom.text().find("Not a fit of the main grid") == std::string::npos);  // fp4lab fit fitted exactly these runs

  auto store = fp4::sweeps::Store::open(dir / "tinyfit.db", fp4::sweeps::Store::Mode::read_only);
  const auto fits = fp4::fit::read_fits(*store);
  REQUIRE(fits.size() == 3);  // chinchilla bf16, chinchilla ufp4, precision joint
  const auto tables = dom.tables();
  auto table = [&](const std::string& prefix) -> const HtmlDom::TableData& {
    for (const auto& t : tables)
      if (t.caption.rfind(prefix, 0) == 0) return t;
    FAIL("no table " << prefix);
    return tables.front();
  };
  // The parameters: each fit's E with its interval, its points and replicates, as stored.
  const auto& params = table("Fitted parameters");
  REQUIRE(params.rows.size() == fits.size());
  for (const auto& f : fits) {
    INFO(f.law << " " << f.scope);
    bool shown = false;
    const auto e = f.parameter("E");
    REQUIRE(e.has_value());
    std::string cell = fp4::reports::fmt_number(e->value, 4);
    if (e->ci.known())
      cell += " [" + fp4::reports::fmt_number(e->ci.lo, 4) + ", " + fp4::reports::fmt_number(e->ci.hi, 4) + "]";
    for (const auto& row : params.rows)
      if (row[0] == f.law && row[1] == f.scope) {
        shown = true;
        CHECK(row[2] == std::to_string(f.n_points));
        CHECK(row[3] == cell);
        CHECK(row[10] == fmt::format("{} of {}", f.samples.size(), f.replicates_asked));
      }
    CHECK(shown);
  }
  // The fitted gap at each grid point is the precision fit's, as the API computes it.
  const fp4::fit::StoredFit* precision = nullptr;
  for (const auto& f : fits)
    if (f.law == "precision") precision = &f;
  REQUIRE(precision != nullptr);
  const auto& gaps = table("Observed gap");
  REQUIRE(gaps.rows.size() == 9);
  for (const auto& run_record : store->runs()) {
    if (run_record.recipe != "ufp4") continue;
    const auto e = fp4::fit::predicted_gap_interval(*precision, "ufp4", static_cast<double>(run_record.n_params_nonembedding),
                                                    static_cast<double>(run_record.tokens));
    std::string cell = fp4::reports::fmt_percent(e.value);
    if (e.ci.known()) cell += " [" + fp4::reports::fmt_percent(e.ci.lo) + ", " + fp4::reports::fmt_percent(e.ci.hi) + "]";
    bool found = false;
    for (const auto& row : gaps.rows)
      found = found || (row[2] == fp4::reports::fmt_count(static_cast<double>(run_record.n_params_nonembedding)) &&
                        row[3] == fp4::reports::fmt_count(static_cast<double>(run_record.tokens)) && row[11] == cell);
    INFO(run_record.name << " " << cell);
    CHECK(found);
  }
  // Every stored prediction at the target is listed; the residuals figure and CSV hold every fitted point.
  size_t predictions = 0, residuals = 0;
  for (const auto& f : fits) {
    predictions += f.predictions.size();
    residuals += f.residuals.size();
  }
  CHECK(table("Extrapolated loss and gap").rows.size() == predictions);
  CHECK(fp4::test::read_csv(fp4::test::slurp(out / "residuals.csv")).size() == residuals + 1);
  for (const char* figure : {"loss-vs-n", "residuals", "precision-law"}) {
    std::string error;
    INFO(figure);
    CHECK(fp4::test::xml_well_formed(fp4::test::slurp(out / "figures" / (std::string(figure) + ".svg")), &error));
    INFO(error);
  }
}
