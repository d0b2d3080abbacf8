// test_fit_planner.cpp — the planner's arithmetic (fit/planner.h, docs/statistics.md "Planning"):
// the seed count of a paired t-test for a known sd against the closed form with Guenther's
// correction, n_z + z²/2 (Guenther 1981), within one seed; more noise or a smaller effect needs
// more seeds; the variance-only interim rule as results/second-study/interim.py states it; the
// device time of runs packed several to a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <sqlite3.h>

#include "fit/planner.h"
#include "store/store.h"
#include "tests/test_support.h"

TEST_CASE("planner: seeds needed for a known sd, against the closed form", "[fit][planner]") {
  const double z975 = 1.959963984540054;
  for (double sd : {0.2, 0.3, 0.5, 1.0, 2.0}) {
    for (double effect : {0.1, 0.3}) {
      const double nz = fp4::fit::seeds_needed_normal(sd, effect);
      const int64_t n = fp4::fit::seeds_needed(sd, effect);
      INFO("sd " << sd << " pp, effect " << effect << " pp: n " << n << ", n_z " << nz);
      // (1.96 + 0.8416)² = 7.849 per (sd/effect)².
      CHECK_THAT(nz, Catch::Matchers::WithinRel(7.848879 * (sd / effect) * (sd / effect), 1e-5));
      if (nz > 10) CHECK(std::llabs(n - static_cast<int64_t>(std::ceil(nz + z975 * z975 / 2))) <= 1);
      CHECK(n >= static_cast<int64_t>(std::ceil(nz)));
    }
  }
  // Monotone: more noise, or a smaller effect, never fewer seeds.
  CHECK(fp4::fit::seeds_needed(1.0, 0.3) > fp4::fit::seeds_needed(0.5, 0.3));
  CHECK(fp4::fit::seeds_needed(0.5, 0.1) > fp4::fit::seeds_needed(0.5, 0.3));
  // Higher power, lower alpha: more seeds.
  CHECK(fp4::fit::seeds_needed(0.5, 0.3, 0.05, 0.9) > fp4::fit::seeds_needed(0.5, 0.3, 0.05, 0.8));
  CHECK(fp4::fit::seeds_needed(0.5, 0.3, 0.01, 0.8) > fp4::fit::seeds_needed(0.5, 0.3, 0.05, 0.8));
  // The first study: a seed sd of d near 0.3 pp and an effect of 0.3 pp (issue 32).
  CHECK(fp4::fit::seeds_needed(0.3, 0.3) == 10);
  CHECK_THROWS_AS(fp4::fit::seeds_needed(0.3, 0.0), std::invalid_argument);
}

TEST_CASE("planner: the variance-only interim rule", "[fit][planner]") {
  // interim.py: n = min(64, max(48, ceil((sd / 0.1)²))).
  CHECK(fp4::fit::interim_seeds(0.5, 0.1, 48, 64) == 48);
  CHECK(fp4::fit::interim_seeds(0.75, 0.1, 48, 64) == 57);
  CHECK(fp4::fit::interim_seeds(0.7, 0.1, 48, 64) == 49);  // (0.7 / 0.1)² = 48.999999999999986 in doubles: 49
  CHECK(fp4::fit::interim_seeds(1.0, 0.1, 48, 64) == 64);
  CHECK_THROWS_AS(fp4::fit::interim_seeds(1.0, 0.1, 65, 64), std::invalid_argument);
}

TEST_CASE("planner: a device's speed counts the runs packed on it", "[fit][planner]") {
  using fp4::fit::MeasuredAttempt;
  const double nan = std::nan("");
  std::vector<MeasuredAttempt> a;
  // Three d4 ufp4 runs share GPU 0 for their whole 100 s at 100 tokens/s each: the GPU trains 300.
  for (int i = 0; i < 3; ++i) a.push_back({"d4", "ufp4", "h", "cuda:0", 1000, 1100, 100});
  // A d4 bf16 run alone on GPU 1 (the same GPU of another host does not share it).
  a.push_back({"d4", "bf16", "h", "cuda:1", 1000, 1050, 250});
  a.push_back({"d2", "bf16", "other", "cuda:1", 1000, 1050, nan});
  // A d6 run on two GPUs at 400 tokens/s: 200 per GPU.
  a.push_back({"d6", "bf16", "h", "cuda:2,3", 0, 10, 400});
  // A d5 run whose GPU a failed attempt shared for the second half of its time: 1.5 runs on it.
  a.push_back({"d5", "e2m1", "h", "cuda:4", 0, 100, 60});
  a.push_back({"d5", "e2m1", "h", "cuda:4", 50, 100, nan});
  // An attempt that never ended counts for nothing.
  a.push_back({"d5", "e2m1", "h", "cuda:4", 0, 0, nan});
  const auto rates = fp4::fit::device_rates(a);
  REQUIRE(rates.size() == 4);
  const auto& packed = rates.at({"d4", "ufp4"});
  CHECK(packed.runs == 3);
  CHECK(packed.sharing == Approx(3.0));
  CHECK(packed.tokens_per_s == Approx(100.0));
  CHECK(packed.tokens_per_device_s == Approx(300.0));
  CHECK(rates.at({"d4", "bf16"}).sharing == Approx(1.0));
  CHECK(rates.at({"d4", "bf16"}).tokens_per_device_s == Approx(250.0));
  CHECK(rates.at({"d6", "bf16"}).tokens_per_device_s == Approx(200.0));
  CHECK(rates.at({"d5", "e2m1"}).sharing == Approx(1.5));
  CHECK(rates.at({"d5", "e2m1"}).tokens_per_device_s == Approx(90.0));
}

