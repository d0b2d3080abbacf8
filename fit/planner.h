// planner.h — how many seeds a contrast needs and what a grid will cost, before anything runs
// (docs/statistics.md "Planning"): the seed count for a paired contrast of a given effect, power
// and level from the seed-to-seed sd of d measured in a pilot store; the variance-only interim
// rule; and the device time of a grid's runs from the tokens/s the store measured (or, where no
// store has measured a size and recipe, from a bench's figures: a rates file).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fit/statistics.h"

namespace fp4::store {
class Store;
struct DeclaredStudy;
}  // namespace fp4::store

namespace fp4::fit {

// The smallest n >= 2 whose two-sided paired t-test at level `alpha` has power `power` against a
// mean difference `effect` when d's seed-to-seed sd is `sd`, by the usual approximation
//   n >= ((t_{1−α/2, n−1} + t_{power, n−1}) · sd / effect)²
// solved by increasing n (it converges: the t quantiles fall with n). The closed form with normal
// quantiles, n_z = ((z_{1−α/2} + z_{power}) · sd / effect)², is its large-n limit; the t version
// is at most a few seeds above it for small n. `cap` bounds the search (returns cap + 1 when even
// cap seeds are not enough).
int64_t seeds_needed(double sd, double effect, double alpha = 0.05, double power = 0.8, int64_t cap = 100000);
// The normal closed form n_z (not rounded), for comparison.
double seeds_needed_normal(double sd, double effect, double alpha = 0.05, double power = 0.8);

// The variance-only interim rule (results/second-study/interim.py): after k seeds, n =
// min(cap, max(floor, ceil((sd / target_se)²))) from the sd of d alone, never from its mean (the
// rule must not see the effect, or the test's level no longer holds).
int64_t interim_seeds(double sd, double target_se, int64_t floor, int64_t cap);

// One attempt of the store as the device-time estimate reads it (the attempts table).
struct MeasuredAttempt {
  std::string model, recipe, host;
  std::string devices;                  // as the store records them: "cuda:0", "cuda:0,1" (a run on two GPUs), "cpu:2"
  double start = 0, end = 0;            // Unix seconds; end 0 (never ended): not counted
  double tokens_per_s = kNaN;           // the run's mean train/tokens_per_s when this attempt trained a run that
                                        // succeeded; NaN: the attempt only occupied the device
};

// What a device does for one size and recipe, from the store's succeeded runs: each run's mean
// tokens/s times the runs that shared its device while it trained (packing: runs_per_gpu; the
// time-weighted count over its attempt of the attempts on the same host and devices, itself
// included), over the GPUs it trained on. A run packed three to a GPU trains at about a third of
// its speed alone, but the GPU trains three: the device time of a run is tokens / this rate.
struct DeviceRate {
  double tokens_per_device_s = kNaN;    // median over the runs
  double tokens_per_s = kNaN;           // median per-run speed, as measured
  double sharing = kNaN;                // median runs per device while they trained
  int64_t runs = 0;
};
std::map<std::pair<std::string, std::string>, DeviceRate> device_rates(const std::vector<MeasuredAttempt>& attempts);

// One row of a rates file (`fp4lab plan --rates FILE`, docs/statistics.md "Planning"; e.g.
// bench/train-rates.csv): what a benchmark measured for one size and recipe, which stands in for a
// size and recipe that no store has measured. The header names the six columns
//   size,recipe,tokens_per_s,runs_per_device,device,source
// in any order; `#` lines and blank lines are skipped; a cell may be "quoted" (a source with commas).
struct BenchRate {
  std::string size, recipe;             // a model preset (d4) and a recipe label (ufp4), as a grid names them
  double tokens_per_s = kNaN;           // what the device trained a second, summed over the runs sharing it
                                        // (one run's speed when runs_per_device is 1), as bench sums packed runs
  int64_t runs_per_device = 1;          // runs that shared the device while measured (MPS packing)
  std::string device, source;           // the GPU it was measured on; where the figure comes from
  int line = 0;                         // its line in the file, for the plan's output
};
// The rows of `path`; a UserError naming file:line for a file a user got wrong (unknown or missing
// column, a cell that is not a positive number, an empty name, the same size, recipe and packing twice).
std::vector<BenchRate> read_bench_rates(const std::filesystem::path& path);
// The row that stands in for (size, recipe) at a grid's packing: the one measured at that packing,
// else the nearest packing (the smaller of two as near); null when the file has no such size and recipe.
const BenchRate* bench_rate_for(const std::vector<BenchRate>& rates, const std::string& size,
                                const std::string& recipe, int64_t runs_per_device);

// `fp4lab plan STUDY.toml`: what the study's grid will cost and how many seeds each declared
// contrast needs.
struct PlanCommand {
  const store::DeclaredStudy* study = nullptr;
  std::filesystem::path pilot;          // a store whose paired seeds give the sd of d ("" : the study's own),
                                        // and whose runs' speeds stand in for those the study has not measured
  std::filesystem::path rates;          // a rates file (BenchRate) for what neither store has measured ("": none)
  double effect_pp = 0.3, power = 0.8, alpha = 0.05;
  int runs_per_device = 1;              // the packing it plans: [executor] runs_per_gpu (GPU runs) or cpu_jobs
};
void plan_study(const PlanCommand& command);

}  // namespace fp4::fit
