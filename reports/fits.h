// fits.h — which stored fits a report draws from, and what it asks of them: the law to draw for a
// recipe, N as the fit counted it, the fitted gap at a grid point with its interval.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "fit/stored_fit.h"
#include "reports/study.h"

namespace fp4::reports {

struct FitChoice {
  const fit::StoredFit* precision = nullptr;                     // the latest joint precision fit
  std::map<std::string, const fit::StoredFit*> chinchilla;       // recipe → its latest chinchilla fit
  bool any() const { return precision != nullptr || !chinchilla.empty(); }
};
FitChoice choose_fits(const Study& study);

// The law drawn for a recipe: its own chinchilla fit, else the precision fit if it knows the
// recipe; null when neither.
const fit::StoredFit* law_for(const FitChoice& fits, const std::string& recipe);

// A run's N as `f` counts it (options.n: non-embedding or total parameters).
double fit_n(const fit::StoredFit& f, const sweeps::RunRecord& run);

// The gap the fitted laws give for `recipe` at the grid point of `run` (its N and D), with its
// bootstrap interval: from the precision fit when there is one, else from the recipe's and the
// baseline's chinchilla fits of one `fp4lab fit` call (paired replicates). `law` names the source.
std::optional<fit::Estimate> fitted_gap(const FitChoice& fits, const std::string& recipe, const sweeps::RunRecord& run,
                                        std::string* law);

}  // namespace fp4::reports
