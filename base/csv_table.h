// csv_table.h — the one reader of the small CSV files a user hands fp4lab (`fit --points`'s
// recipe,n,d,loss and `plan --rates`'s bench figures), so both read the same dialect and refuse the
// same mistakes with the same words.
//
// The dialect: cells separated by commas, each trimmed of blanks; a cell that starts with a double
// quote runs to its closing quote ("" inside is one quote), so a cell may hold commas; blank lines
// and lines whose first non-blank character is '#' are skipped. The first other line is the header:
// it must name every expected column once and nothing else, in any order. Every row after it has as
// many cells as the header. Each failure is a UserError of one line, "<file>:<line>: what".
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fp4 {

struct CsvRow {
  int line = 0;                    // 1-based line number in the file, for the caller's own errors
  std::vector<std::string> cells;  // in the order of the expected columns, not the file's
};

// Reads `path`, whose header must name exactly `columns`; `what` names the file in the error for
// an unreadable path ("points file"). Refuses a file with no header or no row after it.
std::vector<CsvRow> read_csv_table(const std::filesystem::path& path, const std::vector<std::string>& columns,
                                   const std::string& what);

// The cell with blanks (space, tab, carriage return) removed at both ends.
std::string trim_csv_cell(const std::string& s);

}  // namespace fp4
