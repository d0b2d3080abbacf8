// test_fit_guardrails.cpp — the guardrails of a fit (fit/guardrails.h, docs/statistics.md
// "Guardrails"): each check fires on a fit built to trip it and names what it found; a law fitted to
// losses from a known law on a long-run grid with its target inside the grid raises none; a flagged
// unidentified law prints no target gap in `fp4lab fit`'s table, csv or json; the flags survive the store.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "fit/fit_output.h"
#include "fit/fitter.h"
#include "fit/guardrails.h"
#include "fit/stored_fit.h"
#include "fit/synthetic_data.h"
#include "store/store.h"
#include "tests/fit_test_helpers.h"

using fp4::fit::Guardrail;
using fp4::fit::GuardrailInputs;
using fp4::fit::StoredFit;

namespace {

// A plausible chinchilla fit of three sizes and three lengths, every check passing: the base each
// case changes one thing of.
StoredFit plausible_fit() {
  StoredFit f;
  f.law = "chinchilla";
  f.scope = "bf16";
  f.options.baseline = "bf16";
  f.options.targets = {{1e7, 5e8}};
  f.replicates_asked = 100;
  f.parameters = {{"E", "", 1.2, {1.1, 1.3}}, {"A", "", 100, {50, 200}}, {"B", "", 200, {100, 400}},
                  {"alpha", "", 0.35, {0.3, 0.4}}, {"beta", "", 0.3, {0.25, 0.35}}};
  for (double n : {1e6, 3e6, 1e7})
    for (double d : {2e8, 4e8, 8e8})
      f.residuals.push_back({"run-" + std::to_string(f.residuals.size()), "r", "bf16", n, d, 3.0, 3.0, 0.0});
  return f;
}

GuardrailInputs long_runs(const StoredFit& f) {
  GuardrailInputs in;
  for (const auto& r : f.residuals) in.steps[r.run_id] = 2000;
  return in;
}

std::vector<std::string> checks_of(const std::vector<Guardrail>& g) {
  std::vector<std::string> out;
  for (const Guardrail& x : g) out.push_back(x.check);
  return out;
}

Guardrail only(const std::vector<Guardrail>& g, const std::string& check) {
  REQUIRE(checks_of(g) == std::vector<std::string>{check});
  return g[0];
}

}  // namespace

TEST_CASE("guardrails: each check fires on a fit built to trip it, and only it", "[fit][guardrails]") {
  const StoredFit base = plausible_fit();
  CHECK(fp4::fit::check_guardrails(base, long_runs(base)).empty());

  SECTION("a parameter on its bound: its interval is withheld, the law stays identified") {
    StoredFit f = base;
    f.law = "precision";
    f.options.baseline = "bf16";
    f.parameters.push_back({"rho_N", "ufp4", 0.8, {0.7, 0.9}});
    f.parameters.push_back({"rho_D", "ufp4", 1.0, {0.9, 1.0}});
    f.parameters.push_back({"rho_D", "bf16", 1.0, {}});  // the baseline's fixed 1 is no flag
    const Guardrail g = only(fp4::fit::check_guardrails(f, long_runs(f)), "bound");
    CHECK(g.parameter == "rho_D");
    CHECK(g.recipe == "ufp4");
    CHECK_FALSE(g.unidentified);
    CHECK(g.message.find("no percentile interval") != std::string::npos);
  }
  SECTION("an exponent above 0.8 (the first study's beta of 1.05-1.24): unidentified") {
    StoredFit f = base;
    f.parameters[4].value = 1.12;
    const Guardrail g = only(fp4::fit::check_guardrails(f, long_runs(f)), "exponent");
    CHECK(g.unidentified);
    CHECK(g.message.find("beta = 1.12") != std::string::npos);
  }
  SECTION("E's interval reaching 0: unidentified") {
    StoredFit f = base;
    f.parameters[0].ci.lo = 1e-19;
    CHECK(only(fp4::fit::check_guardrails(f, long_runs(f)), "e_interval").unidentified);
  }
  SECTION("failed replicates are counted with their reason") {
    StoredFit f = base;
    f.replicate_failures = {{"the resample drew too few distinct N, D or points to fit the law", 10}};
    const Guardrail g = only(fp4::fit::check_guardrails(f, long_runs(f)), "replicates");
    CHECK(g.message.find("10 of 100 bootstrap replicates failed") == 0);
    CHECK(g.message.find("too few distinct") != std::string::npos);
  }
  SECTION("a held-out error larger than the gaps under study") {
    StoredFit f = base;
    f.scope = "ufp4";
    f.held_out.done = true;
    f.held_out.held_out_n = 1e7;
    f.held_out.recipes = {{"ufp4", {}, 0.01, 0.029}};
    // A large gap at a small N does not count: the gaps at the N held out do.
    f.gaps = {{"ufp4", "bf16", {{1e6, 2e8, 1, 0.08}, {1e7, 2e8, 1, 0.008}}, {}, {}}};
    const Guardrail g = only(fp4::fit::check_guardrails(f, long_runs(f)), "held_out");
    CHECK(g.message.find("2.90%") != std::string::npos);
    f.held_out.recipes[0].max_abs_rel_error = 0.005;
    CHECK(fp4::fit::check_guardrails(f, long_runs(f)).empty());
  }
  SECTION("runs shorter than a few hundred steps") {
    GuardrailInputs in = long_runs(base);
    in.steps.begin()->second = 191;
    const Guardrail g = only(fp4::fit::check_guardrails(base, in), "short_runs");
    CHECK(g.message.find("1 of 9 runs") == 0);
    CHECK(g.message.find("191") != std::string::npos);
  }
  SECTION("runs with few tokens per parameter") {
    StoredFit f = base;
    f.residuals[0].d = 5e6;  // 5 tokens per parameter
    CHECK(only(fp4::fit::check_guardrails(f, long_runs(f)), "tokens_per_param").message.find("1 of 9 runs") == 0);
  }
  SECTION("a target beyond the grid says how far, in N and in D") {
    StoredFit f = base;
    f.options.targets = {{1.5e9, 1e11}};
    const Guardrail g = only(fp4::fit::check_guardrails(f, long_runs(f)), "extrapolation");
    CHECK(g.message.find("×150 in N") != std::string::npos);
    CHECK(g.message.find("×125 in D") != std::string::npos);
    CHECK(g.message.find("extrapolation of the functional form") != std::string::npos);
    CHECK(fp4::fit::beyond_grid(f, {1.5e9, 1e11}) == std::pair<double, double>{150, 125});
    CHECK(fp4::fit::beyond_grid(f, {1e6, 2e8}) == std::pair<double, double>{1, 1});
  }
}

