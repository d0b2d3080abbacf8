// fitter.cpp — see fitter.h; docs/fit.md explains each step.
#include "fit/fitter.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/sha256.h"
#include "base/user_error.h"
#include "fit/guardrails.h"
#include "fit/law_solver.h"
#include "fit/parallel.h"
#include "fit/resample.h"

namespace fp4::fit {

using nlohmann::json;

namespace {

// Bumped whenever the method changes what a fit returns, so that stored fits of an older method are
// not reused for new requests (it is part of every input hash).
constexpr const char* kMethodVersion = "fp4lab-fit-3";

// The fewest distinct values a law needs to identify its parameters (docs/fit.md "Data needed"):
// A, α need three N (two differences for two unknowns), likewise B, β three D; a quantized recipe's
// ρN, ρD need two of each beside the baseline that fixes the shared shape.
constexpr size_t kChinchillaDistinct = 3;
constexpr size_t kRhoDistinct = 2;

// ---- Progress -------------------------------------------------------------------------------

class Progress {
 public:
  explicit Progress(const ProgressFn& fn) : fn_(fn) {}
  // Called by any thread after a task; reports at most every 0.1 s, and always the last task.
  void tick(const std::string& stage, std::atomic<size_t>& done, size_t total) {
    const size_t d = ++done;
    if (!fn_) return;
    const double now = monotonic_s();
    std::lock_guard<std::mutex> lock(mutex_);
    if (d != total && now - last_ < 0.1) return;
    last_ = now;
    fn_({stage, d, total});
  }

