// fits.cpp — see fits.h.
#include "reports/fits.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace fp4::reports {

bool fits_main_grid(const fit::StoredFit& f, const Study& st) {
  if (f.residuals.empty()) return false;
  for (const fit::Residual& r : f.residuals)
    if (r.run_id.empty() || !st.main_ids.count(r.run_id)) return false;
  return true;
}

std::string fit_grid_label(const fit::StoredFit& f) {
  if (f.options.source == "points") return "--points rows";
  if (f.options.grid.empty()) return "every run of the store (fp4lab fit --store)";
  return f.options.grid;
}

const ChosenFit* FitChoice::about(const fit::StoredFit* f) const {
  for (const ChosenFit& c : chosen)
    if (c.fit == f) return &c;
  return nullptr;
}

namespace {

FitRank rank_of(const fit::StoredFit& f, const Study& st, const std::set<std::string>& main_grids) {
  const bool of_main_grid = f.options.source != "points" && main_grids.count(f.options.grid) != 0;
  const bool main_runs = fits_main_grid(f, st);
  if (of_main_grid && main_runs) return FitRank::main_grid;
  if (main_runs) return FitRank::main_runs;
  if (of_main_grid) return FitRank::grid_changed;
  return FitRank::other;
}

// Main-grid runs the fit left out because they had not finished, and that have finished since.
int finished_since(const fit::StoredFit& f, const Study& st) {
  int n = 0;
  for (const fit::ExcludedRun& e : f.excluded) {
    const bool unfinished = e.reason.rfind("not in the store", 0) == 0 || e.state == "pending" ||
                            e.state == "running" || e.state == "orphaned";
    if (!unfinished || e.run_id.empty() || !st.main_ids.count(e.run_id)) continue;
    if (const StudyRun* r = st.run(e.run_id); r != nullptr && r->record.state == store::RunState::succeeded) ++n;
  }
  return n;
}

}  // namespace

FitChoice choose_fits(const Study& st) {
  FitChoice c;
  std::set<std::string> main_grids;
  for (const DeclaredGrid& g : st.declared)
    if (g.main && main_grids.insert(g.name).second) c.main_grids.push_back(g.name);
  // (law, scope) → the best (lowest rank, then highest id) and how many fits it has; st.fits is by id.
  std::map<std::pair<std::string, std::string>, std::pair<ChosenFit, int>> best;
  for (const fit::StoredFit& f : st.fits) {
    if (f.law != "precision" && f.law != "chinchilla") continue;
    const FitRank rank = rank_of(f, st, main_grids);
    auto [it, fresh] = best.try_emplace({f.law, f.scope}, ChosenFit{&f, rank, 0, 0, 0}, 0);
    ++it->second.second;
    ChosenFit& b = it->second.first;
    if (!fresh && (rank < b.rank || (rank == b.rank && f.id > b.fit->id))) b = ChosenFit{&f, rank, 0, 0, 0};
  }
  for (auto& [key, entry] : best) {
    ChosenFit ch = entry.first;
    ch.passed_over = entry.second - 1;
    for (const fit::Residual& r : ch.fit->residuals)
      if (r.run_id.empty() || !st.main_ids.count(r.run_id)) ++ch.runs_outside;
    if (ch.fit->residuals.empty()) ch.runs_outside = 0;
    ch.finished_since = finished_since(*ch.fit, st);
    c.chosen.push_back(ch);
    if (key.first == "precision") {
      if (c.precision == nullptr || ch.fit->id > c.precision->id) c.precision = ch.fit;
    } else {
      c.chinchilla[key.second] = ch.fit;
    }
  }
  return c;
}

const fit::StoredFit* law_for(const FitChoice& fits, const std::string& recipe) {
  if (const auto it = fits.chinchilla.find(recipe); it != fits.chinchilla.end()) return it->second;
  if (fits.precision != nullptr) {
    const auto recipes = fits.precision->recipes();
    if (std::find(recipes.begin(), recipes.end(), recipe) != recipes.end()) return fits.precision;
  }
  return nullptr;
}

double fit_n(const fit::StoredFit& f, const store::RunRecord& run) {
  return static_cast<double>(f.options.n_kind == "total" ? run.n_params : run.n_params_nonembedding);
}

std::optional<fit::Estimate> fitted_gap(const FitChoice& fits, const std::string& recipe, const store::RunRecord& run,
                                        std::string* law) {
  const double d = static_cast<double>(run.tokens);
  try {
    if (fits.precision != nullptr && !fits.precision->options.baseline.empty()) {
      const auto recipes = fits.precision->recipes();
      if (std::find(recipes.begin(), recipes.end(), recipe) != recipes.end()) {
        *law = "precision";
        return fit::predicted_gap_interval(*fits.precision, recipe, fit_n(*fits.precision, run), d);
      }
    }
    const auto r = fits.chinchilla.find(recipe);
    if (r == fits.chinchilla.end() || r->second->options.baseline.empty()) return std::nullopt;
    const auto b = fits.chinchilla.find(r->second->options.baseline);
    if (b == fits.chinchilla.end()) return std::nullopt;
    *law = "chinchilla";
    return fit::predicted_gap_interval(*r->second, *b->second, fit_n(*r->second, run), d);
  } catch (const std::exception&) {
    return std::nullopt;  // fits of different calls cannot be paired: no fitted gap rather than a wrong one
  }
}

}  // namespace fp4::reports
