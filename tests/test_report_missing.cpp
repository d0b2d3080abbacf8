// test_report_missing.cpp — reports of studies that lack something say what is missing and never
// crash: an empty store, a TOML whose sweep has not started, a study still running, runs without a
// BF16 twin, a store without fits; and the command's own errors (no gnuplot, no store, bad
// arguments) are one line with exit code 2.
#include <catch2/catch.hpp>

#include "reports/format.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;
using fp4::store::RunState;
using fp4::test::HtmlDom;
using fp4::test::ScratchDir;

namespace {

struct Rendered {
  std::string html, md, text;
  size_t figures = 0;
};

// `fp4lab report ARGS --out DIR/out`, which must succeed, with every SVG well-formed.
Rendered render(const std::string& args, const ScratchDir& dir) {
  const fp4::test::CliRun r = fp4::test::run_report(args + " --out '" + (dir / "out").string() + "'", dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.err.empty());
  Rendered out;
  out.html = fp4::test::slurp(dir / "out" / "report.html");
  out.md = fp4::test::slurp(dir / "out" / "report.md");
  HtmlDom dom(out.html);
  out.text = dom.text();
  out.figures = dom.elements("figure").size();
  for (const std::string& svg : fp4::test::inline_svgs(out.html)) {
    std::string error;
    CHECK(fp4::test::xml_well_formed(svg, &error));
    INFO(error);
  }
  // Every section is there whatever is missing.
  for (const char* id : {"study", "runs", "loss-curves", "scaling", "gap-to-bf16", "precision-law", "noise-floor",
                         "ablations", "shrinkage-probe", "excluded-and-missing-runs"})
    CHECK(out.html.find("<section id=\"" + std::string(id) + "\">") != std::string::npos);
  return out;
}

}  // namespace

TEST_CASE("report of an empty store says there is nothing yet", "[report][report_missing]") {
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "empty");
  h.record();
  h.close();
  const Rendered r = render("--store '" + h.store_path().string() + "'", dir);
  CHECK(r.text.find("Nothing to report yet.") != std::string::npos);
  CHECK(r.text.find("The store holds no runs yet.") != std::string::npos);
  CHECK(r.text.find("No run of the main grid has an evaluation yet") != std::string::npos);
  CHECK(r.text.find("No finished quantized run has a finished BF16 twin yet") != std::string::npos);
  CHECK(r.text.find("No attempt has started") != std::string::npos);
  CHECK(r.figures == 0);
  CHECK(r.md.find("> **Nothing to report yet.**") != std::string::npos);
}

TEST_CASE("report of a TOML whose sweep has not started lists every run as not started", "[report][report_missing]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "later", "recipe = [\"bf16\", \"ufp4\"]\ntokens = [256]\n");
  const Rendered r = render("'" + toml.string() + "'", dir);
  CHECK_FALSE(fs::exists(dir / "later.db"));  // a report never creates the store
  CHECK(r.text.find("Store (not created yet).") != std::string::npos);
  CHECK(r.text.find("This study is not finished. 2 of 2 runs have no outcome yet") != std::string::npos);
  for (const char* name : {"d1-256-bf16-s0", "d1-256-ufp4-s0"}) {
    INFO(name);
    bool listed = false;
    HtmlDom dom(r.html);
    for (const auto& t : dom.tables())
      for (const auto& row : t.rows) listed = listed || (row.size() == 4 && row[0] == name && row[2] == "not started");
    CHECK(listed);
  }
}

