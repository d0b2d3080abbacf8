// schedule.cpp — see schedule.h.
#include "engine/run/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace fp4::run {

int64_t wsd_decay_steps(const TrainConfig& t) {
  return std::max<int64_t>(1, std::llround(t.decay_fraction * static_cast<double>(t.steps)));
}

double learning_rate(const TrainConfig& t, int64_t step) {
  const double peak = t.lr, floor = t.min_lr;
  const int64_t w = t.warmup_steps, s_total = t.steps;
  if (step < w) return peak * static_cast<double>(step + 1) / static_cast<double>(w);
  if (t.schedule == Schedule::cosine) {
    const double progress = static_cast<double>(step - w) / static_cast<double>(std::max<int64_t>(1, s_total - w));
    return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
  }
  const int64_t d = wsd_decay_steps(t);
  const int64_t decay_start = s_total - d;
  if (step < decay_start) return peak;
  const double done = static_cast<double>(std::min(step - decay_start + 1, d)) / static_cast<double>(d);
  return peak - (peak - floor) * done;
}

}  // namespace fp4::run
