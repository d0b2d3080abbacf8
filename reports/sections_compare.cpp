// sections_compare.cpp — recipe against recipe (SCIENCE.md claim 3: does A train closer to BF16
// than B?). First the paired contrasts over every seed that `fp4lab fit` stored (fit/contrasts.h,
// docs/statistics.md): per family each contrast at each grid point with two or more seeds, d =
// (L_A − L_B) / L̄_bf16 per seed, its t interval, the t, sign-flip and Holm-adjusted p, the trends
// and the variance decomposition. Then, subordinate, the precision law's d on the grid and at the
// targets (predictions_json.comparisons, docs/fit.md "Recipe against recipe"): what the fitted law
// says, with its bootstrap interval. The report shows the stored numbers and recomputes nothing,
// so it agrees with `fp4lab fit`'s output by construction.
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
std::string label(const fit::RecipeComparison& c) { return c.recipe + " − " + c.against; }

std::string p_value(double p) {
  if (std::isnan(p)) return "—";
  return p >= 1e-4 ? fmt::format("{:.4f}", p) : fmt::format("{:.1e}", p);
}
std::string pp_value(double v) { return std::isfinite(v) ? fmt::format("{:+.3f}", v) : "—"; }
// A metric as the table's "loss" column names it.
std::string metric_label(const std::string& metric) { return metric == "final_eval" ? "final eval" : "train, last 10%"; }