TEST_CASE("report of a running study shows what finished and names what is missing", "[report][report_missing]") {
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "running");
  const auto b = h.add("d2-bf16", "bf16", "d2", 90000, 100000, 0, "m");
  const auto q = h.add("d2-ufp4", "ufp4", "d2", 90000, 100000, 0, "m");
  const auto e = h.add("d2-e2m1", "e2m1", "d2", 90000, 100000, 0, "m");
  const auto d = h.add("d2-nvfp4", "nvfp4", "d2", 90000, 100000, 0, "m");
  h.record();
  h.train(b, [](int64_t s) { return 3.0 - 0.1 * s; }, RunState::succeeded);
  h.train(q, [](int64_t s) { return 3.02 - 0.1 * s; }, RunState::succeeded);
  h.train(e, [](int64_t s) { return 3.03 - 0.1 * s; }, RunState::running);
  h.train(d, [](int64_t s) { return s < 5 ? 3.0 : std::nan(""); }, RunState::diverged,
          "diverged at step 5: the loss is not finite");
  h.close();
  const Rendered r = render("--store '" + h.store_path().string() + "'", dir);
  CHECK(r.text.find("This study is not finished. 1 of 4 runs have no outcome yet") != std::string::npos);
  CHECK(r.text.find("diverged at step 5: the loss is not finite") != std::string::npos);
  HtmlDom dom(r.html);
  bool running_listed = false, gap_shown = false, running_in_gaps = false;
  for (const auto& t : dom.tables()) {
    for (const auto& row : t.rows) {
      if (t.caption.rfind("Runs without an outcome yet", 0) == 0)
        running_listed = running_listed || (row[0] == "d2-e2m1" && row[2] == "running");
      if (t.caption.rfind("Observed gap", 0) == 0) {
        gap_shown = gap_shown || row[0] == "ufp4";
        running_in_gaps = running_in_gaps || row[0] == "e2m1";
      }
    }
  }
  CHECK(running_listed);
  CHECK(gap_shown);
  CHECK_FALSE(running_in_gaps);  // an unfinished pair is left out of the gap table, and said so
  CHECK(r.text.find("1 pair where the run or its BF16 twin has not finished is left out") != std::string::npos);
  CHECK(r.text.find("1 pair where the run or its BF16 twin diverged or failed is left out") != std::string::npos);
  CHECK(r.figures == 4);  // loss curves, the gap over training, final loss against N and against compute
}

TEST_CASE("report of runs without a BF16 twin names them and shows the gaps it can", "[report][report_missing]") {
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "twinless");
  const auto b = h.add("d2-bf16", "bf16", "d2", 90000, 100000, 0, "m1");
  const auto q = h.add("d2-ufp4", "ufp4", "d2", 90000, 100000, 0, "m1");
  const auto lone = h.add("d3-ufp4", "ufp4", "d3", 200000, 100000, 0, "m2");
  h.record();
  h.train(b, [](int64_t s) { return 3.0 - 0.1 * s; }, RunState::succeeded);
  h.train(q, [](int64_t s) { return 3.03 - 0.1 * s; }, RunState::succeeded);
  h.train(lone, [](int64_t s) { return 2.9 - 0.1 * s; }, RunState::succeeded);
  h.close();
  const Rendered r = render("--store '" + h.store_path().string() + "'", dir);
  CHECK(r.text.find("No BF16 twin: 1 quantized run has no BF16 run at the same grid point") != std::string::npos);
  CHECK(r.text.find("d3-ufp4") != std::string::npos);
  HtmlDom dom(r.html);
  int gap_rows = 0;
  for (const auto& t : dom.tables())
    if (t.caption.rfind("Observed gap", 0) == 0) gap_rows = static_cast<int>(t.rows.size());
  CHECK(gap_rows == 1);
  // (3.03 - 0.1·10 + 0.01) / (3.0 - 0.1·10 + 0.01) - 1, the final eval losses.
  CHECK(r.text.find(fp4::reports::fmt_percent(2.04 / 2.01 - 1)) != std::string::npos);
}

TEST_CASE("report: a missing gnuplot, store or argument is one line and exit code 2", "[report][report_missing]") {
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "s");
  h.record();
  h.close();
  // No gnuplot on PATH: one line naming the Debian package, and nothing written.
  const fp4::test::CliRun no_gnuplot = fp4::test::run_fp4lab(
      "report --store '" + h.store_path().string() + "' --out '" + (dir / "out").string() + "'", dir.path());
  REQUIRE(no_gnuplot.exit_code == 0);  // with gnuplot
  fs::remove_all(dir / "out");
  const std::string env = "env PATH='" + (dir / "empty-path").string() + "' ";
  const std::string cmd = env + "'" + std::string(FP4LAB_BINARY) + "' report --store '" + h.store_path().string() +
                          "' --out '" + (dir / "out").string() + "' >'" + (dir / "o.txt").string() + "' 2>'" +
                          (dir / "e.txt").string() + "'";
  const int status = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(status) == 2);
  const std::string err = fp4::test::slurp(dir / "e.txt");
  CHECK(err.find("gnuplot-nox") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(dir / "out" / "report.html"));

  const auto missing = fp4::test::run_report("--store '" + (dir / "nope.db").string() + "'", dir.path());
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("nope.db") != std::string::npos);
  CHECK(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
  const auto neither = fp4::test::run_report("", dir.path());
  CHECK(neither.exit_code == 2);
  const auto both = fp4::test::run_report("x.toml --store '" + h.store_path().string() + "'", dir.path());
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("exactly one of") != std::string::npos);
  fp4::test::spit(dir / "not-a-store.db", "hello");
  const auto garbage = fp4::test::run_report("--store '" + (dir / "not-a-store.db").string() + "'", dir.path());
  CHECK(garbage.exit_code == 2);
  CHECK(std::count(garbage.err.begin(), garbage.err.end(), '\n') == 1);
}

