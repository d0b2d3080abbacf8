// guardrails.h — what stops a fit from saying more than its data hold (docs/statistics.md
// "Guardrails"). Each check looks at a finished fit (its parameters and replicates, residuals,
// held-out check, gaps and targets) and the runs it was made from, and raises a one-line flag:
//
//   bound             a parameter on its bound: its percentile interval is not shown (a bootstrap
//                     percentile interval is not valid at a boundary: half the replicates pile on it)
//   exponent          α or β outside [kMinExponent, kMaxExponent]: unidentified
//   e_interval        E's interval reaching 0 (its low end below kEFloor·E): unidentified
//   replicates        bootstrap replicates that failed, counted by reason
//   held_out          the held-out error larger than the gaps under study
//   short_runs        runs shorter than kMinSteps steps
//   tokens_per_param  runs with fewer than kMinTokensPerParam tokens per parameter
//   extrapolation     a target beyond the grid (how far, in N and in D): its predictions are
//                     "extrapolation of the functional form"
//
// A law with an `unidentified` flag prints no target gap at all (fit_output.cpp, the report).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fit/stored_fit.h"

namespace fp4::fit {

inline constexpr double kMinExponent = 0.05, kMaxExponent = 0.8;
inline constexpr double kEFloor = 1e-3;          // E's interval "reaches 0" below kEFloor·E
inline constexpr int64_t kMinSteps = 300;        // "a few hundred steps"
inline constexpr double kMinTokensPerParam = 10; // Chinchilla's optimum is about 20

// The grid's extent and the runs' lengths, which the fit itself does not keep.
struct GuardrailInputs {
  std::map<std::string, int64_t> steps;  // run id → training steps (its last eval step); absent: unknown
};

// Every flag of `fit`, in the order of the list above. Stored in quality_json ("guardrails").
std::vector<Guardrail> check_guardrails(const StoredFit& fit, const GuardrailInputs& inputs);

// Whether any flag says the law is not identified (then no target gap is shown).
bool unidentified(const StoredFit& fit);
// The flag that withholds the interval of parameter `name` (of `recipe`), or null.
const Guardrail* withheld_interval(const StoredFit& fit, const std::string& name, const std::string& recipe = "");
// How far a target lies beyond the fit's grid: {N factor, D factor}, each >= 1 (1: inside).
std::pair<double, double> beyond_grid(const StoredFit& fit, const Target& target);

}  // namespace fp4::fit
