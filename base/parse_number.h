// parse_number.h — whole-string integer parsing with std::from_chars: no exceptions, no locale, no
// leading whitespace or '+', and nothing left over. Text the user wrote ("first:99999999999", a
// GPU index, a model preset's layer count) is read through here, so an out-of-range number is a
// value to refuse in one line, never a std::out_of_range escaping from std::stoi.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>

namespace fp4 {

// The integer `text` spells in decimal, when it spells one that fits T; empty otherwise.
template <typename T>
std::optional<T> parse_integer(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

}  // namespace fp4
