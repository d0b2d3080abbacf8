// user_error.h — the one exception type for errors the user caused: a bad flag, a malformed file,
// a value out of range, a missing input. Its message is the whole explanation on one line: what
// was wrong, where (file:line:col for TOML, the field for JSON, the flag), and what to do.
//
// cli/main.cpp maps it to exit code 2 at one place; anything else that escapes is an internal
// error or a failed run (exit 1). It is deliberately not std::invalid_argument, which the standard
// library also throws (std::stoi, std::bitset, ...) for reasons that are not the user's.
#pragma once

#include <stdexcept>
#include <string>

namespace fp4 {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace fp4
