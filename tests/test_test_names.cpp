// test_test_names.cpp — every Catch2 test case is one ctest test. catch_discover_tests (CMake)
// passes each discovered name to ctest as a list item, and a CMake list splits at ';': a name
// with a ';' becomes a ctest test whose filter matches no test case, which Catch2 (v2) answers
// with "No tests ran" and exit 0, so it passes without running. This check keeps ';' out of
// every test case name, the [gpu] ones included.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace {

// The test case names declared in one source (the first string literal of each TEST_CASE).
std::vector<std::string> test_case_names(const std::string& source) {
  static const std::regex declaration(R"re(TEST_CASE\(\s*"((?:[^"\\]|\\.)*)")re");
  std::vector<std::string> names;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), declaration); it != std::sregex_iterator(); ++it)
    names.push_back((*it)[1].str());
  return names;
}

}  // namespace

TEST_CASE("no test case name holds a semicolon (ctest would split it and run nothing)", "[layers]") {
  const fs::path root = fs::path(FP4LAB_SOURCE_DIR) / "tests";
  int files = 0, names = 0, offending = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    ++files;
    for (const std::string& name : test_case_names(fp4::test::slurp(e.path()))) {
      ++names;
      if (name.find(';') != std::string::npos) {
        ++offending;
        UNSCOPED_INFO(fs::relative(e.path(), root).string() << ": \"" << name << "\"");
      }
    }
  }
  REQUIRE(files > 50);   // the walk found the tests
  REQUIRE(names > 300);  // and their declarations
  CHECK(offending == 0);
}

TEST_CASE("the test name check finds each declaration's name, semicolons included", "[layers]") {
  const std::vector<std::string> names = test_case_names(
      "TEST_CASE(\"a, b\", \"[x]\") {}\nTEST_CASE(\n    \"c; d \\\"e\\\"\",\n    \"[y]\") {}\n");
  REQUIRE(names.size() == 2);
  CHECK(names[0] == "a, b");
  CHECK(names[1] == "c; d \\\"e\\\"");
}