 private:
  const ProgressFn& fn_;
  std::mutex mutex_;
  double last_ = -1;
};

// ---- What each fit is made of ---------------------------------------------------------------

struct RecordSpec {
  Law law = Law::chinchilla;
  std::string scope;
  LawLayout layout;
  std::vector<size_t> points;  // indices into data.points
};

int rho_index_of(const LawLayout& layout, const std::string& recipe) {
  const auto it = std::find(layout.quantized.begin(), layout.quantized.end(), recipe);
  return it == layout.quantized.end() ? -1 : static_cast<int>(it - layout.quantized.begin());
}

std::vector<SolverPoint> solver_points(const FitData& data, const LawLayout& layout, const std::vector<size_t>& idx,
                                       const std::vector<double>* weights = nullptr) {
  std::vector<SolverPoint> out;
  out.reserve(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    const FitPoint& p = data.points[idx[k]];
    out.push_back({std::log(p.n), std::log(p.d), std::log(p.loss), rho_index_of(layout, p.recipe),
                   weights ? (*weights)[k] : 1.0});
  }
  return out;
}

std::string compact(double v) { return fmt::format("{:.4g}", v); }

// Distinct values of n (or d) among the points with positive weight.
std::set<double> distinct(const FitData& data, const std::vector<size_t>& idx, const std::vector<double>* weights,
                          bool n) {
  std::set<double> out;
  for (size_t k = 0; k < idx.size(); ++k)
    if (!weights || (*weights)[k] > 0) out.insert(n ? data.points[idx[k]].n : data.points[idx[k]].d);
  return out;
}

// "" when `idx` (with `weights`) can be fitted by a law needing `need` distinct N and D, else what is
// missing.
std::string missing_distinct(const FitData& data, const std::vector<size_t>& idx, const std::vector<double>* weights,
                             size_t need) {
  const auto ns = distinct(data, idx, weights, true), ds = distinct(data, idx, weights, false);
  auto list = [](const std::set<double>& s) {
    std::vector<std::string> v;
    for (double x : s) v.push_back(compact(x));
    return v.empty() ? std::string("none") : fmt::format("{}", fmt::join(v, ", "));
  };
  if (ns.size() < need) return fmt::format("needs at least {} distinct N, has {} (N = {})", need, ns.size(), list(ns));
  if (ds.size() < need) return fmt::format("needs at least {} distinct D, has {} (D = {})", need, ds.size(), list(ds));
  return "";
}

size_t positive(const std::vector<size_t>& idx, const std::vector<double>* weights) {
  if (!weights) return idx.size();
  return static_cast<size_t>(std::count_if(weights->begin(), weights->end(), [](double w) { return w > 0; }));
}

// What keeps `spec` (with resample weights, or none) from being fitted; "" when nothing does.
std::string unfittable(const FitData& data, const RecordSpec& spec, const std::vector<double>* weights) {
  if (spec.law == Law::chinchilla) {
    std::string m = missing_distinct(data, spec.points, weights, kChinchillaDistinct);
    if (m.empty() && positive(spec.points, weights) < 5)
      m = fmt::format("needs at least 5 points for 5 parameters, has {}", positive(spec.points, weights));
    return m;
  }
  // precision: the baseline fixes the shared shape, each quantized recipe its ρ.
  auto subset = [&](const std::string& recipe, std::vector<double>* w_out) {
    std::vector<size_t> idx;
    for (size_t k = 0; k < spec.points.size(); ++k)
      if (data.points[spec.points[k]].recipe == recipe) {
        idx.push_back(spec.points[k]);
        if (w_out) w_out->push_back((*weights)[k]);
      }
    return idx;
  };
  std::vector<double> wb;
  const auto base = subset(spec.layout.baseline, weights ? &wb : nullptr);
  if (std::string m = missing_distinct(data, base, weights ? &wb : nullptr, kChinchillaDistinct); !m.empty())
    return "baseline " + spec.layout.baseline + " " + m;
  for (const std::string& r : spec.layout.quantized) {
    std::vector<double> wr;
    const auto idx = subset(r, weights ? &wr : nullptr);
    if (std::string m = missing_distinct(data, idx, weights ? &wr : nullptr, kRhoDistinct); !m.empty())
      return "recipe " + r + " " + m;
  }
  if (positive(spec.points, weights) < spec.layout.size())
    return fmt::format("needs at least {} points for {} parameters, has {}", spec.layout.size(), spec.layout.size(),
                       positive(spec.points, weights));
  return "";
}

// "; 3 runs excluded (2 final eval/loss is NaN, 1 state diverged)", or "".
std::string excluded_note(const FitData& data, const std::vector<std::string>& recipes) {
  std::map<std::string, int> kinds;
  int total = 0;
  for (const ExcludedRun& e : data.excluded) {
    if (std::find(recipes.begin(), recipes.end(), e.recipe) == recipes.end()) continue;
    std::string kind = e.reason.substr(0, e.reason.find_first_of(":("));
    while (!kind.empty() && kind.back() == ' ') kind.pop_back();
    ++kinds[kind];
    ++total;
  }
  if (total == 0) return "";
  std::vector<std::string> parts;
  for (const auto& [k, n] : kinds) parts.push_back(fmt::format("{} {}", n, k));
  return fmt::format("; {} run{} excluded ({})", total, total == 1 ? "" : "s", fmt::join(parts, ", "));
}

std::vector<size_t> indices_of(const FitData& data, const std::string& recipe) {
  std::vector<size_t> out;
  for (size_t i = 0; i < data.points.size(); ++i)
    if (recipe.empty() || data.points[i].recipe == recipe) out.push_back(i);
  return out;
}

std::vector<Law> laws_to_fit(const FitData& data, const FitRequest& request, const std::string& baseline) {
  if (!request.laws.empty()) return request.laws;
  std::vector<Law> laws = {Law::chinchilla};
  if (!baseline.empty() && data.recipes.size() >= 2) laws.push_back(Law::precision);
  return laws;
}

// The recipes a fit is made of: {scope} for chinchilla, the baseline and the quantized recipes for
// precision.
std::vector<std::string> recipes_of(const RecordSpec& spec) {
  if (spec.law == Law::chinchilla) return {spec.scope};
  std::vector<std::string> out = spec.layout.quantized;
  out.push_back(spec.layout.baseline);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<size_t> indices_of_recipes(const FitData& data, const std::vector<std::string>& recipes) {
  std::vector<size_t> out;
  for (size_t i = 0; i < data.points.size(); ++i)
    if (std::find(recipes.begin(), recipes.end(), data.points[i].recipe) != recipes.end()) out.push_back(i);
  return out;
}

// The fits a request makes on `data` and the ones it skips (fitter.h, FitRequest): a named recipe
// that a law cannot fit, or a named law that can fit nothing, throws instead.
struct Selection {
  std::vector<RecordSpec> specs;
  std::vector<SkippedFit> skipped;
};

Selection select_fits(const FitData& data, const FitRequest& request, const std::string& baseline) {
  Selection out;
  const bool laws_named = !request.laws.empty();
  auto line = [&](const std::string& subject, const std::string& what, const std::vector<std::string>& recipes) {
    return fmt::format("{}: {}{}", subject, what, excluded_note(data, recipes));
  };
  auto refuse = [&](const std::string& text) { throw UserError(fmt::format("{} (in {})", text, data.origin)); };
  for (Law law : laws_to_fit(data, request, baseline)) {
    const size_t skipped_before = out.skipped.size();
    if (law == Law::chinchilla) {
      bool any = false;
      for (const std::string& r : data.recipes) {
        RecordSpec s{Law::chinchilla, r, {}, indices_of(data, r)};
        if (const std::string why = unfittable(data, s, nullptr); !why.empty()) {
          const std::string text = line("chinchilla fit of recipe " + r, why, {r});
          if (request.recipes_named) refuse(text);
          out.skipped.push_back({law, r, text});
          continue;
        }
        out.specs.push_back(std::move(s));
        any = true;
      }
      if (!any && laws_named) {
        std::vector<std::string> reasons;
        for (size_t k = skipped_before; k < out.skipped.size(); ++k) reasons.push_back(out.skipped[k].reason);
        refuse(fmt::format("{}", fmt::join(reasons, "; ")));
      }
      continue;
    }
    // precision: the baseline fixes the shared shape, each quantized recipe its ρ.
    auto cannot = [&](const std::string& text) {
      if (laws_named) refuse(text);
      out.skipped.push_back({law, "joint", text});
    };
    if (baseline.empty()) {
      cannot(fmt::format("precision fit: needs the BF16 baseline among the recipes; {} has {}", data.origin,
                         fmt::join(data.recipes, ", ")));
      continue;
    }
    if (data.recipes.size() < 2) {
      cannot(fmt::format("precision fit: needs the baseline {} and at least one other recipe; {} has only {}",
                         baseline, data.origin, baseline));
      continue;
    }
    if (const std::string m = missing_distinct(data, indices_of(data, baseline), nullptr, kChinchillaDistinct);
        !m.empty()) {
      cannot(line("precision fit", "baseline " + baseline + " " + m, {baseline}));
      continue;
    }
    RecordSpec s{Law::precision, "joint", {}, {}};
    s.layout.gamma = request.gamma;
    s.layout.baseline = baseline;
    std::vector<SkippedFit> left_out;
    for (const std::string& r : data.recipes) {
      if (r == baseline) continue;
      if (const std::string m = missing_distinct(data, indices_of(data, r), nullptr, kRhoDistinct); !m.empty()) {
        const std::string text = line("precision fit", "recipe " + r + " " + m, {r});
        if (request.recipes_named) refuse(text);
        left_out.push_back({law, r, text + "; left out of the joint fit"});
        continue;
      }
      s.layout.quantized.push_back(r);
    }
    if (s.layout.quantized.empty()) {
      std::vector<std::string> reasons;
      for (const SkippedFit& k : left_out) reasons.push_back(k.reason);
      cannot(fmt::format("precision fit: no recipe beside the baseline can be fitted: {}", fmt::join(reasons, "; ")));
      continue;
    }
    s.points = indices_of_recipes(data, recipes_of(s));
    if (const std::string why = unfittable(data, s, nullptr); !why.empty()) {
      cannot(line("precision fit", why, recipes_of(s)));
      continue;
    }
    out.skipped.insert(out.skipped.end(), left_out.begin(), left_out.end());
    out.specs.push_back(std::move(s));
  }
  if (out.specs.empty()) {
    std::vector<std::string> reasons;
    for (const SkippedFit& k : out.skipped) reasons.push_back(k.reason);
    throw NothingToFit(fmt::format("nothing can be fitted: {} (in {})", fmt::join(reasons, "; "), data.origin));
  }
  return out;
}

// The data the plan's fits are made of: `data` without the recipes no fit uses, so that their runs
// neither enter the input hash nor the bootstrap's resampling units.
FitData fitted_data(const FitData& data, const std::vector<std::string>& recipes) {
  if (recipes == data.recipes) return data;
  return select_recipes(data, recipes);
}

void check_request(const FitRequest& request) {
  if (!(request.huber_delta > 0) || !std::isfinite(request.huber_delta))
    throw UserError(fmt::format("huber_delta must be > 0, got {}", request.huber_delta));
  if (request.bootstrap < 0) throw UserError(fmt::format("bootstrap must be >= 0, got {}", request.bootstrap));
  for (const Target& t : request.targets) {
    if (!(t.n > 0) || !std::isfinite(t.n))
      throw UserError(fmt::format("targets: n must be > 0 (parameters), got {}", t.n));
    if (!(t.d > 0) || !std::isfinite(t.d)) throw UserError(fmt::format("targets: d must be > 0 (tokens), got {}", t.d));
  }
  if (request.grid.size() == 0 || request.polish_best < 1 || request.rho_starts.empty())
    throw std::invalid_argument("FitRequest: empty start grid, polish_best < 1 or no rho starts");
}

json canonical_data(const FitData& data, const FitRequest& request) {
  json points = json::array(), excluded = json::array(), targets = json::array();
  for (const FitPoint& p : data.points) {
    json point = {p.recipe, p.group, p.run_id, p.n, p.d, p.loss};
    // The train-tail loss is not fitted, but the fit's gap table shows its gap: a store whose tails
    // differ is another input.
    if (std::isfinite(p.train_tail)) point.push_back(p.train_tail);
    points.push_back(std::move(point));
  }
  for (const ExcludedRun& e : data.excluded) excluded.push_back({e.recipe, e.run_id, e.run_name, e.reason});
  for (const Target& t : request.targets) targets.push_back({t.n, t.d});
  const StartGrid& g = request.grid;
  return {{"method", kMethodVersion},
          {"points", points},
          {"excluded", excluded},
          {"n", data.n_kind},
          {"source", data.source},
          {"grid", data.grid},
          {"huber_delta", request.huber_delta},
          {"bootstrap", request.bootstrap},
          {"seed", request.seed},
          {"gamma", request.gamma},
          {"targets", targets},
          {"held_out", request.held_out},
          {"search",
           {{"a", g.a}, {"b", g.b}, {"e", g.e}, {"alpha", g.alpha}, {"beta", g.beta},
            {"polish_best", request.polish_best}, {"rho_starts", request.rho_starts}}}};
}

// ---- The search for the point estimate -----------------------------------------------------

struct Search {
  std::vector<double> x;
  SolveOutcome best;
  int64_t tried = 0, succeeded = 0, best_start = -1;
  std::vector<std::vector<double>> candidates;  // polished ends, best first
};

// grid_stage: run every start briefly, then polish the best `polish_best`; otherwise polish every
// start. Ties go to the lower start index.
Search search(const LawLayout& layout, const std::vector<SolverPoint>& pts, double delta,
              const std::vector<std::vector<double>>& starts, bool grid_stage, int polish_best, int threads,
              Progress& progress, const std::string& stage) {
  Search s;
  s.tried = static_cast<int64_t>(starts.size());
  std::vector<size_t> ranked;
  std::vector<SolveOutcome> grid(starts.size());
  std::atomic<size_t> done{0};
  const size_t polish_count =
      grid_stage ? std::min<size_t>(static_cast<size_t>(polish_best), starts.size()) : starts.size();
  const size_t total = (grid_stage ? starts.size() : 0) + polish_count;
  auto make_solver = [&] { return std::make_unique<LawSolver>(layout, pts, delta); };
  if (grid_stage) {
    parallel_for(starts.size(), threads, make_solver, [&](std::unique_ptr<LawSolver>& solver, size_t i) {
      grid[i] = solver->solve(starts[i], grid_stage_settings());
      progress.tick(stage, done, total);
    });
    for (size_t i = 0; i < grid.size(); ++i)
      if (grid[i].usable) ranked.push_back(i);
    s.succeeded = static_cast<int64_t>(ranked.size());
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](size_t a, size_t b) { return grid[a].objective < grid[b].objective; });
    if (ranked.size() > polish_count) ranked.resize(polish_count);
  } else {
    for (size_t i = 0; i < starts.size(); ++i) ranked.push_back(i);
  }
  std::vector<SolveOutcome> polished(ranked.size());
  parallel_for(ranked.size(), threads, make_solver, [&](std::unique_ptr<LawSolver>& solver, size_t k) {
    polished[k] = solver->solve(grid_stage ? grid[ranked[k]].x : starts[ranked[k]], polish_settings());
    progress.tick(stage, done, total);
  });
  std::vector<size_t> order;
  for (size_t k = 0; k < polished.size(); ++k)
    if (polished[k].usable) order.push_back(k);
  if (!grid_stage) s.succeeded = static_cast<int64_t>(order.size());
  if (order.empty()) throw std::runtime_error(stage + ": no start reached a finite objective");
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return polished[a].objective < polished[b].objective; });
  s.best = polished[order[0]];
  s.x = s.best.x;
  s.best_start = static_cast<int64_t>(ranked[order[0]]);
  for (size_t k : order) s.candidates.push_back(polished[k].x);
  return s;
}

