// number_options.cpp — see number_options.h.
#include "cli/number_options.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "base/parse_number.h"

namespace fp4::cli {

CLI::Validator whole_number(int64_t min, int64_t max) {
  const std::string range = max == std::numeric_limits<int64_t>::max() ? fmt::format("{} or more", min)
                                                                       : fmt::format("from {} to {}", min, max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        const std::optional<int64_t> v = parse_integer<int64_t>(text);
        if (!v || *v < min || *v > max) return fmt::format("expected a whole number {}, got \"{}\"", range, text);
        return "";
      },
      "INT " + range, "whole_number");
}

CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!parse_integer<uint64_t>(text)) return fmt::format("expected a whole number from 0 to 2^64 - 1, got \"{}\"", text);
        return "";
      },
      "INT from 0 to 2^64 - 1", "seed_number");
}

CLI::Validator real_number(double min, double max, bool open_min) {
  const std::string range = std::isinf(max) ? fmt::format("{} {}", open_min ? "greater than" : "at least", min)
                                            : fmt::format("from {} to {}", min, max);
  return CLI::Validator(
      [min, max, open_min, range](std::string& text) -> std::string {
        double v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        const bool ok = !text.empty() && ec == std::errc() && ptr == end && std::isfinite(v) &&
                        (open_min ? v > min : v >= min) && v <= max;
        if (!ok) return fmt::format("expected a number {}, got \"{}\"", range, text);
        return "";
      },
      "NUMBER " + range, "real_number");
}

}  // namespace fp4::cli
