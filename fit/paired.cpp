// paired.cpp — see paired.h.
#include "fit/paired.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace fp4::fit {

namespace {

// The continued fraction of I_x(a, b) (modified Lentz; Numerical Recipes §6.4, eq. 6.4.5).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300;
  auto guard = [](double v) { return std::fabs(v) > tiny ? v : tiny; };
  double c = 1.0, d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
  double h = d;
  for (int m = 1; m < 10000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 / guard(1.0 + aa * d);
    c = guard(1.0 + aa / c);
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 / guard(1.0 + aa * d);
    c = guard(1.0 + aa / c);
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-15) return h;
  }
  throw std::runtime_error("incomplete_beta: the continued fraction did not converge");
}

}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (!(a > 0 && b > 0)) throw std::invalid_argument("incomplete_beta: a and b must be > 0");
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  // The fraction converges fast for x < (a+1)/(a+b+2); on the other side use I_x(a,b) = 1 - I_{1-x}(b,a).
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(a, b, x) / a;
  return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

double student_t_two_sided_p(double t, double df) {
  if (!(df > 0)) throw std::invalid_argument("student_t_two_sided_p: df must be > 0");
  return incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

double student_t_quantile(double p, double df) {
  if (!(p > 0.5 && p < 1.0)) throw std::invalid_argument("student_t_quantile: p must lie in (0.5, 1)");
  const double tail = 2.0 * (1.0 - p);
  double lo = 0.0, hi = 1.0;
  while (student_t_two_sided_p(hi, df) > tail) hi *= 2.0;
  for (int i = 0; i < 200; ++i) {  // 200 halvings: far below double precision, as stats.py does
    const double mid = 0.5 * (lo + hi);
    if (student_t_two_sided_p(mid, df) > tail) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

PairedT paired_t(const std::vector<double>& d, double level) {
  if (d.size() < 2) throw std::invalid_argument("paired_t: a paired interval needs at least two pairs");
  PairedT r;
  r.n = static_cast<int64_t>(d.size());
  const double n = static_cast<double>(d.size());
  r.mean = std::accumulate(d.begin(), d.end(), 0.0) / n;
  double ss = 0;
  for (double v : d) ss += (v - r.mean) * (v - r.mean);
  r.sd = std::sqrt(ss / (n - 1));
  r.se = r.sd / std::sqrt(n);
  const double half = student_t_quantile(0.5 + level / 2.0, n - 1) * r.se;
  r.ci = {r.mean - half, r.mean + half};
  r.p = r.se > 0 ? student_t_two_sided_p(r.mean / r.se, n - 1) : (r.mean != 0 ? 0.0 : 1.0);
  return r;
}

std::string SignFlip::method() const {
  return exact ? fmt::format("exact over 2^{} sign vectors", n) : fmt::format("Monte Carlo, {} draws", kSignFlipDraws);
}

SignFlip sign_flip_p(const std::vector<double>& d, uint64_t seed) {
  SignFlip r;
  r.n = static_cast<int>(d.size());
  double observed = 0, scale = 0;
  for (double v : d) {
    observed += v;
    scale += std::fabs(v);
  }
  observed = std::fabs(observed);
  // Sums equal to the observed one up to rounding count as extreme (ties), as in stats.py.
  const double eps = 1e-12 * std::max(1.0, scale);
  if (r.n <= kSignFlipExactUpTo) {
    const uint64_t vectors = uint64_t{1} << r.n;
    uint64_t hits = 0;
    for (uint64_t bits = 0; bits < vectors; ++bits) {
      double s = 0;
      for (int i = 0; i < r.n; ++i) s += (bits >> i) & 1 ? -d[static_cast<size_t>(i)] : d[static_cast<size_t>(i)];
      if (std::fabs(s) >= observed - eps) ++hits;
    }
    r.p = static_cast<double>(hits) / static_cast<double>(vectors);
    return r;
  }
  r.exact = false;
  std::mt19937_64 rng(seed);
  int64_t hits = 0;
  for (int64_t k = 0; k < kSignFlipDraws; ++k) {
    double s = 0;
    uint64_t bits = 0;
    for (int i = 0; i < r.n; ++i) {
      if (i % 64 == 0) bits = rng();
      s += bits & 1 ? -d[static_cast<size_t>(i)] : d[static_cast<size_t>(i)];
      bits >>= 1;
    }
    if (std::fabs(s) >= observed - eps) ++hits;
  }
  r.p = static_cast<double>(1 + hits) / static_cast<double>(1 + kSignFlipDraws);
  return r;
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  for (double v : p)
    if (std::isnan(v)) throw std::invalid_argument("holm_adjust: a p-value is NaN");
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adjusted(p.size());
  double running = 0;
  const size_t m = p.size();
  for (size_t rank = 0; rank < m; ++rank) {
    running = std::max(running, std::min(1.0, static_cast<double>(m - rank) * p[order[rank]]));
    adjusted[order[rank]] = running;
  }
  return adjusted;
}

}  // namespace fp4::fit
