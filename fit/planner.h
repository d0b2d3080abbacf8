// planner.h — how many seeds a contrast needs and what a grid will cost, before anything runs
// (docs/statistics.md "Planning"): the seed count for a paired contrast of a given effect, power
// and level from the seed-to-seed sd of d measured in a pilot store; the variance-only interim
// rule; and the device time of a grid's runs from the tokens/s the store measured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
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

// `fp4lab plan STUDY.toml`: what the study's grid will cost and how many seeds each declared
// contrast needs.
struct PlanCommand {
  const store::DeclaredStudy* study = nullptr;
  std::filesystem::path pilot;          // a store whose paired seeds give the sd of d ("" : the study's own)
  double effect_pp = 0.3, power = 0.8, alpha = 0.05;
};
void plan_study(const PlanCommand& command);

}  // namespace fp4::fit
