// plot.h — a figure as data (panels of series on labelled axes) and the gnuplot script that draws
// it. Figures are described here and drawn by gnuplot's svg terminal (reports/gnuplot.h); every
// string in the script is a gnuplot_quote'd literal and every number is written by us, so the
// script is ours whatever the names in the store are.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fp4::reports {

enum class SeriesStyle { lines, points, linespoints, error_bars, band };

struct Series {
  std::string title;              // the legend entry; empty: none
  std::string color = "#000000";  // "#rrggbb"
  int dash = 1;                   // gnuplot dash type: 1 solid, 2 dashed, 3 dotted, 4 dash-dot, 5
  int point = 7;                  // gnuplot point type: 7 filled circle, 5 square, 9 triangle, ...
  double width = 1.5;             // line width
  SeriesStyle style = SeriesStyle::lines;
  // One row per point: lines, points, linespoints {x, y}; error_bars {x, y, y_low, y_high};
  // band {x, y_low, y_high}. A row holding a non-finite value breaks the line there.
  std::vector<std::vector<double>> rows;
};

// How tick labels are written: number (1.25), count (SI: 250k, 1.5M, 2B), percent (0.5%).
enum class TickFormat { number, count, percent };

struct Axis {
  std::string label;              // with its unit: "training tokens D", "loss (nats/token)"
  bool log = false;
  TickFormat format = TickFormat::number;
  std::optional<double> min, max; // default: the data's range, padded
  // A categorical axis: labels at these positions (then the range is [first - 0.5, last + 0.5]).
  std::vector<std::pair<double, std::string>> categories;
  bool slanted = false;           // categorical labels drawn at a slant (many or long names)
};

struct Panel {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  std::vector<double> y_lines;    // horizontal reference lines (dashed grey), e.g. a 0 % gap
};

struct Plot {
  std::vector<Panel> panels;      // laid out in rows of `columns`
  int columns = 2;
  int panel_width = 460, panel_height = 340;  // SVG pixels per panel
};

// One tick mark of an axis; minor ticks carry no label.
struct Tick {
  double value = 0;
  std::string label;
  bool minor = false;
};

// Ticks for [lo, hi]. Log axes: decades (1, 10, 100, ...) with unlabelled minor ticks at 2..9,
// or 1-2-5 multiples when the range spans less than about two decades, or a linear 1-2-5 step
// when it spans less than one; linear axes: 4 to 8 ticks at a 1-2-5 step.
std::vector<Tick> axis_ticks(double lo, double hi, bool log, TickFormat format);

// The data range of one axis of a panel (column 0 for x; 1..3 for y), padded for the plot and
// restricted to positive values on a log axis. Nothing when the panel holds no usable value.
std::optional<std::pair<double, double>> axis_range(const Panel& panel, bool x_axis);

// The complete gnuplot script: terminal (svg, fixed size, noenhanced text), the datablocks and
// the plot commands of every panel. `title` names the figure in the SVG's <title>.
std::string gnuplot_script(const Plot& plot);

}  // namespace fp4::reports
