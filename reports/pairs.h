// pairs.h — each quantized run beside its BF16 twin (the run that differs from it only in its
// recipe: same match key, docs/sweeps.md), and the BF16-relative gap over training computed from
// the two runs' train losses smoothed as the UFP4 paper does (a mean over a trailing window).
#pragma once

#include <cstdint>
#include <vector>

#include "reports/report.h"
#include "reports/stats.h"
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
// Every quantized run of the store, or only those at the main grid's points (the main grid's runs
// and their other seeds: what the gap figures and table show).
Twins bf16_twins(const Study& study, bool main_points_only);

// Runs that finished with a finite final loss (succeeded).
bool finished_with_loss(const StudyRun& r);

// The relative difference L_a / L_b − 1 of two sets of replicates (runs of one grid point under
// several seeds), paired by seed: each seed's two runs share their initial weights and batches, so
// the difference carries less noise than the two means. Finished runs only; `pairs` counts them.
struct PairedDifference {
  Spread diff;                              // over the pairs: mean, sd, 95% t interval
  std::vector<double> values;               // by seed
};
PairedDifference paired_difference(const std::vector<const StudyRun*>& a, const std::vector<const StudyRun*>& b);
// The same on the paper's metric, each run's train-tail loss (fit::train_tail): finished runs with
// one, paired by seed.
PairedDifference paired_train_tail_difference(const Study& study, const std::vector<const StudyRun*>& a,
                                              const std::vector<const StudyRun*>& b);

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

// The gap on the paper's metric: L_r / L_bf16 − 1 of the two runs' train-tail losses
// (fit::train_tail, the definition the paired contrasts use: the mean train loss of the last tenth
// of the logged steps, at most 1000). NaN when either run has none.
double train_tail_gap(const Study& study, const TwinPair& pair);

}  // namespace fp4::reports