TEST_CASE("guardrails: a law recovered from clean long runs raises none, an unidentified one prints no target gap",
          "[fit][guardrails]") {
  // 2 seeds: 30 resampling groups, so a resample rarely draws too few distinct N or D.
  fp4::fit::SyntheticGrid g = fp4::test::first_study_grid(5, 0.001, 2);
  g.d = {2.5e8, 5e8, 1e9};  // ten times the study's tokens: at least 23 tokens per parameter
  const fp4::fit::FitData data = fp4::fit::synthetic_data(g);
  fp4::fit::FitRequest request;
  request.laws = {fp4::fit::Law::chinchilla};
  request.bootstrap = 60;
  request.targets = {{5e6, 5e8}};  // inside the grid
  request.grid = fp4::test::coarse_start_grid();
  auto fits = fp4::fit::run_fits(data, request, fp4::fit::plan_fits(data, request));
  REQUIRE(fits.size() == 1);
  StoredFit& f = fits[0];
  INFO(fp4::fit::format_fits(fits, fp4::fit::OutputFormat::table));
  CHECK(f.guardrails_checked);
  CHECK(checks_of(f.guardrails).empty());
  CHECK(fp4::fit::format_fits(fits, fp4::fit::OutputFormat::table).find("guardrails: none raised") != std::string::npos);

  // The same fit read back from its row keeps its flags (none) and knows they were checked.
  const StoredFit back = fp4::fit::from_record(fp4::fit::to_record(f));
  CHECK(back.guardrails_checked);

  // Flag it unidentified: the target's loss stays, labelled; its gap is withheld.
  f.guardrails.push_back({"exponent", "beta = 1.2 lies outside", true, "beta", ""});
  f.predictions = {{{1.5e9, 1e11}, "ufp4", {2.9, {2.8, 3.0}}, {0.02, {0.01, 0.03}}}};
  const std::string table = fp4::fit::format_fits(fits, fp4::fit::OutputFormat::table);
  CHECK(table.find("the law is NOT IDENTIFIED") != std::string::npos);
  CHECK(table.find("withheld") != std::string::npos);
  CHECK(table.find("+2.000%") == std::string::npos);
  CHECK(table.find("extrapolation of the functional form") != std::string::npos);
  const StoredFit flagged = fp4::fit::from_record(fp4::fit::to_record(f));
  CHECK(fp4::fit::unidentified(flagged));
  // The csv format withholds it too: the target_gap row stays, its value and interval empty, the
  // reason in the note (docs/fit.md); the target's loss is still given.
  const std::string csv = fp4::fit::format_fits(fits, fp4::fit::OutputFormat::csv);
  INFO(csv);
  CHECK(csv.find(",target_gap,gap,ufp4,1500000000,100000000000,,,,withheld: the law is flagged unidentified "
                 "(guardrails)\n") != std::string::npos);
  CHECK(csv.find(",target_loss,loss,ufp4,1500000000,100000000000,2.9,2.8,3,\n") != std::string::npos);
  CHECK(csv.find(",target_gap,gap,ufp4,1500000000,100000000000,0.02") == std::string::npos);
  // And the json format: the target stays with its loss, the gap's value and interval are null with
  // the csv's note beside them; a compare-target d the same (docs/fit.md "Output"). The stored
  // record keeps the numbers: only the output withholds them.
  fp4::fit::RecipeComparison c;
  c.recipe = "ufp4";
  c.against = "e2m1";
  c.baseline = "bf16";
  c.targets = {{1.5e9, 1e11, {-0.004, {-0.006, -0.002}}}};
  f.comparisons = {c};
  const nlohmann::json doc = nlohmann::json::parse(fp4::fit::format_fits(fits, fp4::fit::OutputFormat::json));
  INFO(doc.dump(1));
  const nlohmann::json& target = doc["fits"][0]["predictions"]["targets"][0];
  CHECK(target["recipe"] == "ufp4");
  CHECK(target["loss"] == nlohmann::json::parse(R"({"value": 2.9, "lo": 2.8, "hi": 3.0})"));
  const nlohmann::json withheld_gap = {{"value", nullptr}, {"lo", nullptr}, {"hi", nullptr},
                                       {"note", "withheld: the law is flagged unidentified (guardrails)"}};
  CHECK(target["gap"] == withheld_gap);
  nlohmann::json withheld_d = withheld_gap;
  withheld_d["n"] = 1.5e9;
  withheld_d["d"] = 1e11;
  CHECK(doc["fits"][0]["predictions"]["comparisons"][0]["targets"][0] == withheld_d);
  const nlohmann::json stored = nlohmann::json::parse(fp4::fit::to_record(f).predictions_json);
  CHECK(stored["targets"][0]["gap"]["value"] == 0.02);
  CHECK(stored["comparisons"][0]["targets"][0]["value"] == -0.004);
  // Identified again, the gap is given.
  f.guardrails.pop_back();
  const std::string shown = fp4::fit::format_fits(fits, fp4::fit::OutputFormat::csv);
  CHECK(shown.find(",target_gap,gap,ufp4,1500000000,100000000000,0.02,0.01,0.03,\n") != std::string::npos);
  const nlohmann::json again = nlohmann::json::parse(fp4::fit::format_fits(fits, fp4::fit::OutputFormat::json));
  CHECK(again["fits"][0]["predictions"]["targets"][0]["gap"] ==
        nlohmann::json::parse(R"({"value": 0.02, "lo": 0.01, "hi": 0.03})"));
  CHECK(again["fits"][0]["predictions"]["comparisons"][0]["targets"][0]["value"] == -0.004);
}

