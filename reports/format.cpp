// format.cpp — see format.h.
#include "reports/format.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

namespace fp4::reports {

namespace {
constexpr const char* kNone = "—";
}

std::string fmt_loss(double loss) { return std::isfinite(loss) ? fmt::format("{:.4f}", loss) : kNone; }

std::string fmt_percent(double fraction, int decimals) {
  if (!std::isfinite(fraction)) return kNone;
  return fmt::format("{:+.{}f}%", 100 * fraction, decimals);
}

std::string fmt_count(double n) {
  if (!std::isfinite(n)) return kNone;
  static const char* kSuffix[] = {"", "k", "M", "B", "T", "P", "E"};
  if (std::fabs(n) < 1000) return fmt::format("{:g}", n);
  int k = 0;
  double m = n;
  while (std::fabs(m) >= 999.5 && k < 6) {
    m /= 1000;
    ++k;
  }
  return fmt::format("{:.3g}", m) + kSuffix[k];
}

std::string fmt_number(double v, int significant) {
  if (!std::isfinite(v)) return kNone;
  return fmt::format("{:.{}g}", v, significant);
}

std::string csv_number(double v) { return std::isfinite(v) ? fmt::format("{:.17g}", v) : std::string(); }

std::string fmt_utc(double t) {
  if (!(t > 0)) return kNone;
  const std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

}  // namespace fp4::reports
