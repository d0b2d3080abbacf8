// run_duration.cpp — see run_duration.h.
#include "sweeps/run_duration.h"

#include <algorithm>

namespace fp4::sweeps {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

RunDurationModel::RunDurationModel(const store::Store& store) {
  for (const store::RunRecord& r : store.runs())
    if (r.state == store::RunState::succeeded) measure(store, r.id);
}

void RunDurationModel::measure(const store::Store& store, const std::string& run_id) {
  const std::optional<store::RunRecord> r = store.run(run_id);
  if (!r || r->state != store::RunState::succeeded || r->tokens <= 0) return;
  double seconds = 0;
  for (const store::Store::AttemptRecord& a : store.attempts(run_id)) {
    if (a.end <= 0) return;  // an attempt still open: not a finished measurement
    seconds += std::max(0.0, a.end - a.start);
  }
  if (!(seconds > 0)) return;
  Measurement m;
  m.model = r->model;
  m.recipe = r->recipe;
  m.seconds_per_token = seconds / static_cast<double>(r->tokens);
  m.flops_per_second = r->flops_per_token * static_cast<double>(r->tokens) / seconds;
  runs_[run_id] = m;
}

std::optional<double> RunDurationModel::estimate_s(const GridPoint& point, int64_t tokens_left) const {
  const double tokens = static_cast<double>(std::max<int64_t>(0, tokens_left));
  std::vector<double> same_recipe, same_model, flop_rates;
  for (const auto& [id, m] : runs_) {
    if (m.model == point.model_label) {
      same_model.push_back(m.seconds_per_token);
      if (m.recipe == point.recipe_label) same_recipe.push_back(m.seconds_per_token);
    }
    if (m.flops_per_second > 0) flop_rates.push_back(m.flops_per_second);
  }
  if (!same_recipe.empty()) return median(same_recipe) * tokens;
  if (!same_model.empty()) return median(same_model) * tokens;
  if (!flop_rates.empty() && point.flops_per_token > 0) return point.flops_per_token * tokens / median(flop_rates);
  return std::nullopt;
}

}  // namespace fp4::sweeps
