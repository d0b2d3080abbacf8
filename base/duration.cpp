// duration.cpp — see duration.h.
#include "base/duration.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace fp4 {

std::optional<double> parse_duration_s(std::string_view text) {
  if (text.empty()) return std::nullopt;
  static constexpr struct {
    char unit;
    double seconds;
  } kUnits[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
  double total = 0;
  int last_unit = -1;  // index into kUnits of the previous part's unit
  size_t at = 0;
  while (at < text.size()) {
    size_t end = at;
    while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
    if (end == at) return std::nullopt;
    double value = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + end, value);
    if (ec != std::errc() || ptr != text.data() + end || !std::isfinite(value) || value < 0) return std::nullopt;
    int unit = 3;  // a bare number is seconds, and only alone: "1h30" could mean 30 s or 30 min
    if (end < text.size()) {
      unit = -1;
      for (int u = 0; u < 4; ++u)
        if (text[end] == kUnits[u].unit) unit = u;
      if (unit < 0) return std::nullopt;
      ++end;
    } else if (at != 0) {
      return std::nullopt;
    }
    if (unit <= last_unit) return std::nullopt;  // "30m1h", "1h1h"
    last_unit = unit;
    total += value * kUnits[unit].seconds;
    at = end;
  }
  return std::isfinite(total) ? std::optional<double>(total) : std::nullopt;
}

}  // namespace fp4
