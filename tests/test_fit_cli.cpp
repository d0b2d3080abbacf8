// test_fit_cli.cpp — `fp4lab fit` end to end on stores built from real study TOMLs (their runs'
// final losses drawn from a known law): the [fit] table and the flags, excluded runs listed with
// their reasons, fits stored once and found again, --refit, the three formats and --out, and every
// bad input the issue names (one line, exit 2).
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fit/laws.h"
#include "fit/stored_fit.h"
#include "store/store.h"
#include "sweeps/spec.h"
#include "tests/fit_test_helpers.h"
#include "tests/test_support.h"

using fp4::store::MetricRow;
using fp4::store::MetricsBatch;
using fp4::store::RunState;
using fp4::store::Store;
using fp4::test::check_one_line_error;
using fp4::test::run_fp4lab;
using fp4::test::ScratchDir;
using nlohmann::json;

namespace {

// A study TOML over tiny CPU models; only its grid matters here (nothing is trained).
std::string study_toml(const std::string& grid, const std::string& fit, const std::string& model = "") {
  return "[sweep]\nname = \"fitstudy\"\n"
         "[data]\nsource = \"synthetic:markov?order=1&vocab=64\"\n"
         "[model]\nseq_len = 32\n" + model +
         "[train]\nbatch_tokens = 128\nmicro_batch = 2\n"
         "[grid]\n" + grid + "\n" + fit;
}

constexpr const char* kGrid5x3 =
    "model = [\"d1\", \"d2\", \"d3\", \"d4\", \"d5\"]\ntokens = [16000, 32000, 64000]\nrecipe = [\"bf16\", \"ufp4\"]";

// Records the study's grid in its store and gives each run an outcome: succeeded with the law's
// loss at its (N, D) (×(1 + 0.003·k) with k cycling through −1, 0, 1, a deterministic stand-in for
// noise), unless `outcome` says otherwise for the run's name.
struct Outcome {
  RunState state = RunState::succeeded;
  bool nan_loss = false;
};
fp4::sweeps::SweepSpec make_study(const std::filesystem::path& toml, const std::string& text,
                                  const std::map<std::string, Outcome>& outcome = {}) {
  fp4::test::spit(toml, text);
  const auto spec = fp4::sweeps::load_sweep_spec(toml);
  auto store = Store::open(spec.store, Store::Mode::read_write);
  store->record_grid(fp4::sweeps::grid_record(spec));
  const fp4::fit::LawParameters law = fp4::test::first_study_law();
  int k = 0;
  for (const auto& p : spec.points) {
    const bool quantized = !p.baseline;
    const double clean = fp4::fit::law_loss(law, quantized ? 0.8 : 1.0, quantized ? 0.9 : 1.0,
                                            static_cast<double>(p.n_params_nonembedding),
                                            static_cast<double>(p.tokens));
    const Outcome o = outcome.count(p.name) ? outcome.at(p.name) : Outcome{};
    MetricsBatch b;
    b.metrics.push_back({"eval/loss", 50, 6400, 4.0, false});
    b.metrics.push_back({"eval/loss", 100, p.tokens, clean * (1 + 0.003 * ((k++ % 3) - 1)), o.nan_loss});
    store->ingest(p.id, b, 0);
    store->set_state(p.id, o.state, o.state == RunState::diverged ? "non-finite training loss" : "");
  }
  return spec;
}

int64_t fit_rows(const std::filesystem::path& store) {
  return static_cast<int64_t>(Store::open(store, Store::Mode::read_only)->fits().size());
}

}  // namespace

