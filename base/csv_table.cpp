// csv_table.cpp — see csv_table.h.
#include "base/csv_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "base/user_error.h"

namespace fp4 {
namespace {

// The cells of one line, trimmed; quoted cells unquoted.
std::vector<std::string> split_cells(const std::string& line, const std::string& where) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::string cell;
    size_t next;
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) throw UserError(where + ": a quoted cell has no closing quote");
        if (line[i] == '"' && i + 1 < line.size() && line[i + 1] == '"') cell += '"', ++i;
        else if (line[i] == '"') break;
        else cell += line[i];
      }
      ++i;  // past the closing quote
      next = line.find(',', i);
      if (!trim_csv_cell(line.substr(i, next == std::string::npos ? std::string::npos : next - i)).empty())
        throw UserError(where + ": text after a quoted cell's closing quote");
    } else {
      next = line.find(',', i);
      cell = trim_csv_cell(line.substr(i, next == std::string::npos ? std::string::npos : next - i));
    }
    out.push_back(std::move(cell));
    if (next == std::string::npos) return out;
    i = next + 1;
  }
}

// "the four columns", "the six columns": how the header's errors count what it lacks.
std::string count_words(size_t n) {
  static const char* const kWords[] = {"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"};
  return n < std::size(kWords) ? kWords[n] : std::to_string(n);
}

}  // namespace

std::string trim_csv_cell(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<CsvRow> read_csv_table(const std::filesystem::path& path, const std::vector<std::string>& columns,
                                   const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot read the {} (check the path)", path.string(), what));
  const std::string names = fmt::format("{}", fmt::join(columns, ","));
  std::vector<size_t> file_index;  // file_index[k]: where columns[k] sits in the file's rows
  std::vector<CsvRow> rows;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string text = trim_csv_cell(line);
    if (text.empty() || text[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", path.string(), line_no);
    std::vector<std::string> cells = split_cells(line, where);
    if (file_index.empty()) {
      std::map<std::string, size_t> at;  // name → the file's index
      for (size_t i = 0; i < cells.size(); ++i) {
        if (std::find(columns.begin(), columns.end(), cells[i]) == columns.end())
          throw UserError(fmt::format("{}: unknown column \"{}\": the header must name {}", where, cells[i], names));
        if (!at.emplace(cells[i], i).second) throw UserError(where + ": column \"" + cells[i] + "\" appears twice");
      }
      if (at.size() != columns.size())
        throw UserError(fmt::format("{}: the header must name the {} columns {}", where, count_words(columns.size()),
                                    names));
      for (const std::string& c : columns) file_index.push_back(at.at(c));
      continue;
    }
    if (cells.size() != columns.size())
      throw UserError(fmt::format("{}: {} cells, the header has {} ({})", where, cells.size(), columns.size(), names));
    CsvRow row{line_no, {}};
    for (size_t k : file_index) row.cells.push_back(std::move(cells[k]));
    rows.push_back(std::move(row));
  }
  if (file_index.empty())
    throw UserError(fmt::format("{}: empty: expected the header {} and rows", path.string(), names));
  if (rows.empty()) throw UserError(path.string() + ": no rows after the header");
  return rows;
}

}  // namespace fp4
