// pairs.cpp — see pairs.h.
#include "reports/pairs.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "fit/contrasts.h"

namespace fp4::reports {

Twins bf16_twins(const Study& st, bool main_points_only) {
  std::map<std::string, const StudyRun*> baseline_of;
  std::set<std::string> main_keys;
  for (const StudyRun& r : st.runs) {
    if (r.record.baseline) baseline_of.emplace(r.record.match_key, &r);
    if (st.in_main(r)) main_keys.insert(r.replicate_key);
  }
  Twins t;
  for (const StudyRun& r : st.runs) {
    if (r.record.baseline) continue;
    if (main_points_only && !main_keys.count(r.replicate_key)) continue;
    const auto it = baseline_of.find(r.record.match_key);
    if (it == baseline_of.end()) t.without.push_back(&r);
    else t.pairs.push_back({&r, it->second});
  }
  return t;
}

bool finished_with_loss(const StudyRun& r) {
  return r.record.state == store::RunState::succeeded && r.final_loss.has_value();
}

namespace {

// L_a / L_b − 1 by seed of the finished runs whose `loss` is finite.
template <typename Loss>
PairedDifference paired_by_seed(const std::vector<const StudyRun*>& a, const std::vector<const StudyRun*>& b, Loss loss) {
  std::map<uint64_t, double> by_seed;
  for (const StudyRun* r : b)
    if (finished_with_loss(*r))
      if (const double v = loss(*r); std::isfinite(v)) by_seed.emplace(r->record.seed, v);
  PairedDifference d;
  std::map<uint64_t, double> diffs;
  for (const StudyRun* r : a)
    if (finished_with_loss(*r))
      if (const auto it = by_seed.find(r->record.seed); it != by_seed.end())
        if (const double v = loss(*r); std::isfinite(v)) diffs.emplace(r->record.seed, v / it->second - 1);
  for (const auto& [seed, v] : diffs) d.values.push_back(v);
  d.diff = spread(d.values);
  return d;
}

// A run's train/loss rows by step (null when it logged none).
const std::vector<store::MetricRow>* train_loss_rows(const Study& st, const StudyRun* r) {
  const auto run = st.curves.find(r->record.id);
  if (run == st.curves.end()) return nullptr;
  const auto loss = run->second.find("train/loss");
  return loss == run->second.end() ? nullptr : &loss->second;
}

double train_tail_loss(const Study& st, const StudyRun& r) {
  const auto* rows = train_loss_rows(st, &r);
  return rows == nullptr ? std::numeric_limits<double>::quiet_NaN() : fit::train_tail(*rows).mean;
}

}  // namespace

PairedDifference paired_difference(const std::vector<const StudyRun*>& a, const std::vector<const StudyRun*>& b) {
  return paired_by_seed(a, b, [](const StudyRun& r) { return *r.final_loss; });
}

PairedDifference paired_train_tail_difference(const Study& st, const std::vector<const StudyRun*>& a,
                                              const std::vector<const StudyRun*>& b) {
  return paired_by_seed(a, b, [&](const StudyRun& r) { return train_tail_loss(st, r); });
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

double train_tail_gap(const Study& st, const TwinPair& p) {
  const auto* a = train_loss_rows(st, p.run);
  const auto* b = train_loss_rows(st, p.bf16);
  if (a == nullptr || b == nullptr) return std::numeric_limits<double>::quiet_NaN();
  return fit::train_tail(*a).mean / fit::train_tail(*b).mean - 1;
}

GapCurve train_gap_curve(const Study& st, const TwinPair& p, int window) {
  GapCurve g;
  const auto* a = train_loss_rows(st, p.run);
  const auto* b = train_loss_rows(st, p.bf16);
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
