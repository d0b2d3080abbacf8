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

std::string target_cell(const fit::RecipeComparison& c) {
  std::vector<std::string> parts;
  for (const fit::FittedGap& t : c.targets)
    parts.push_back(fmt::format("{}, {}: {}", fmt_count(t.n), fmt_count(t.d), pp_estimate(t.gap)));
  return parts.empty() ? "—" : fmt::format("{}", fmt::join(parts, "; "));
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
                            {pp_interval(o.ci)}, {reading(c, o.ci)}, {target_cell(c)},
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
