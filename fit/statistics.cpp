// statistics.cpp — see statistics.h.
#include "fit/statistics.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace fp4::fit {

double quantile_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return kNaN;
  if (!(p >= 0 && p <= 1)) throw std::invalid_argument("quantile_sorted: p must lie in [0, 1]");
  const double h = static_cast<double>(sorted.size() - 1) * p;
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[lo + 1] - sorted[lo]);
}

Interval percentile_interval(std::vector<double> values, double level) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  if (values.size() < 2) return {};
  std::sort(values.begin(), values.end());
  const double tail = (1 - level) / 2;
  return {quantile_sorted(values, tail), quantile_sorted(values, 1 - tail)};
}

double student_t975(int df) {
  if (df < 1) throw std::invalid_argument("student_t975: df must be >= 1");
  static constexpr std::array<double, 30> table = {
      12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
      2.2010,  2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
      2.0796,  2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423};
  if (df <= 30) return table[static_cast<size_t>(df - 1)];
  const double z = 1.959963984540054, v = df;
  const double z3 = z * z * z, z5 = z3 * z * z;
  return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v);
}

MeanSpread mean_spread(const std::vector<double>& values) {
  MeanSpread m;
  if (values.empty()) return m;
  double sum = 0;
  m.min = m.max = values[0];
  for (double v : values) {
    sum += v;
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  const double n = static_cast<double>(values.size());
  m.mean = sum / n;
  if (values.size() < 2) return m;
  double ss = 0;
  for (double v : values) ss += (v - m.mean) * (v - m.mean);
  m.sd = std::sqrt(ss / (n - 1));
  const double half = student_t975(static_cast<int>(values.size()) - 1) * m.sd / std::sqrt(n);
  m.ci = {m.mean - half, m.mean + half};
  return m;
}

Line least_squares_line(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) throw std::invalid_argument("least_squares_line: x and y differ in length");
  Line line;
  if (x.size() < 2) return line;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(x.size());
  my /= static_cast<double>(x.size());
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (!(sxx > 0)) return line;
  line.slope = sxy / sxx;
  line.intercept = my - line.slope * mx;
  return line;
}

}  // namespace fp4::fit
