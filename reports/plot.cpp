// plot.cpp — see plot.h.
#include "reports/plot.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "reports/escape.h"
#include "reports/format.h"

namespace fp4::reports {

namespace {

// Decimal places that show a multiple of 10^exponent exactly.
int decimals_for(int exponent) { return std::max(0, -exponent); }

std::string format_number(double v, int decimals) {
  if (v == 0) return "0";
  return fmt::format("{:.{}f}", v, decimals);
}

std::string tick_label(double v, int exponent, TickFormat f) {
  switch (f) {
    case TickFormat::count: return fmt_count(v);
    case TickFormat::percent: return format_number(v, decimals_for(exponent)) + "%";
    case TickFormat::number: break;
  }
  // Far from 1, "1e+06" reads better than a row of zeros.
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3)) return fmt::format("{:g}", v);
  return format_number(v, decimals_for(exponent));
}

// The 1-2-5 step that puts 4 to 8 ticks on a span, with its power of ten.
std::pair<double, int> nice_step(double span) {
  const int e = static_cast<int>(std::floor(std::log10(span / 5)));
  const double base = std::pow(10.0, e);
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (m * base) <= 8) return {m * base, m == 10.0 ? e + 1 : e};
  return {10 * base, e + 1};
}

std::vector<Tick> linear_ticks(double lo, double hi, TickFormat f) {
  std::vector<Tick> ticks;
  const auto [step, exponent] = nice_step(hi - lo);
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi * (1 + 1e-12) + 1e-12 * step; k += 1) {
    const double v = std::abs(k) < 0.5 ? 0.0 : k * step;
    ticks.push_back({v, tick_label(v, exponent, f), false});
  }
  return ticks;
}

std::vector<Tick> log_ticks(double lo, double hi, TickFormat f) {
  const int e_lo = static_cast<int>(std::floor(std::log10(lo))) - 1;
  const int e_hi = static_cast<int>(std::ceil(std::log10(hi))) + 1;
  // The sparsest mantissa set that labels at least 3 ticks in range.
  const std::vector<std::vector<int>> sets = {{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  std::vector<int> labelled;
  for (const auto& set : sets) {
    int n = 0;
    for (int e = e_lo; e <= e_hi; ++e)
      for (int m : set) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo && v <= hi) ++n;
      }
    labelled = set;
    if (n >= 3) break;
  }
  if (labelled.size() == 9) {
    // Less than one decade: a 1-2-5 linear step reads better than crowded mantissas.
    int n = 0;
    for (int e = e_lo; e <= e_hi; ++e)
      for (int m : labelled)
        if (const double v = m * std::pow(10.0, e); v >= lo && v <= hi) ++n;
    if (n < 3) return linear_ticks(lo, hi, f);
  }
  // Many decades: label every 2nd or 3rd one so labels do not collide.
  const int decades = e_hi - e_lo - 2;
  const int every = labelled.size() == 1 && decades > 8 ? (decades + 7) / 8 : 1;
  std::vector<Tick> ticks;
  for (int e = e_lo; e <= e_hi; ++e)
    for (int m = 1; m <= 9; ++m) {
      const double v = m * std::pow(10.0, e);
      if (v < lo || v > hi) continue;
      const bool major = std::find(labelled.begin(), labelled.end(), m) != labelled.end() &&
                         (m != 1 || every == 1 || ((e % every) + every) % every == 0);
      if (major) ticks.push_back({v, tick_label(v, e, f), false});
      else if (decades <= 6) ticks.push_back({v, "", true});
    }
  return ticks;
}

std::string number(double v) { return fmt::format("{:.17g}", v); }

// The data columns that carry an axis's values for a series' style.
std::vector<size_t> value_columns(SeriesStyle s, bool x_axis) {
  if (x_axis) return {0};
  switch (s) {
    case SeriesStyle::error_bars: return {1, 2, 3};
    case SeriesStyle::band: return {1, 2};
    default: return {1};
  }
}

bool row_finite(const std::vector<double>& row) {
  return std::all_of(row.begin(), row.end(), [](double v) { return std::isfinite(v); });
}

// Whether a row can be drawn on the panel's axes (finite, and positive where an axis is log).
bool row_drawable(const Panel& p, const Series& s, const std::vector<double>& row) {
  if (!row_finite(row) || row.empty()) return false;
  if (p.x.log && row[0] <= 0) return false;
  if (p.y.log)
    for (size_t c : value_columns(s.style, false))
      if (c < row.size() && row[c] <= 0) return false;
  return true;
}

