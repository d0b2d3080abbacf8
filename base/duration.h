// duration.h — a length of time as people write it on a command line: "90s", "10m", "1h30m",
// "1.5h", "2d", or plain seconds "600".
#pragma once

#include <optional>
#include <string_view>

namespace fp4 {

// Seconds, when `text` is one or more <number><unit> parts (units d, h, m, s; a bare number is
// seconds), each number finite and >= 0, in order from the largest unit down, no unit twice;
// empty otherwise. "1h30m" = 5400, "0.5h" = 1800, "45" = 45.
std::optional<double> parse_duration_s(std::string_view text);

}  // namespace fp4
