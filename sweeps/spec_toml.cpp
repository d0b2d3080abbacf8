// spec_toml.cpp — typed, located reads of TOML nodes for the sweep spec (see spec_toml.h).
#include "sweeps/spec_toml.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "base/user_error.h"

namespace fp4::sweeps::detail {

Loc loc_of(const toml::source_region& r) {
  // toml++ leaves positions at 0 for nodes it created itself; 1:1 still names the file usefully.
  return Loc{std::max<uint32_t>(1, r.begin.line), std::max<uint32_t>(1, r.begin.column)};
}
Loc loc_of(const toml::node& n) { return loc_of(n.source()); }
Loc loc_of(const toml::key& k) { return loc_of(k.source()); }

void SpecErrors::fail(Loc at, const std::string& key, const std::string& what) const {
  std::string line = fmt::format("{}:{}:{}: ", file_, at.line, at.col);
  if (!key.empty()) line += key + ": ";
  throw UserError(line + what);
}

std::string dotted(const std::string& prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
}

std::string number_text(double v) { return fmt::format("{}", v); }

std::string describe(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "the string \"" + n.as_string()->get() + "\"";
    case toml::node_type::integer: return fmt::format("the integer {}", n.as_integer()->get());
    case toml::node_type::floating_point: return "the number " + number_text(n.as_floating_point()->get());
    case toml::node_type::boolean: return n.as_boolean()->get() ? "true" : "false";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

void check_keys(const toml::table& table, const std::string& table_name, const std::set<std::string>& known,
                const SpecErrors& errors) {
  for (auto&& [key, value] : table) {
    (void)value;
    if (!known.count(std::string(key.str())))
      errors.fail(loc_of(key), dotted(table_name, key.str()),
                  table_name.empty() ? fmt::format("is not a known table; a sweep spec has: {}", fmt::join(known, ", "))
                                     : fmt::format("is not a known key; [{}] has: {}", table_name, fmt::join(known, ", ")));
  }
}

const toml::table& require_table(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  if (!n.is_table()) errors.fail(loc_of(n), key, "must be a table, got " + describe(n));
  return *n.as_table();
}

int64_t read_integer(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  if (n.is_integer()) return n.as_integer()->get();
  if (n.is_floating_point()) {
    // 1e8 is a natural way to write a whole number; 1.5 is not one. Beyond 2^53 a double no longer
    // holds every integer, so a float that large cannot be trusted to mean the integer it shows.
    const double d = n.as_floating_point()->get();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  errors.fail(loc_of(n), key, "must be an integer, got " + describe(n));
}

int read_small_int(const toml::node& n, const std::string& key, int64_t min_value, const SpecErrors& errors) {
  const int64_t v = read_integer(n, key, errors);
  if (v < min_value) errors.fail(loc_of(n), key, fmt::format("must be >= {}, got {}", min_value, v));
  if (v > std::numeric_limits<int>::max()) errors.fail(loc_of(n), key, fmt::format("is too large, got {}", v));
  return static_cast<int>(v);
}

std::optional<int64_t> parse_count_text(std::string_view text) {
  size_t i = 0;
  std::string digits;  // the mantissa's digits, the decimal point dropped
  int fraction_digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') digits.push_back(text[i++]);
  if (digits.empty()) return std::nullopt;
  if (i < text.size() && text[i] == '.') {
    ++i;
    const size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') digits.push_back(text[i++]);
    fraction_digits = static_cast<int>(i - start);
    if (fraction_digits == 0) return std::nullopt;
  }
  int exponent = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k': case 'K': exponent = 3; break;
      case 'M': exponent = 6; break;
      case 'B': case 'G': exponent = 9; break;
      case 'T': exponent = 12; break;
      default: return std::nullopt;
    }
    ++i;
  }
  if (i != text.size()) return std::nullopt;
  // Exact decimal arithmetic: "1.5B" is 15 · 10^8, never 1.5 · 1e9 rounded.
  int shift = exponent - fraction_digits;
  while (shift < 0) {
    if (digits.back() != '0') return std::nullopt;  // "1.5" tokens is not a whole count
    digits.pop_back();
    ++shift;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t value = 0;
  for (char c : digits) {
    const int d = c - '0';
    if (value > (kMax - d) / 10) return std::nullopt;
    value = value * 10 + d;
  }
  for (; shift > 0; --shift) {
    if (value > kMax / 10) return std::nullopt;
    value *= 10;
  }
  return value;
}

int64_t read_count(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  if (n.is_string()) {
    const auto v = parse_count_text(n.as_string()->get());
    if (!v)
      errors.fail(loc_of(n), key,
                  "must be a whole count such as 25000000, 2.5e7 or \"25M\" (suffixes k, M, B, T), got " +
                      describe(n));
    return *v;
  }
  if (!n.is_integer() && !n.is_floating_point())
    errors.fail(loc_of(n), key, "must be a count such as 25000000, 2.5e7 or \"25M\", got " + describe(n));
  return read_integer(n, key, errors);
}

double read_number(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
  if (n.is_floating_point()) {
    const double d = n.as_floating_point()->get();
    if (!std::isfinite(d)) errors.fail(loc_of(n), key, "must be a finite number, got " + describe(n));
    return d;
  }
  errors.fail(loc_of(n), key, "must be a number, got " + describe(n));
}

std::string read_string(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  if (!n.is_string()) errors.fail(loc_of(n), key, "must be a string, got " + describe(n));
  return n.as_string()->get();
}

nlohmann::json to_json(const toml::node& n, const std::string& key, const SpecErrors& errors) {
  switch (n.type()) {
    case toml::node_type::table: {
      nlohmann::json out = nlohmann::json::object();
      for (auto&& [k, v] : *n.as_table()) out[std::string(k.str())] = to_json(v, dotted(key, k.str()), errors);
      return out;
    }
    case toml::node_type::array: {
      nlohmann::json out = nlohmann::json::array();
      for (const toml::node& element : *n.as_array()) out.push_back(to_json(element, key, errors));
      return out;
    }
    case toml::node_type::string: return n.as_string()->get();
    case toml::node_type::integer: return n.as_integer()->get();
    case toml::node_type::floating_point: return read_number(n, key, errors);
    case toml::node_type::boolean: return n.as_boolean()->get();
    default: errors.fail(loc_of(n), key, "dates and times are not accepted here, got " + describe(n));
  }
}

}  // namespace fp4::sweeps::detail
