// test_layers.cpp — the arrows of ARCHITECTURE.md that a grep can hold (issue 31): every SQL
// statement of fp4lab lives in store/, so no other module of the product names a table in a string
// or includes SQLite (the tests are outside that rule: they check the store from outside, as a user
// with the sqlite3 shell would); and a study's TOML is read by sweeps/ alone, once per command.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_support.h"

namespace fs = std::filesystem;
using fp4::test::count_of;

namespace {

// The C++ and CUDA sources below one module's folder.
std::vector<fs::path> module_files(const fs::path& root, const char* module) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root / module)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root / module)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".cpp" || ext == ".h" || ext == ".cu" || ext == ".cuh")) out.push_back(e.path());
  }
  return out;
}

// The C++ and CUDA sources of the product's modules other than store/.
std::vector<fs::path> sources_outside_store(const fs::path& root) {
  std::vector<fs::path> out;
  for (const char* module : {"base", "kernels", "engine", "quant", "sweeps", "fit", "reports", "cli", "bench"})
    for (fs::path& f : module_files(root, module)) out.push_back(std::move(f));
  return out;
}

// A line without its `//` comment (a comment may name a table; a statement is code).
std::string code_of(const std::string& line) {
  const size_t comment = line.find("//");
  return comment == std::string::npos ? line : line.substr(0, comment);
}

}  // namespace

TEST_CASE("no SQL statement and no SQLite header outside store/", "[layers]") {
  const fs::path root = FP4LAB_SOURCE_DIR;
  const std::regex sql(R"(\b(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|VIEW|INDEX)|ALTER\s+TABLE|PRAGMA)\b)");
  const std::regex sqlite_include(R"(#\s*include\s*[<"]sqlite3\.h[>"])");
  const std::vector<fs::path> files = sources_outside_store(root);
  REQUIRE(files.size() > 50);  // the walk found the tree
  int offending = 0;
  for (const fs::path& file : files) {
    std::istringstream lines(fp4::test::slurp(file));
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      const std::string code = code_of(line);
      if (std::regex_search(code, sql) || std::regex_search(code, sqlite_include)) {
        ++offending;
        UNSCOPED_INFO(fs::relative(file, root).string() << ":" << number << ": " << line);
      }
    }
  }
  CHECK(offending == 0);
}

TEST_CASE("the SQL check sees a statement where one is written", "[layers]") {
  // The pattern of the test above, on lines it must and must not flag.
  const std::regex sql(R"(\b(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|VIEW|INDEX)|ALTER\s+TABLE|PRAGMA)\b)");
  CHECK(std::regex_search(code_of(R"(  Statement s(db, "SELECT id FROM runs");)"), sql));
  CHECK(std::regex_search(code_of(R"(  q("UPDATE runs SET state = ?2");)"), sql));
  CHECK_FALSE(std::regex_search(code_of("  // the store's CREATE TABLE holds the same list"), sql));
  CHECK_FALSE(std::regex_search(code_of("  const bool selected = select(runs);"), sql));
}

namespace {

// Every source file below `module`, with its text.
std::vector<std::pair<fs::path, std::string>> module_sources(const fs::path& root, const char* module) {
  std::vector<std::pair<fs::path, std::string>> out;
  for (const fs::path& f : module_files(root, module)) out.emplace_back(f, fp4::test::slurp(f));
  REQUIRE_FALSE(out.empty());  // the module is where the test looks for it
  return out;
}

}  // namespace

TEST_CASE("every module includes only what ARCHITECTURE.md's arrows allow", "[layers]") {
  // The contract's arrows, and quant/ (the offline quantizer probe, which the contract does not
  // name; README "Layout" says why it is a module of its own): each module with the modules whose
  // headers it may include, itself first.
  const std::vector<std::pair<const char*, std::vector<std::string>>> arrows = {
      {"base", {"base"}},
      {"kernels", {"kernels"}},
      {"engine", {"engine", "kernels", "base"}},
      {"quant", {"quant", "engine", "kernels", "base"}},
      {"store", {"store", "base"}},
      {"sweeps", {"sweeps", "store", "engine", "base"}},
      {"fit", {"fit", "store", "base"}},
      {"reports", {"reports", "fit", "store", "base"}},
      {"cli", {"cli", "sweeps", "fit", "reports", "engine", "quant", "base"}},
  };
  const fs::path root = FP4LAB_SOURCE_DIR;
  const std::regex include(R"(^\s*#\s*include\s*"([a-z0-9_]+)/)");
  int includes = 0;
  for (const auto& [module, allowed] : arrows)
    for (const auto& [file, text] : module_sources(root, module)) {
      std::istringstream lines(text);
      int number = 0;
      for (std::string line; std::getline(lines, line);) {
        ++number;
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        ++includes;
        INFO(fs::relative(file, root).string() << ":" << number << ": " << line);
        CHECK(std::find(allowed.begin(), allowed.end(), m[1].str()) != allowed.end());
      }
    }
  CHECK(includes > 300);  // the walk read the includes
}

TEST_CASE("a study is read once per command, by sweeps/ alone", "[layers]") {
  // fit/ and reports/ include nothing of sweeps/ (the test above; the link check holds their
  // libraries to it too): they take the study as store::DeclaredStudy and cannot parse it.
  const fs::path root = FP4LAB_SOURCE_DIR;
  // Only sweeps/ parses a sweep TOML; the commands ask it through read_study, `fit`, `report` and
  // `plan` once each.
  for (const char* module : {"base", "kernels", "engine", "quant", "store", "fit", "reports", "cli"})
    for (const auto& [file, text] : module_sources(root, module)) {
      INFO(fs::relative(file, root).string());
      CHECK(count_of(text, "load_sweep_spec(") + count_of(text, "parse_sweep_spec(") == 0);
    }
  CHECK(count_of(fp4::test::slurp(root / "cli/fit_commands.cpp"), "read_study(") == 1);
  CHECK(count_of(fp4::test::slurp(root / "cli/report_commands.cpp"), "read_study(") == 1);
  CHECK(count_of(fp4::test::slurp(root / "cli/plan_commands.cpp"), "read_study(") == 1);
}