TEST_CASE("fp4lab fit: a study's store is fitted as its [fit] asks, stored once, found again, refitted on demand",
          "[fit][fit_cli]") {
  ScratchDir dir;
  const auto toml = dir / "study.toml";
  const auto spec = make_study(toml,
                               study_toml(kGrid5x3, "[fit]\nbootstrap = 20\nseed = 7\ntargets = [{n = 1e8, d = 1e10}]\n"),
                               {{"d5-64k-ufp4-s0", {RunState::diverged, false}}, {"d4-32k-ufp4-s0", {RunState::succeeded, true}},
                                {"d1-16k-ufp4-s0", {RunState::failed, false}}});

  const auto first = run_fp4lab("fit '" + toml.string() + "' --format json --threads 2", dir);
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const json first_doc = json::parse(first.out);
  const json fits = first_doc["fits"];
  // From a store, the paired contrasts come with the fits (one seed per point here: no test, every pair untested).
  REQUIRE(first_doc["contrasts"].is_object());
  CHECK(first_doc["contrasts"]["id"].get<int64_t>() > 0);
  REQUIRE(fits.size() == 3);  // chinchilla bf16, chinchilla ufp4, precision joint
  CHECK(fits[0]["law"] == "chinchilla");
  CHECK(fits[0]["scope"] == "bf16");
  CHECK(fits[1]["scope"] == "ufp4");
  CHECK(fits[2]["law"] == "precision");
  CHECK(fits[2]["scope"] == "joint");
  for (const json& f : fits) {
    CHECK(f["options"]["bootstrap"] == 20);
    CHECK(f["options"]["seed"] == 7);
    CHECK(f["options"]["targets"][0]["n"] == 1e8);
    CHECK(f["options"]["n"] == "nonembedding");
    CHECK(f["id"].get<int64_t>() > 0);
  }
  // ufp4: 15 runs, 3 excluded with their reasons; the joint fit lists the same three.
  CHECK(fits[1]["n_points"] == 12);
  const json& excluded = fits[1]["quality"]["excluded"];
  REQUIRE(excluded.size() == 3);
  std::map<std::string, std::string> reason;
  for (const json& e : excluded) reason[e["name"]] = e["reason"];
  CHECK(reason["d5-64k-ufp4-s0"].find("state diverged") == 0);
  CHECK(reason["d4-32k-ufp4-s0"].find("final eval/loss is NaN") == 0);
  CHECK(reason["d1-16k-ufp4-s0"] == "state failed");
  CHECK(fits[2]["quality"]["excluded"].size() == 3);
  CHECK(fits[2]["n_points"] == 27);
  // The joint fit's rho_N: the losses came from rho_N = 0.8 (with ±0.3% wobble).
  CHECK(fits[2]["params"]["rho"]["ufp4"]["rho_N"].get<double>() == Approx(0.8).margin(0.1));
  CHECK(fits[2]["params"]["rho"]["bf16"]["rho_N"] == 1.0);
  CHECK(fits[2]["predictions"]["gaps"][0]["recipe"] == "ufp4");
  CHECK(fit_rows(spec.store) == 3);

  // Unchanged data and options: the stored fits, nothing fitted or written (the file's bytes stay).
  const std::string bytes_before = fp4::test::slurp(spec.store);
  const auto again = run_fp4lab("fit '" + toml.string() + "' --format json", dir);
  REQUIRE(again.exit_code == 0);
  CHECK(json::parse(again.out) == first_doc);
  CHECK(again.err.find("fit: ") == std::string::npos);  // no progress: nothing was fitted
  CHECK(fit_rows(spec.store) == 3);
  CHECK(fp4::test::slurp(spec.store) == bytes_before);

  // The table says where each fit is.
  const auto table = run_fp4lab("fit '" + toml.string() + "'", dir);
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("stored fit 3 (same data and options") != std::string::npos);
  CHECK(table.out.find("worth a bf16 model of") != std::string::npos);
  CHECK(table.out.find("excluded: d5-64k-ufp4-s0 (ufp4): state diverged") != std::string::npos);

  // A flag changes the options: a new fit. --refit fits again although nothing changed.
  const auto narrowed = run_fp4lab("fit '" + toml.string() + "' --recipe bf16 --format csv --out '" +
                                       (dir / "bf16.csv").string() + "'",
                                   dir);
  REQUIRE(narrowed.exit_code == 0);
  CHECK(narrowed.out.empty());
  const std::string csv = fp4::test::slurp(dir / "bf16.csv");
  CHECK(csv.rfind("fit_id,law,scope,kind,name,recipe,n,d,value,lo,hi,note\n", 0) == 0);
  CHECK(csv.find(",chinchilla,bf16,parameter,alpha,,") != std::string::npos);
  CHECK(csv.find(",residual,d3-32k-bf16-s0,bf16,") != std::string::npos);
  CHECK(fit_rows(spec.store) == 4);
  const auto refit = run_fp4lab("fit '" + toml.string() + "' --refit --format json", dir);
  REQUIRE(refit.exit_code == 0);
  CHECK(fit_rows(spec.store) == 7);
  // Same data, options and seed: the same numbers (only ids and times differ).
  const json re = json::parse(refit.out)["fits"];
  for (size_t i = 0; i < 3; ++i) {
    CHECK(re[i]["params"] == fits[i]["params"]);
    CHECK(re[i]["intervals"] == fits[i]["intervals"]);
    CHECK(re[i]["predictions"] == fits[i]["predictions"]);
    CHECK(re[i]["input_hash"] == fits[i]["input_hash"]);
  }

  // A fit stored by an fp4lab without guardrails (quality_json without "guardrails") is not reused:
  // the same data are fitted again, and the new rows carry them.
  {
    auto store = Store::open(spec.store, Store::Mode::read_write);
    char* error = nullptr;
    REQUIRE(sqlite3_exec(store->handle(), "UPDATE fits SET quality_json = json_remove(quality_json, '$.guardrails')",
                         nullptr, nullptr, &error) == SQLITE_OK);
  }
  const auto old_fits = run_fp4lab("fit '" + toml.string() + "'", dir);
  REQUIRE(old_fits.exit_code == 0);
  CHECK(fit_rows(spec.store) == 10);
  CHECK(old_fits.out.find("GUARDRAILS: not checked") == std::string::npos);
  CHECK(old_fits.out.find("uardrails") != std::string::npos);
}