std::vector<std::vector<double>> grid_starts(const StartGrid& grid) {
  std::vector<std::vector<double>> starts;
  starts.reserve(grid.size());
  for (size_t i = 0; i < grid.size(); ++i) starts.push_back(grid.start(i));
  return starts;
}

// The point estimate of one fit over the points `idx` (a subset of spec.points for the held-out
// check). Chinchilla: the grid. Precision: the baseline's chinchilla search (stage 1, cached: the
// baseline's own chinchilla fit is the same search), then every polished candidate × ρ start.
struct Estimated {
  Search search;
  int64_t stage1_tried = 0, stage1_succeeded = 0;
};

class Estimator {
 public:
  Estimator(const FitData& data, const FitRequest& request, Progress& progress)
      : data_(data), request_(request), progress_(progress), threads_(resolve_threads(request.threads)),
        grid_(grid_starts(request.grid)) {}

  Estimated estimate(const RecordSpec& spec, const std::vector<size_t>& idx, const std::string& label) {
    if (spec.law == Law::chinchilla) return {chinchilla(idx, label), 0, 0};
    std::vector<size_t> base;
    for (size_t i : idx)
      if (data_.points[i].recipe == spec.layout.baseline) base.push_back(i);
    const Search& stage1 = chinchilla(base, label + ": baseline starts");
    std::vector<std::vector<double>> starts;
    for (const std::vector<double>& c : stage1.candidates)
      for (double rho : request_.rho_starts) {
        std::vector<double> x(spec.layout.size(), std::log(rho));
        std::copy(c.begin(), c.end(), x.begin());
        if (spec.layout.gamma) x[5] = 1.0;
        starts.push_back(std::move(x));
      }
    const auto pts = solver_points(data_, spec.layout, idx);
    Estimated e{search(spec.layout, pts, request_.huber_delta, starts, false, request_.polish_best, threads_,
                       progress_, label + ": joint starts"),
                stage1.tried, stage1.succeeded};
    return e;
  }

