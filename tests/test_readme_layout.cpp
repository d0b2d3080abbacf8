// The README's "Layout" section names every top-level directory of the tree, and only what exists
// (issue 14: the layout section must match the tree).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "base/shell_quote.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace {

// The first word of every unindented line of the README's Layout block ("cli/", ".ci/run", ...).
std::set<std::string> layout_entries(const std::string& readme) {
  const std::string heading = "## Layout\n\n```\n";
  const size_t begin = readme.find(heading);
  REQUIRE(begin != std::string::npos);
  const size_t end = readme.find("```\n", begin + heading.size());
  REQUIRE(end != std::string::npos);
  std::istringstream block(readme.substr(begin + heading.size(), end - begin - heading.size()));
  std::set<std::string> out;
  for (std::string line; std::getline(block, line);)
    if (!line.empty() && line[0] != ' ') out.insert(line.substr(0, line.find(' ')));
  return out;
}

// The top-level directories holding tracked files (git ls-files), e.g. "cli/"; empty when the
// source is not a git checkout.
std::set<std::string> tracked_top_directories(const fs::path& root) {
  std::set<std::string> out;
  FILE* p = ::popen(("git -C " + fp4::shell_quote(root.string()) + " ls-files 2>/dev/null").c_str(), "r");
  if (p == nullptr) return out;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  ::pclose(p);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (const size_t slash = line.find('/'); slash != std::string::npos) out.insert(line.substr(0, slash + 1));
  return out;
}

}  // namespace

TEST_CASE("the README's layout section matches the tree", "[docs]") {
  const fs::path root = FP4LAB_SOURCE_DIR;
  const std::set<std::string> entries = layout_entries(fp4::test::slurp(root / "README.md"));
  // Everything named exists.
  for (const std::string& e : entries) {
    INFO("README names " << e);
    CHECK(fs::exists(root / e));
  }
  const std::set<std::string> dirs = tracked_top_directories(root);
  if (dirs.empty()) {
    WARN("not a git checkout: the README's directories were not compared with the tracked tree");
    return;
  }
  // Every tracked top-level directory is named (as "dir/", or through a file in it like ".ci/run").
  for (const std::string& d : dirs) {
    bool named = entries.count(d) > 0;
    for (const std::string& e : entries) named = named || e.rfind(d, 0) == 0;
    INFO("tracked directory " << d);
    CHECK(named);
  }
}