TEST_CASE("fp4lab fit: every [fit] key is applied, and its flag overrides it", "[fit][fit_cli]") {
  ScratchDir dir;
  const auto toml = dir / "keys.toml";
  const auto spec = make_study(toml, study_toml(kGrid5x3, "[fit]\nlaw = [\"chinchilla\"]\nn = \"total\"\nbootstrap = 12\n"
                                                          "seed = 7\nhuber_delta = 2e-3\ntargets = [{n = 1e8, d = 1e10}]\n"));
  std::map<std::string, std::pair<double, double>> counts;  // run id → (total N, non-embedding N)
  for (const auto& p : spec.points)
    counts[p.id] = {static_cast<double>(p.n_params), static_cast<double>(p.n_params_nonembedding)};
  auto check_n = [&](const json& fit, bool total) {
    REQUIRE(fit["quality"]["residuals"].size() > 0);
    for (const json& r : fit["quality"]["residuals"]) {
      const auto& c = counts.at(r["run"].get<std::string>());
      CHECK(r["n"].get<double>() == (total ? c.first : c.second));
    }
  };

  const auto from_table = run_fp4lab("fit '" + toml.string() + "' --format json", dir);
  INFO(from_table.err);
  REQUIRE(from_table.exit_code == 0);
  const json a = json::parse(from_table.out)["fits"];
  REQUIRE(a.size() == 2);  // chinchilla bf16, ufp4: law = ["chinchilla"]
  for (const json& f : a) {
    CHECK(f["law"] == "chinchilla");
    CHECK(f["options"]["n"] == "total");
    CHECK(f["options"]["bootstrap"] == 12);
    CHECK(f["intervals"]["replicates"] == 12);
    CHECK(f["options"]["seed"] == 7);
    CHECK(f["options"]["huber_delta"] == 2e-3);
    CHECK(f["options"]["targets"] == json::parse(R"([{"n": 1e8, "d": 1e10}])"));
    check_n(f, true);
  }

  const auto from_flags = run_fp4lab("fit '" + toml.string() +
                                         "' --format json --law precision --n nonembedding --bootstrap 9 --seed 3 "
                                         "--huber-delta 1e-3 --target 2e8,3e10",
                                     dir);
  INFO(from_flags.err);
  REQUIRE(from_flags.exit_code == 0);
  const json b = json::parse(from_flags.out)["fits"];
  REQUIRE(b.size() == 1);
  CHECK(b[0]["law"] == "precision");
  CHECK(b[0]["options"]["n"] == "nonembedding");
  CHECK(b[0]["options"]["bootstrap"] == 9);
  CHECK(b[0]["options"]["seed"] == 3);
  CHECK(b[0]["options"]["huber_delta"] == 1e-3);
  CHECK(b[0]["options"]["targets"] == json::parse(R"([{"n": 2e8, "d": 3e10}])"));
  check_n(b[0], false);
  // A different seed draws other resamples: the intervals move, the point estimate does not.
  const auto reseeded = run_fp4lab("fit '" + toml.string() +
                                       "' --format json --law precision --n nonembedding --bootstrap 9 --seed 4 "
                                       "--huber-delta 1e-3 --target 2e8,3e10",
                                   dir);
  REQUIRE(reseeded.exit_code == 0);
  const json c = json::parse(reseeded.out)["fits"];
  CHECK(c[0]["params"] == b[0]["params"]);
  CHECK(c[0]["intervals"]["params"] != b[0]["intervals"]["params"]);
}