  // A refit of `spec` over `idx` from given starts (the held-out check starts from the full fit's
  // polished candidates, as the bootstrap starts from its point estimate), each polished.
  Estimated refit(const RecordSpec& spec, const std::vector<size_t>& idx,
                  const std::vector<std::vector<double>>& starts, const std::string& label) {
    const auto pts = solver_points(data_, spec.layout, idx);
    return {search(spec.layout, pts, request_.huber_delta, starts, false, request_.polish_best, threads_, progress_,
                   label),
            0, 0};
  }

 private:
  const Search& chinchilla(const std::vector<size_t>& idx, const std::string& label) {
    auto it = cache_.find(idx);
    if (it != cache_.end()) return it->second;
    const LawLayout layout;
    const auto pts = solver_points(data_, layout, idx);
    Search s = search(layout, pts, request_.huber_delta, grid_, true, request_.polish_best, threads_, progress_,
                      label);
    return cache_.emplace(idx, std::move(s)).first->second;
  }

  const FitData& data_;
  const FitRequest& request_;
  Progress& progress_;
  int threads_;
  std::vector<std::vector<double>> grid_;
  std::map<std::vector<size_t>, Search> cache_;
};

// ---- The BF16-relative gap as observed -------------------------------------------------------

struct MatchedRun {
  size_t group = 0;
  double n = 0, d = 0, gap = 0;
  double tail_gap = kNaN;  // the same gap on the runs' train-tail losses (NaN where either has none)
};

// Every group that has a run of `recipe` and of `baseline` (the first of each, in data order).
std::vector<MatchedRun> matched_runs(const FitData& data, const std::vector<size_t>& group_of,
                                     const std::string& recipe, const std::string& baseline) {
  std::map<size_t, const FitPoint*> base_of;
  for (size_t i = 0; i < data.points.size(); ++i)
    if (data.points[i].recipe == baseline) base_of.emplace(group_of[i], &data.points[i]);
  std::vector<MatchedRun> out;
  std::set<size_t> seen;
  for (size_t i = 0; i < data.points.size(); ++i) {
    const FitPoint& p = data.points[i];
    if (p.recipe != recipe || !seen.insert(group_of[i]).second) continue;
    const auto b = base_of.find(group_of[i]);
    if (b != base_of.end())
      out.push_back({group_of[i], p.n, p.d, p.loss / b->second->loss - 1, p.train_tail / b->second->train_tail - 1});
  }
  return out;
}

// The slope of gap against log10(6 N D) over the matched runs, each counted `counts[group]` times
// (all once when counts is null); with `tail`, of their train-tail gaps, over the runs that have one.
double gap_slope(const std::vector<MatchedRun>& runs, const std::vector<int>* counts, bool tail = false) {
  std::vector<double> x, y;
  for (const MatchedRun& m : runs) {
    if (tail && !std::isfinite(m.tail_gap)) continue;
    const int times = counts ? (*counts)[m.group] : 1;
    for (int t = 0; t < times; ++t) {
      x.push_back(std::log10(6 * m.n * m.d));
      y.push_back(tail ? m.tail_gap : m.gap);
    }
  }
  return least_squares_line(x, y).slope;
}

// Distinct (n, d) of matched runs, in order, with the gaps observed there (the train-tail gaps
// with `tail`, those that are finite).
std::vector<std::pair<std::pair<double, double>, std::vector<double>>> by_grid_point(
    const std::vector<MatchedRun>& runs, bool tail = false) {
  std::map<std::pair<double, double>, std::vector<double>> m;
  for (const MatchedRun& r : runs) {
    std::vector<double>& gaps = m[{r.n, r.d}];
    if (!tail) gaps.push_back(r.gap);
    else if (std::isfinite(r.tail_gap)) gaps.push_back(r.tail_gap);
  }
  return {m.begin(), m.end()};
}