TEST_CASE("guardrails: a recipe's chinchilla fit whose BF16 fit is unidentified is flagged 'baseline', and only that",
          "[fit][guardrails]") {
  // ufp4's losses follow a plausible law on the long-run grid of the clean case above; bf16's
  // follow one whose data exponent is 1.2, which the exponent guardrail flags. ufp4's own fit is
  // clean, but its gaps divide by the bf16 law: fit/fitter.cpp adds the "baseline" flag to it.
  fp4::fit::SyntheticGrid g = fp4::test::first_study_grid(5, 0.001, 2);
  g.d = {2.5e8, 5e8, 1e9};
  g.rho = {{"ufp4", {0.9, 0.95}}};
  fp4::fit::FitData data = fp4::fit::synthetic_data(g);
  fp4::fit::SyntheticGrid steep = g;
  steep.truth.beta = 1.2;
  steep.truth.B = 2e9;  // a data term of 0.17 at the shortest runs, 0.03 at the longest
  steep.rho = {{"bf16", {1.0, 1.0}}};
  steep.seed = 6;
  const fp4::fit::FitData bf16 = fp4::fit::synthetic_data(steep);
  data.points.insert(data.points.begin(), bf16.points.begin(), bf16.points.end());
  data.recipes = {"bf16", "ufp4"};
  data.baselines = {"bf16"};
  fp4::fit::FitRequest request;
  request.laws = {fp4::fit::Law::chinchilla};
  request.bootstrap = 60;
  request.targets = {{5e6, 5e8}};  // inside the grid
  request.grid = fp4::test::coarse_start_grid();
  const auto fits = fp4::fit::run_fits(data, request, fp4::fit::plan_fits(data, request));
  INFO(fp4::fit::format_fits(fits, fp4::fit::OutputFormat::table));
  REQUIRE(fits.size() == 2);
  const StoredFit& base = fits[0].scope == "bf16" ? fits[0] : fits[1];
  const StoredFit& ufp4 = fits[0].scope == "bf16" ? fits[1] : fits[0];
  REQUIRE(base.scope == "bf16");
  REQUIRE(ufp4.scope == "ufp4");
  CHECK(fp4::fit::unidentified(base));
  CHECK(base.parameter("beta")->value > fp4::fit::kMaxExponent);
  // ufp4's only flag is the baseline's, and it withholds ufp4's target gap.
  const Guardrail g_base = only(ufp4.guardrails, "baseline");
  CHECK(g_base.unidentified);
  CHECK(g_base.message == "its gaps divide by the bf16 chinchilla fit, which is flagged unidentified");
  CHECK(fp4::fit::unidentified(ufp4));
  // Without the steep baseline (ufp4 alone, its gap from nothing), ufp4 raises no flag at all.
  const fp4::fit::FitData alone = fp4::fit::select_recipes(data, {"ufp4"});
  const auto alone_fits = fp4::fit::run_fits(alone, request, fp4::fit::plan_fits(alone, request));
  REQUIRE(alone_fits.size() == 1);
  CHECK(checks_of(alone_fits[0].guardrails).empty());
}
