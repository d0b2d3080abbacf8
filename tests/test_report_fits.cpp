// test_report_fits.cpp — the fitted sections, from fits stored through fit/stored_fit.h in a
// hand-built store: each recipe's law and band in the loss-vs-N figure, the parameters with their
// intervals, the residuals, the held-out check, the fitted gap at each grid point (equal to
// fit::predicted_gap_interval), the predictions at the targets beside the paper's gap, the slope's
// reading, and the precision law's rho table and figure.
#include <catch2/catch.hpp>

#include <functional>
#include <initializer_list>

#include "engine/data/synthetic_spec.h"
#include "fit/guardrails.h"
#include "fit/stored_fit.h"
#include "reports/format.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;
using fp4::store::RunState;
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

// The table whose caption starts with `prefix`; the test case fails when there is none.
const HtmlDom::TableData& table_named(const std::vector<HtmlDom::TableData>& tables, const std::string& prefix) {
  const HtmlDom::TableData* t = fp4::test::table_with_caption(tables, prefix);
  if (t == nullptr) FAIL("no table " << prefix);
  return *t;
}

// Runs of three sizes (50k, 100k, 200k parameters, 100k tokens) by `recipes`, recorded and trained:
// run p's loss at step s is loss(p, s).
std::vector<fp4::sweeps::GridPoint> trained_points(
    fp4::test::HandStudy& h, std::initializer_list<const char*> recipes,
    const std::function<double(const fp4::sweeps::GridPoint&, int64_t)>& loss) {
  std::vector<fp4::sweeps::GridPoint> points;
  for (int64_t n : {50000, 100000, 200000})
    for (const char* recipe : recipes)
      points.push_back(h.add(fmt::format("n{}-{}", n, recipe), recipe, fmt::format("m{}", n), n, 100000, 0,
                             fmt::format("m{}", n)));
  h.record();
  for (const auto& p : points) h.train(p, [&](int64_t s) { return loss(p, s); }, RunState::succeeded);
  return points;
}

