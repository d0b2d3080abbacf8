// fits.h — which stored fits a report draws from, and what it asks of them: the law to draw for a
// recipe, N as the fit counted it, the fitted gap at a grid point with its interval.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "fit/stored_fit.h"
#include "reports/study.h"

namespace fp4::reports {

// The fits a report draws: for each (law, scope) the latest fit of the main grid's runs (every
// fitted run one of the main grid's), else the latest at all, counted in `foreign`: a fit made of
// other runs (another grid's `fp4lab fit`, or a fit of the whole store) is shown with a note
// rather than hidden.
struct FitChoice {
  const fit::StoredFit* precision = nullptr;                     // the joint precision fit
  std::map<std::string, const fit::StoredFit*> chinchilla;       // recipe → its chinchilla fit
  std::vector<const fit::StoredFit*> foreign;                    // chosen fits with runs outside the main grid
  bool any() const { return precision != nullptr || !chinchilla.empty(); }
};
FitChoice choose_fits(const Study& study);

// Whether every run `f` fitted is one of the main grid's (a fit of --points rows is not).
bool fits_main_grid(const fit::StoredFit& f, const Study& study);

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
