// test_fit_grids.cpp — `fp4lab fit` on a store that several grids share, as the first study's does
// (results/first-study: the main grid, the noise floor and the ablation in one store, a point
// declared in two grids being one run). Three tiny CPU grids are trained for real into one store;
// a study's fit must use exactly its own grid's runs, and `--store` every run, skipping (and
// naming) what its default laws cannot fit, while a named law or recipe that cannot be fitted is
// one line and exit 2.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fit/contrasts.h"
#include "fit/statistics.h"
#include "store/store.h"
#include "sweeps/spec.h"
#include "tests/fit_test_helpers.h"
#include "tests/test_support.h"

using fp4::test::check_one_line_error;
using fp4::test::run_fp4lab;
using fp4::test::ScratchDir;
using nlohmann::json;

namespace {

// What every grid shares: one-layer models on a Markov source, runs of 8 to 32 steps.
std::string grid_toml(const std::string& name, const std::string& grid) {
  return "[sweep]\nname = \"" + name + "\"\nstore = \"shared.db\"\n"
         "[data]\nsource = \"synthetic:markov?order=1&vocab=16&branch=4&seed=1\"\n"
         "[model]\nseq_len = 32\n"
         "[train]\nbatch_tokens = 256\nmicro_batch = 2\nlr = 1e-2\n"
         "[eval]\nevery = 1000\ntokens = 1024\n"
         "[checkpoint]\nevery = 1000\n"
         "[executor]\ncpu_jobs = 2\nthreads_per_job = 1\n"
         "[grid]\n" + grid;
}

constexpr const char* kSmall = "{n_layers = 1, d_model = 16, n_heads = 1, head_dim = 16}";
constexpr const char* kMiddle = "{n_layers = 1, d_model = 32, n_heads = 1, head_dim = 32}";
constexpr const char* kLarge = "{n_layers = 1, d_model = 64, n_heads = 1}";

// The ids of a spec's points, optionally of one recipe.
std::set<std::string> ids_of(const fp4::sweeps::SweepSpec& spec, const std::string& recipe = "") {
  std::set<std::string> out;
  for (const auto& p : spec.points)
    if (recipe.empty() || p.recipe_label == recipe) out.insert(p.id);
  return out;
}

// The run ids a fit was made of (its residuals), optionally of one recipe.
std::set<std::string> fitted_ids(const json& fit, const std::string& recipe = "") {
  std::set<std::string> out;
  for (const json& r : fit["quality"]["residuals"])
    if (recipe.empty() || r["recipe"] == recipe) out.insert(r["run"].get<std::string>());
  return out;
}

const json& fit_of(const json& fits, const std::string& law, const std::string& scope) {
  for (const json& f : fits)
    if (f["law"] == law && f["scope"] == scope) return f;
  FAIL("no " << law << " fit of " << scope << " in the output");
  return fits;
}

}  // namespace

