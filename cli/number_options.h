// number_options.h — readable checks for numeric options. CLI11's own range validators print the
// type's whole range ("not in range 1 to 1.797...e+308", 309 digits); these say what the option
// takes in words, and read the text with std::from_chars before CLI11 converts it:
//   --jobs: expected a whole number from 1 to 4096, got "abc"
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

namespace fp4::cli {

// A whole number in [min, max] (max defaults to the largest int64).
CLI::Validator whole_number(int64_t min, int64_t max = std::numeric_limits<int64_t>::max());
// A seed: a whole number from 0 to 2^64 - 1.
CLI::Validator seed_number();
// A finite number in [min, max]; `open_min` excludes min itself ("greater than 0").
CLI::Validator real_number(double min, double max, bool open_min = false);

}  // namespace fp4::cli
