// test_report_docs.cpp — what the issue asks of the report's documentation and of the README's main
// job, checked against the tree: scripts/demo.sh ends by writing the default study's report and
// printing its path (the path the README names), and docs/report.md shows a real screenshot of it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>

#include "reports/report.h"
#include "sweeps/study.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;

TEST_CASE("scripts/demo.sh ends by writing the default study's report, at the path the README names", "[report][docs]") {
  const fs::path root = FP4LAB_SOURCE_DIR;
  // The last command of the script (comments and blank lines aside) is the report of the study it ran.
  std::istringstream script(fp4::test::slurp(root / "scripts/demo.sh"));
  std::string line, last, sweep_run;
  while (std::getline(script, line)) {
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    last = line.substr(start);
    if (last.find(" sweep run ") != std::string::npos) sweep_run = last;
  }
  CHECK(last == "\"$build/cli/fp4lab\" report \"$root/demo/study.toml\"");
  CHECK(sweep_run == "\"$build/cli/fp4lab\" sweep run \"$root/demo/study.toml\"");
  // fp4lab report prints the path of report.html (tests/test_report_real.cpp checks the output); for
  // the demo's TOML that is demo/demo-report/report.html, the path the README and docs give.
  const auto study = fp4::sweeps::read_study(root / "scripts/demo-study.toml", fp4::sweeps::DataCheck::plan,
                                             fp4::sweeps::Siblings::skip);
  CHECK(fp4::reports::default_report_dir(&study.declared, study.spec.store).filename() == "demo-report");  // beside the TOML: demo/
  const std::string readme = fp4::test::slurp(root / "README.md");
  CHECK(readme.find("`demo/demo-report/report.html`") != std::string::npos);
  CHECK(readme.find("fp4lab report demo/study.toml") != std::string::npos);
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