TEST_CASE("fp4lab fit: a study fits exactly its own grid's runs of a store that several grids share",
          "[fit][fit_grids]") {
  ScratchDir dir;
  const std::string models = std::string("model = [") + kSmall + ", " + kMiddle + ", " + kLarge + "]\n";
  // The main grid (3 N × 3 D × 2 recipes), a noise floor on the smallest size (its seed-0 runs are
  // the main grid's), an ablation at one size and length with a recipe only it has.
  fp4::test::spit(dir / "main.toml", grid_toml("shared-main", models + "tokens = [\"2k\", \"4k\", \"8k\"]\n"
                                                                    "recipe = [\"bf16\", \"ufp4\"]\n"));
  fp4::test::spit(dir / "noise.toml",
                  grid_toml("shared-noise", std::string("model = [") + kSmall + "]\ntokens = [\"2k\", \"4k\", \"8k\"]\n"
                                                "recipe = [\"bf16\", \"ufp4\"]\nseed = [0, 1]\n"));
  fp4::test::spit(dir / "ablation.toml",
                  grid_toml("shared-ablation", std::string("model = [") + kMiddle + "]\ntokens = [\"4k\"]\n"
                                                   "recipe = [\"bf16\", \"ufp4\", \"ufp4-rht-none\"]\nseed = [0, 1]\n"
                                                   "[recipes.ufp4-rht-none]\nbase = \"ufp4\"\nrht = []\n"));
  // Declared, never run: its points are not in the store.
  fp4::test::spit(dir / "later.toml", grid_toml("shared-later", models + "tokens = [\"16k\"]\nrecipe = [\"bf16\"]\n"));
  const auto main_spec = fp4::sweeps::load_sweep_spec(dir / "main.toml");
  const auto noise_spec = fp4::sweeps::load_sweep_spec(dir / "noise.toml");
  const auto ablation_spec = fp4::sweeps::load_sweep_spec(dir / "ablation.toml");
  REQUIRE(main_spec.points.size() == 18);
  // The files by their full path (the commands do not run in `dir`).
  auto at = [&](const std::string& name) {
    std::string quoted = (dir / name).string();
    quoted.insert(quoted.begin(), '\'');
    quoted.push_back('\'');
    return quoted;
  };
  for (const char* grid : {"main.toml", "noise.toml", "ablation.toml"}) {
    const auto r = run_fp4lab("sweep run " + at(grid) + " --plain", dir);
    INFO(grid << ": " << r.err << r.out);
    REQUIRE(r.exit_code == 0);
  }
  std::set<std::string> all_runs;
  for (const auto& run : fp4::store::Store::open(dir / "shared.db", fp4::store::Store::Mode::read_only)->runs())
    all_runs.insert(run.id);
  // 18 + 12 + 6 points, of which 6 (noise seed 0) and 2 (ablation bf16, ufp4 seed 0) are the main grid's.
  REQUIRE(all_runs.size() == 28);

  {  // --store: every run; what the default laws cannot fit is skipped and named.
    const auto r = run_fp4lab("fit --store " + at("shared.db") + " --bootstrap 20 --format json", dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json fits = json::parse(r.out)["fits"];
    REQUIRE(fits.size() == 3);  // chinchilla bf16 and ufp4, precision over both
    std::set<std::string> bf16_runs = ids_of(main_spec, "bf16");
    for (const auto& spec : {noise_spec, ablation_spec})
      for (const std::string& id : ids_of(spec, "bf16")) bf16_runs.insert(id);
    CHECK(bf16_runs.size() == 13);
    CHECK(fitted_ids(fit_of(fits, "chinchilla", "bf16")) == bf16_runs);
    const json& joint = fit_of(fits, "precision", "joint");
    CHECK(joint["options"]["grid"] == "");
    CHECK(fitted_ids(joint, "ufp4-rht-none").empty());
    CHECK(fitted_ids(joint).size() == 26);  // every run but the two of ufp4-rht-none
    CHECK(r.err.find("fp4lab fit: skipped chinchilla fit of recipe ufp4-rht-none: needs at least 3 distinct N, has 1") !=
          std::string::npos);
    CHECK(r.err.find("fp4lab fit: skipped precision fit: recipe ufp4-rht-none needs at least 2 distinct N, has 1") !=
          std::string::npos);
    // The seed-1 runs of the noise floor sit beside the main grid's at the smallest size.
    const json& observed = joint["predictions"]["gaps"][0]["observed"];
    REQUIRE(observed.size() == 9);
    CHECK(observed[0]["seeds"] == 2);
    // The table ends with the same list; the stored fits are found again without refitting.
    const auto table = run_fp4lab("fit --store " + at("shared.db") + " --bootstrap 20", dir);
    REQUIRE(table.exit_code == 0);
    CHECK(table.out.find("stored fit 1 (same data and options") != std::string::npos);
    CHECK(table.out.find("\nskipped: chinchilla fit of recipe ufp4-rht-none: needs at least 3 distinct N") !=
          std::string::npos);
    CHECK(table.err.empty());
  }

  {  // The main grid's fit: its 18 runs, no other.
    const auto r = run_fp4lab("fit " + at("main.toml") + " --bootstrap 20 --format json", dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json fits = json::parse(r.out)["fits"];
    REQUIRE(fits.size() == 3);
    for (const char* recipe : {"bf16", "ufp4"}) {
      const json& f = fit_of(fits, "chinchilla", recipe);
      CHECK(fitted_ids(f) == ids_of(main_spec, recipe));
      CHECK(f["n_points"] == 9);
      CHECK(f["quality"]["excluded"].empty());
      CHECK(f["options"]["grid"] == "shared-main");
    }
    const json& joint = fit_of(fits, "precision", "joint");
    CHECK(fitted_ids(joint) == ids_of(main_spec));
    CHECK(joint["options"]["recipes"] == json::array({"bf16", "ufp4"}));
    // The observed gaps are the main grid's own pairs: one seed at each of the 9 points.
    const json& gaps = joint["predictions"]["gaps"][0]["observed"];
    REQUIRE(gaps.size() == 9);
    for (const json& g : gaps) CHECK(g["seeds"] == 1);
    // Beside each, the gap on the paper's metric: the same pair's train-tail losses (fit::train_tail).
    const json& tails = joint["predictions"]["gaps"][0]["observed_train_tail"];
    REQUIRE(tails.size() == 9);
    const auto store = fp4::store::Store::open(dir / "shared.db", fp4::store::Store::Mode::read_only);
    for (size_t i = 0; i < tails.size(); ++i) {
      INFO("grid point " << i);
      CHECK(tails[i]["n"] == gaps[i]["n"]);
      CHECK(tails[i]["d"] == gaps[i]["d"]);
      CHECK(tails[i]["seeds"] == 1);
      std::map<std::string, double> tail;
      for (const auto& run : store->runs())
        if (ids_of(main_spec, run.recipe).count(run.id) &&
            static_cast<double>(run.n_params_nonembedding) == gaps[i]["n"].get<double>() &&
            static_cast<double>(run.tokens) == gaps[i]["d"].get<double>())
          tail[run.recipe] = fp4::fit::train_tail(store->metrics(run.id, "train/loss")).mean;
      REQUIRE(tail.size() == 2);
      CHECK_THAT(tails[i]["mean"].get<double>(), Catch::Matchers::WithinRel(tail["ufp4"] / tail["bf16"] - 1, 1e-12));
      CHECK(tails[i]["mean"].get<double>() != gaps[i]["mean"].get<double>());
    }
    // The gap's trend on the train tail beside the final loss's: the least-squares slope against
    // log10(6ND) over the same matched runs (one per point here), its interval from the same
    // bootstrap replicates.
    std::vector<double> x, y;
    for (const json& t : tails) {
      x.push_back(std::log10(6 * t["n"].get<double>() * t["d"].get<double>()));
      y.push_back(t["mean"].get<double>());
    }
    const json& tail_slope = joint["predictions"]["gaps"][0]["slope_train_tail"];
    CHECK(tail_slope["points"] == 9);
    CHECK_THAT(tail_slope["per_decade"].get<double>(),
               Catch::Matchers::WithinRel(fp4::fit::least_squares_line(x, y).slope, 1e-9));
    CHECK(tail_slope["lo"].is_number());
    CHECK(tail_slope["hi"].is_number());
    CHECK(tail_slope["per_decade"] != joint["predictions"]["gaps"][0]["slope"]["per_decade"]);
    const auto table = run_fp4lab("fit " + at("main.toml") + " --bootstrap 20", dir);
    REQUIRE(table.exit_code == 0);
    CHECK(table.out.find("beside it on the paper's train-tail loss") != std::string::npos);
    CHECK(table.out.find(" matched runs; on the train tail ") != std::string::npos);
    const auto csv = run_fp4lab("fit " + at("main.toml") + " --bootstrap 20 --format csv", dir);
    REQUIRE(csv.exit_code == 0);
    CHECK(csv.out.find(",gap_slope_train_tail,per_decade,ufp4,,,") != std::string::npos);
  }

  {  // What cannot be fitted when it is asked for: one line, exit 2.
    // The noise floor alone has one N: no law to fit, but its seeds still give paired contrasts
    // (docs/statistics.md), which are printed and stored; the output says why no law was fitted.
    const auto noise = run_fp4lab("fit " + at("noise.toml"), dir);
    INFO("stderr: " << noise.err << "\nstdout: " << noise.out);
    CHECK(noise.exit_code == 0);
    CHECK(noise.out.find("no scaling law fitted: nothing can be fitted: chinchilla fit of recipe bf16: needs at least 3 "
                         "distinct N, has 1") != std::string::npos);
    CHECK(noise.out.find("paired contrasts over seeds") != std::string::npos);
    // The csv and json formats carry the same contrasts (docs/fit.md "Output"): the ablation's
    // ufp4-rht-none − ufp4 over its two seeds, on both losses, with no fit beside them.
    const auto as_json = run_fp4lab("fit " + at("ablation.toml") + " --format json", dir);
    INFO("stderr: " << as_json.err);
    REQUIRE(as_json.exit_code == 0);
    const json doc = json::parse(as_json.out);
    CHECK(doc["fits"].empty());
    const json* variant = nullptr;
    for (const json& f : doc["contrasts"]["families"])
      for (const json& t : f["tests"])
        if (t["recipe"] == "ufp4-rht-none" && t["against"] == "ufp4" && t["metric"] == "final_eval") variant = &t;
    REQUIRE(variant != nullptr);
    CHECK((*variant)["seeds"] == 2);
    CHECK((*variant)["d"].size() == 2);
    CHECK((*variant)["p_sign_flip"].get<double>() >= 0.5);  // two seeds: 2/2² is the smallest possible
    const double mean_pp = (*variant)["mean_pp"].get<double>();
    CHECK(mean_pp == Approx(((*variant)["d"][0][1].get<double>() + (*variant)["d"][1][1].get<double>()) / 2));
    const auto as_csv = run_fp4lab("fit " + at("ablation.toml") + " --format csv", dir);
    REQUIRE(as_csv.exit_code == 0);
    std::string contrast_row, holm_row;
    std::istringstream lines(as_csv.out);
    for (std::string l; std::getline(lines, l);) {
      if (l.find(",paired,variants against their base,contrast,ufp4,ufp4-rht-none,") != std::string::npos &&
          l.find("metric=final_eval seeds=2 ") != std::string::npos)
        contrast_row = l;
      if (l.find(",contrast_p_holm,ufp4,ufp4-rht-none,") != std::string::npos && l.find("metric=final_eval") != std::string::npos)
        holm_row = l;
    }
    INFO(as_csv.out);
    REQUIRE_FALSE(contrast_row.empty());
    REQUIRE_FALSE(holm_row.empty());
    // fit_id,law,scope,kind,name,recipe,n,d,value,...: the value is the json's mean d, to the digit.
    std::vector<std::string> cells;
    std::istringstream row(contrast_row);
    for (std::string c; std::getline(row, c, ',');) cells.push_back(c);
    REQUIRE(cells.size() > 8);
    CHECK(std::stod(cells[8]) == mean_pp);
    CHECK(cells[0] == std::to_string(doc["contrasts"]["id"].get<int64_t>()));
    // A named law that can fit nothing.
    check_one_line_error(run_fp4lab("fit " + at("ablation.toml") + " --law chinchilla", dir),
                         "chinchilla fit of recipe bf16: needs at least 3 distinct N, has 1");
    check_one_line_error(run_fp4lab("fit " + at("ablation.toml") + " --law precision", dir),
                         "precision fit: baseline bf16 needs at least 3 distinct N, has 1");
    // A named recipe that a law cannot fit.
    check_one_line_error(run_fp4lab("fit --store " + at("shared.db") + " --recipe ufp4-rht-none", dir),
                         "chinchilla fit of recipe ufp4-rht-none: needs at least 3 distinct N, has 1");
    check_one_line_error(
        run_fp4lab("fit --store " + at("shared.db") + " --recipe bf16,ufp4-rht-none --law precision", dir),
                         "precision fit: recipe ufp4-rht-none needs at least 2 distinct N, has 1");
    // A grid the store has not run: every point excluded, none dropped silently.
    check_one_line_error(run_fp4lab("fit " + at("later.toml"), dir),
                         "no run can be fitted; 3 runs excluded (3 not in the store)");
  }
}