TEST_CASE("report paths inside the study's repository are written relative to its root, from another directory",
          "[report][report_missing]") {
  ScratchDir dir;
  const fs::path repo = dir / "repo";
  fs::create_directories(repo / ".git");
  fs::create_directories(repo / "study");
  const fs::path toml = fp4::test::write_tiny_grid(repo / "study", "paths", "recipe = [\"bf16\"]\ntokens = [256]\n");
  // fp4lab runs in the test's working directory, neither the repository nor above it.
  const auto sweep = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  INFO(sweep.err);
  REQUIRE(sweep.exit_code == 0);
  const auto report = [&] {
    const auto r = fp4::test::run_report("'" + toml.string() + "' --out '" + (dir / "out").string() + "'", dir.path());
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return fp4::test::slurp(dir / "out" / "report.md");
  };
  // Run the way scripts/demo.sh runs it (absolute paths, from wherever the user is): the report
  // names the store, the grid and the commands to reproduce it from the repository's root.
  std::string md = report();
  CHECK(md.find(dir.path().string()) == std::string::npos);
  CHECK(md.find("`study/paths.db`") != std::string::npos);
  CHECK(md.find("| paths | study/paths.toml |") != std::string::npos);
  CHECK(md.find("build/cli/fp4lab sweep run study/paths.toml\n") != std::string::npos);
  CHECK(md.find("build/cli/fp4lab report study/paths.toml\n") != std::string::npos);
  // Outside any repository and outside the working directory a path is written as given.
  fs::remove_all(repo / ".git");
  md = report();
  CHECK(md.find("build/cli/fp4lab report " + toml.string() + "\n") != std::string::npos);
}

TEST_CASE("report of a study with MoE runs draws their expert load, without them there is no such figure",
          "[report][report_missing][moe]") {
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), "experts");
  const auto bf16 = h.add("moe-bf16", "bf16", "d1-e4k2", 50000, 1000, 0, "m0");
  const auto ufp4 = h.add("moe-ufp4", "ufp4", "d1-e4k2", 50000, 1000, 0, "m0");
  const auto dense = h.add("dense-bf16", "bf16", "d1", 50000, 1000, 0, "m1");
  h.record();
  for (const auto* p : {&bf16, &ufp4, &dense}) h.train(*p, [](int64_t s) { return 4.0 - 0.1 * s; }, RunState::succeeded);
  // Two MoE blocks; the load evens out over training (CV 1/s and 2/s).
  for (const auto* p : {&bf16, &ufp4}) {
    fp4::store::MetricsBatch b;
    for (int64_t s = 1; s <= 10; ++s)
      for (int layer : {0, 1}) {
        const std::string key = "moe/" + std::to_string(layer) + "/load_cv";
        b.metrics.push_back({key, s, s * 100, (layer + 1.0) / static_cast<double>(s), false});
      }
    h.store().ingest(p->id, b, 0);
  }
  h.close();
  const Rendered r = render("--store '" + h.store_path().string() + "'", dir);
  CHECK(r.html.find("id=\"figure-expert-load\"") != std::string::npos);
  const std::vector<std::vector<std::string>> csv =
      fp4::test::read_csv(fp4::test::slurp(dir / "out" / "expert_load.csv"));
  REQUIRE(csv.size() == 1 + 2 * 10);  // the header, then every step of both MoE runs; the dense run has none
  CHECK(csv[0] == std::vector<std::string>{"run", "run_id", "model", "recipe", "step", "tokens", "load_cv_mean"});
  for (size_t i = 1; i < csv.size(); ++i) {
    const double step = std::stod(csv[i][4]);
    CHECK(std::stod(csv[i][6]) == Approx(1.5 / step));  // the mean of 1/s and 2/s
  }
  CHECK(fp4::test::undocumented_csv_files(dir / "out").empty());

  // A dense study: no figure, no file.
  ScratchDir dense_dir;
  fp4::test::HandStudy d(dense_dir.path(), "dense");
  const auto only = d.add("dense-bf16", "bf16", "d1", 50000, 1000, 0, "m1");
  d.record();
  d.train(only, [](int64_t s) { return 4.0 - 0.1 * s; }, RunState::succeeded);
  d.close();
  const Rendered rd = render("--store '" + d.store_path().string() + "'", dense_dir);
  CHECK(rd.html.find("figure-expert-load") == std::string::npos);
  CHECK_FALSE(fs::exists(dense_dir / "out" / "expert_load.csv"));
}
