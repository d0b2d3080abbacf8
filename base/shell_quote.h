// shell_quote.h — a string quoted for a POSIX shell, so that nothing a user wrote is re-parsed:
// the generated Slurm job's lines, the report's reproduce commands, the tests' command lines.
#pragma once

#include <string>

namespace fp4 {

// 'it'\''s': single quotes around the whole, each ' written as '\'' (close, escaped quote, open).
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

}  // namespace fp4