// ---- Two quantized recipes against each other ------------------------------------------------

// A pair of quantized recipes compared as gap_a - gap_b: a is the later name in sorted order.
struct RecipePair {
  std::string a, b;
};
std::vector<RecipePair> recipe_pairs(const std::vector<std::string>& quantized_sorted) {
  std::vector<RecipePair> out;
  for (size_t j = 1; j < quantized_sorted.size(); ++j)
    for (size_t i = 0; i < j; ++i) out.push_back({quantized_sorted[j], quantized_sorted[i]});
  return out;
}

// The groups matched in both `a` and `b` (runs of a, b and the baseline), with `gap` holding the
// paired difference gap_a - gap_b = (L_a - L_b) / L_baseline; in a's order.
std::vector<MatchedRun> paired_differences(const std::vector<MatchedRun>& a, const std::vector<MatchedRun>& b) {
  std::map<size_t, double> gap_b;
  for (const MatchedRun& m : b) gap_b.emplace(m.group, m.gap);
  std::vector<MatchedRun> out;
  for (const MatchedRun& m : a)
    if (const auto it = gap_b.find(m.group); it != gap_b.end()) out.push_back({m.group, m.n, m.d, m.gap - it->second});
  return out;
}

// The mean of paired differences with its Student-t interval, points as the unit; n names the size
// (NaN over every size).
ObservedDifference observed_difference(const std::vector<double>& differences, double n) {
  const MeanSpread m = mean_spread(differences);
  ObservedDifference o;
  o.n = n;
  o.points = static_cast<int64_t>(differences.size());
  o.wins = std::count_if(differences.begin(), differences.end(), [](double x) { return x < 0; });
  o.mean = m.mean;
  o.sd = m.sd;
  o.ci = m.ci;
  return o;
}

// Everything a precision fit reports about a against b: observed from the paired runs, fitted and
// predicted from the fit's point estimate and replicates (`fit` already holds both).
RecipeComparison compare_recipes(const StoredFit& fit, const RecipePair& pair, const std::vector<MatchedRun>& paired,
                                 const std::vector<double>& replicate_slopes) {
  RecipeComparison c;
  c.recipe = pair.a;
  c.against = pair.b;
  c.baseline = fit.options.baseline;
  std::vector<double> all;
  std::map<double, std::vector<double>> by_n;
  for (const MatchedRun& m : paired) {
    all.push_back(m.gap);
    by_n[m.n].push_back(m.gap);
  }
  c.observed = observed_difference(all, kNaN);
  for (const auto& [n, values] : by_n) c.observed_by_n.push_back(observed_difference(values, n));
  for (const auto& [nd, values] : by_grid_point(paired)) {
    const MeanSpread m = mean_spread(values);
    c.observed_points.push_back(
        {nd.first, nd.second, static_cast<int64_t>(values.size()), m.mean, m.sd, m.min, m.max, m.ci});
    c.fitted.push_back({nd.first, nd.second, predicted_gap_difference_interval(fit, pair.a, pair.b, nd.first, nd.second)});
  }
  for (const Target& t : fit.options.targets)
    c.targets.push_back({t.n, t.d, predicted_gap_difference_interval(fit, pair.a, pair.b, t.n, t.d)});
  c.slope.points = static_cast<int64_t>(paired.size());
  c.slope.per_decade = {gap_slope(paired, nullptr), percentile_interval(replicate_slopes)};
  return c;
}

// ---- Assembling a fit -----------------------------------------------------------------------

std::vector<ParameterEstimate> parameter_estimates(const Law law, const LawParameters& point,
                                                   const std::vector<BootstrapSample>& samples) {
  std::vector<ParameterEstimate> out;
  auto add = [&](const std::string& name, const std::string& recipe, auto value_of) {
    std::vector<double> values;
    for (const BootstrapSample& s : samples) values.push_back(value_of(s.params));
    out.push_back({name, recipe, value_of(point), percentile_interval(std::move(values))});
  };
  add("E", "", [](const LawParameters& p) { return p.E; });
  add("A", "", [](const LawParameters& p) { return p.A; });
  add("B", "", [](const LawParameters& p) { return p.B; });
  add("alpha", "", [](const LawParameters& p) { return p.alpha; });
  add("beta", "", [](const LawParameters& p) { return p.beta; });
  add("a", "", [](const LawParameters& p) { return allocation_exponent_a(p); });
  add("b", "", [](const LawParameters& p) { return allocation_exponent_b(p); });
  if (law == Law::precision) {
    add("gamma", "", [](const LawParameters& p) { return p.gamma; });
    for (const auto& [recipe, v] : point.rho_n) {
      (void)v;
      const std::string r = recipe;
      add("rho_N", r, [r](const LawParameters& p) { return p.rho_n.at(r); });
      add("rho_D", r, [r](const LawParameters& p) { return p.rho_d.at(r); });
    }
  }
  return out;
}

// A law's loss for `recipe` under parameters `p` of a fit of `law`.
double loss_of(Law law, const LawParameters& p, const std::string& recipe, double n, double d) {
  if (law == Law::chinchilla) return law_loss(p, 1, 1, n, d);
  return law_loss(p, p.rho_n.at(recipe), p.rho_d.at(recipe), n, d);
}

// The point value and replicate values of some quantity computed from a fit's parameters.
struct Replicated {
  LawParameters point;
  std::vector<std::optional<LawParameters>> replicates;  // by replicate index
};

}  // namespace

StartGrid StartGrid::hoffmann() {
  StartGrid g;
  for (int k = 0; k <= 5; ++k) g.a.push_back(5.0 * k);
  g.b = g.a;
  for (int k = -2; k <= 2; ++k) g.e.push_back(0.5 * k);
  for (int k = 0; k <= 4; ++k) g.alpha.push_back(0.5 * k);
  g.beta = g.alpha;
  return g;
}