TEST_CASE("fp4lab fit: progress is one redrawn line on a terminal, lines per stage otherwise", "[fit][fit_cli]") {
  ScratchDir dir;
  std::string csv = "recipe,n,d,loss\n";
  const fp4::fit::LawParameters law = fp4::test::first_study_law();
  for (double n : {4e5, 1.3e6, 3.1e6})
    for (double d : {2.5e7, 5e7, 1e8}) csv += fmt::format("bf16,{},{},{}\n", n, d, fp4::fit::law_loss(law, 1, 1, n, d));
  fp4::test::spit(dir / "points.csv", csv);
  const std::string fit = std::string("'") + FP4LAB_BINARY + "' fit --points '" + (dir / "points.csv").string() +
                          "' --bootstrap 30 --format json";
  // A terminal: util-linux's script(1) runs the command on a pseudo-terminal and copies what it
  // writes (stdout and stderr together) to its own stdout.
  auto on_terminal = [&](const std::string& extra) {
    const std::string cmd = "script -qec \"" + fit + extra + "\" /dev/null > '" + (dir / "tty.txt").string() +
                            "' 2>&1 </dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return fp4::test::slurp(dir / "tty.txt");
  };
  const std::string tty = on_terminal("");
  INFO(tty);
  CHECK(tty.find("\r\033[Kfit: chinchilla bf16: 4508/4508, ") != std::string::npos);  // starts done of total
  CHECK(tty.find("\r\033[Kfit: bootstrap: 30/30, ") != std::string::npos);             // replicates done
  CHECK(tty.find(" left") != std::string::npos);                                      // the time left
  const std::string plain = on_terminal(" --plain");
  CHECK(plain.find("\033[K") == std::string::npos);
  CHECK(plain.find("fit: bootstrap: 30/30 done in ") != std::string::npos);
  // Not a terminal: one line per finished stage on stderr, stdout untouched.
  const auto piped = run_fp4lab(fit.substr(fit.find(" fit ") + 1), dir);
  REQUIRE(piped.exit_code == 0);
  CHECK(piped.err.find("fit: chinchilla bf16: 4508/4508 done in ") != std::string::npos);
  CHECK(piped.err.find("\r") == std::string::npos);
  CHECK(json::parse(piped.out)["fits"].size() == 1);
}

TEST_CASE("fp4lab fit: --points fits a CSV and stores nothing, gamma and targets come from flags", "[fit][fit_cli]") {
  ScratchDir dir;
  std::string csv = "recipe,n,d,loss\n";
  const fp4::fit::LawParameters law = fp4::test::first_study_law();
  for (double n : {4e5, 1.3e6, 3.1e6, 6.1e6})
    for (double d : {2.5e7, 5e7, 1e8}) {
      csv += fmt::format("bf16,{},{},{}\n", n, d, fp4::fit::law_loss(law, 1, 1, n, d));
      csv += fmt::format("e2m1,{},{},{}\n", n, d, fp4::fit::law_loss(law, 0.7, 0.95, n, d));
    }
  csv += "e2m1,1e7,1e8,nan\n";
  fp4::test::spit(dir / "points.csv", csv);
  const auto r = run_fp4lab("fit --points '" + (dir / "points.csv").string() +
                                "' --law precision --gamma --bootstrap 10 --target 1e9,2e10 --target 2e9,4e10 --format json",
                            dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc["contrasts"].is_null());  // a points file has no seeds to pair
  const json fits = doc["fits"];
  REQUIRE(fits.size() == 1);
  CHECK(fits[0]["id"] == 0);
  CHECK(fits[0]["options"]["gamma"] == true);
  CHECK(fits[0]["options"]["source"] == "points");
  CHECK(fits[0]["options"]["n"] == "given");
  CHECK(fits[0]["predictions"]["targets"].size() == 4);  // 2 targets × 2 recipes
  CHECK(fits[0]["quality"]["excluded"][0]["reason"] == "loss is NaN");
  // Exact data from the law with gamma = 1: the fit finds it.
  CHECK(fits[0]["params"]["gamma"].get<double>() == Approx(1.0).margin(0.02));
  CHECK(fits[0]["params"]["rho"]["e2m1"]["rho_N"].get<double>() == Approx(0.7).margin(0.01));
  CHECK_FALSE(std::filesystem::exists(dir / "fitstudy.db"));
}