// Nine runs, three sizes by bf16, e2m1 and ufp4, all trained to a final loss of 3.0.
std::vector<fp4::sweeps::GridPoint> nine_trained_points(fp4::test::HandStudy& h) {
  return trained_points(h, {"bf16", "e2m1", "ufp4"}, [](const auto&, int64_t s) { return 3.0 + 0.01 * (10 - s); });
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
  trained_points(h, {"bf16", "ufp4"}, [](const fp4::sweeps::GridPoint& p, int64_t s) {
    const double final = 3.0 - 0.1 * std::log10(static_cast<double>(p.n_params_nonembedding)) + (p.baseline ? 0 : 0.01);
    return final + 0.01 * (10 - s) - 0.01;
  });
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
  auto table = [&](const std::string& prefix) -> const HtmlDom::TableData& { return table_named(tables, prefix); };
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
  // 3 widths × 3 lengths × bf16, e2m1, ufp4: the fewest runs both laws accept, with two 4-bit recipes
  // to compare. The fits of such tiny runs are poorly determined; the test checks that the report
  // shows what the fitter stored, whatever it is.
  ScratchDir dir;
  fp4::test::spit(dir / "fit.toml",
                  "[sweep]\nname = \"tinyfit\"\n"
                  "[data]\nsource = \"synthetic:markov?order=1&vocab=64&branch=4&seed=1\"\n"
                  "[model]\nseq_len = 32\n[train]\nbatch_tokens = 128\nmicro_batch = 2\nlr = 3e-3\n"
                  "[eval]\nevery = 100\ntokens = 128\n[checkpoint]\nevery = 100\n"
                  "[executor]\ncpu_jobs = 2\nthreads_per_job = 1\n[fit]\nbootstrap = 20\n"
                  "[grid]\nmodel = [{n_layers = 1, d_model = 64}, {n_layers = 2, d_model = 64}, {n_layers = 3, d_model = 64}]\n"
                  "tokens = [256, 384, 512]\nrecipe = [\"bf16\", \"e2m1\", \"ufp4\"]\nseed = [0]\n");
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

  auto store = fp4::store::Store::open(dir / "tinyfit.db", fp4::store::Store::Mode::read_only);
  const auto fits = fp4::fit::read_fits(*store);
  REQUIRE(fits.size() == 4);  // chinchilla bf16, e2m1, ufp4, precision joint
  const auto tables = dom.tables();
  auto table = [&](const std::string& prefix) -> const HtmlDom::TableData& { return table_named(tables, prefix); };
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
  // Each fit's E beside the source's true entropy rate (the engine's, as fp4lab data entropy prints it).
  const double rate =
      fp4::data::MarkovChain(fp4::data::parse_synthetic_spec("synthetic:markov?order=1&vocab=64&branch=4&seed=1")).entropies().rate;
  const auto& floor = table("Irreducible loss E against the source's true entropy rate");
  REQUIRE(floor.rows.size() == fits.size());
  for (const auto& f : fits) {
    INFO(f.law << " " << f.scope);
    const double e = f.parameter("E")->value;
    int shown = 0;
    for (const auto& row : floor.rows)
      if (row[0] == f.law && row[1] == f.scope) {
        ++shown;
        CHECK(row[3] == fp4::reports::fmt_number(rate, 5));
        CHECK(row[4] == fp4::reports::fmt_number(e - rate, 3));
      }
    CHECK(shown == 1);
  }
  CHECK(dom.text().find("whose true entropy rate is " + fp4::reports::fmt_number(rate, 5)) != std::string::npos);

  // The fitted gap at each grid point is the precision fit's, as the API computes it.
  const fp4::fit::StoredFit* precision = nullptr;
  for (const auto& f : fits)
    if (f.law == "precision") precision = &f;
  REQUIRE(precision != nullptr);
  const auto& gaps = table("Observed gap");
  REQUIRE(gaps.rows.size() == 18);
  for (const auto& run_record : store->runs()) {
    if (run_record.baseline) continue;
    const auto e = fp4::fit::predicted_gap_interval(*precision, run_record.recipe, static_cast<double>(run_record.n_params_nonembedding),
                                                    static_cast<double>(run_record.tokens));
    std::string cell = fp4::reports::fmt_percent(e.value);
    if (e.ci.known()) cell += " [" + fp4::reports::fmt_percent(e.ci.lo) + ", " + fp4::reports::fmt_percent(e.ci.hi) + "]";
    bool found = false;
    for (const auto& row : gaps.rows)
      found = found || (row[0] == run_record.recipe && row[2] == fp4::reports::fmt_count(static_cast<double>(run_record.n_params_nonembedding)) &&
                        row[3] == fp4::reports::fmt_count(static_cast<double>(run_record.tokens)) && row[11] == cell);
    INFO(run_record.name << " " << cell);
    CHECK(found);
  }
  // Recipe against recipe: the seed-paired tests supersede the fit's observed d (one seed per
  // point here), so only the law's d is shown, at the target and at every grid point, and the CSV
  // sidecar holds every number exactly as stored.
  REQUIRE(precision->comparisons.size() == 1);
  const auto& c = precision->comparisons[0];
  CHECK(c.recipe == "ufp4");
  CHECK(c.against == "e2m1");
  REQUIRE(c.observed.points == 9);
  // No [compare] table: the report says that no test was declared, and what the default family is
  // tested on (one seed a point here: no test, the family's line says so).
  CHECK(dom.text().find("Declared tests: none. Every family below is one of fp4lab's defaults") !=
        std::string::npos);
  CHECK(dom.text().find("Family “ufp4 - e2m1”: a default family, declared nowhere; tested on final_eval and train_tail "
                        "(every metric, the default). Holm sets: on final eval: no test") != std::string::npos);
  for (const auto& t : tables) {
    INFO(t.caption);
    CHECK(t.caption.rfind("Paired difference of gaps", 0) != 0);
    CHECK(t.caption.rfind("The same per model size", 0) != 0);
    CHECK(t.caption.rfind("Per grid point", 0) != 0);
  }
  auto pp = [](double v) { return fmt::format("{:+.3f} pp", 100 * v); };
  auto pp_estimate = [&](const fp4::fit::Estimate& e) {
    return e.ci.known() ? pp(e.value) + " [" + pp(e.ci.lo) + ", " + pp(e.ci.hi) + "]" : pp(e.value);
  };
  const auto& law = table("The precision law's d");
  REQUIRE(c.targets.size() == 1);
  REQUIRE(law.rows.size() == 1 + c.fitted.size());
  CHECK(law.rows[0][0] == "ufp4 − e2m1");
  CHECK(law.rows[0][1].rfind("target", 0) == 0);
  CHECK(law.rows[0][2] == "1.5B");
  // A law the guardrails flag unidentified shows no target d (fit/guardrails.h); this tiny grid's
  // may be either.
  CHECK(law.rows[0][4] == (fp4::fit::unidentified(*precision) ? "withheld: the law is not identified (Guardrails)"
                                                               : pp_estimate(c.targets[0].gap)));
  for (size_t i = 0; i < c.fitted.size(); ++i) {
    INFO(i);
    CHECK(law.rows[1 + i][1] == "grid point");
    CHECK(law.rows[1 + i][2] == fp4::reports::fmt_count(c.fitted[i].n));
    CHECK(law.rows[1 + i][3] == fp4::reports::fmt_count(c.fitted[i].d));
    CHECK(law.rows[1 + i][4] == pp_estimate(c.fitted[i].gap));
  }
  // The predicted d is the difference of the two printed predicted gaps (docs/fit.md).
  const auto d = fp4::fit::predicted_gap_difference_interval(*precision, "ufp4", "e2m1", 1.5e9, 1e11);
  CHECK(d.value == c.targets[0].gap.value);
  // The fit's observed d per grid point is the paired difference of the two recipes' bf16_gap rows.
  for (const auto& p : c.observed_points) {
    double gap_a = std::nan(""), gap_b = std::nan("");
    for (const auto& g : precision->gaps)
      for (const auto& o : g.observed)
        if (o.n == p.n && o.d == p.d) (g.recipe == "ufp4" ? gap_a : gap_b) = o.mean;
    CHECK(p.mean == Approx(gap_a - gap_b).margin(1e-15));
  }
  const auto cmp_csv = fp4::test::read_csv(fp4::test::slurp(out / "comparisons.csv"));
  REQUIRE(cmp_csv.size() == 1 + 1 + 9);  // header, target, fitted
  for (size_t i = 1; i < cmp_csv.size(); ++i) {
    const auto& row = cmp_csv[i];
    CHECK(row[0] == std::to_string(precision->id));
    if (row[4] == "target") {
      // Withheld for a law flagged unidentified: empty, the reason in the note.
      if (fp4::fit::unidentified(*precision)) {
        CHECK(row[7].empty());
        CHECK(row[10] == "withheld: the law is flagged unidentified");
      } else {
        CHECK(std::strtod(row[7].c_str(), nullptr) == c.targets[0].gap.value);
        CHECK(row[10].empty());
      }
    }
    if (row[4] == "fitted")
      for (const auto& g : c.fitted)
        if (std::strtod(row[5].c_str(), nullptr) == g.n && std::strtod(row[6].c_str(), nullptr) == g.d)
          CHECK(std::strtod(row[7].c_str(), nullptr) == g.gap.value);
  }
  // Every fit shown is the main grid's, fp4lab fit's own.
  const auto& shown = table("The stored fits this report shows");
  REQUIRE(shown.rows.size() == fits.size());
  for (const auto& row : shown.rows) {
    CHECK(row[3] == "tinyfit");
    CHECK(row[8] == "the main grid's fit (fp4lab fit STUDY.toml)");
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

namespace {

// A precision fit of the hand study's runs `ids` as `fp4lab fit` of grid `grid` stores it, with one
// recipe comparison (ufp4 − e2m1) whose numbers are set by `k` so that fits can be told apart.
fp4::fit::StoredFit grid_fit(const std::string& grid, double k, const std::vector<fp4::sweeps::GridPoint>& points,
                             double created) {
  fp4::fit::StoredFit f = make_fit("precision", "joint", 1.0 + 0.01 * k);
  f.input_hash = fmt::format("{:064x}", static_cast<uint64_t>(1000 + k));
  f.options.grid = grid;
  f.options.source = "store";
  f.options.recipes = {"bf16", "e2m1", "ufp4"};
  f.created = created;
  f.fp4lab_version = "0.1.0";
  f.residuals.clear();
  for (const auto& p : points)
    f.residuals.push_back({p.id, p.name, p.recipe_label, static_cast<double>(p.n_params_nonembedding),
                           static_cast<double>(p.tokens), 3.0, 3.0, 0.0});
  f.n_points = static_cast<int64_t>(f.residuals.size());
  // The law knows e2m1 too (it is drawn), a little worse than ufp4.
  f.point.rho_n["e2m1"] = 0.85;
  f.point.rho_d["e2m1"] = 0.9;
  for (auto& sample : f.samples) {
    sample.params.rho_n["e2m1"] = 0.85;
    sample.params.rho_d["e2m1"] = 0.9;
  }
  fp4::fit::RecipeComparison c;
  c.recipe = "ufp4";
  c.against = "e2m1";
  c.baseline = "bf16";
  c.observed = {std::nan(""), 3, 2, -0.0024 - 0.001 * k, 0.0021, {-0.0076 - 0.001 * k, 0.0028 - 0.001 * k}};
  for (int64_t n : {50000, 100000, 200000}) {
    const double dn = static_cast<double>(n);
    c.observed_by_n.push_back({dn, 1, n == 50000 ? 0 : 1, -1e-3 * static_cast<double>(n / 50000) - 0.001 * k,
                               std::nan(""), {}});
    fp4::fit::ObservedGap g;
    g.n = dn;
    g.d = 1e5;
    g.seeds = 1;
    g.mean = g.min = g.max = -1e-3 * static_cast<double>(n / 50000) - 0.001 * k;
    c.observed_points.push_back(g);
    c.fitted.push_back({dn, 1e5, {-0.0015 - 0.001 * k, {-0.003, 0.0002}}});
  }
  c.targets.push_back({1.5e9, 1e11, {-0.0011 - 0.001 * k, {-0.0025, 0.0002}}});
  c.slope = {{0.0001 + 0.001 * k, {-0.0006, 0.0009}}, 3};
  f.comparisons.push_back(c);
  return f;
}

}  // namespace

TEST_CASE("report of a store with fits of several grids shows the main grid's fits and names them",
          "[report][report_fits]") {
  // One store that several TOMLs wrote (as results/first-study/'s four do): the main grid's precision
  // fit, then later fits of the same law over the same runs chosen by other grids (a noise-floor
  // TOML's name, and fp4lab fit --store's ""), and a chinchilla fit of bf16 that only another grid made.
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "fitted");
  const auto points = nine_trained_points(h);
  auto main_fit = grid_fit("fitted", 0, points, 1764640000);      // 2025-12-02 01:46 UTC
  // Fitted while one run had not run yet (it has since): the report says the fit is older than the runs.
  main_fit.residuals.pop_back();
  main_fit.n_points = static_cast<int64_t>(main_fit.residuals.size());
  main_fit.excluded.push_back({points.back().id, points.back().name, "ufp4", "", "not in the store: not run yet"});
  auto noise_fit = grid_fit("fitted-noise", 1, points, 1764650000);
  auto store_fit = grid_fit("", 2, points, 1764660000);
  auto bf16_fit = make_fit("chinchilla", "bf16", 1.0);
  bf16_fit.options.grid = "fitted-noise";
  bf16_fit.options.source = "store";
  bf16_fit.residuals.clear();
  for (const auto& p : points)
    if (p.baseline)
      bf16_fit.residuals.push_back({p.id, p.name, "bf16", static_cast<double>(p.n_params_nonembedding), 1e5, 3.0, 3.0, 0.0});
  for (auto* f : {&main_fit, &noise_fit, &store_fit, &bf16_fit}) f->id = fp4::fit::insert_fit(h.store(), *f);
  h.close();

  const fs::path out = dir / "out";
  const auto r = fp4::test::run_report("--store '" + h.store_path().string() + "' --out '" + out.string() + "'", dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string html = fp4::test::slurp(out / "report.html");
  const std::string md = fp4::test::slurp(out / "report.md");
  HtmlDom dom(html);
  const auto tables = dom.tables();
  auto table = [&](const std::string& prefix) -> const HtmlDom::TableData& { return table_named(tables, prefix); };

  // The parameters are the main grid's fit's (E = 1.8), not the later ones' (1.818, 1.836).
  const auto& params = table("Fitted parameters");
  REQUIRE(params.rows.size() == 2);
  for (const auto& row : params.rows)
    if (row[0] == "precision") CHECK(row[3].rfind(fp4::reports::fmt_number(1.8, 4) + " [", 0) == 0);
  // Which fits are shown: id, grid, input hash, date, why, how many were passed over.
  const auto& shown = table("The stored fits this report shows");
  REQUIRE(shown.rows.size() == 2);
  for (const auto& row : shown.rows) {
    INFO(row[1]);
    if (row[1] == "precision") {
      CHECK(row[0] == std::to_string(main_fit.id));
      CHECK(row[3] == "fitted");
      CHECK(row[5] == main_fit.input_hash.substr(0, 16));
      CHECK(row[6] == fp4::reports::fmt_utc(main_fit.created));
      CHECK(row[6] == "2025-12-02 01:46 UTC");
      CHECK(row[8] == "the main grid's fit (fp4lab fit STUDY.toml)");
      CHECK(row[9] == "2 others");
    } else {
      CHECK(row[0] == std::to_string(bf16_fit.id));
      CHECK(row[3] == "fitted-noise");
      CHECK(row[8].rfind("of the main grid's runs only", 0) == 0);
      CHECK(row[9] == "0");
    }
  }
  const auto shown_csv = fp4::test::read_csv(fp4::test::slurp(out / "fits_shown.csv"));
  REQUIRE(shown_csv.size() == 3);
  CHECK(shown_csv[0][0] == "fit_id");
  bool precision_row = false;
  for (const auto& row : shown_csv)
    if (row[1] == "precision") {
      precision_row = true;
      CHECK(row[0] == std::to_string(main_fit.id));
      CHECK(row[3] == "fitted");
      CHECK(row[6] == main_fit.input_hash);
      CHECK(std::strtod(row[8].c_str(), nullptr) == main_fit.created);
    }
  CHECK(precision_row);
  // Neither fit is foreign: no note says so.
  CHECK(dom.text().find("Not a fit of the main grid") == std::string::npos);
  CHECK(dom.text().find(fmt::format("Older than the runs: the precision fit (joint), fit {}, left out 1 run of the main "
                                    "grid that had not finished then and has succeeded since; fp4lab fit STUDY.toml "
                                    "fits them too.",
                                    main_fit.id)) != std::string::npos);

  // Recipe against recipe: the main grid's fit's stored comparison (the law's d), in HTML, Markdown
  // and CSV.
  const auto& law = table("The precision law's d");
  REQUIRE(law.rows.size() == 4);
  const auto& c = main_fit.comparisons[0];
  CHECK(law.rows[0] == std::vector<std::string>{"ufp4 − e2m1", "target (extrapolation of the functional form)", "1.5B",
                                                "100B", "-0.110 pp [-0.250 pp, +0.020 pp]"});
  CHECK(law.rows[1] == std::vector<std::string>{"ufp4 − e2m1", "grid point", "50k", "100k",
                                                "-0.150 pp [-0.300 pp, +0.020 pp]"});
  CHECK(md.find("# Recipe against recipe\n") != std::string::npos);
  CHECK(md.find("| ufp4 − e2m1 | grid point | 50k | 100k | \\-0.150 pp \\[-0.300 pp, +0.020 pp\\] |") !=
        std::string::npos);
  const auto rows = fp4::test::read_csv(fp4::test::slurp(out / "comparisons.csv"));
  REQUIRE(!rows.empty());
  CHECK(rows[0] == std::vector<std::string>{"fit_id", "recipe", "against", "baseline", "kind", "n", "d", "value", "lo",
                                            "hi", "note"});
  std::map<std::string, int> kinds;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& row = rows[i];
    ++kinds[row[4]];
    CHECK(row[0] == std::to_string(main_fit.id));
    CHECK(row[1] == "ufp4");
    CHECK(row[2] == "e2m1");
    const double value = std::strtod(row[7].c_str(), nullptr);
    if (row[4] == "target") {
      CHECK(value == c.targets[0].gap.value);  // %.17g round-trips
      CHECK(std::strtod(row[5].c_str(), nullptr) == 1.5e9);
      CHECK(std::strtod(row[8].c_str(), nullptr) == c.targets[0].gap.ci.lo);
      CHECK(std::strtod(row[9].c_str(), nullptr) == c.targets[0].gap.ci.hi);
    }
  }
  CHECK(kinds == std::map<std::string, int>{{"fitted", 3}, {"target", 1}});
  // Every sidecar written is documented (docs/report.md, "The data files").
  CHECK(fp4::test::documented_csv_files().size() >= 18);
  CHECK(fp4::test::undocumented_csv_files(out).empty());
}

TEST_CASE("report notes a fit that names the main grid whose TOML has changed since, chosen by rank over a later fit",
          "[report][report_fits]") {
  // The main grid's precision fit was made before its TOML was edited: one run it fitted (a size the
  // edit dropped) is no longer one of the main grid's. A later precision fit of another grid's runs
  // ranks below it (rank 4 against rank 3), so the report shows the older fit, and says why in a note.
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "fitted");
  const auto points = nine_trained_points(h);
  auto changed_fit = grid_fit("fitted", 0, points, 1764640000);
  changed_fit.residuals.push_back({"id-dropped-by-the-edit", "n400000-ufp4", "ufp4", 4e5, 1e5, 2.9, 2.9, 0.0});
  changed_fit.n_points = static_cast<int64_t>(changed_fit.residuals.size());
  // The later fit: the ablation grid's runs, none of them the main grid's.
  auto other_fit = grid_fit("fitted-ablation", 1, points, 1764650000);
  for (auto& r : other_fit.residuals) r.run_id = "ablation-" + r.run_id;
  for (auto* f : {&changed_fit, &other_fit}) f->id = fp4::fit::insert_fit(h.store(), *f);
  REQUIRE(other_fit.id > changed_fit.id);
  h.close();

  const fs::path out = dir / "out";
  const auto r = fp4::test::run_report("--store '" + h.store_path().string() + "' --out '" + out.string() + "'", dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  HtmlDom dom(fp4::test::slurp(out / "report.html"));
  const std::string text = dom.text();
  const auto tables = dom.tables();
  auto table = [&](const std::string& prefix) -> const HtmlDom::TableData& { return table_named(tables, prefix); };
  // The older fit is shown (E = 1.8, not the later fit's 1.818) and named with its reason.
  const auto& params = table("Fitted parameters");
  REQUIRE(params.rows.size() == 1);
  CHECK(params.rows[0][2] == "10");
  CHECK(params.rows[0][3].rfind(fp4::reports::fmt_number(1.8, 4) + " [", 0) == 0);
  const auto& shown = table("The stored fits this report shows");
  REQUIRE(shown.rows.size() == 1);
  CHECK(shown.rows[0][0] == std::to_string(changed_fit.id));
  CHECK(shown.rows[0][3] == "fitted");
  CHECK(shown.rows[0][8] == "names the main grid, but of runs it no longer declares");
  CHECK(shown.rows[0][9] == "1 other");
  // The note: how many of its points are not the main grid's runs, and that the TOML changed.
  CHECK(text.find("Not a fit of the main grid: the precision fit (joint) was made of 10 points, 1 of them not runs of "
                  "the main grid (fitted (") != std::string::npos);
  CHECK(text.find(") (it names the main grid, whose TOML has changed since); no fit of exactly the main grid's runs "
                  "is stored. It is shown as stored; fp4lab fit STUDY.toml fits the main grid.") != std::string::npos);
  CHECK(text.find("fitted on fitted-ablation") == std::string::npos);  // the later fit is passed over, not noted
  const auto shown_csv = fp4::test::read_csv(fp4::test::slurp(out / "fits_shown.csv"));
  REQUIRE(shown_csv.size() == 2);
  CHECK(shown_csv[1][0] == std::to_string(changed_fit.id));
  CHECK(shown_csv[1][11] == "3");  // rank grid_changed
}

TEST_CASE("report: the gap table's train-loss gap is the paper's metric as the contrasts take it (fit::train_tail)",
          "[report][report_fits]") {
  // 40 logged steps: the train tail is the last 4 (a tenth), where the figure's trailing window
  // would be 2 (5%); losses that keep falling tell the two apart.
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "tail");
  const auto bf16 = h.add("m-bf16", "bf16", "m", 100000, 400000, 0, "m", 40);
  const auto ufp4 = h.add("m-ufp4", "ufp4", "m", 100000, 400000, 0, "m", 40);
  h.record();
  auto bf16_loss = [](int64_t s) { return 3.0 + 0.05 * static_cast<double>(40 - s); };
  auto ufp4_loss = [](int64_t s) { return 3.1 + 0.1 * static_cast<double>(40 - s); };
  h.train(bf16, bf16_loss, RunState::succeeded);
  h.train(ufp4, ufp4_loss, RunState::succeeded);
  h.close();
  const fs::path out = dir / "out";
  const auto r = fp4::test::run_report("--store '" + h.store_path().string() + "' --out '" + out.string() + "'", dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto tail = [](const auto& loss) { return (loss(37) + loss(38) + loss(39) + loss(40)) / 4; };
  const double expected = tail(ufp4_loss) / tail(bf16_loss) - 1;
  const double window2 = (ufp4_loss(39) + ufp4_loss(40)) / (bf16_loss(39) + bf16_loss(40)) - 1;
  REQUIRE(std::fabs(expected - window2) > 0.01);  // the test can tell the two definitions apart
  const auto rows = fp4::test::read_csv(fp4::test::slurp(out / "gaps.csv"));
  REQUIRE(rows.size() == 2);
  REQUIRE(rows[0][11] == "train_gap_mean");
  CHECK(std::strtod(rows[1][11].c_str(), nullptr) == Approx(expected).epsilon(1e-12));
  // --smooth-steps changes the figure's window, not the metric.
  const auto smoothed = fp4::test::run_report(
      "--store '" + h.store_path().string() + "' --out '" + (dir / "out2").string() + "' --smooth-steps 7", dir.path());
  REQUIRE(smoothed.exit_code == 0);
  CHECK(fp4::test::read_csv(fp4::test::slurp(dir / "out2" / "gaps.csv"))[1][11] == rows[1][11]);
}
