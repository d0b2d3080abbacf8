// planner.cpp — see planner.h.
#include "fit/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>

#include "base/format.h"
#include "base/user_error.h"
#include "fit/contrasts.h"
#include "fit/paired.h"
#include "store/grid_record.h"
#include "store/store.h"

namespace fp4::fit {

namespace {

// The p-quantile of the standard normal, by bisection on its upper tail ½·erfc(z/√2).
double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("normal_quantile: p must lie in (0, 1)");
  if (p < 0.5) return -normal_quantile(1 - p);
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > 1 - p) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

// Student's t quantile for any 0 < p < 1 (the symmetric half below the median).
double t_quantile_any(double p, double df) {
  if (p == 0.5) return 0;
  return p > 0.5 ? student_t_quantile(p, df) : -student_t_quantile(1 - p, df);
}

void check_design(double sd, double effect, double alpha, double power) {
  if (!(effect > 0)) throw std::invalid_argument("seeds_needed: the effect must be > 0");
  if (!(sd >= 0)) throw std::invalid_argument("seeds_needed: sd must be >= 0");
  if (!(alpha > 0 && alpha < 1) || !(power > 0 && power < 1))
    throw std::invalid_argument("seeds_needed: alpha and power must lie in (0, 1)");
}

}  // namespace

double seeds_needed_normal(double sd, double effect, double alpha, double power) {
  check_design(sd, effect, alpha, power);
  const double z = normal_quantile(1 - alpha / 2) + normal_quantile(power);
  return (z * sd / effect) * (z * sd / effect);
}

int64_t seeds_needed(double sd, double effect, double alpha, double power, int64_t cap) {
  check_design(sd, effect, alpha, power);
  for (int64_t n = 2; n <= cap; ++n) {
    const double df = static_cast<double>(n - 1);
    const double t = t_quantile_any(1 - alpha / 2, df) + t_quantile_any(power, df);
    if ((t * sd / effect) * (t * sd / effect) <= static_cast<double>(n)) return n;
  }
  return cap + 1;
}

int64_t interim_seeds(double sd, double target_se, int64_t floor, int64_t cap) {
  if (!(target_se > 0) || floor > cap) throw std::invalid_argument("interim_seeds: needs target_se > 0 and floor <= cap");
  // ceil with a hair of slack, as interim.py, so that an exact square is not pushed up by rounding.
  const int64_t need = static_cast<int64_t>(std::ceil((sd / target_se) * (sd / target_se) - 1e-9));
  return std::min(cap, std::max(floor, need));
}

namespace {

// The mean train/tokens_per_s of each succeeded run, by (model, recipe): the median over its runs.
std::map<std::pair<std::string, std::string>, double> measured_rates(const store::Store& store) {
  std::map<std::pair<std::string, std::string>, std::vector<double>> per;
  for (const store::RunRecord& r : store.runs()) {
    if (r.state != store::RunState::succeeded) continue;
    double sum = 0;
    int64_t n = 0;
    for (const store::MetricRow& m : store.metrics(r.id, "train/tokens_per_s"))
      if (!m.is_nan && m.value > 0) sum += m.value, ++n;
    if (n > 0) per[{r.model, r.recipe}].push_back(sum / static_cast<double>(n));
  }
  std::map<std::pair<std::string, std::string>, double> out;
  for (auto& [key, v] : per) {
    std::sort(v.begin(), v.end());
    out[key] = quantile_sorted(v, 0.5);
  }
  return out;
}

// A store to read, or null when there is none yet. An older schema is migrated first (what
// `fp4lab fit` does too: the migration adds tables and changes no row).
std::unique_ptr<store::Store> open_if_there(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return nullptr;
  return store::Store::open(path, store::Store::Mode::read_migrating);
}

}  // namespace

