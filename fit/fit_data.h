// fit_data.h — the points a fit is made from: the final validation losses of a study's succeeded
// runs (N as asked, D = training tokens), or the rows of a `recipe,n,d,loss` CSV. Runs that cannot
// be fitted (not succeeded, no eval/loss, a non-finite loss) are kept aside with their reason,
// never dropped silently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fit/stored_fit.h"

namespace fp4::store {
class Store;
struct GridRecord;
}  // namespace fp4::store

namespace fp4::fit {

struct FitPoint {
  std::string run_id, run_name, recipe;
  // The bootstrap's resampling unit: runs of one grid point and seed (the store's match key: every
  // recipe of that point and seed) share it, so a resample keeps matched runs together and the gap
  // between them keeps its pairing. CSV rows: "<n>|<d>|<k>" for the k-th row of a recipe at (n, d).
  std::string group;
  double n = 0, d = 0, loss = 0;
  int64_t steps = 0;                   // the run's last eval step (its training steps); 0: unknown (CSV)
  // The paper's metric (fit::train_tail, fit/contrasts.h): the mean train loss of the run's last
  // tenth of logged steps; NaN from a CSV, or when the run logged none or a NaN lies in its tail.
  // Not fitted: the gap tables show its gap beside the final loss's.
  double train_tail = kNaN;
};

struct FitData {
  std::vector<FitPoint> points;        // sorted by recipe, n, d, group
  std::vector<ExcludedRun> excluded;   // by recipe, then name
  std::vector<std::string> recipes;    // with at least one point or exclusion, sorted
  std::vector<std::string> baselines;  // recipes that are BF16 everywhere (normally one: "bf16")
  std::string n_kind;                  // "nonembedding", "total", "given"
  std::string source;                  // "store", "points"
  std::string grid;                    // the study's [sweep] name when its grid chose the runs, else ""
  std::string origin;                  // the store or CSV path, for messages
};

// From a store: every run (n_kind "nonembedding" or "total"). Baselines are the recipes whose runs
// are BF16 everywhere (runs.baseline). An empty store is a fp4::UserError.
FitData load_store_data(const store::Store& store, const std::string& n_kind);
// From a study's store: exactly the runs its grid declares (the grid's points, by run id), however
// many other grids share the store. A point the store does not hold yet is excluded with the
// reason "not in the store". An empty store is a fp4::UserError.
FitData load_grid_data(const store::Store& store, const store::GridRecord& grid, const std::string& n_kind);
// From a CSV with the header recipe,n,d,loss (base/csv_table.h's dialect: any column order, '#'
// comments). A loss of "nan" excludes the row; a malformed row is a fp4::UserError naming file:line
// and the column. The baseline is the recipe named "bf16".
FitData load_csv_data(const std::filesystem::path& path);

// Keeps only `recipes` (empty: all); a name the data does not have is a fp4::UserError listing the
// recipes it has.
FitData select_recipes(const FitData& data, const std::vector<std::string>& recipes);

// The one baseline recipe ("" when none); two are a fp4::UserError asking to narrow with --recipe.
std::string baseline_of(const FitData& data);

}  // namespace fp4::fit
