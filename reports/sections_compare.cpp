// sections_compare.cpp — recipe against recipe (SCIENCE.md claim 3: does A train closer to BF16
// than B?), as the precision fit stored it (predictions_json.comparisons, docs/fit.md "Recipe
// against recipe"): the paired difference of gaps d = gap_A − gap_B = (L_A − L_B) / L_bf16 of runs
// sharing N, D, seed and batches, observed over the matched points (overall, per model size, per
// grid point) with Student-t intervals, the law's d on the grid and at the targets with intervals
// taken replicate by replicate, and d's trend with compute. The report shows the stored numbers;
// it recomputes nothing, so the table and `fp4lab fit`'s output agree by construction.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "fit/guardrails.h"
#include "reports/escape.h"
#include "reports/fits.h"
#include "reports/format.h"
#include "reports/report_context.h"

namespace fp4::reports {

namespace {

// d in percentage points of the BF16 loss: "-0.244 pp".
std::string pp(double d) { return std::isfinite(d) ? fmt::format("{:+.3f} pp", 100 * d) : "—"; }
std::string pp_interval(const fit::Interval& ci) {
  return ci.known() ? "[" + pp(ci.lo) + ", " + pp(ci.hi) + "]" : "—";
}
std::string pp_estimate(const fit::Estimate& e) {
  return e.ci.known() ? pp(e.value) + " " + pp_interval(e.ci) : pp(e.value);
}
std::string mean_sd(double mean, double sd) {
  return std::isfinite(sd) ? pp(mean) + " ± " + fmt::format("{:.3f}", 100 * sd) : pp(mean);
}

std::string label(const fit::RecipeComparison& c) { return c.recipe + " − " + c.against; }

// What an interval of d says, A being c.recipe.
std::string reading(const fit::RecipeComparison& c, const fit::Interval& ci) {
  if (!ci.known()) return "no interval";
  if (ci.hi < 0) return c.recipe + " closer to BF16";
  if (ci.lo > 0) return c.against + " closer to BF16";
  return "no difference resolved (holds 0)";
}

std::string target_cell(const fit::StoredFit& f, const fit::RecipeComparison& c) {
  if (fit::unidentified(f)) return "withheld: the law is not identified (Guardrails)";
  std::vector<std::string> parts;
  for (const fit::FittedGap& t : c.targets)
    parts.push_back(fmt::format("{}, {}: {}", fmt_count(t.n), fmt_count(t.d), pp_estimate(t.gap)));
  return parts.empty() ? "—" : fmt::format("{}", fmt::join(parts, "; "));
}

std::string p_value(double p) {
  if (std::isnan(p)) return "—";
  return p >= 1e-4 ? fmt::format("{:.4f}", p) : fmt::format("{:.1e}", p);
}
std::string pp_value(double v) { return std::isfinite(v) ? fmt::format("{:+.3f}", v) : "—"; }

// Every seed, paired (fit/contrasts.h, as `fp4lab fit` stored it): a table per family with Holm's
// adjustment, the families' origin stated.
void paired_over_seeds(ReportContext& ctx, Section& s) {
  const std::optional<fit::ContrastSet>& set = ctx.study.contrasts;
  if (!set) {
    s.blocks.push_back(Note{{text("No paired contrasts over seeds are stored: run "), code("fp4lab fit STUDY.toml"),
                             text(" to test each pair of recipes at every grid point with two or more seeds.")}});
    return;
  }
  s.blocks.push_back(Paragraph{{strong("Over every seed. "),
                                text(fmt::format(
                                    "At each grid point with two or more seeds of both recipes, d = (L_A − L_B) / L̄_bf16 per "
                                    "seed, in pp, where L̄_bf16 is the mean final loss of the point's BF16 runs over all their "
                                    "seeds (a seed without a BF16 twin is normalised by that mean too, and the row says so); "
                                    "the mean of d with its 95% Student-t interval over the seeds, the paired t-test, the exact "
                                    "sign-flip test (with n seeds it cannot fall below 2/2ⁿ: 1/32 for six) and the sign-flip p "
                                    "Holm-adjusted across its family; a difference is called significant only when the Holm p is "
                                    "below 0.05. Each test is made twice: on the final validation loss (the primary "
                                    "metric) and on the UFP4 paper's own, the mean train loss of the last tenth of the "
                                    "logged steps (at most 1000; \"train, last 10%\"), with Holm applied to each "
                                    "separately. Stored set {} (fp4lab {}). Families: {}.",
                                    set->id, set->fp4lab_version.empty() ? "unknown" : set->fp4lab_version, set->source))}});
  std::vector<std::vector<std::string>> csv;
  for (const fit::ContrastFamily& f : set->families) {
    Table t;
    t.caption = fmt::format("Family “{}”: {} test{}, Holm-adjusted together on each loss", f.name, f.tests.size(),
                            f.tests.size() == 1 ? "" : "s");
    t.header = {"A − B", "loss", "grid point", "seeds", "A wins", "mean d (pp)", "95% t interval (pp)", "t p",
                "sign-flip p", "Holm p", "reading"};
    t.numeric = {false, false, false, true, true, true, true, true, true, true, false};
    for (const fit::ContrastTest& c : f.tests) {
      std::string reading = c.p_holm < 0.05 ? (c.t.mean < 0 ? c.recipe : c.against) + " closer to BF16 (significant)"
                                            : "not significant after Holm";
      if (c.primary) reading += "; primary contrast";
      if (c.missing_twins > 0)
        reading += fmt::format("; {} of {} seeds without a {} twin, normalised by the {} run mean", c.missing_twins,
                               c.t.n, c.baseline, c.baseline);
      t.rows.push_back({Cell(c.recipe + " − " + c.against, ctx.palette.style(c.recipe).color),
                        {c.metric == "final_eval" ? "final eval" : "train, last 10%"}, {c.point},
                        {std::to_string(c.t.n)}, {std::to_string(c.wins)}, {pp_value(c.t.mean)},
                        {"[" + pp_value(c.t.ci.lo) + ", " + pp_value(c.t.ci.hi) + "]"}, {p_value(c.t.p)},
                        {p_value(c.flip.p)}, {p_value(c.p_holm)}, {reading}});
      csv.push_back({csv_field(f.name), c.primary ? "1" : "0", csv_field(c.recipe), csv_field(c.against),
                     csv_field(c.baseline), c.metric, csv_field(c.point), csv_field(c.model), std::to_string(c.n),
                     std::to_string(c.tokens), std::to_string(c.t.n), std::to_string(c.wins),
                     std::to_string(c.baseline_seeds), std::to_string(c.missing_twins), csv_number(c.t.mean),
                     csv_number(c.t.sd), csv_number(c.t.ci.lo), csv_number(c.t.ci.hi), csv_number(c.t.p),
                     csv_number(c.flip.p), csv_number(c.p_holm)});
    }
    if (!t.rows.empty()) s.blocks.push_back(std::move(t));
    for (const auto& contrast : f.contrasts) {
      const fit::Trend tr = fit::contrast_trend(f, contrast);
      if (tr.points < 2 || std::isnan(tr.weighted.slope)) continue;
      std::vector<std::string> loo;
      for (const fit::LeaveOneOut& l : tr.leave_one_out) loo.push_back(fmt::format("without {}: {}", l.label, pp_value(l.slope)));
      s.blocks.push_back(Paragraph{{strong(fmt::format("Trend of {} − {} with compute. ", contrast.first, contrast.second)),
                                    text(fmt::format(
                                        "Over its {} tested points (final loss), the weighted least-squares slope of the "
                                        "mean d against log10 C is {} pp per tenfold compute, 95% [{}, {}] (weights "
                                        "1/se² from each point's seeds); unweighted {}; seed bootstrap [{}, {}]; cluster "
                                        "bootstrap over the points [{}, {}]{}. {}",
                                        tr.points, pp_value(tr.weighted.slope), pp_value(tr.weighted.ci.lo),
                                        pp_value(tr.weighted.ci.hi), pp_value(tr.unweighted_slope),
                                        pp_value(tr.seed_bootstrap.lo), pp_value(tr.seed_bootstrap.hi),
                                        pp_value(tr.cluster_bootstrap.lo), pp_value(tr.cluster_bootstrap.hi),
                                        loo.empty() ? "" : "; leave one out: " + fmt::format("{}", fmt::join(loo, "; ")),
                                        "Whatever else varies between the points varies along this axis too (the note "
                                        "below names it)."))}});
    }
    if (!f.untested.empty())
      s.blocks.push_back(Note{{text(fmt::format("Family “{}”, not tested: {}.", f.name, fmt::join(f.untested, "; ")))}});
  }
  // Why a contrast is or is not resolved: how much of each recipe's seed noise the pairing cancels.
  Table v;
  v.caption = "Variance over the seeds (final eval loss, pp of the BF16 mean; points with three seeds or more)";
  v.header = {"A − B", "grid point", "seeds", "sd A", "sd B", "correlation", "seed-shared sd", "sd of d",
              "removed by pairing"};
  v.numeric = {false, false, true, true, true, true, true, true, true};
  std::set<std::string> shown;
  for (const fit::ContrastFamily& f : set->families)
    for (const fit::ContrastTest& c : f.tests) {
      if (c.metric != "final_eval" || c.t.n < 3 || !shown.insert(c.recipe + "|" + c.against + "|" + c.point).second)
        continue;
      auto num = [](double x) { return std::isfinite(x) ? fmt::format("{:.3f}", x) : std::string("—"); };
      v.rows.push_back({{c.recipe + " − " + c.against}, {c.point}, {std::to_string(c.t.n)}, {num(c.sd_recipe)},
                        {num(c.sd_against)}, {std::isfinite(c.correlation) ? fmt::format("{:+.2f}", c.correlation) : "—"},
                        {num(c.shared_sd())}, {num(c.t.sd)},
                        {std::isfinite(c.pairing_removed()) ? fmt::format("{:.0f}%", 100 * c.pairing_removed()) : "—"}});
    }
  if (!v.rows.empty()) {
    s.blocks.push_back(Paragraph{{text("Each recipe's final loss varies from seed to seed; the part that the two recipes "
                                       "share (the seed's initial weights and batches: the covariance) cancels in d, the "
                                       "run-specific rest does not. Removed by pairing = 1 − var d / (var A + var B): "
                                       "near 100%, pairing resolves differences far below the seed noise; near 0, the "
                                       "recipes' seed noise is independent and only more seeds help.")}});
    s.blocks.push_back(std::move(v));
  }
  const std::string file = ctx.csv("paired_contrasts.csv",
                                   {"family", "primary", "recipe", "against", "baseline", "metric", "point", "model", "n",
                                    "d", "seeds", "wins", "baseline_seeds", "missing_twins", "mean_pp", "sd_pp", "lo_pp",
                                    "hi_pp", "p_t", "p_sign_flip", "p_holm"},
                                   csv);
  for (Block& b : s.blocks)
    if (Table* t = std::get_if<Table>(&b); t != nullptr && t->csv.empty()) t->csv = file;
  for (const std::string& n : set->notes) s.blocks.push_back(Note{{text(n)}});
}

}  // namespace

Section comparison_section(ReportContext& ctx) {
  const FitChoice fits = choose_fits(ctx.study);
  Section s{slug("Recipe against recipe"), "Recipe against recipe", {}, {}};
  s.blocks.push_back(Paragraph{
      {text("Does recipe A train closer to BF16 than recipe B (SCIENCE.md claim 3)? Two overlapping gap intervals do not "
            "answer it: the recipes of a grid point share N, D, seed and batches, so their gaps move together. The "
            "question is about the paired difference d = gap_A − gap_B = (L_A − L_B) / L_bf16, in percentage points (pp) "
            "of the BF16 loss; below 0, A is the closer to BF16. Observed: d of every matched point (a grid point and "
            "seed with runs of A, B and BF16), the mean ± sd over the points with its 95% Student-t interval (the points "
            "as the unit) and how many points A wins; the same per model size and per grid point. Fitted and predicted: "
            "the precision law's d on the grid and at the fit's targets, its 95% interval taken replicate by replicate "
            "(not the difference of two gaps' intervals). Trend: d's least-squares slope per tenfold compute, with its "
            "bootstrap interval. An interval that holds 0 says this grid cannot tell the two apart, not that they are "
            "equal (docs/fit.md, \"Recipe against recipe\").")}});
  paired_over_seeds(ctx, s);
  if (fits.precision == nullptr) {
    s.blocks.push_back(Note{{text(fits.any() ? "No precision-law fit is stored, and the comparisons come from it: run "
                                             : "No fits in the store: run "),
                             code("fp4lab fit STUDY.toml"),
                             text(" (law \"precision\", the default) to compare every pair of 4-bit recipes.")}});
    return s;
  }
  const fit::StoredFit& f = *fits.precision;
  if (f.comparisons.empty()) {
    std::vector<std::string> quantized;
    for (const std::string& r : f.options.recipes)
      if (r != f.options.baseline) quantized.push_back(r);
    if (quantized.size() < 2)
      s.blocks.push_back(Note{{text(fmt::format("Nothing to compare: the precision fit (fit {}) has {} quantized recipe{} "
                                                "({}); a comparison needs two.",
                                                f.id, quantized.size(), quantized.size() == 1 ? "" : "s",
                                                quantized.empty() ? "none" : fmt::format("{}", fmt::join(quantized, ", "))))}});
    else
      s.blocks.push_back(Note{{text(fmt::format("The precision fit (fit {}, fp4lab {}) was stored before fp4lab compared "
                                                "recipes: it holds no comparisons. ",
                                                f.id, f.fp4lab_version.empty() ? "unknown" : f.fp4lab_version)),
                               code("fp4lab fit STUDY.toml"), text(" fits it again with them.")}});
    return s;
  }
  s.blocks.push_back(Paragraph{{text(fmt::format("From the precision fit, fit {} of the store (Fitted laws names it).", f.id))}});

  std::vector<std::vector<std::string>> csv;
  auto row = [&](const fit::RecipeComparison& c, const char* kind, double n, double d, int64_t count, int64_t wins,
                 double value, double sd, const fit::Interval& ci) {
    csv.push_back({std::to_string(f.id), csv_field(c.recipe), csv_field(c.against), csv_field(c.baseline), kind, csv_number(n),
                   csv_number(d), count < 0 ? "" : std::to_string(count), wins < 0 ? "" : std::to_string(wins), csv_number(value),
                   csv_number(sd), csv_number(ci.lo), csv_number(ci.hi)});
  };

  Table overall;
  overall.id = "comparison-table";
  overall.caption = "Paired difference of gaps d = gap_A − gap_B per pair of recipes";
  overall.header = {"A − B", "matched points", "A wins", "observed d (mean ± sd, pp)", "95% interval (points)",
                    "reading", "predicted d at the targets [95%]", "change of d per tenfold compute [95%]"};
  overall.numeric = {false, true, true, true, true, false, true, true};
  Table by_n;
  by_n.caption = "The same per model size (over its D values and seeds)";
  by_n.header = {"A − B", "N", "matched points", "A wins", "observed d (mean ± sd, pp)", "95% interval (points)",
                 "reading"};
  by_n.numeric = {false, true, true, true, true, true, false};
  Table points;
  points.caption = "Per grid point: observed d over its seeds and the law's d there";
  points.header = {"A − B", "N", "D", "seeds", "observed d (mean ± sd, pp)", "95% interval (seeds)",
                   "fitted d [95%]"};
  points.numeric = {false, true, true, true, true, true, true};
  for (const fit::RecipeComparison& c : f.comparisons) {
    const Cell pair(label(c), ctx.palette.style(c.recipe).color);
    const fit::ObservedDifference& o = c.observed;
    overall.rows.push_back({pair, {std::to_string(o.points)}, {std::to_string(o.wins)}, {mean_sd(o.mean, o.sd)},
                            {pp_interval(o.ci)}, {reading(c, o.ci)}, {target_cell(f, c)},
                            {pp_estimate(c.slope.per_decade)}});
    row(c, "observed", std::nan(""), std::nan(""), o.points, o.wins, o.mean, o.sd, o.ci);
    for (const fit::ObservedDifference& n : c.observed_by_n) {
      by_n.rows.push_back({pair, {fmt_count(n.n)}, {std::to_string(n.points)}, {std::to_string(n.wins)},
                           {mean_sd(n.mean, n.sd)}, {pp_interval(n.ci)}, {reading(c, n.ci)}});
      row(c, "observed_n", n.n, std::nan(""), n.points, n.wins, n.mean, n.sd, n.ci);
    }
    for (const fit::ObservedGap& p : c.observed_points) {
      const fit::FittedGap* fitted = nullptr;
      for (const fit::FittedGap& g : c.fitted)
        if (g.n == p.n && g.d == p.d) fitted = &g;
      points.rows.push_back({pair, {fmt_count(p.n)}, {fmt_count(p.d)}, {std::to_string(p.seeds)}, {mean_sd(p.mean, p.sd)},
                             {pp_interval(p.ci)}, {fitted ? pp_estimate(fitted->gap) : "—"}});
      row(c, "observed_point", p.n, p.d, p.seeds, -1, p.mean, p.sd, p.ci);
    }
    for (const fit::FittedGap& g : c.fitted) row(c, "fitted", g.n, g.d, -1, -1, g.gap.value, std::nan(""), g.gap.ci);
    for (const fit::FittedGap& t : c.targets) row(c, "target", t.n, t.d, -1, -1, t.gap.value, std::nan(""), t.gap.ci);
    row(c, "slope", std::nan(""), std::nan(""), c.slope.points, -1, c.slope.per_decade.value, std::nan(""),
        c.slope.per_decade.ci);
  }
  const std::string file = ctx.csv("comparisons.csv",
                                   {"fit_id", "recipe", "against", "baseline", "kind", "n", "d", "count", "wins", "value",
                                    "sd", "lo", "hi"},
                                   csv);
  overall.csv = by_n.csv = points.csv = file;
  s.blocks.push_back(std::move(overall));
  s.blocks.push_back(Note{{strong("Read with care: "),
                           text("the observed interval treats the matched points as independent draws of one difference; "
                                "where d changes with size, the per-size rows and the trend say so. The predicted d at a "
                                "target far beyond the data carries the parameters' spread only, not the risk that the "
                                "law's form is wrong there.")}});
  if (!by_n.rows.empty()) s.blocks.push_back(std::move(by_n));
  if (!points.rows.empty()) s.blocks.push_back(std::move(points));
  return s;
}

}  // namespace fp4::reports
