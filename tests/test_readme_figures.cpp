// test_readme_figures.cpp — the README's speed figures are bench/RESULTS.md's "Current figures"
// table, copied row for row, and the README states no speed figure anywhere else: a figure that a
// newer measurement superseded cannot stay behind in the README (issue 35).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace {

// The Markdown table that follows `heading` (a line of its own), its rows as lines.
std::vector<std::string> table_after(const std::string& text, const std::string& heading) {
  const size_t at = text.find("\n" + heading + "\n");
  REQUIRE(at != std::string::npos);
  std::istringstream lines(text.substr(at + heading.size() + 2));
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("|", 0) == 0) rows.push_back(line);
    else if (!rows.empty() || line.rfind("## ", 0) == 0) break;  // the table ended, or a section began without one
  }
  return rows;
}

}  // namespace

TEST_CASE("the README's speed table is bench/RESULTS.md's current-figures table, and the only speed figures", "[docs]") {
  const std::filesystem::path root = FP4LAB_SOURCE_DIR;
  const std::string readme = fp4::test::slurp(root / "README.md");
  const std::vector<std::string> results = table_after(fp4::test::slurp(root / "bench/RESULTS.md"), "## Current figures");
  REQUIRE(results.size() >= 3);  // header, rule, at least one figure
  const std::vector<std::string> quoted = table_after(readme, "## Speed");
  CHECK(quoted == results);
  // Outside that table, no line of the README states a speed: tokens/s, MFU, step times, a ratio to
  // the peer, minutes for a grid.
  const std::regex speed(R"((tokens/s|tok/s|MFU|ms a step|× the (compiled )?(PyTorch )?peer|min (one run|three|packed)))");
  std::istringstream lines(readme);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("|", 0) == 0 && std::find(quoted.begin(), quoted.end(), line) != quoted.end()) continue;
    INFO(line);
    CHECK_FALSE(std::regex_search(line, speed));
  }
}