void plan_study(const PlanCommand& c) {
  if (c.study == nullptr) throw std::logic_error("plan_study: no study");
  if (!(c.effect_pp > 0)) throw UserError(fmt::format("--effect {}: must be > 0 (percentage points)", c.effect_pp));
  if (!(c.power > 0 && c.power < 1)) throw UserError(fmt::format("--power {}: must lie in (0, 1)", c.power));
  if (!(c.alpha > 0 && c.alpha < 1)) throw UserError(fmt::format("--alpha {}: must lie in (0, 1)", c.alpha));
  const store::GridRecord& grid = c.study->main;
  std::string out = fmt::format("plan of {} ({} points; docs/statistics.md \"Planning\")\n", grid.name, grid.points.size());

  // (a) Device time, from the study's own store.
  std::unique_ptr<store::Store> own = open_if_there(grid.store);
  std::map<std::string, store::RunState> state;
  std::map<std::pair<std::string, std::string>, double> rates;
  if (own) {
    for (const store::RunRecord& r : own->runs()) state[r.id] = r.state;
    rates = measured_rates(*own);
  }
  struct Cost {
    int64_t runs = 0, tokens = 0;
  };
  std::map<std::pair<std::string, std::string>, Cost> left;
  int64_t done = 0;
  for (const store::GridPointRecord& p : grid.points) {
    const auto s = state.find(p.id);
    if (s != state.end() && s->second == store::RunState::succeeded) {
      ++done;
      continue;
    }
    Cost& k = left[{p.model, p.recipe}];
    ++k.runs;
    k.tokens += p.tokens;
  }
  out += fmt::format("device time: {} of {} runs have succeeded; the others, one run at a time at the tokens/s the "
                     "store measured for the size and recipe (median over its succeeded runs; packing several runs "
                     "on one GPU is not told apart):\n",
                     done, grid.points.size());
  double total = 0;
  int64_t unknown = 0;
  for (const auto& [key, k] : left) {
    const auto rate = rates.find(key);
    if (rate == rates.end()) {
      unknown += k.runs;
      out += fmt::format("  {:<8} {:<22} {:>4} runs  {:>8} tokens  unknown: no succeeded run of this size and recipe "
                         "measured its speed (bench/RESULTS.md has figures per size)\n",
                         key.first, key.second, k.runs, fmt::format("{:.3g}", static_cast<double>(k.tokens)));
      continue;
    }
    const double seconds = static_cast<double>(k.tokens) / rate->second;
    total += seconds;
    out += fmt::format("  {:<8} {:<22} {:>4} runs  {:>8} tokens  at {}: {}\n", key.first, key.second, k.runs,
                       fmt::format("{:.3g}", static_cast<double>(k.tokens)), format_rate(rate->second), format_duration(seconds));
  }
  out += fmt::format("  total: {}{}\n", format_duration(total),
                     unknown > 0 ? fmt::format(", plus {} run(s) of unknown speed", unknown) : "");

  // (b) Seeds per contrast, from the pilot's paired seeds.
  const std::filesystem::path pilot_path = c.pilot.empty() ? grid.store : c.pilot;
  if (!c.pilot.empty() && !std::filesystem::exists(c.pilot))
    throw UserError("--pilot " + c.pilot.string() + ": no such store");
  std::unique_ptr<store::Store> pilot = open_if_there(pilot_path);
  const double target_se = c.effect_pp / (normal_quantile(1 - c.alpha / 2) + normal_quantile(c.power));
  out += fmt::format("seeds per contrast: effect {:g} pp, power {:g}%, two-sided alpha {:g} (before any multiplicity "
                     "adjustment), from the sd of d over the pilot's paired seeds ({}):\n",
                     c.effect_pp, 100 * c.power, c.alpha, pilot_path.string());
  if (!pilot) {
    out += "  no pilot store yet: run a few seeds of each contrast first (--pilot names another store)\n";
  } else {
    const std::vector<ContrastRun> runs = load_contrast_runs(*pilot);
    std::vector<std::string> main_recipes;
    for (const store::GridPointRecord& p : grid.points)
      if (std::find(main_recipes.begin(), main_recipes.end(), p.recipe) == main_recipes.end())
        main_recipes.push_back(p.recipe);
    std::map<std::string, std::string> bases = grid.recipe_bases;
    for (const store::GridRecord& g : c.study->others) bases.insert(g.recipe_bases.begin(), g.recipe_bases.end());
    const FamilyRequest request =
        families_asked(grid.compare, grid.file.filename().string(), main_recipes, bases, runs);
    const ContrastSet set = compute_contrasts(runs, request, grid.name);
    out += "  families: " + set.source + "\n";
    out += fmt::format("    {:<28} {:<44} {:>6} {:>9} {:>7} {:>9}\n", "A - B", "pilot grid point", "seeds", "sd d (pp)",
                       "needed", "normal n");
    int64_t rows = 0;
    for (const ContrastFamily& f : set.families)
      for (const ContrastTest& t : f.tests) {
        if (t.metric != "final_eval") continue;
        ++rows;
        const int64_t n = seeds_needed(t.t.sd, c.effect_pp, c.alpha, c.power);
        out += fmt::format("    {:<28} {:<44} {:>6} {:>9.3f} {:>7} {:>9.1f}\n", t.recipe + " - " + t.against, t.point,
                           t.t.n, t.t.sd, n, seeds_needed_normal(t.t.sd, c.effect_pp, c.alpha, c.power));
      }
    if (rows == 0) out += "    no contrast has two paired seeds at any point of the pilot: nothing to estimate sd from\n";
    out += fmt::format(
        "  interim rule (variance only): after the first k seeds of a contrast (k at least 8), compute the sd of d "
        "over them and continue to n = min(cap, max(planned n, ceil((sd / {:.3f} pp)²))), the standard error that "
        "gives this power; never look at the mean of d before n is fixed, and fix the cap (e.g. twice the planned n) "
        "in advance\n",
        target_se);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace fp4::fit
