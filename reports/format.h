// format.h — how numbers are written in the report's tables and text, in one place so that a loss
// or a gap reads the same in every table, in the Markdown and in the HTML.
#pragma once

#include <cstdint>
#include <string>

namespace fp4::reports {

std::string fmt_loss(double loss);                   // "1.2867"; "—" for NaN
std::string fmt_percent(double fraction, int decimals = 3);  // 0.0123 → "+1.230%"; "—" for NaN
std::string fmt_count(double n);                     // 53400 → "53.4k", 2e8 → "200M", 1.5e9 → "1.5B"
std::string fmt_number(double v, int significant = 4);  // "0.347", "2.14e+03"; "—" for NaN
std::string fmt_utc(double unix_seconds);            // "2026-12-01 20:03 UTC"; "—" for 0
// A number in a CSV cell: every digit (%.17g, so it reads back to the same double); "" for NaN.
std::string csv_number(double v);

}  // namespace fp4::reports
