// spec_toml.h — private to sweeps/spec*.cpp: TOML nodes read with their source locations.
//
// Every problem in a sweep spec is reported as one line "file:line:col: key: what; what to do".
// The helpers here turn a TOML node into a typed value (or JSON) and refuse anything else at the
// node's own location, so no caller ever has to reconstruct where a value came from.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace fp4::sweeps::detail {

// A 1-based position in the spec's text.
struct Loc {
  uint32_t line = 1;
  uint32_t col = 1;
};

Loc loc_of(const toml::node& n);
Loc loc_of(const toml::key& k);
Loc loc_of(const toml::source_region& r);

// Formats and throws the spec's errors; knows the file name every message starts with.
class SpecErrors {
 public:
  explicit SpecErrors(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }
  // "file:line:col: key: what" (the key may be empty: then "file:line:col: what").
  [[noreturn]] void fail(Loc at, const std::string& key, const std::string& what) const;

 private:
  std::string file_;
};

// "key" under "prefix": "train" + "lr" → "train.lr"; an empty prefix gives the key alone.
std::string dotted(const std::string& prefix, std::string_view key);

// A short rendering of what the user wrote, for "got ..." in messages: 3, 1.5, "abc", an array.
std::string describe(const toml::node& n);

// Refuses every key of `table` that is not in `known`, at the key's location, listing the known ones.
void check_keys(const toml::table& table, const std::string& table_name, const std::set<std::string>& known,
                const SpecErrors& errors);

// The node as a table, or an error at its location ("<key> must be a table").
const toml::table& require_table(const toml::node& n, const std::string& key, const SpecErrors& errors);

// Typed reads; each refuses another type (or a value it cannot represent) at the node's location.
// An integer may be written as an integral float (1e8), as the run config allows.
int64_t read_integer(const toml::node& n, const std::string& key, const SpecErrors& errors);
// An integer >= min_value that fits an int (GPU indices, jobs, attempts).
int read_small_int(const toml::node& n, const std::string& key, int64_t min_value, const SpecErrors& errors);
// A token count: an integer, an integral float, or a string with a suffix ("25M", "1.5B", "262k").
int64_t read_count(const toml::node& n, const std::string& key, const SpecErrors& errors);
// Any finite number (integers included).
double read_number(const toml::node& n, const std::string& key, const SpecErrors& errors);
std::string read_string(const toml::node& n, const std::string& key, const SpecErrors& errors);

// "25M" → 25000000, "1.5B" → 1500000000, "262k" → 262000, "100" → 100. Suffixes k/K (10^3),
// M (10^6), B/G (10^9), T (10^12); the result must be a whole number that fits int64.
// Empty when the text is not such a count.
std::optional<int64_t> parse_count_text(std::string_view text);

// The node as JSON: tables become objects, arrays arrays, integers int64, floats doubles. Dates and
// times, and floats that are not finite (JSON has no NaN), are refused at their location.
nlohmann::json to_json(const toml::node& n, const std::string& key, const SpecErrors& errors);

// The shortest text that reads back as `v` (0.003, 1e-05, 25): numbers in names and axis labels.
std::string number_text(double v);

}  // namespace fp4::sweeps::detail
