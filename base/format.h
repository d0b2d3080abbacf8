// format.h — numbers written for people in progress lines: durations and rates.
#pragma once

#include <string>

namespace fp4 {

// "42s", "3m07s", "2h05m"; "?" for a negative, non-finite or absurd (> 3 years) duration.
std::string format_duration(double seconds);
// "950", "12.3k", "1.25M": a rate (tokens per second) to three or four significant digits.
std::string format_rate(double per_second);

}  // namespace fp4