std::vector<double> StartGrid::start(size_t index) const {
  if (index >= size()) throw std::out_of_range("StartGrid::start");
  const size_t ib = index % beta.size();
  index /= beta.size();
  const size_t ial = index % alpha.size();
  index /= alpha.size();
  const size_t ie = index % e.size();
  index /= e.size();
  const size_t ibb = index % b.size();
  index /= b.size();
  return {a[index], b[ibb], e[ie], alpha[ial], beta[ib]};
}

FitPlan plan_fits(const FitData& data, const FitRequest& request) {
  check_request(request);
  if (data.points.empty())
    throw UserError(fmt::format("{}: no run can be fitted{}", data.origin, excluded_note(data, data.recipes)));
  const Selection all = select_fits(data, request, baseline_of(data));
  std::set<std::string> used;
  for (const RecordSpec& spec : all.specs)
    for (const std::string& r : recipes_of(spec)) used.insert(r);
  FitPlan plan;
  plan.recipes.assign(used.begin(), used.end());
  plan.skipped = all.skipped;
  const FitData fitted = fitted_data(data, plan.recipes);
  plan.baseline = baseline_of(fitted);
  plan.data_hash = sha256_hex(canonical_data(fitted, request).dump());
  for (const RecordSpec& spec : select_fits(fitted, request, plan.baseline).specs) {
    const json key = {{"data_hash", plan.data_hash}, {"law", law_name(spec.law)}, {"scope", spec.scope}};
    plan.fits.push_back({spec.law, spec.scope, sha256_hex(key.dump())});
  }
  if (plan.fits.size() != all.specs.size()) throw std::logic_error("plan_fits: the selection changed when narrowed");
  return plan;
}