TEST_CASE("fp4lab fit: bad input ends in one line and exit 2", "[fit][fit_cli]") {
  ScratchDir dir;
  SECTION("an empty store") {
    Store::open(dir / "empty.db", Store::Mode::read_write);
    check_one_line_error(run_fp4lab("fit --store '" + (dir / "empty.db").string() + "'", dir), "has no runs");
  }
  SECTION("a store that does not exist") {
    check_one_line_error(run_fp4lab("fit --store '" + (dir / "none.db").string() + "'", dir), "no store yet");
  }
  SECTION("one recipe only, for precision") {
    const auto toml = dir / "one.toml";
    make_study(toml, study_toml("model = [\"d1\", \"d2\", \"d3\"]\ntokens = [16000, 32000, 64000]", ""));
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "' --law precision", dir),
                         "precision fit: needs the baseline bf16 and at least one other recipe");
  }
  SECTION("all runs at one N") {
    const auto toml = dir / "onen.toml";
    make_study(toml, study_toml("tokens = [16000, 32000, 64000]\nrecipe = [\"bf16\", \"ufp4\"]", "", "preset = \"d2\"\n"));
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "'", dir),
                         "chinchilla fit of recipe bf16: needs at least 3 distinct N, has 1");
  }
  SECTION("NaN losses") {
    const auto toml = dir / "nan.toml";
    std::map<std::string, Outcome> all_nan;
    for (const std::string m : {"d1", "d2", "d3"})
      for (const std::string t : {"16k", "32k", "64k"}) all_nan[m + "-" + t + "-bf16-s0"] = {RunState::succeeded, true};
    make_study(toml, study_toml("model = [\"d1\", \"d2\", \"d3\"]\ntokens = [16000, 32000, 64000]", ""), all_nan);
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "'", dir),
                         "no run can be fitted; 9 runs excluded (9 final eval/loss is NaN)");
  }
  SECTION("fewer points than parameters") {
    // Three distinct N and D on a diagonal: 3 points for chinchilla's 5 parameters.
    fp4::test::spit(dir / "diag.csv", "recipe,n,d,loss\nbf16,1e6,1e7,3.1\nbf16,2e6,2e7,2.9\nbf16,4e6,4e7,2.7\n");
    check_one_line_error(run_fp4lab("fit --points '" + (dir / "diag.csv").string() + "' --law chinchilla", dir),
                         "chinchilla fit of recipe bf16: needs at least 5 points for 5 parameters, has 3");
  }
  SECTION("a target with n <= 0") {
    const auto toml = dir / "target.toml";
    make_study(toml, study_toml(kGrid5x3, ""));
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "' --target 0,1e11", dir),
                         "targets: n must be > 0 (parameters), got 0");
    // In the study's [fit] table the spec parser refuses it, with its place in the file.
    fp4::test::spit(toml, study_toml(kGrid5x3, "[fit]\ntargets = [{n = -1.5e9, d = 1e11}]\n"));
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "'", dir), "fit.targets.n: must be > 0");
  }
  SECTION("a malformed points file, an unknown recipe, two sources") {
    fp4::test::spit(dir / "p.csv", "recipe,n,d,loss\nbf16,1e6,abc,3.0\n");
    check_one_line_error(run_fp4lab("fit --points '" + (dir / "p.csv").string() + "'", dir),
                         "p.csv:2: column d: \"abc\" is not a finite number");
    fp4::test::spit(dir / "q.csv", "recipe,n,loss\n");
    check_one_line_error(run_fp4lab("fit --points '" + (dir / "q.csv").string() + "'", dir), "four columns");
    const auto toml = dir / "r.toml";
    make_study(toml, study_toml(kGrid5x3, ""));
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "' --recipe nvfp4", dir),
                         "--recipe nvfp4: ");
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "' --points '" + (dir / "p.csv").string() + "'", dir),
                         "exactly one of");
    check_one_line_error(run_fp4lab("fit '" + toml.string() + "' --format xml", dir), "--format xml");
  }
}
