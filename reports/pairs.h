// pairs.h — each quantized run beside its BF16 twin (the run that differs from it only in its
// recipe: same match key, docs/sweeps.md), and the BF16-relative gap over training computed from
// the two runs' train losses smoothed as the UFP4 paper does (a mean over a trailing window).
#pragma once

#include <cstdint>
#include <vector>

#include "reports/report.h"
#include "reports/study.h"

namespace fp4::reports {

struct TwinPair {
  const StudyRun* run = nullptr;    // the quantized run
  const StudyRun* bf16 = nullptr;   // its BF16 twin
};

struct Twins {
  std::vector<TwinPair> pairs;              // quantized runs with a twin, in run order
  std::vector<const StudyRun*> without;     // quantized runs whose twin is not in the store
};
Twins bf16_twins(const Study& study);

// The trailing window in steps: the option, or 5% of the run's steps (at least 1).
int smoothing_window(const ReportOptions& options, int64_t steps);

// Mean of the last `window` values up to each step (fewer at the start). A NaN inside the window
// makes that mean NaN.
std::vector<double> trailing_mean(const std::vector<double>& values, int window);

struct GapCurve {
  std::vector<int64_t> steps, tokens;
  std::vector<double> gap;                  // smoothed L_r / smoothed L_bf16 - 1
};
// Over the steps both runs have a train loss for.
GapCurve train_gap_curve(const Study& study, const TwinPair& pair, int window);

}  // namespace fp4::reports
