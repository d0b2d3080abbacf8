// test_fit_planner.cpp — the planner's arithmetic (fit/planner.h, docs/statistics.md "Planning"):
// the seed count of a paired t-test for a known sd against the closed form with Guenther's
// correction, n_z + z²/2 (Guenther 1981), within one seed; more noise or a smaller effect needs
// more seeds; the variance-only interim rule as results/second-study/interim.py states it; the
// device time of runs packed several to a GPU; a rates file's bench figures (read, chosen by packing,
// used only where no store has measured a size and recipe, its errors at file:line) and the one
// bench/gpu_train.sh writes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <sqlite3.h>

#include "base/user_error.h"
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

TEST_CASE("planner: a rates file's rows, the packing a plan takes from it, and its errors at file:line",
          "[fit][planner][rates]") {
  fp4::test::ScratchDir dir;
  fp4::test::spit(dir / "rates.csv",
                  "# a comment, then the header in another order\n"
                  "recipe,size,tokens_per_s,runs_per_device,device,source\n"
                  "\n"
                  "ufp4,d4,3.35e6,1,NVIDIA H200,\"bench/RESULTS.md, a section (\"\"alone\"\")\"\n"
                  "ufp4,d4,4770000,3,NVIDIA H200,three runs under MPS\n"
                  "bf16, d4 ,5e6,4,NVIDIA H100,x\n");
  const std::vector<fp4::fit::BenchRate> rates = fp4::fit::read_bench_rates(dir / "rates.csv");
  REQUIRE(rates.size() == 3);
  CHECK(rates[0].size == "d4");
  CHECK(rates[0].recipe == "ufp4");
  CHECK(rates[0].tokens_per_s == 3.35e6);
  CHECK(rates[0].runs_per_device == 1);
  CHECK(rates[0].source == "bench/RESULTS.md, a section (\"alone\")");
  CHECK(rates[0].line == 4);
  CHECK(rates[2].size == "d4");  // cells are trimmed
  // The row at the grid's packing; else the nearest, the smaller of two as near.
  CHECK(fp4::fit::bench_rate_for(rates, "d4", "ufp4", 3)->line == 5);
  CHECK(fp4::fit::bench_rate_for(rates, "d4", "ufp4", 1)->line == 4);
  CHECK(fp4::fit::bench_rate_for(rates, "d4", "ufp4", 2)->line == 4);
  CHECK(fp4::fit::bench_rate_for(rates, "d4", "ufp4", 8)->line == 5);
  CHECK(fp4::fit::bench_rate_for(rates, "d4", "bf16", 1)->line == 6);
  CHECK(fp4::fit::bench_rate_for(rates, "d6", "ufp4", 1) == nullptr);

  // Each malformed file: a UserError naming file:line and what is wrong.
  const std::string header = "size,recipe,tokens_per_s,runs_per_device,device,source\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {header + "d4,ufp4,fast,1,H200,x\n", "bad.csv:2: column tokens_per_s: \"fast\" is not a number > 0"},
      {header + "d4,ufp4,-3,1,H200,x\n", "bad.csv:2: column tokens_per_s: \"-3\" is not a number > 0"},
      {header + "d4,ufp4,1e6,0,H200,x\n", "bad.csv:2: column runs_per_device: \"0\" is not a whole number >= 1"},
      {header + "d4,ufp4,1e6,1.5,H200,x\n", "bad.csv:2: column runs_per_device: \"1.5\" is not a whole number >= 1"},
      {header + "d4,ufp4,1e6,1,H200\n", "bad.csv:2: 5 cells, the header has 6"},
      {header + "d4,,1e6,1,H200,x\n", "bad.csv:2: column recipe: empty"},
      {header + "d4,ufp4,1e6,1,H200,\"x\n", "bad.csv:2: a quoted cell has no closing quote"},
      {header + "d4,ufp4,1e6,1,H200,x\n#\nd4,ufp4,2e6,1,H100,y\n",
       "bad.csv:4: d4 ufp4 at 1 run(s) per device is already given at line 2"},
      {"size,recipe,tokens,runs_per_device,device,source\n", "bad.csv:1: unknown column \"tokens\""},
      {"size,recipe,tokens_per_s,device,source\n", "bad.csv:1: the header must name the six columns"},
      {header, "bad.csv: no rows after the header"},
      {"# only a comment\n", "bad.csv: empty: expected the header"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    fp4::test::spit(dir / "bad.csv", text);
    try {
      fp4::fit::read_bench_rates(dir / "bad.csv");
      FAIL("no error");
    } catch (const fp4::UserError& e) {
      const std::string what = e.what();
      CHECK(what.find(message) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("fp4lab plan --rates: a bench figure where no store has measured a size and recipe, the store's where "
          "one has, and a malformed file in one line with exit 2",
          "[fit][planner][rates]") {
  fp4::test::ScratchDir dir;
  if (!fp4::test::copy_committed_study("first-study", dir.path())) {
    WARN("xz not found: skipped");
    return;
  }
  const std::string rates = (std::filesystem::path(FP4LAB_SOURCE_DIR) / "bench/train-rates.csv").string();
  // A study planned before any run of it, with no pilot: every size and recipe from the committed
  // bench figures, at the grid's packing (runs_per_gpu = 3: the ×3 rows), marked and noted.
  std::string fresh = fp4::test::slurp(dir / "study.toml");
  const size_t at_store = fresh.find("store = \"first-study.db\"");
  REQUIRE(at_store != std::string::npos);
  fresh.replace(at_store, std::string("store = \"first-study.db\"").size(), "store = \"fresh.db\"");
  fp4::test::spit(dir / "fresh.toml", fresh);
  const auto bench = fp4::test::run_fp4lab("plan '" + (dir / "fresh.toml").string() + "' --rates '" + rates + "'", dir);
  INFO(bench.err << bench.out);
  REQUIRE(bench.exit_code == 0);
  CHECK(bench.out.find("unknown speed") == std::string::npos);
  CHECK(fp4::test::count_of(bench.out, "(bench figure, train-rates.csv:") == 20);  // 5 sizes × 4 recipes
  CHECK(bench.out.find("note: 60 run(s) at bench figures from " + rates) != std::string::npos);
  CHECK(bench.out.find("trains at another speed") != std::string::npos);
  CHECK(bench.out.find("note: this grid packs") == std::string::npos);  // the ×3 rows: measured as it packs
  std::string d4;
  std::istringstream lines(bench.out);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("  d4 ", 0) == 0 && l.find(" ufp4 ") != std::string::npos) d4 = l;
  CHECK(d4.find("at 1.59M a run, 3.0 runs per device: 4.77M a device") != std::string::npos);
  // bench/RESULTS.md gives 13.5 min for this grid three to a GPU at these rates.
  CHECK(bench.out.find("total: 13m31s of device time") != std::string::npos);
  // Without --rates the same sizes are unknown, and the line says where figures are.
  const auto none = fp4::test::run_fp4lab("plan '" + (dir / "fresh.toml").string() + "'", dir);
  REQUIRE(none.exit_code == 0);
  CHECK(none.out.find("--rates FILE a bench's figures: bench/train-rates.csv") != std::string::npos);

  // The study's own store measured d6: with its d6 100M runs left to do, their speed is the
  // store's, not the bench's, though the rates file has d6 rows.
  {
    auto store = fp4::store::Store::open(dir / "first-study.db", fp4::store::Store::Mode::read_write);
    REQUIRE(sqlite3_exec(store->handle(), "UPDATE runs SET state = 'pending' WHERE name LIKE 'd6-100M-%-s0-lr0.001'",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
  }
  const auto own = fp4::test::run_fp4lab("plan '" + (dir / "study.toml").string() + "' --rates '" + rates + "'", dir);
  INFO(own.err << own.out);
  REQUIRE(own.exit_code == 0);
  CHECK(own.out.find("device time: 56 of 60 runs have succeeded") != std::string::npos);
  CHECK(fp4::test::count_of(own.out, "\n  d6 ") == 4);
  CHECK(own.out.find("(bench figure") == std::string::npos);
  CHECK(own.out.find("at bench figures") == std::string::npos);

  // A malformed rates file: one line naming file:line, exit 2, nothing planned.
  fp4::test::spit(dir / "bad.csv", "size,recipe,tokens_per_s,runs_per_device,device,source\n"
                                   "d4,ufp4,3.35M,1,NVIDIA H200,bench\n");
  const auto bad = fp4::test::run_fp4lab("plan '" + (dir / "fresh.toml").string() + "' --rates '" +
                                             (dir / "bad.csv").string() + "'",
                                         dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.empty());
  CHECK(bad.err.find("bad.csv:2: column tokens_per_s: \"3.35M\" is not a number > 0") != std::string::npos);
  CHECK(fp4::test::count_of(bad.err, "\n") == 1);
  const auto missing = fp4::test::run_fp4lab("plan '" + (dir / "fresh.toml").string() + "' --rates nosuch.csv", dir);
  CHECK(missing.exit_code == 2);
}

TEST_CASE("bench/gpu_train.sh RATES_CSV=FILE writes a rates file fp4lab plan reads", "[fit][planner][rates]") {
  fp4::test::ScratchDir dir;
  // A stand-in for `fp4lab train --config C --dir D --quiet`: a metrics.jsonl whose train rows after
  // the first make 2000, 3000, 4000 tokens/s (median 3000).
  fp4::test::write_script(dir / "fake-fp4lab",
                          "#!/bin/sh\nmkdir -p \"$5\"\ncat > \"$5/metrics.jsonl\" <<'EOF'\n"
                          "{\"kind\":\"run\",\"flops_per_token\":1000000}\n"
                          "{\"kind\":\"train\",\"step\":1,\"tokens_per_s\":100}\n"
                          "{\"kind\":\"train\",\"step\":2,\"tokens_per_s\":4000}\n"
                          "{\"kind\":\"train\",\"step\":3,\"tokens_per_s\":2000}\n"
                          "{\"kind\":\"train\",\"step\":4,\"tokens_per_s\":3000}\n"
                          "{\"kind\":\"end\",\"peak_device_bytes\":1048576}\n"
                          "EOF\n");
  const std::filesystem::path csv = dir / "rates.csv";
  const std::string cmd = "cd '" + dir.path().string() + "' && RATES_CSV='" + csv.string() +
                          "' DEVICE='Test GPU' SIZES=d2 RECIPES='bf16 ufp4' bash '" + FP4LAB_SOURCE_DIR +
                          "/bench/gpu_train.sh' ./fake-fp4lab 780 4 > table.md 2> err.txt";
  REQUIRE(std::system(cmd.c_str()) == 0);
  INFO(fp4::test::slurp(dir / "table.md") << fp4::test::slurp(dir / "err.txt") << fp4::test::slurp(csv));
  const std::vector<fp4::fit::BenchRate> rates = fp4::fit::read_bench_rates(csv);
  REQUIRE(rates.size() == 2);
  CHECK(rates[0].size == "d2");
  CHECK(rates[0].recipe == "bf16");
  CHECK(rates[1].recipe == "ufp4");
  CHECK(rates[0].tokens_per_s == 3000);
  CHECK(rates[0].runs_per_device == 1);
  CHECK(rates[0].device == "Test GPU");
  CHECK(rates[0].source.rfind("bench/gpu_train.sh ", 0) == 0);
  CHECK(rates[0].source.find("65536 tokens a step") != std::string::npos);
}
