// format.h — text written for people: durations and rates in progress lines, control characters
// in names.
#pragma once

#include <string>
#include <string_view>

namespace fp4 {

// "42s", "3m07s", "2h05m"; "?" for a negative, non-finite or absurd (> 3 years) duration.
std::string format_duration(double seconds);
// "950", "12.3k", "1.25M": a rate (tokens per second) to three or four significant digits.
std::string format_rate(double per_second);

// The offset of the first ASCII control character (0x00-0x1F or 0x7F: a newline, a tab, an escape)
// in `text`, or std::string_view::npos. Names and paths that reach a generated script must have none.
size_t find_control_character(std::string_view text);
// "\n", "\t", "\x1b": how such a character is named in a message.
std::string control_character_name(char c);

}  // namespace fp4
