// test_csv_table.cpp — base/csv_table: the one dialect of the user's CSV files (fit --points,
// plan --rates): columns in any order, comments, quoting, and the one-line errors.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "base/csv_table.h"
#include "base/user_error.h"
#include "tests/test_support.h"

namespace {
const std::vector<std::string> kColumns = {"recipe", "n", "note"};
}

TEST_CASE("read_csv_table: cells in the caller's column order, trimmed, unquoted, with their lines", "[base]") {
  const fp4::test::ScratchDir dir;
  const std::string text =
      "# a comment before the header\n"
      "\n"
      " note , recipe,n\r\n"
      "\"a, quoted \"\"note\"\"\",bf16 , 1e6\n"
      "   # an indented comment\n"
      ",ufp4,2e6\n";
  // A trailing comma is one more, empty cell.
  fp4::test::spit(dir / "t.csv", text + "bf16,3e6,x,\n");
  try {
    fp4::read_csv_table(dir / "t.csv", kColumns, "test file");
    FAIL("a row of four cells was read");
  } catch (const fp4::UserError& e) {
    CHECK(std::string(e.what()).find("t.csv:7: 4 cells, the header has 3 (recipe,n,note)") != std::string::npos);
  }
  fp4::test::spit(dir / "t.csv", text);
  const std::vector<fp4::CsvRow> rows = fp4::read_csv_table(dir / "t.csv", kColumns, "test file");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].line == 4);
  CHECK(rows[0].cells == std::vector<std::string>{"bf16", "1e6", "a, quoted \"note\""});
  CHECK(rows[1].line == 6);
  CHECK(rows[1].cells == std::vector<std::string>{"ufp4", "2e6", ""});
}

TEST_CASE("read_csv_table: each malformed file is one line naming file:line", "[base]") {
  const fp4::test::ScratchDir dir;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"recipe,n,note,extra\nbf16,1,x,y\n", "bad.csv:1: unknown column \"extra\": the header must name recipe,n,note"},
      {"recipe,n,n\n", "bad.csv:1: column \"n\" appears twice"},
      {"recipe,n\nbf16,1\n", "bad.csv:1: the header must name the three columns recipe,n,note"},
      {"recipe,n,note\nbf16,1\n", "bad.csv:2: 2 cells, the header has 3 (recipe,n,note)"},
      {"recipe,n,note\nbf16,1,\"open\n", "bad.csv:2: a quoted cell has no closing quote"},
      {"recipe,n,note\nbf16,1,\"closed\" then text\n", "bad.csv:2: text after a quoted cell's closing quote"},
      {"recipe,n,note\n# no row\n", "bad.csv: no rows after the header"},
      {"# only a comment\n\n", "bad.csv: empty: expected the header recipe,n,note and rows"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    fp4::test::spit(dir / "bad.csv", text);
    try {
      fp4::read_csv_table(dir / "bad.csv", kColumns, "test file");
      FAIL("no error");
    } catch (const fp4::UserError& e) {
      const std::string what = e.what();
      CHECK(what.find(message) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  try {
    fp4::read_csv_table(dir / "absent.csv", kColumns, "test file");
    FAIL("no error");
  } catch (const fp4::UserError& e) {
    CHECK(std::string(e.what()).find("absent.csv: cannot read the test file (check the path)") != std::string::npos);
  }
}
