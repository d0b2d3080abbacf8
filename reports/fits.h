// fits.h — which stored fits a report draws from, and what it asks of them: the law to draw for a
// recipe, N as the fit counted it, the fitted gap at a grid point with its interval.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "fit/stored_fit.h"
#include "reports/study.h"

namespace fp4::reports {

// The fits a report draws. A store shared by several TOMLs (results/first-study/: the main grid,
// its noise floor, ablation and probes) can hold fits of several grids, and of one grid several
// times (refits, a TOML edited between fits); for each (law, scope) the report takes, by rank, the
// latest of:
//   1. main_grid:    the fit `fp4lab fit STUDY.toml` writes for the main grid: its options.grid is a
//                    main grid's [sweep] name and every run it fitted is one of the main grid's;
//   2. main_runs:    every fitted run is one of the main grid's, but another grid chose them, or none
//                    did (`fp4lab fit --store`, options.grid "");
//   3. grid_changed: the main grid's name, but it fitted runs the main grid no longer declares (the
//                    TOML was edited after the fit);
//   4. other:        any other fit (another grid's runs, a fit of --points rows).
// Ranks 3 and 4 are shown with a note rather than hidden; the report names every chosen fit (id,
// grid, input hash, date) so a reader can find it in the store.
enum class FitRank { main_grid = 1, main_runs = 2, grid_changed = 3, other = 4 };
struct ChosenFit {
  const fit::StoredFit* fit = nullptr;
  FitRank rank = FitRank::other;
  int passed_over = 0;            // other stored fits of the same law and scope, not shown
  int runs_outside = 0;           // fitted points that are not runs of the main grid (ranks 3, 4)
  // Runs of the main grid the fit left out as unfinished (not in the store yet, pending, running,
  // orphaned) that have succeeded since: the fit is older than the store's data.
  int finished_since = 0;
};
struct FitChoice {
  const fit::StoredFit* precision = nullptr;                     // the joint precision fit
  std::map<std::string, const fit::StoredFit*> chinchilla;       // recipe → its chinchilla fit
  std::vector<ChosenFit> chosen;                                 // every drawn fit, by law then scope
  std::vector<std::string> main_grids;                           // the main grid's [sweep] names
  bool any() const { return precision != nullptr || !chinchilla.empty(); }
  const ChosenFit* about(const fit::StoredFit* f) const;
};
FitChoice choose_fits(const Study& study);

// Whether every run `f` fitted is one of the main grid's (a fit of --points rows is not).
bool fits_main_grid(const fit::StoredFit& f, const Study& study);

// How the report names a fit's grid: "first-study", "every run of the store (fp4lab fit --store)",
// "--points rows".
std::string fit_grid_label(const fit::StoredFit& f);

// The law drawn for a recipe: its own chinchilla fit, else the precision fit if it knows the
// recipe; null when neither.
const fit::StoredFit* law_for(const FitChoice& fits, const std::string& recipe);

// A run's N as `f` counts it (options.n: non-embedding or total parameters).
double fit_n(const fit::StoredFit& f, const store::RunRecord& run);

// The gap the fitted laws give for `recipe` at the grid point of `run` (its N and D), with its
// bootstrap interval: from the precision fit when there is one, else from the recipe's and the
// baseline's chinchilla fits of one `fp4lab fit` call (paired replicates). `law` names the source.
std::optional<fit::Estimate> fitted_gap(const FitChoice& fits, const std::string& recipe, const store::RunRecord& run,
                                        std::string* law);

}  // namespace fp4::reports