std::string style_clause(const Series& s) {
  const std::string color = gnuplot_quote(s.color);
  switch (s.style) {
    case SeriesStyle::lines:
      return fmt::format("using 1:2 with lines lw {} dt {} lc rgb {}", s.width, s.dash, color);
    case SeriesStyle::points:
      return fmt::format("using 1:2 with points pt {} ps 0.9 lc rgb {}", s.point, color);
    case SeriesStyle::linespoints:
      return fmt::format("using 1:2 with linespoints lw {} dt {} pt {} ps 0.7 lc rgb {}", s.width, s.dash, s.point,
                         color);
    case SeriesStyle::error_bars:
      return fmt::format("using 1:2:3:4 with yerrorbars lw 1 pt {} ps 0.9 lc rgb {}", s.point, color);
    case SeriesStyle::band:
      return fmt::format("using 1:2:3 with filledcurves fc rgb {} fs transparent solid 0.18 noborder", color);
  }
  return "";
}

// gnuplot reads an explicit tic label as a printf format for the tic's value, so a '%' in it
// (ours: "0.5%"; a recipe's name on a categorical axis) is doubled.
std::string tic_label_literal(const std::string& label) {
  std::string out;
  for (char c : label) {
    out += c;
    if (c == '%') out += '%';
  }
  return gnuplot_quote(out);
}

std::string tics_command(const char* axis, const std::vector<Tick>& ticks) {
  std::string cmd = fmt::format("set {}tics (", axis);
  for (size_t i = 0; i < ticks.size(); ++i) {
    if (i) cmd += ", ";
    cmd += tic_label_literal(ticks[i].label) + " " + number(ticks[i].value) + (ticks[i].minor ? " 1" : "");
  }
  return cmd + ")\n";
}

void axis_commands(std::string& s, const char* name, const Axis& a, std::pair<double, double> range) {
  s += fmt::format("set {}label {}\n", name, gnuplot_quote(a.label));
  s += a.log ? fmt::format("set logscale {} 10\n", name) : fmt::format("unset logscale {}\n", name);
  s += fmt::format("set {}range [{}:{}]\n", name, number(range.first), number(range.second));
  if (!a.categories.empty()) {
    std::vector<Tick> ticks;
    for (const auto& [v, label] : a.categories) ticks.push_back({v, label, false});
    s += tics_command(name, ticks);
    if (a.slanted) s += fmt::format("set {}tics rotate by 30 right\n", name);
  } else {
    s += tics_command(name, axis_ticks(range.first, range.second, a.log, a.format));
  }
}

}  // namespace

std::vector<Tick> axis_ticks(double lo, double hi, bool log, TickFormat format) {
  if (!(hi > lo)) return {{lo, tick_label(lo, 0, format), false}};
  return log ? log_ticks(lo, hi, format) : linear_ticks(lo, hi, format);
}

std::optional<std::pair<double, double>> axis_range(const Panel& p, bool x_axis) {
  const Axis& a = x_axis ? p.x : p.y;
  if (!a.categories.empty())
    return std::make_pair(a.categories.front().first - 0.5, a.categories.back().first + 0.5);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Series& s : p.series)
    for (const auto& row : s.rows) {
      if (!row_drawable(p, s, row)) continue;
      for (size_t c : value_columns(s.style, x_axis))
        if (c < row.size()) {
          lo = std::min(lo, row[c]);
          hi = std::max(hi, row[c]);
        }
    }
  for (double y : x_axis ? std::vector<double>{} : p.y_lines)
    if (!a.log || y > 0) {
      lo = std::min(lo, y);
      hi = std::max(hi, y);
    }
  if (a.min) lo = *a.min;
  if (a.max) hi = *a.max;
  if (!(lo <= hi)) return std::nullopt;
  if (a.min && a.max) return std::make_pair(lo, hi);
  // Pad by 5 % of the span (in log space on a log axis); a single value gets a span around it.
  double plo = lo, phi = hi;
  if (a.log) {
    const double r = hi > lo ? std::pow(hi / lo, 0.05) : 1.25;
    plo = lo / r;
    phi = hi * r;
  } else {
    const double pad = hi > lo ? 0.05 * (hi - lo) : (lo != 0 ? 0.1 * std::fabs(lo) : 1.0);
    plo = lo - pad;
    phi = hi + pad;
  }
  return std::make_pair(a.min ? lo : plo, a.max ? hi : phi);
}