TEST_CASE("fp4lab plan: the first study's device time and the seeds its contrasts need, from its own store",
          "[fit][planner]") {
  fp4::test::ScratchDir dir;
  if (!fp4::test::copy_committed_study("first-study", dir.path())) {
    WARN("xz not found: skipped");
    return;
  }
  const auto r = fp4::test::run_fp4lab("plan '" + (dir / "study.toml").string() + "'", dir);
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("device time: 60 of 60 runs have succeeded") != std::string::npos);
  CHECK(r.out.find("effect 0.3 pp, power 80%, two-sided alpha 0.05") != std::string::npos);
  // ufp4 - e2m1 at d4 × 25M: six pilot seeds, a seed sd of d of 1.160 pp (about 120 seeds for 0.3 pp).
  std::string line;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);)
    if (l.find("ufp4 - e2m1") != std::string::npos && l.find("d4 25M (first-study, first-study-ablation)") != std::string::npos)
      line = l;
  REQUIRE_FALSE(line.empty());
  CHECK(line.find(" 1.160 ") != std::string::npos);
  CHECK(r.out.find("interim rule (variance only)") != std::string::npos);
  // Its runs shared one GPU three at a time (runs_per_gpu = 3): with the d6 runs of 100M tokens
  // not run yet, their device time is their tokens over the speed of a GPU packed as they were.
  {
    auto store = fp4::store::Store::open(dir / "first-study.db", fp4::store::Store::Mode::read_write);
    REQUIRE(sqlite3_exec(store->handle(), "UPDATE runs SET state = 'pending' WHERE name LIKE 'd6-100M-%-s0-lr0.001'",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  const auto left = fp4::test::run_fp4lab("plan '" + (dir / "study.toml").string() + "'", dir);
  INFO(left.err << left.out);
  REQUIRE(left.exit_code == 0);
  CHECK(left.out.find("device time: 56 of 60 runs have succeeded") != std::string::npos);
  std::string d6;
  std::istringstream out_lines(left.out);
  for (std::string l; std::getline(out_lines, l);)
    if (l.rfind("  d6 ", 0) == 0 && l.find(" ufp4 ") != std::string::npos) d6 = l;
  REQUIRE_FALSE(d6.empty());
  const size_t at = d6.find(" runs per device");
  REQUIRE(at != std::string::npos);
  const double sharing = std::stod(d6.substr(d6.rfind(' ', at - 1) + 1));
  CHECK(sharing > 1.5);  // packed: not the speed of a run alone
  CHECK(sharing <= 3.0);
  CHECK(left.out.find("note: this grid packs") == std::string::npos);  // measured as it plans to pack

  // A study planned before any of its runs (its store does not exist yet) reads the speeds of the
  // pilot's runs of the same size and recipe, and says so.
  std::string fresh = fp4::test::slurp(dir / "study.toml");
  const size_t at_store = fresh.find("store = \"first-study.db\"");
  REQUIRE(at_store != std::string::npos);
  fresh.replace(at_store, std::string("store = \"first-study.db\"").size(), "store = \"fresh.db\"");
  fp4::test::spit(dir / "fresh.toml", fresh);
  const auto alone = fp4::test::run_fp4lab("plan '" + (dir / "fresh.toml").string() + "'", dir);
  INFO(alone.err << alone.out);
  REQUIRE(alone.exit_code == 0);
  CHECK(alone.out.find("device time: 0 of 60 runs have succeeded") != std::string::npos);
  CHECK(alone.out.find("plus 60 run(s) of unknown speed") != std::string::npos);
  const auto piloted =
      fp4::test::run_fp4lab("plan '" + (dir / "fresh.toml").string() + "' --pilot '" + (dir / "first-study.db").string() + "'", dir);
  INFO(piloted.err << piloted.out);
  REQUIRE(piloted.exit_code == 0);
  CHECK(piloted.out.find("unknown speed") == std::string::npos);
  CHECK(fp4::test::count_of(piloted.out, "(the pilot's speed)") == 20);  // 5 sizes × 4 recipes
  CHECK(piloted.out.find("note: 60 run(s) at the speed the pilot's runs") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "fresh.db"));  // planning writes nothing

  // A malformed option is one line, exit 2.
  const auto bad = fp4::test::run_fp4lab("plan '" + (dir / "study.toml").string() + "' --power 1.5", dir);
  CHECK(bad.exit_code == 2);
}
