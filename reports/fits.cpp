// fits.cpp — see fits.h.
#include "reports/fits.h"

#include <algorithm>
#include <cmath>

namespace fp4::reports {

bool fits_main_grid(const fit::StoredFit& f, const Study& st) {
  if (f.residuals.empty()) return false;
  for (const fit::Residual& r : f.residuals)
    if (r.run_id.empty() || !st.main_ids.count(r.run_id)) return false;
  return true;
}

FitChoice choose_fits(const Study& st) {
  // (law, scope) → (the latest of the main grid, the latest at all); st.fits is by id.
  std::map<std::pair<std::string, std::string>, std::pair<const fit::StoredFit*, const fit::StoredFit*>> latest;
  for (const fit::StoredFit& f : st.fits) {
    if (f.law != "precision" && f.law != "chinchilla") continue;
    auto& [of_main, any] = latest[{f.law, f.scope}];
    if (any == nullptr || f.id > any->id) any = &f;
    if (fits_main_grid(f, st) && (of_main == nullptr || f.id > of_main->id)) of_main = &f;
  }
  FitChoice c;
  for (const auto& [key, pick] : latest) {
    const fit::StoredFit* f = pick.first != nullptr ? pick.first : pick.second;
    if (pick.first == nullptr) c.foreign.push_back(f);
    if (key.first == "precision") {
      if (c.precision == nullptr || f->id > c.precision->id) c.precision = f;
    } else {
      c.chinchilla[key.second] = f;
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

double fit_n(const fit::StoredFit& f, const sweeps::RunRecord& run) {
  return static_cast<double>(f.options.n_kind == "total" ? run.n_params : run.n_params_nonembedding);
}

std::optional<fit::Estimate> fitted_gap(const FitChoice& fits, const std::string& recipe, const sweeps::RunRecord& run,
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