// The same trend on the paper's metric, the train tail, where the family is tested on it: one
// sentence beside the final loss's ("" when it is not, or has fewer than two x).
std::string train_tail_trend(const fit::ContrastFamily& f, const std::pair<std::string, std::string>& contrast) {
  if (std::find(f.metrics.begin(), f.metrics.end(), "train_tail") == f.metrics.end()) return "";
  const fit::Trend tr = fit::contrast_trend(f, contrast, "train_tail");
  if (tr.points < 2 || std::isnan(tr.weighted.slope)) return "";
  return fmt::format("On the paper's metric (train, last 10%), over {} points of {} sizes: weighted {} pp per tenfold "
                     "compute, 95% [{}, {}]; seed bootstrap [{}, {}]; cluster bootstrap over the sizes {}. ",
                     tr.points, tr.sizes, pp_value(tr.weighted.slope), pp_value(tr.weighted.ci.lo),
                     pp_value(tr.weighted.ci.hi), pp_value(tr.seed_bootstrap.lo), pp_value(tr.seed_bootstrap.hi),
                     fit::size_bootstrap_text(tr, [](double v) { return pp_value(v); }));
}

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
                                    "below 0.05. A family is tested on the final validation loss (the primary metric, "
                                    "\"final eval\"), on the UFP4 paper's own, the mean train loss of the last tenth of the "
                                    "logged steps (at most 1000; \"train, last 10%\"), or on both, as its declaration "
                                    "says; Holm's adjustment runs over the family's tests on one metric at a time. "
                                    "Stored set {} (fp4lab {}). Families: {}.",
                                    set->id, set->fp4lab_version.empty() ? "unknown" : set->fp4lab_version, set->source))}});
  s.blocks.push_back(Paragraph{{strong("Declared tests: "), text(fit::declared_in_words(*set) + ".")}});
  std::vector<std::vector<std::string>> csv;
  for (const fit::ContrastFamily& f : set->families) {
    Table t;
    std::vector<std::string> per_metric;
    for (const std::string& m : f.metrics)
      per_metric.push_back(fmt::format("on {}: {}", metric_label(m), fit::holm_set_in_words(f.tests_on(m).size())));
    t.caption = fmt::format("Family “{}”: {}. Holm sets: {}", f.name, f.origin(), fmt::join(per_metric, "; "));
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
                        {metric_label(c.metric)}, {c.point},
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
    if (!t.rows.empty())
      s.blocks.push_back(std::move(t));
    else
      s.blocks.push_back(Note{{text(t.caption + ".")}});
    for (const auto& contrast : f.contrasts) {
      const fit::Trend tr = fit::contrast_trend(f, contrast);
      if (tr.points < 2 || std::isnan(tr.weighted.slope)) continue;
      std::vector<std::string> loo;
      for (const fit::LeaveOneOut& l : tr.leave_one_size_out)
        loo.push_back(fmt::format("without {}: {}", l.label, pp_value(l.slope)));
      s.blocks.push_back(Paragraph{{strong(fmt::format("Trend of {} − {} with compute. ", contrast.first, contrast.second)),
                                    text(fmt::format(
                                        "Over its {} tested points of {} model sizes (final loss), the weighted "
                                        "least-squares slope of the mean d against log10 C is {} pp per tenfold compute, "
                                        "95% [{}, {}] (weights 1/se² from each point's seeds); unweighted {}; seed "
                                        "bootstrap [{}, {}]; cluster bootstrap over the sizes (each with all its points) "
                                        "{}{}. {}",
                                        tr.points, tr.sizes, pp_value(tr.weighted.slope), pp_value(tr.weighted.ci.lo),
                                        pp_value(tr.weighted.ci.hi), pp_value(tr.unweighted_slope),
                                        pp_value(tr.seed_bootstrap.lo), pp_value(tr.seed_bootstrap.hi),
                                        fit::size_bootstrap_text(tr, [](double v) { return pp_value(v); }),
                                        loo.empty() ? "" : "; leave one size out: " + fmt::format("{}", fmt::join(loo, "; ")),
                                        train_tail_trend(f, contrast) +
                                            "Whatever else varies between the points varies along this axis too (the "
                                            "note below names it)."))}});
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
            "question is about the paired difference d = (L_A − L_B) / L_bf16, in percentage points (pp) of the BF16 "
            "loss; below 0, A is the closer to BF16. It is answered by the tests over every seed below, with Holm's "
            "adjustment across each family (docs/statistics.md); the precision law's d follows them, as what the "
            "fitted law says, not as a test. An interval that holds 0 says this study cannot tell the two apart, not "
            "that they are equal.")}});
  paired_over_seeds(ctx, s);
  if (fits.precision == nullptr) {
    s.blocks.push_back(Note{{text(fits.any() ? "No precision-law fit is stored, and the law's d comes from it: run "
                                             : "No fits in the store: run "),
                             code("fp4lab fit STUDY.toml"),
                             text(" (law \"precision\", the default) for the law's d between every pair of 4-bit recipes.")}});
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
  // The law's d only. The fit's observed d (over its grid's matched points, one seed each in a
  // grid of one seed, without a multiplicity adjustment) is not shown: the tests over every seed
  // above supersede it (issue 32).
  std::vector<std::vector<std::string>> csv;
  Table law;
  law.caption = "The precision law's d = gap_A − gap_B at the fit's targets and on the grid";
  law.header = {"A − B", "where", "N", "D", "the law's d [95%]"};
  law.numeric = {false, false, true, true, true};
  const bool withheld = fit::unidentified(f);
  for (const fit::RecipeComparison& c : f.comparisons) {
    const Cell pair(label(c), ctx.palette.style(c.recipe).color);
    for (const fit::FittedGap& t : c.targets) {
      const auto [xn, xd] = fit::beyond_grid(f, {t.n, t.d});
      law.rows.push_back({pair, {xn > 1 || xd > 1 ? "target (extrapolation of the functional form)" : "target"},
                          {fmt_count(t.n)}, {fmt_count(t.d)},
                          {withheld ? "withheld: the law is not identified (Guardrails)" : pp_estimate(t.gap)}});
      // Withheld in the CSV too: the value left empty, the reason in the note.
      const fit::Estimate shown = withheld ? fit::Estimate{} : t.gap;
      csv.push_back({std::to_string(f.id), csv_field(c.recipe), csv_field(c.against), csv_field(c.baseline), "target",
                     csv_number(t.n), csv_number(t.d), csv_number(shown.value), csv_number(shown.ci.lo),
                     csv_number(shown.ci.hi), csv_field(withheld ? "withheld: the law is flagged unidentified" : "")});
    }
    for (const fit::FittedGap& g : c.fitted) {
      law.rows.push_back({pair, {"grid point"}, {fmt_count(g.n)}, {fmt_count(g.d)}, {pp_estimate(g.gap)}});
      csv.push_back({std::to_string(f.id), csv_field(c.recipe), csv_field(c.against), csv_field(c.baseline), "fitted",
                     csv_number(g.n), csv_number(g.d), csv_number(g.gap.value), csv_number(g.gap.ci.lo),
                     csv_number(g.gap.ci.hi), ""});
    }
  }
  law.csv = ctx.csv("comparisons.csv", {"fit_id", "recipe", "against", "baseline", "kind", "n", "d", "value", "lo", "hi", "note"},
                    csv);
  s.blocks.push_back(Paragraph{{strong("The precision law's d. "),
                                text(fmt::format(
                                    "From the precision fit, fit {} of the store (Fitted laws names it): the law's d on "
                                    "the grid and at the fit's targets, its 95% interval taken replicate by replicate "
                                    "from the bootstrap over grid points (not the difference of two gaps' intervals). It "
                                    "is the fitted form's answer, only as good as the law (its guardrails are under "
                                    "Fitted laws): at a target far beyond the data it carries the parameters' spread, not "
                                    "the risk that the form is wrong there, and a law flagged unidentified gives none.",
                                    f.id))}});
  s.blocks.push_back(std::move(law));
  return s;
}

}  // namespace fp4::reports
