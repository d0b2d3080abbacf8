// pairs.cpp — see pairs.h.
#include "reports/pairs.h"

#include <cmath>
#include <limits>
#include <map>

namespace fp4::reports {

Twins bf16_twins(const Study& st) {
  std::map<std::string, const StudyRun*> baseline_of;
  for (const StudyRun& r : st.runs)
    if (r.record.baseline) baseline_of.emplace(r.record.match_key, &r);
  Twins t;
  for (const StudyRun& r : st.runs) {
    if (r.record.baseline) continue;
    const auto it = baseline_of.find(r.record.match_key);
    if (it == baseline_of.end()) t.without.push_back(&r);
    else t.pairs.push_back({&r, it->second});
  }
  return t;
}

int smoothing_window(const ReportOptions& o, int64_t steps) {
  if (o.smooth_steps > 0) return o.smooth_steps;
  return static_cast<int>(std::max<int64_t>(1, (steps + 10) / 20));
}

std::vector<double> trailing_mean(const std::vector<double>& v, int window) {
  std::vector<double> out(v.size());
  double sum = 0;
  int nans = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) ++nans;
    else sum += v[i];
    if (i >= static_cast<size_t>(window)) {
      const double old = v[i - static_cast<size_t>(window)];
      if (std::isnan(old)) --nans;
      else sum -= old;
    }
    const size_t n = std::min(i + 1, static_cast<size_t>(window));
    out[i] = nans > 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(n);
  }
  return out;
}

GapCurve train_gap_curve(const Study& st, const TwinPair& p, int window) {
  GapCurve g;
  auto rows_of = [&](const StudyRun* r) -> const std::vector<sweeps::MetricRow>* {
    const auto run = st.curves.find(r->record.id);
    if (run == st.curves.end()) return nullptr;
    const auto loss = run->second.find("train/loss");
    return loss == run->second.end() ? nullptr : &loss->second;
  };
  const auto* a = rows_of(p.run);
  const auto* b = rows_of(p.bf16);
  if (a == nullptr || b == nullptr) return g;
  // Both runs train the same steps on the same batches; align on the step anyway.
  std::vector<double> la, lb;
  size_t j = 0;
  for (const auto& ra : *a) {
    while (j < b->size() && (*b)[j].step < ra.step) ++j;
    if (j == b->size()) break;
    if ((*b)[j].step != ra.step) continue;
    g.steps.push_back(ra.step);
    g.tokens.push_back(ra.tokens);
    la.push_back(ra.is_nan ? std::nan("") : ra.value);
    lb.push_back((*b)[j].is_nan ? std::nan("") : (*b)[j].value);
  }
  const std::vector<double> sa = trailing_mean(la, window), sb = trailing_mean(lb, window);
  for (size_t i = 0; i < sa.size(); ++i) g.gap.push_back(sa[i] / sb[i] - 1);
  return g;
}

}  // namespace fp4::reports
