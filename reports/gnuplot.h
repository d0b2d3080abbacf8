// gnuplot.h — figures are drawn by gnuplot (Debian's gnuplot-nox), started as a child process with
// an argument vector (never a shell); the script and its data go to its standard input, the SVG
// comes back on its standard output. Nothing a user wrote reaches gnuplot except as a quoted
// string literal (reports/escape.h gnuplot_quote).
#pragma once

#include <filesystem>
#include <string>

namespace fp4::reports {

// The gnuplot executable: `program` itself when it contains a '/', else the first executable of
// that name on PATH. A missing gnuplot is the user's to fix: fp4::UserError with one line naming
// the Debian package.
std::filesystem::path find_gnuplot(const std::string& program = "gnuplot");

// Runs `gnuplot` on `script` (commands and inline data) and returns what it wrote to stdout.
// gnuplot failing (an error in the script, a crash, more than `timeout_s` seconds) is an internal
// error: std::runtime_error naming `what` with gnuplot's first error line.
std::string run_gnuplot(const std::filesystem::path& gnuplot, const std::string& script, const std::string& what,
                        double timeout_s = 60);

}  // namespace fp4::reports
