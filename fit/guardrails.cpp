// guardrails.cpp — see guardrails.h.
#include "fit/guardrails.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "fit/law_solver.h"

namespace fp4::fit {

namespace {

// On a bound, to the solver's precision (Ceres stops exactly on an active bound).
bool at(double value, double bound) { return std::fabs(value - bound) <= 1e-6 * std::max(1.0, std::fabs(bound)); }

std::string ratio(double x) { return x >= 10 ? fmt::format("×{:.0f}", x) : fmt::format("×{:.1f}", x); }

}  // namespace

std::pair<double, double> beyond_grid(const StoredFit& fit, const Target& target) {
  double max_n = 0, max_d = 0;
  for (const Residual& r : fit.residuals) {
    max_n = std::max(max_n, r.n);
    max_d = std::max(max_d, r.d);
  }
  if (max_n <= 0 || max_d <= 0) return {1, 1};
  return {std::max(1.0, target.n / max_n), std::max(1.0, target.d / max_d)};
}

std::vector<Guardrail> check_guardrails(const StoredFit& f, const GuardrailInputs& in) {
  std::vector<Guardrail> out;
  // Parameters on their bounds: ρ ∈ [kRhoMin, kRhoMax], γ ∈ [kGammaMin, kGammaMax].
  for (const ParameterEstimate& p : f.parameters) {
    if (!p.recipe.empty() && p.recipe == f.options.baseline) continue;  // the baseline's ρ is fixed at 1
    double bound = kNaN;
    if (p.name == "rho_N" || p.name == "rho_D") {
      if (at(p.value, kRhoMax)) bound = kRhoMax;
      if (at(p.value, kRhoMin)) bound = kRhoMin;
    } else if (p.name == "gamma" && f.options.gamma) {
      if (at(p.value, kGammaMin)) bound = kGammaMin;
      if (at(p.value, kGammaMax)) bound = kGammaMax;
    }
    if (std::isnan(bound)) continue;
    out.push_back({"bound",
                   fmt::format("{}{} = {:.4g} sits on its bound {:g}: no percentile interval is shown for it (the "
                               "bootstrap piles replicates on the bound, where a percentile interval is not valid)",
                               p.name, p.recipe.empty() ? "" : " of " + p.recipe, p.value, bound),
                   false, p.name, p.recipe});
  }
  for (const char* name : {"alpha", "beta"}) {
    const auto p = f.parameter(name);
    if (!p || (p->value >= kMinExponent && p->value <= kMaxExponent)) continue;
    out.push_back({"exponent",
                   fmt::format("{} = {:.3g} lies outside the plausible range [{}, {}] of a data or size exponent: the "
                               "runs are far from the regime the law describes, so the law is not identified",
                               name, p->value, kMinExponent, kMaxExponent),
                   true, name, ""});
  }
  if (const auto e = f.parameter("E"); e && e->ci.known() && e->ci.lo < kEFloor * e->value)
    out.push_back({"e_interval",
                   fmt::format("E's 95% interval reaches {:.3g}, down to 0 in effect (below {}·E = {:.3g}): the "
                               "irreducible loss is not identified",
                               e->ci.lo, kEFloor, kEFloor * e->value),
                   true, "E", ""});
  int64_t failed = 0;
  for (const ReplicateFailure& r : f.replicate_failures) failed += r.count;
  if (failed > 0) {
    std::string reasons;
    for (const ReplicateFailure& r : f.replicate_failures)
      reasons += fmt::format("{}{} {}", reasons.empty() ? "" : "; ", r.count, r.reason);
    out.push_back({"replicates",
                   fmt::format("{} of {} bootstrap replicates failed and are left out of every interval ({})", failed,
                               f.replicates_asked, reasons),
                   false, "", ""});
  }
  // The held-out error against the gaps under study there: the largest observed |gap| of the fit's
  // recipes at the N that was held out (the largest model, where the law is used to extrapolate).
  if (f.held_out.done) {
    double worst_error = 0, largest_gap = 0;
    for (const HeldOutRecipe& h : f.held_out.recipes) worst_error = std::max(worst_error, h.max_abs_rel_error);
    for (const RecipeGap& g : f.gaps)
      for (const ObservedGap& o : g.observed)
        if (o.n == f.held_out.held_out_n && std::isfinite(o.mean)) largest_gap = std::max(largest_gap, std::fabs(o.mean));
    if (largest_gap > 0 && worst_error > largest_gap)
      out.push_back({"held_out",
                     fmt::format("the held-out check misses the largest N by up to {:.2f}%, more than the largest gap "
                                 "observed there ({:.2f}%): the law's error is as large as the effects it is used for",
                                 100 * worst_error, 100 * largest_gap),
                     false, "", ""});
  }
  int64_t short_runs = 0, known = 0, shortest = -1;
  int64_t few_tokens = 0;
  double least_tpp = kNaN;
  for (const Residual& r : f.residuals) {
    if (const auto s = in.steps.find(r.run_id); s != in.steps.end()) {
      ++known;
      if (s->second < kMinSteps) ++short_runs;
      if (shortest < 0 || s->second < shortest) shortest = s->second;
    }
    const double tpp = r.d / r.n;
    if (tpp < kMinTokensPerParam) ++few_tokens;
    if (std::isnan(least_tpp) || tpp < least_tpp) least_tpp = tpp;
  }
  if (short_runs > 0)
    out.push_back({"short_runs",
                   fmt::format("{} of {} runs trained fewer than {} steps (the shortest {}): far from the asymptotic "
                               "regime the law's form assumes",
                               short_runs, known, kMinSteps, shortest),
                   false, "", ""});
  if (few_tokens > 0)
    out.push_back({"tokens_per_param",
                   fmt::format("{} of {} runs saw fewer than {:g} tokens per parameter (the fewest {:.2g})", few_tokens,
                               f.residuals.size(), kMinTokensPerParam, least_tpp),
                   false, "", ""});
  for (const Target& t : f.options.targets) {
    const auto [xn, xd] = beyond_grid(f, t);
    if (xn <= 1 && xd <= 1) continue;
    std::vector<std::string> parts;
    if (xn > 1) parts.push_back(ratio(xn) + " in N beyond the largest model");
    if (xd > 1) parts.push_back(ratio(xd) + " in D beyond the longest run");
    out.push_back({"extrapolation",
                   fmt::format("the target N = {:.3g}, D = {:.3g} lies {}: its predictions are extrapolation of the "
                               "functional form, not measurements",
                               t.n, t.d, fmt::format("{}", fmt::join(parts, ", "))),
                   false, "", ""});
  }
  return out;
}

bool unidentified(const StoredFit& f) {
  return std::any_of(f.guardrails.begin(), f.guardrails.end(), [](const Guardrail& g) { return g.unidentified; });
}

const Guardrail* withheld_interval(const StoredFit& f, const std::string& name, const std::string& recipe) {
  for (const Guardrail& g : f.guardrails)
    if (g.check == "bound" && g.parameter == name && g.recipe == recipe) return &g;
  return nullptr;
}

}  // namespace fp4::fit
