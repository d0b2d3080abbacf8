// sections_gaps.cpp — the gap table: per recipe and grid point the observed BF16-relative gap
// (mean ± sd over seeds, from the store's bf16_gap view), the gap the fitted laws give there and
// at the fit's targets, beside the UFP4 paper's reported gaps.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "fit/contrasts.h"
#include "fit/guardrails.h"
#include "fit/trend.h"
#include "reports/escape.h"
#include "reports/fits.h"
#include "reports/format.h"
#include "reports/numerics.h"
#include "reports/pairs.h"
#include "reports/paper.h"
#include "reports/report_context.h"
#include "reports/stats.h"

namespace fp4::reports {

namespace {

struct PointKey {
  std::string recipe, model;
  int64_t n = 0, d = 0;
  std::string replicate_key;  // the point itself (two points may share recipe, model, N and D)
  bool operator<(const PointKey& o) const {
    return std::tie(recipe, n, d, model, replicate_key) < std::tie(o.recipe, o.n, o.d, o.model, o.replicate_key);
  }
};

struct ObservedPoint {
  std::vector<double> gaps, losses, bf16_losses, train_gaps;
  std::vector<std::string> runs;
  const StudyRun* example = nullptr;  // one of its runs: N and D as the fits count them
};

// The replicate keys of the main grid's quantized points: the gap table's rows.
std::set<std::string> main_points(const Study& st) {
  std::set<std::string> keys;
  for (const StudyRun* r : st.main_runs())
    if (!r->record.baseline) keys.insert(r->replicate_key);
  return keys;
}

// The finished pairs of the bf16_gap view at the main grid's points, every seed the store holds of
// them (the noise floor's seeds too), by point; unfinished and excluded ones are counted apart.
std::map<PointKey, ObservedPoint> observed_points(const ReportContext& ctx, int* unfinished, int* excluded) {
  const Study& st = ctx.study;
  const std::set<std::string> keys = main_points(st);
  std::map<std::string, const TwinPair*> pair_of;
  const Twins twins = bf16_twins(st, true);
  for (const TwinPair& p : twins.pairs) pair_of[p.run->record.id] = &p;
  std::map<PointKey, ObservedPoint> out;
  *unfinished = *excluded = 0;
  auto left_out = [](const std::string& state) { return state == "failed" || state == "diverged"; };
  for (const store::Bf16GapRow& g : st.gaps) {
    const StudyRun* run = st.run(g.id);
    if (run == nullptr || !keys.count(run->replicate_key)) continue;
    if (left_out(g.state) || left_out(g.bf16_state)) {
      ++*excluded;
      continue;
    }
    if (g.state != "succeeded" || g.bf16_state != "succeeded") {
      ++*unfinished;
      continue;
    }
    ObservedPoint& p = out[{g.recipe, g.model, g.n_params_nonembedding, g.tokens, run->replicate_key}];
    p.gaps.push_back(g.gap);
    p.losses.push_back(g.loss);
    p.bf16_losses.push_back(g.bf16_loss);
    p.runs.push_back(g.name);
    if (p.example == nullptr || st.in_main(*run)) p.example = run;
    // The paper's measure, as the paired contrasts take it (fit::train_tail).
    if (const auto it = pair_of.find(g.id); it != pair_of.end()) p.train_gaps.push_back(train_tail_gap(st, *it->second));
  }
  return out;
}

// "+0.512% [+0.31%, +0.70%]".
std::string gap_with_interval(const fit::Estimate& e) {
  std::string s = fmt_percent(e.value);
  if (e.ci.known()) s += " [" + fmt_percent(e.ci.lo) + ", " + fmt_percent(e.ci.hi) + "]";
  return s;
}

// The fits' predictions at their targets (e.g. 1.5B parameters at 100B tokens), with the paper's
// gap beside a target at one of its model sizes.
Section prediction_subsection(ReportContext& ctx, const FitChoice& fits) {
  Section s{slug("Predicted at the fit's targets"), "Predicted at the fit's targets", {}, {}};
  std::vector<const fit::StoredFit*> all;
  if (fits.precision != nullptr) all.push_back(fits.precision);
  for (const auto& [recipe, f] : fits.chinchilla) all.push_back(f);
  Table t;
  t.caption = "Extrapolated loss and gap at the targets of the fit, with 95% bootstrap intervals";
  t.header = {"law", "recipe", "target N", "target D", "loss [95%]", "gap [95%]", "the paper's gap at that size"};
  t.numeric = {false, false, true, true, true, true, true};
  std::vector<std::vector<std::string>> csv;
  for (const fit::StoredFit* f : all)
    for (const fit::TargetPrediction& p : f->predictions) {
      std::string reported;
      for (const auto& g : paper::reported_gaps())
        if (std::fabs(p.target.n / g.params - 1) < 0.05 && (p.recipe == "e2m1" || p.recipe == "ufp4"))
          reported = fmt::format("{:.4f}% ({})", 100 * (p.recipe == "e2m1" ? g.e2m1 : g.ufp4), g.model);
      std::string loss = fmt_loss(p.loss.value);
      if (p.loss.ci.known()) loss += " [" + fmt_loss(p.loss.ci.lo) + ", " + fmt_loss(p.loss.ci.hi) + "]";
      const auto [xn, xd] = fit::beyond_grid(*f, p.target);
      if (xn > 1 || xd > 1) loss += " (extrapolation of the functional form)";
      // A law flagged unidentified gives no target gap, in the table or in the CSV (fit/guardrails.h):
      // the CSV leaves gap, gap_lo and gap_hi empty and says why in gap_note.
      const bool baseline = !std::isfinite(p.gap.value), withheld = !baseline && fit::unidentified(*f);
      const std::string gap = baseline ? "— (baseline)"
                              : withheld ? "withheld: the law is not identified (Guardrails)"
                                         : gap_with_interval(p.gap);
      t.rows.push_back({{f->law}, ctx.recipe_cell(p.recipe), {fmt_count(p.target.n)}, {fmt_count(p.target.d)}, {loss},
                        {gap}, {reported}});
      const fit::Estimate shown = withheld ? fit::Estimate{} : p.gap;
      csv.push_back({csv_field(f->law), csv_field(f->scope), csv_field(p.recipe), csv_number(p.target.n), csv_number(p.target.d),
                     csv_number(p.loss.value), csv_number(p.loss.ci.lo), csv_number(p.loss.ci.hi), csv_number(shown.value),
                     csv_number(shown.ci.lo), csv_number(shown.ci.hi),
                     csv_field(baseline ? "baseline" : withheld ? "withheld: the law is flagged unidentified" : "")});
    }
  t.csv = ctx.csv("predictions.csv",
                  {"law", "scope", "recipe", "n", "d", "loss", "loss_lo", "loss_hi", "gap", "gap_lo", "gap_hi", "gap_note"}, csv);
  if (t.rows.empty()) {
    s.blocks.push_back(Paragraph{{text(fits.any() ? "The stored fits have no targets: add "
                                                  : "No fits, so no predictions: run "),
                                  code(fits.any() ? "[fit] targets = [{n = 1.5e9, d = 1e11}]" : "fp4lab fit STUDY.toml"),
                                  text(fits.any() ? " to the TOML and fit again." : ".")}});
    return s;
  }
  s.blocks.push_back(Paragraph{{text("The fitted laws extrapolated to the targets named in the TOML's [fit] table. An "
                                     "interval this far from the data is only as good as the law's form: it carries the "
                                     "bootstrap's spread of the parameters, not the error of extrapolating the form itself.")}});
  s.blocks.push_back(std::move(t));
  return s;
}

// The gap's weighted trend (fit/trend.h, docs/statistics.md "Trends with scale"): over the main
// grid's points with two or more seeds, each point's mean gap weighted by 1/se² from its own seeds,
// beside the unweighted line, the seed bootstrap, the cluster bootstrap over model sizes and the
// leave-one-size-out slopes (a size's points at several D share its model and noise). The
// least-squares slope of the fits weighs every matched run alike, though a point's seed noise
// differs severalfold between sizes.
void weighted_gap_trends(ReportContext& ctx, const std::map<PointKey, ObservedPoint>& observed, Section& s) {
  Table t;
  t.caption = "Weighted trend of the observed gap per tenfold compute (points with two or more seeds)";
  t.header = {"recipe", "points", "sizes", "weighted slope per decade of C [95%]", "unweighted", "seed bootstrap [95%]",
              "cluster bootstrap over the sizes [95%]", "without each size", "on the train tail: weighted [95%]"};
  t.numeric = {false, true, true, true, true, true, true, false, true};
  std::vector<std::vector<std::string>> csv;
  auto interval = [](const fit::Interval& ci) {
    return ci.known() ? "[" + fmt_percent(ci.lo) + ", " + fmt_percent(ci.hi) + "]" : std::string("—");
  };
  for (const std::string& recipe : ctx.palette.order()) {
    std::vector<fit::TrendPoint> points, tail_points;
    std::set<double> xs;
    for (const auto& [k, p] : observed) {
      if (k.recipe != recipe) continue;
      const double x = std::log10(6.0 * static_cast<double>(k.n) * static_cast<double>(k.d));
      const std::string label = k.model + " " + fmt_count(static_cast<double>(k.d));
      std::vector<double> gaps, tails;
      for (double g : p.gaps)
        if (std::isfinite(g)) gaps.push_back(g);
      for (double g : p.train_gaps)
        if (std::isfinite(g)) tails.push_back(g);
      if (tails.size() >= 2) tail_points.push_back({label, x, std::move(tails), k.model});
      if (gaps.size() < 2) continue;
      points.push_back({label, x, std::move(gaps), k.model});
      xs.insert(x);
    }
    if (xs.size() < 2) continue;
    const fit::Trend tr = fit::fit_trend(points, fit::kTrendReplicates, 0);
    // The paper's metric: the weighted line alone (its bootstraps would say what the final loss's say).
    const fit::WeightedLine tail = fit::fit_trend(tail_points, 0).weighted;
    std::vector<std::string> loo;
    for (const fit::LeaveOneOut& l : tr.leave_one_size_out) loo.push_back(l.label + ": " + fmt_percent(l.slope));
    t.rows.push_back({ctx.recipe_cell(recipe), {std::to_string(tr.points)}, {std::to_string(tr.sizes)},
                      {fmt_percent(tr.weighted.slope) + " " + interval(tr.weighted.ci)}, {fmt_percent(tr.unweighted_slope)},
                      {interval(tr.seed_bootstrap)}, {fit::size_bootstrap_text(tr, [](double v) { return fmt_percent(v); })},
                      {loo.empty() ? "—" : fmt::format("{}", fmt::join(loo, "; "))},
                      {std::isfinite(tail.slope) ? fmt_percent(tail.slope) + " " + interval(tail.ci) : "—"}});
    csv.push_back({csv_field(recipe), std::to_string(tr.points), std::to_string(tr.sizes), csv_number(tr.weighted.slope),
                   csv_number(tr.weighted.ci.lo), csv_number(tr.weighted.ci.hi), csv_number(tr.unweighted_slope),
                   csv_number(tr.seed_bootstrap.lo), csv_number(tr.seed_bootstrap.hi), csv_number(tr.size_bootstrap.lo),
                   csv_number(tr.size_bootstrap.hi), std::to_string(tail_points.size()), csv_number(tail.slope),
                   csv_number(tail.ci.lo), csv_number(tail.ci.hi)});
  }
  t.csv = ctx.csv("gap_trends.csv",
                  {"recipe", "points", "sizes", "slope_per_decade", "lo", "hi", "unweighted_slope", "seed_bootstrap_lo",
                   "seed_bootstrap_hi", "size_bootstrap_lo", "size_bootstrap_hi", "train_points", "train_slope_per_decade",
                   "train_lo", "train_hi"},
                  csv);
  if (t.rows.empty()) {
    s.blocks.push_back(Note{{text("No recipe has two sizes of compute with two or more seeds each: no weighted trend of "
                                  "the gap. The slope above weighs single-seed points as if they were equally noisy.")}});
    return;
  }
  s.blocks.push_back(Paragraph{{strong("Weighted by each point's seed noise. "),
                                text("The slope above weighs every matched run alike, though the seed noise of a point's "
                                     "gap differs severalfold between sizes. Over the points the store holds two or more "
                                     "seeds of, each point's mean gap is weighted by 1/se² from its own seeds (the weighted "
                                     "least-squares line of docs/statistics.md \"Trends with scale\", its normal 95% "
                                     "interval), beside the unweighted line, a bootstrap of the seeds within each point, a "
                                     "cluster bootstrap over the model sizes (a size's points at several token counts "
                                     "drawn together), the slope without each size, and the weighted line of the same "
                                     "points' gaps on the paper's metric, the runs' train-tail losses. Whatever else "
                                     "varies between these points (the learning rate, the steps) varies along C too.")}});
  s.blocks.push_back(std::move(t));
}

// SCIENCE.md claim 6 as a number: the observed gap's least-squares slope against log10(C).
Section slope_subsection(ReportContext& ctx, const FitChoice& fits, const std::map<PointKey, ObservedPoint>& observed) {
  Section s{slug("Gap against compute"), "Gap against compute", {}, {}};
  std::map<std::string, const fit::RecipeGap*> gaps;
  for (const auto& [recipe, f] : fits.chinchilla)
    for (const fit::RecipeGap& g : f->gaps) gaps[g.recipe] = &g;
  if (fits.precision != nullptr)
    for (const fit::RecipeGap& g : fits.precision->gaps) gaps[g.recipe] = &g;  // the joint fit's, when both
  Table t;
  t.caption = "Change of the gap per tenfold compute (least-squares slope against log10 C, C = 6·N·D)";
  t.header = {"recipe", "slope per decade of C [95%]", "runs", "reading", "on the train tail [95%]", "runs with one"};
  t.numeric = {false, true, true, false, true, true};
  std::vector<std::vector<std::string>> csv;
  for (const std::string& recipe : ctx.palette.order()) {
    const auto it = gaps.find(recipe);
    if (it == gaps.end()) continue;
    const fit::GapSlope& sl = it->second->slope;
    std::string reading = "not enough points";
    if (sl.per_decade.ci.known())
      reading = sl.per_decade.ci.lo > 0   ? "widens with compute"
                : sl.per_decade.ci.hi < 0 ? "narrows with compute"
                                          : "no trend distinguishable from zero";
    else if (std::isfinite(sl.per_decade.value))
      reading = "no interval (no bootstrap)";
    // The paper's metric beside it (fit::train_tail), from the same fit and bootstrap.
    const fit::GapSlope& tail = it->second->slope_train_tail;
    t.rows.push_back({ctx.recipe_cell(recipe), {gap_with_interval(sl.per_decade)}, {std::to_string(sl.points)}, {reading},
                      {tail.points > 0 ? gap_with_interval(tail.per_decade) : "—"}, {std::to_string(tail.points)}});
    csv.push_back({csv_field(recipe), csv_number(sl.per_decade.value), csv_number(sl.per_decade.ci.lo), csv_number(sl.per_decade.ci.hi),
                   std::to_string(sl.points), csv_number(tail.per_decade.value), csv_number(tail.per_decade.ci.lo),
                   csv_number(tail.per_decade.ci.hi), std::to_string(tail.points)});
  }
  t.csv = ctx.csv("gap_slopes.csv",
                  {"recipe", "slope_per_decade", "lo", "hi", "points", "train_slope_per_decade", "train_lo", "train_hi",
                   "train_points"},
                  csv);
  if (t.rows.empty()) {
    s.blocks.push_back(Paragraph{{text("The gap's trend with compute comes with the fits: run "),
                                  code("fp4lab fit STUDY.toml"), text(".")}});
  } else {
    s.blocks.push_back(Paragraph{{text("SCIENCE.md claim 6 says the gap to BF16 does not widen with compute. The slope is "
                                       "the change of the observed gap (percentage points) per tenfold increase of C over "
                                       "every matched run, its interval from the bootstrap; beside it the same on the "
                                       "paper's metric, the gap of the runs' train-tail losses (the mean train loss of "
                                       "the last tenth of the logged steps).")}});
    s.blocks.push_back(std::move(t));
  }
  weighted_gap_trends(ctx, observed, s);
  return s;
}

std::string mean_sd_percent(const Spread& s) {
  if (s.n == 0) return "—";
  if (s.n == 1) return fmt_percent(s.mean);
  return fmt_percent(s.mean) + " ± " + fmt::format("{:.3f}%", 100 * s.sd);
}

Section paper_subsection(ReportContext& ctx, const std::map<PointKey, ObservedPoint>& observed) {
  Section s{slug("The paper's reported gaps"), "The paper's reported gaps", {}, {}};
  Table t;
  t.caption = "Reported by the UFP4 paper, not measured here";
  t.header = {"model (the paper's)", "parameters", "E2M1 reference gap", "UFP4 gap", "UFP4 / E2M1"};
  t.numeric = {false, true, true, true, true};
  std::vector<std::vector<std::string>> csv;
  for (const auto& g : paper::reported_gaps()) {
    t.rows.push_back({{g.model}, {fmt_count(g.params)}, {fmt::format("{:.4f}%", 100 * g.e2m1)},
                      {fmt::format("{:.4f}%", 100 * g.ufp4)}, {fmt::format("{:.3f}", g.ufp4 / g.e2m1)}});
    csv.push_back({csv_field(g.model), fmt::format("{:.17g}", g.params), fmt::format("{:.17g}", g.e2m1),
                   fmt::format("{:.17g}", g.ufp4)});
  }
  t.csv = ctx.csv("paper_gaps.csv", {"model", "params", "gap_e2m1", "gap_ufp4"}, csv);
  s.blocks.push_back(Paragraph{{text("As " + std::string(paper::kCitation) +
                                     " reports them: |L_fp4 − L_bf16| / L_bf16, the mean training loss of the last 1000 "
                                     "steps, for its strongest E2M1 recipe (fp32 1×16 scales, RHT on wgrad only, SR on "
                                     "dY) and for UFP4 (uniform grid, fp32 1×16 scales, RHT on all three GEMMs, SR only "
                                     "on dY), which fp4lab's e2m1 and ufp4 presets implement.")}});
  s.blocks.push_back(std::move(t));
  // The scale difference, stated with our own largest grid point.
  double largest_n = 0, largest_d = 0;
  for (const auto& [k, p] : observed) {
    largest_n = std::max(largest_n, static_cast<double>(k.n));
    largest_d = std::max(largest_d, static_cast<double>(k.d));
  }
  if (largest_n > 0) {
    s.blocks.push_back(Note{{strong("Scale: "),
                             text(fmt::format("this study's largest model has {} non-embedding parameters and its longest "
                                              "run {} tokens; the paper's smallest model has 1.5B parameters, about {}× "
                                              "larger. Its gaps are not a prediction of ours at our scale, and ours are "
                                              "not a measurement at its scale: only the fitted laws, with their intervals, "
                                              "connect the two (the predictions at the fit's targets).",
                                              fmt_count(largest_n), fmt_count(largest_d),
                                              1.5e9 / largest_n >= 1000 ? fmt_count(1.5e9 / largest_n)
                                                                        : fmt::format("{:.3g}", 1.5e9 / largest_n)))}});
  } else {
    s.blocks.push_back(Note{{text("No finished pair in this study yet, so no scale to compare with.")}});
  }
  return s;
}

}  // namespace

Section gap_section(ReportContext& ctx) {
  Section s{slug("Gap to BF16"), "Gap to BF16", {}, {}};
  s.blocks.push_back(Paragraph{{text("The BF16-relative gap of recipe r at a grid point is gap = L_r / L_bf16 − 1, from the "
                                     "final validation losses of a run and its BF16 twin (same model, D, seed and "
                                     "batches); above 0 the 4-bit recipe trains worse. The rows are the main grid's "
                                     "points; each is observed over every seed the store holds of it (other grids of the "
                                     "study, such as a noise floor, add seeds): the mean ± the sample standard deviation "
                                     "(n − 1) over the seeds and the 95% Student-t interval of that mean. The train-loss "
                                     "column is the paper's measure: the gap of the two runs' mean train losses over the "
                                     "last tenth of their logged steps (at most 1000), the train-tail loss the paired "
                                     "contrasts test (docs/statistics.md).")}});
  int unfinished = 0, excluded = 0;
  const auto observed = observed_points(ctx, &unfinished, &excluded);
  const FitChoice fits = choose_fits(ctx.study);
  std::set<std::string> laws;
  Table t;
  t.id = "gap-table";
  t.caption = "Observed gap per recipe and grid point";
  t.header = {"recipe", "model", "N", "D", "seeds", "loss", "BF16 loss", "gap (mean ± sd)", "95% interval (seeds)",
              "range", "train-loss gap", "fitted gap [95%]"};
  t.numeric = {false, false, true, true, true, true, true, true, true, true, true, true};
  std::vector<std::vector<std::string>> csv;
  for (const std::string& recipe : ctx.palette.order())
    for (const auto& [k, p] : observed) {
      if (k.recipe != recipe) continue;
      const Spread g = spread(p.gaps), l = spread(p.losses), b = spread(p.bf16_losses), tg = spread(p.train_gaps);
      std::string law;
      const std::optional<fit::Estimate> fitted =
          p.example ? fitted_gap(fits, k.recipe, p.example->record, &law) : std::nullopt;
      if (fitted) laws.insert(law);
      t.rows.push_back({ctx.recipe_cell(k.recipe), {k.model}, {fmt_count(static_cast<double>(k.n))},
                        {fmt_count(static_cast<double>(k.d))}, {std::to_string(g.n)}, {fmt_loss(l.mean)},
                        {fmt_loss(b.mean)}, {mean_sd_percent(g)},
                        {g.has_interval() ? "[" + fmt_percent(g.lo) + ", " + fmt_percent(g.hi) + "]" : "—"},
                        {g.n > 1 ? fmt_percent(g.min) + " … " + fmt_percent(g.max) : "—"}, {fmt_percent(tg.mean)},
                        {fitted ? gap_with_interval(*fitted) : "—"}});
      csv.push_back({csv_field(k.recipe), csv_field(k.model), std::to_string(k.n), std::to_string(k.d),
                     std::to_string(g.n), csv_number(l.mean), csv_number(b.mean), csv_number(g.mean), csv_number(g.sd), csv_number(g.min), csv_number(g.max),
                     csv_number(tg.mean), fitted ? csv_field(law) : "", fitted ? csv_number(fitted->value) : "",
                     fitted ? csv_number(fitted->ci.lo) : "", fitted ? csv_number(fitted->ci.hi) : "", csv_number(g.lo), csv_number(g.hi)});
    }
  t.csv = ctx.csv("gaps.csv",
                  {"recipe", "model", "n_params_nonembedding", "tokens", "seeds", "loss_mean", "bf16_loss_mean",
                   "gap_mean", "gap_sd", "gap_min", "gap_max", "train_gap_mean", "fitted_law", "fitted_gap",
                   "fitted_gap_lo", "fitted_gap_hi", "gap_seeds_lo", "gap_seeds_hi"},
                  csv);
  if (!laws.empty())
    t.caption += fmt::format(" (fitted: the {} law{})", fmt::join(laws, " and "), laws.size() == 1 ? "" : "s");
  if (t.rows.empty())
    s.blocks.push_back(Note{{text("No finished quantized run has a finished BF16 twin yet: no gap to show.")}});
  else s.blocks.push_back(std::move(t));
  if (!fits.any())
    s.blocks.push_back(Note{{text("No fits in the store: the fitted and predicted gaps need "), code("fp4lab fit STUDY.toml"),
                             text(".")}});
  if (unfinished > 0)
    s.blocks.push_back(Note{{text(fmt::format("{} pair{} where the run or its BF16 twin has not finished {} left out of this "
                                              "table.",
                                              unfinished, unfinished == 1 ? "" : "s", unfinished == 1 ? "is" : "are"))}});
  if (excluded > 0)
    s.blocks.push_back(Note{{text(fmt::format("{} pair{} where the run or its BF16 twin diverged or failed {} left out (see "
                                              "Excluded and missing runs).",
                                              excluded, excluded == 1 ? "" : "s", excluded == 1 ? "is" : "are"))}});
  const Twins twins = bf16_twins(ctx.study, true);
  std::vector<std::pair<const StudyRun*, const StudyRun*>> pairs;
  for (const TwinPair& p : twins.pairs) pairs.emplace_back(p.run, p.bf16);
  if (auto note = numerics_pairs_note(pairs, "gap pairs (a run and its BF16 twin)")) s.blocks.push_back(std::move(*note));
  if (!twins.without.empty())
    s.blocks.push_back(Note{{text(fmt::format("{} quantized run{} without a BF16 twin in the store ha{} no gap (see Loss "
                                              "curves).",
                                              twins.without.size(), twins.without.size() == 1 ? "" : "s",
                                              twins.without.size() == 1 ? "s" : "ve"))}});
  s.subsections.push_back(prediction_subsection(ctx, fits));
  s.subsections.push_back(paper_subsection(ctx, observed));
  s.subsections.push_back(slope_subsection(ctx, fits, observed));
  return s;
}

}  // namespace fp4::reports