std::vector<StoredFit> run_fits(const FitData& all_data, const FitRequest& request, const FitPlan& plan,
                                const ProgressFn& progress_fn) {
  Progress progress(progress_fn);
  const int threads = resolve_threads(request.threads);
  const std::string& baseline = plan.baseline;
  const FitData data = fitted_data(all_data, plan.recipes);
  const std::vector<RecordSpec> specs = select_fits(data, request, baseline).specs;
  if (specs.size() != plan.fits.size()) throw std::logic_error("run_fits: the plan does not match the request");

  // Groups: the resampling units, in sorted order.
  std::map<std::string, size_t> group_index;
  for (const FitPoint& p : data.points) group_index.emplace(p.group, 0);
  {
    size_t k = 0;
    for (auto& [g, i] : group_index) i = k++;
  }
  std::vector<size_t> group_of(data.points.size());
  for (size_t i = 0; i < data.points.size(); ++i) group_of[i] = group_index.at(data.points[i].group);
  const size_t groups = group_index.size();

  // 1. Point estimates.
  Estimator estimator(data, request, progress);
  std::vector<Estimated> estimates;
  for (const RecordSpec& spec : specs)
    estimates.push_back(estimator.estimate(spec, spec.points, std::string(law_name(spec.law)) + " " + spec.scope));

  // 2. Bootstrap: replicate k resamples the groups once, for every fit and every observed gap.
  std::vector<std::string> quantized;
  if (!baseline.empty())
    for (const std::string& r : data.recipes)
      if (r != baseline) quantized.push_back(r);
  std::map<std::string, std::vector<MatchedRun>> matched;
  for (const std::string& r : quantized) matched[r] = matched_runs(data, group_of, r, baseline);

  // The pairs of the joint fit's quantized recipes, each with its paired runs.
  std::vector<RecipePair> pairs;
  std::vector<std::vector<MatchedRun>> paired;
  for (const RecordSpec& spec : specs)
    if (spec.law == Law::precision) {
      std::vector<std::string> q = spec.layout.quantized;
      std::sort(q.begin(), q.end());
      pairs = recipe_pairs(q);
    }
  for (const RecipePair& pr : pairs) paired.push_back(paired_differences(matched.at(pr.a), matched.at(pr.b)));

  const size_t replicates = static_cast<size_t>(request.bootstrap);
  std::vector<std::vector<std::optional<std::vector<double>>>> boot(
      specs.size(), std::vector<std::optional<std::vector<double>>>(replicates));
  // Why a replicate failed (0: it did not), counted per fit for the guardrails.
  constexpr int kResampleUnfittable = 1, kSolveUnusable = 2;
  std::vector<std::vector<int>> boot_failure(specs.size(), std::vector<int>(replicates, 0));
  std::map<std::string, std::vector<double>> boot_slopes, boot_tail_slopes;
  for (const std::string& r : quantized) boot_slopes[r].assign(replicates, kNaN);
  for (const std::string& r : quantized) boot_tail_slopes[r].assign(replicates, kNaN);
  std::vector<std::vector<double>> boot_pair_slopes(pairs.size(), std::vector<double>(replicates, kNaN));
  {
    std::atomic<size_t> done{0};
    const SolveSettings settings = replicate_settings();
    parallel_for(replicates, threads, [] { return 0; }, [&](int&, size_t k) {
      const std::vector<int> counts = resample_counts(request.seed, k, groups);
      for (size_t s = 0; s < specs.size(); ++s) {
        const RecordSpec& spec = specs[s];
        std::vector<double> weights;
        weights.reserve(spec.points.size());
        for (size_t i : spec.points) weights.push_back(counts[group_of[i]]);
        if (!unfittable(data, spec, &weights).empty()) {
          boot_failure[s][k] = kResampleUnfittable;
          continue;
        }
        LawSolver solver(spec.layout, solver_points(data, spec.layout, spec.points, &weights), request.huber_delta);
        SolveOutcome o = solver.solve(estimates[s].search.x, settings);
        if (o.usable) boot[s][k] = std::move(o.x);
        else boot_failure[s][k] = kSolveUnusable;
      }
      for (const std::string& r : quantized) boot_slopes.at(r)[k] = gap_slope(matched.at(r), &counts);
      for (const std::string& r : quantized) boot_tail_slopes.at(r)[k] = gap_slope(matched.at(r), &counts, true);
      for (size_t q = 0; q < pairs.size(); ++q) boot_pair_slopes[q][k] = gap_slope(paired[q], &counts);
      progress.tick("bootstrap", done, replicates);
    });
  }

  // Parameters per fit, point and replicates.
  std::vector<Replicated> params(specs.size());
  for (size_t s = 0; s < specs.size(); ++s) {
    params[s].point = specs[s].layout.parameters(estimates[s].search.x);
    for (const auto& x : boot[s])
      params[s].replicates.push_back(x ? std::optional<LawParameters>(specs[s].layout.parameters(*x)) : std::nullopt);
  }
  const auto chinchilla_of = [&](const std::string& recipe) -> const Replicated* {
    for (size_t s = 0; s < specs.size(); ++s)
      if (specs[s].law == Law::chinchilla && specs[s].scope == recipe) return &params[s];
    return nullptr;
  };

  // 3. Held-out checks.
  std::vector<HeldOutCheck> held(specs.size());
  for (size_t s = 0; s < specs.size() && request.held_out; ++s) {
    const RecordSpec& spec = specs[s];
    double top = 0;
    for (size_t i : spec.points) top = std::max(top, data.points[i].n);
    RecordSpec reduced = spec;
    std::erase_if(reduced.points, [&](size_t i) { return data.points[i].n == top; });
    HeldOutCheck& h = held[s];
    h.held_out_n = top;
    if (const std::string why = unfittable(data, reduced, nullptr); !why.empty()) {
      h.reason = fmt::format("without N = {}: {}", compact(top), why);
      continue;
    }
    const std::string label = fmt::format("{} {}: held-out refit", law_name(spec.law), spec.scope);
    const Estimated e = estimator.refit(reduced, reduced.points, estimates[s].search.candidates, label);
    const LawParameters p = spec.layout.parameters(e.search.x);
    std::map<std::string, HeldOutRecipe> per_recipe;
    for (size_t i : spec.points) {
      const FitPoint& pt = data.points[i];
      if (pt.n != top) continue;
      const double predicted = loss_of(spec.law, p, pt.recipe, pt.n, pt.d);
      HeldOutRecipe& hr = per_recipe[pt.recipe];
      hr.recipe = pt.recipe;
      hr.points.push_back({pt.run_id, pt.run_name, pt.n, pt.d, pt.loss, predicted, predicted / pt.loss - 1});
    }
    for (auto& [r, hr] : per_recipe) {
      double sum = 0, worst = 0;
      for (const HeldOutPoint& q : hr.points) {
        sum += std::fabs(q.rel_error);
        worst = std::max(worst, std::fabs(q.rel_error));
      }
      hr.mean_abs_rel_error = sum / static_cast<double>(hr.points.size());
      hr.max_abs_rel_error = worst;
      h.recipes.push_back(std::move(hr));
    }
    h.done = true;
  }

  // 4. Assemble.
  GuardrailInputs guardrail_inputs;
  for (const FitPoint& p : data.points)
    if (p.steps > 0 && !p.run_id.empty()) guardrail_inputs.steps[p.run_id] = p.steps;
  std::vector<StoredFit> fits;
  const double created = unix_time_s();
  for (size_t s = 0; s < specs.size(); ++s) {
    const RecordSpec& spec = specs[s];
    const Estimated& est = estimates[s];
    const Replicated& rep = params[s];
    StoredFit f;
    f.law = law_name(spec.law);
    f.scope = spec.scope;
    f.input_hash = plan.fits[s].input_hash;
    f.options.n_kind = data.n_kind;
    f.options.huber_delta = request.huber_delta;
    f.options.bootstrap = request.bootstrap;
    f.options.seed = request.seed;
    f.options.gamma = spec.law == Law::precision && request.gamma;
    f.options.targets = request.targets;
    f.options.recipes = data.recipes;
    f.options.baseline = baseline;
    f.options.source = data.source;
    f.options.grid = data.grid;
    f.options.data_hash = plan.data_hash;
    f.point = rep.point;
    f.replicates_asked = request.bootstrap;
    for (size_t k = 0; k < rep.replicates.size(); ++k)
      if (rep.replicates[k]) f.samples.push_back({static_cast<int64_t>(k), *rep.replicates[k]});
    f.parameters = parameter_estimates(spec.law, f.point, f.samples);

    const auto pts = solver_points(data, spec.layout, spec.points);
    const LawSolver evaluator(spec.layout, pts, request.huber_delta);
    f.objective = evaluator.objective(est.search.x);
    f.n_points = static_cast<int64_t>(spec.points.size());
    OptimizerSummary& o = f.optimizer;
    o.library = ceres_library_name();
    const std::string grid_text = fmt::format("{} grid starts (≤ {} iterations each), the best {} polished",
                                              request.grid.size(), grid_stage_settings().max_iterations,
                                              request.polish_best);
    o.method = spec.law == Law::chinchilla
                   ? "Levenberg-Marquardt (Ceres trust region, dense QR), Huber loss; " + grid_text
                   : fmt::format("Levenberg-Marquardt (Ceres trust region, dense QR), Huber loss; stage 1: the "
                                 "baseline's chinchilla fit, {}; stage 2: {} joint starts (each stage-1 candidate x "
                                 "rho start in {{{}}})",
                                 grid_text, est.search.tried, fmt::join(request.rho_starts, ", "));
    o.starts_tried = est.stage1_tried + est.search.tried;
    o.starts_succeeded = est.stage1_succeeded + est.search.succeeded;
    o.best_start = est.stage1_tried + est.search.best_start;
    o.iterations = est.search.best.iterations;
    o.termination = est.search.best.termination;
    o.message = est.search.best.message;
    o.initial_cost = est.search.best.initial_cost;
    o.final_cost = est.search.best.final_cost;

    for (size_t k = 0; k < spec.points.size(); ++k) {
      const FitPoint& p = data.points[spec.points[k]];
      const double fitted = std::exp(log_predicted_loss(spec.layout, est.search.x, pts[k]));
      f.residuals.push_back({p.run_id, p.run_name, p.recipe, p.n, p.d, p.loss, fitted, std::log(p.loss / fitted)});
    }
    f.held_out = held[s];
    if (!request.held_out) f.held_out.reason = "not asked";
    const std::vector<std::string> recipes = recipes_of(spec);
    for (const ExcludedRun& e : data.excluded)
      if (std::find(recipes.begin(), recipes.end(), e.recipe) != recipes.end()) f.excluded.push_back(e);

    // Losses and gaps, from this fit alone (precision) or from this fit and the baseline's
    // chinchilla fit, replicate by replicate.
    const Replicated* base = spec.law == Law::chinchilla && !baseline.empty() && spec.scope != baseline
                                 ? chinchilla_of(baseline)
                                 : nullptr;
    auto loss_estimate = [&](const std::string& recipe, double n, double d) {
      Estimate e{loss_of(spec.law, rep.point, recipe, n, d), {}};
      std::vector<double> v;
      for (const auto& p : rep.replicates)
        if (p) v.push_back(loss_of(spec.law, *p, recipe, n, d));
      e.ci = percentile_interval(std::move(v));
      return e;
    };
    const bool has_gap = spec.law == Law::precision ? !baseline.empty() : base != nullptr;
    auto gap_estimate = [&](const std::string& recipe, double n, double d) {
      Estimate e;
      if (!has_gap || recipe == baseline) return e;
      auto gap = [&](const LawParameters& p, const LawParameters& b) {
        return spec.law == Law::precision ? loss_of(spec.law, p, recipe, n, d) / loss_of(spec.law, p, baseline, n, d) - 1
                                          : loss_of(spec.law, p, recipe, n, d) / loss_of(spec.law, b, "", n, d) - 1;
      };
      const LawParameters& bp = base ? base->point : rep.point;
      e.value = gap(rep.point, bp);
      std::vector<double> v;
      for (size_t k = 0; k < rep.replicates.size(); ++k) {
        if (!rep.replicates[k]) continue;
        if (base && !base->replicates[k]) continue;
        v.push_back(gap(*rep.replicates[k], base ? *base->replicates[k] : *rep.replicates[k]));
      }
      e.ci = percentile_interval(std::move(v));
      return e;
    };
    for (const Target& t : request.targets)
      for (const std::string& r : recipes)
        f.predictions.push_back({t, r, loss_estimate(r, t.n, t.d), gap_estimate(r, t.n, t.d)});

    if (has_gap)
      for (const std::string& r : recipes) {
        if (r == baseline) continue;
        RecipeGap g;
        g.recipe = r;
        g.baseline = baseline;
        for (const auto& [nd, gaps] : by_grid_point(matched[r])) {
          const MeanSpread m = mean_spread(gaps);
          g.observed.push_back({nd.first, nd.second, static_cast<int64_t>(gaps.size()), m.mean, m.sd, m.min, m.max,
                                m.ci});
          g.fitted.push_back({nd.first, nd.second, gap_estimate(r, nd.first, nd.second)});
        }
        // The same grid points, in the same order, on the train-tail losses (no seed there: NaN).
        for (const auto& [nd, gaps] : by_grid_point(matched[r], true)) {
          const MeanSpread m = mean_spread(gaps);  // all NaN without a gap
          g.observed_train_tail.push_back(
              {nd.first, nd.second, static_cast<int64_t>(gaps.size()), m.mean, m.sd, m.min, m.max, m.ci});
        }
        g.slope.points = static_cast<int64_t>(matched[r].size());
        g.slope.per_decade = {gap_slope(matched[r], nullptr), percentile_interval(boot_slopes[r])};
        for (const MatchedRun& m : matched[r]) g.slope_train_tail.points += std::isfinite(m.tail_gap) ? 1 : 0;
        if (g.slope_train_tail.points > 0)
          g.slope_train_tail.per_decade = {gap_slope(matched[r], nullptr, true), percentile_interval(boot_tail_slopes[r])};
        f.gaps.push_back(std::move(g));
      }
    if (spec.law == Law::precision && has_gap)
      for (size_t q = 0; q < pairs.size(); ++q)
        f.comparisons.push_back(compare_recipes(f, pairs[q], paired[q], boot_pair_slopes[q]));
    int64_t unfittable_count = 0, unusable_count = 0;
    for (int why : boot_failure[s]) {
      unfittable_count += why == kResampleUnfittable;
      unusable_count += why == kSolveUnusable;
    }
    if (unfittable_count > 0)
      f.replicate_failures.push_back(
          {"the resample drew too few distinct N, D or points to fit the law", unfittable_count});
    if (unusable_count > 0)
      f.replicate_failures.push_back({"the solve ended without a finite objective or parameters", unusable_count});
    f.guardrails = check_guardrails(f, guardrail_inputs);
    f.guardrails_checked = true;
    f.fp4lab_version = FP4LAB_VERSION;
    f.created = created;
    fits.push_back(std::move(f));
  }
  // A chinchilla recipe's gap divides by the baseline's chinchilla fit: where that law is not
  // identified, neither is the gap.
  for (const StoredFit& b : fits)
    if (b.law == "chinchilla" && b.scope == baseline && unidentified(b))
      for (StoredFit& f : fits)
        if (f.law == "chinchilla" && f.scope != baseline)
          f.guardrails.push_back({"baseline", fmt::format("its gaps divide by the {} chinchilla fit, which is flagged "
                                                          "unidentified",
                                                          baseline),
                                  true, "", ""});
  return fits;
}

}  // namespace fp4::fit
