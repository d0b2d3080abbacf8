// test_report_docs.cpp — what the issue asks of the report's documentation and of the README's main
// job, checked against the tree: scripts/demo.sh ends by writing the default study's report and
// printing its path (the path the README names), and docs/report.md shows a real screenshot of it.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "reports/report.h"
#include "sweeps/study.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;

TEST_CASE("scripts/demo.sh ends by writing the default study's report, at the path the README names", "[report][docs]") {
  const fs::path root = FP4LAB_SOURCE_DIR;
  // The last command of the script (comments and blank lines aside) is the report of the study it ran.
  std::istringstream script(fp4::test::slurp(root / "scripts/demo.sh"));
  std::vector<std::string> commands;
  for (std::string line; std::getline(script, line);) {
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    commands.push_back(line.substr(start));
  }
  REQUIRE(!commands.empty());
  CHECK(commands.back() == "\"$build/cli/fp4lab\" report \"$root/demo/study.toml\"");
  // The main job ends in fitted curves: the sweep, then the fit, then the report that draws it.
  const auto at = [&](const std::string& command) {
    return std::find(commands.begin(), commands.end(), command) - commands.begin();
  };
  const auto sweep_run = at("\"$build/cli/fp4lab\" sweep run \"$root/demo/study.toml\"");
  const auto fit = at("\"$build/cli/fp4lab\" fit \"$root/demo/study.toml\"");
  const auto n = static_cast<std::ptrdiff_t>(commands.size());
  CHECK(sweep_run < n);
  CHECK(fit < n);
  CHECK(sweep_run < fit);
  CHECK(fit < n - 1);
  // The first command is quick: the demo builds the executable only, without the CUDA backend (its
  // runs are on the CPU), as a unity build (tests/build/demo_unity_build.sh holds it to the regular
  // build's bits), in a folder of its own (scripts/test.sh builds everything into build/).
  CHECK(at("FP4LAB_BUILD_DIR=\"$build\" FP4LAB_BUILD_TARGETS=fp4lab \"$root/scripts/build.sh\" -DFP4LAB_CUDA=OFF "
           "-DCMAKE_UNITY_BUILD=ON") < sweep_run);
  CHECK(commands[2] == "build=${FP4LAB_BUILD_DIR:-$root/build-demo}");
  // fp4lab report prints the path of report.html (tests/test_report_real.cpp checks the output); for
  // the demo's TOML that is demo/demo-report/report.html, the path the README and docs give.
  const auto study = fp4::sweeps::read_study(root / "scripts/demo-study.toml", fp4::sweeps::DataCheck::plan,
                                             fp4::sweeps::Siblings::skip);
  CHECK(fp4::reports::default_report_dir(&study.declared, study.spec.store).filename() == "demo-report");  // beside the TOML: demo/
  const std::string readme = fp4::test::slurp(root / "README.md");
  CHECK(readme.find("`demo/demo-report/report.html`") != std::string::npos);
  CHECK(readme.find("fp4lab report demo/study.toml") != std::string::npos);
}

TEST_CASE("the default study's grid is one that every law can be fitted to", "[report][docs][fit]") {
  // The demo ends in fitted curves only if fp4lab fit accepts its grid: each recipe needs 3 distinct N
  // and 3 distinct D for chinchilla, and the precision law the baseline and another recipe. The
  // grid's own N and D with losses from a known law, fitted without bootstrap: every law fits.
  const fs::path root = FP4LAB_SOURCE_DIR;
  const auto spec = fp4::sweeps::load_sweep_spec(root / "scripts/demo-study.toml");
  std::set<std::string> recipes;
  std::string csv = "recipe,n,d,loss\n";
  for (const fp4::sweeps::GridPoint& p : spec.points) {
    recipes.insert(p.recipe_label);
    const double n = static_cast<double>(p.n_params_nonembedding), d = static_cast<double>(p.tokens);
    const double rho = p.recipe_label == "bf16" ? 1.0 : 0.9;
    csv += fmt::format("{},{},{},{:.17g}\n", p.recipe_label, n, d,
                       1.2 + 40 / std::pow(n * rho, 0.4) + 300 / std::pow(d * rho, 0.35));
  }
  CHECK(recipes == std::set<std::string>{"bf16", "e2m1", "ufp4"});
  for (const fp4::sweeps::GridPoint& p : spec.points)  // a source whose entropy rate is known
    CHECK(p.config["data"].get<std::string>().rfind("synthetic:markov?", 0) == 0);
  fp4::test::ScratchDir dir;
  fp4::test::spit(dir / "points.csv", csv);
  const auto fit = fp4::test::run_fp4lab("fit --points '" + (dir / "points.csv").string() + "' --bootstrap 0 --format json", dir);
  INFO(fit.err);
  REQUIRE(fit.exit_code == 0);
  const nlohmann::json fits = nlohmann::json::parse(fit.out)["fits"];
  int chinchilla = 0, precision = 0;
  for (const nlohmann::json& f : fits) {
    chinchilla += f["law"] == "chinchilla";
    precision += f["law"] == "precision";
  }
  CHECK(chinchilla == 3);
  CHECK(precision == 1);
}

TEST_CASE("docs/report.md shows a screenshot of the real report", "[report][docs]") {
  const fs::path root = FP4LAB_SOURCE_DIR;
  const std::string doc = fp4::test::slurp(root / "docs/report.md");
  CHECK(doc.find("](report-demo.png)") != std::string::npos);
  // A real PNG of a page (Chromium's screenshot, 1100 px wide), not a placeholder.
  const fp4::test::Image png = fp4::test::read_png(root / "docs/report-demo.png");
  CHECK(png.width >= 1000);
  CHECK(png.height >= 1000);
  // Not blank: the page has dark text on a light background.
  int dark = 0, light = 0;
  for (int y = 0; y < png.height; y += 7)
    for (int x = 0; x < png.width; x += 7) {
      const uint8_t* p = png.at(x, y);
      const int sum = p[0] + p[1] + p[2];
      dark += sum < 200;
      light += sum > 700;
    }
  CHECK(dark > 500);
  CHECK(light > dark);
}