std::string gnuplot_script(const Plot& plot) {
  const int columns = std::max(1, std::min(plot.columns, static_cast<int>(plot.panels.size())));
  const int rows = std::max(1, static_cast<int>((plot.panels.size() + columns - 1) / columns));
  std::string s;
  s += "reset session\n";
  s += "set encoding utf8\n";
  s += fmt::format("set terminal svg size {},{} fixed noenhanced font 'sans-serif,12' linewidth 1 background rgb '#ffffff'\n",
                   columns * plot.panel_width, rows * plot.panel_height);
  s += "set output\n";  // standard output
  s += "set border lw 1 lc rgb '#444444'\n";
  s += "set grid xtics ytics lw 1 lc rgb '#e4e4e4' dt 1\n";
  s += "set key below left horizontal Left reverse noautotitle samplen 2.5 spacing 1.1 font ',11'\n";
  s += "set tics out nomirror font ',11'\n";
  s += "set title font ',12'\n";
  // Datablocks first: one per series, named by panel and series index.
  for (size_t p = 0; p < plot.panels.size(); ++p) {
    const Panel& panel = plot.panels[p];
    for (size_t k = 0; k < panel.series.size(); ++k) {
      const Series& series = panel.series[k];
      s += fmt::format("$p{}s{} << EOD\n", p, k);
      for (const auto& row : series.rows) {
        if (!row_drawable(panel, series, row)) {
          s += "\n";  // a blank line breaks a line plot
          continue;
        }
        for (size_t c = 0; c < row.size(); ++c) {
          if (c) s += ' ';
          s += number(row[c]);
        }
        s += '\n';
      }
      s += "EOD\n";
    }
  }
  if (plot.panels.size() > 1) s += fmt::format("set multiplot layout {},{}\n", rows, columns);
  for (size_t p = 0; p < plot.panels.size(); ++p) {
    const Panel& panel = plot.panels[p];
    s += "unset arrow\nunset label\n";
    s += fmt::format("set title {}\n", gnuplot_quote(panel.title));
    const auto xr = axis_range(panel, true), yr = axis_range(panel, false);
    if (!xr || !yr) {
      // Nothing drawable: an empty frame that says so, so a panel never silently disappears.
      s += "unset logscale\nset xrange [0:1]\nset yrange [0:1]\nunset xtics\nunset ytics\n";
      s += fmt::format("set xlabel {}\nset ylabel {}\n", gnuplot_quote(panel.x.label), gnuplot_quote(panel.y.label));
      s += "set label 'no data to draw' at graph 0.5, graph 0.5 center textcolor rgb '#888888'\n";
      s += "plot 1/0 notitle\n";
      s += "set xtics\nset ytics\n";
      continue;
    }
    s += "set xtics norotate\n";
    axis_commands(s, "x", panel.x, *xr);
    axis_commands(s, "y", panel.y, *yr);
    for (double y : panel.y_lines)
      if (!panel.y.log || y > 0)
        s += fmt::format("set arrow from graph 0, first {} to graph 1, first {} nohead lc rgb '#777777' dt 2 lw 1 back\n",
                         number(y), number(y));
    std::vector<std::string> parts;
    // Bands first, so lines and points draw over them.
    for (int pass = 0; pass < 2; ++pass)
      for (size_t k = 0; k < panel.series.size(); ++k) {
        const Series& series = panel.series[k];
        if ((series.style == SeriesStyle::band) != (pass == 0)) continue;
        const bool any = std::any_of(series.rows.begin(), series.rows.end(),
                                     [&](const auto& r) { return row_drawable(panel, series, r); });
        if (!any) continue;
        parts.push_back(fmt::format("$p{}s{} {} {}", p, k, style_clause(series),
                                    series.title.empty() ? std::string("notitle")
                                                         : "title " + gnuplot_quote(series.title)));
      }
    s += "plot " + fmt::format("{}", fmt::join(parts, ", \\\n     ")) + "\n";
  }
  if (plot.panels.size() > 1) s += "unset multiplot\n";
  return s;
}

}  // namespace fp4::reports
