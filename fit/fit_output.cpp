// fit_output.cpp — see fit_output.h.
#include "fit/fit_output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "fit/guardrails.h"
#include "store/store.h"

namespace fp4::fit {

using nlohmann::json;

namespace {

std::string num(double v, const char* spec = "{:.6g}") {
  if (std::isnan(v)) return "-";
  return fmt::format(fmt::runtime(spec), v);
}
std::string interval(const Interval& ci, const char* spec = "{:.6g}") {
  if (!ci.known()) return "-";
  return fmt::format("[{}, {}]", num(ci.lo, spec), num(ci.hi, spec));
}
std::string pct(double v) { return std::isnan(v) ? "-" : fmt::format("{:+.3f}%", 100 * v); }
std::string pct_interval(const Interval& ci) {
  return ci.known() ? fmt::format("[{}, {}]", pct(ci.lo), pct(ci.hi)) : "-";
}

// "recipe comparisons" of a precision fit: each pair's d = gap_A - gap_B as the law gives it at the targets.
void table_comparisons(std::string& out, const StoredFit& f) {
  if (f.options.baseline.empty()) return;
  if (f.comparisons.empty()) {
    std::vector<std::string> quantized;
    for (const RecipeGap& g : f.gaps) quantized.push_back(g.recipe);
    if (quantized.size() >= 2)
      out += "  recipe comparisons: not in this stored fit (an older fp4lab wrote it; --refit adds them)\n";
    else
      out += fmt::format("  recipe comparisons: none (one quantized recipe, {}: nothing to compare it with)\n",
                         quantized.empty() ? std::string("-") : quantized[0]);
    return;
  }
  // The law's d only, as the report shows it: the observed d over the fit's own grid points (one
  // seed each in a one-seed grid, sizes mixed, no multiplicity adjustment) is descriptive, and
  // the test of A - B is the paired contrasts over seeds printed after the fits.
  out += fmt::format("  recipe comparisons, the law's d = gap_A - gap_B = (L_A - L_B)/L_{} (negative: A closer to {}); "
                     "the test of A - B is the paired contrasts over seeds after the fits, and the descriptive observed "
                     "d of the fit's grid points is in --format csv and json only\n",
                     f.options.baseline, f.options.baseline);
  for (const RecipeComparison& c : f.comparisons) {
    if (c.targets.empty())
      out += fmt::format("    {} - {}: no target (--format csv lists the law's d at each grid point)\n", c.recipe, c.against);
    for (const FittedGap& t : c.targets)
      out += unidentified(f)
                 ? fmt::format("    {} - {} at N = {}, D = {}: withheld (the law is flagged unidentified)\n", c.recipe,
                               c.against, num(t.n, "{:.3g}"), num(t.d, "{:.3g}"))
                 : fmt::format("    {} - {} at N = {}, D = {}: {} 95% {}{}\n", c.recipe, c.against, num(t.n, "{:.3g}"),
                               num(t.d, "{:.3g}"), pct(t.gap.value), pct_interval(t.gap.ci),
                               beyond_grid(f, {t.n, t.d}) != std::pair<double, double>{1, 1}
                                   ? " (extrapolation of the functional form)"
                                   : "");
  }
}

// The guardrails (fit/guardrails.h), first under the heading: a reader meets them before the numbers.
void table_guardrails(std::string& out, const StoredFit& f) {
  if (!f.guardrails_checked) {
    out += "  GUARDRAILS: not checked (an older fp4lab stored this fit; --refit checks them)\n";
    return;
  }
  if (f.guardrails.empty()) {
    out += "  guardrails: none raised (docs/statistics.md \"Guardrails\")\n";
    return;
  }
  out += fmt::format("  GUARDRAILS: {} raised{} (docs/statistics.md \"Guardrails\")\n", f.guardrails.size(),
                     unidentified(f) ? "; the law is NOT IDENTIFIED: it prints no target gap" : "");
  for (const Guardrail& g : f.guardrails) out += fmt::format("    ! {}: {}\n", g.check, g.message);
}

void table_one(std::string& out, const StoredFit& f, const std::string& note) {
  const bool precision = f.law == "precision";
  out += fmt::format("{} fit{}: {} — {} points, objective {} (sum of Huber_δ, δ = {}), {} starts ({} usable), "
                     "bootstrap {}/{} replicates, seed {}\n",
                     f.law, f.id > 0 ? fmt::format(" {}", f.id) : "",
                     precision ? "joint over " + fmt::format("{}", fmt::join(f.recipes(), ", "))
                               : "recipe " + f.scope,
                     f.n_points, num(f.objective, "{:.6e}"), num(f.options.huber_delta, "{:g}"),
                     f.optimizer.starts_tried, f.optimizer.starts_succeeded, f.samples.size(), f.replicates_asked,
                     f.options.seed);
  if (!note.empty()) out += "  " + note + "\n";
  table_guardrails(out, f);
  out += fmt::format("  {}; L = E + {}\n",
                     f.options.n_kind == "given" ? std::string("N and D as given in the points file")
                                                 : fmt::format("N = {} parameters, D = training tokens",
                                                               f.options.n_kind == "total" ? "total" : "non-embedding"),
                     precision ? (f.options.gamma ? "(A/(rho_N N)^alpha + B/(rho_D D)^beta)^gamma"
                                                  : "A/(rho_N N)^alpha + B/(rho_D D)^beta")
                               : "A/N^alpha + B/D^beta");
  out += fmt::format("  {:<8} {:>12}  {}\n", "param", "value", "95% interval");
  for (const ParameterEstimate& p : f.parameters) {
    if (!p.recipe.empty()) continue;
    if (p.name == "gamma" && !f.options.gamma) continue;
    std::string extra;
    if (p.name == "a") extra = "   N_opt ∝ C^a";
    if (p.name == "b") extra = "   D_opt ∝ C^b";
    out += fmt::format("  {:<8} {:>12}  {}{}\n", p.name, num(p.value),
                       withheld_interval(f, p.name) ? "(on its bound: no interval)" : interval(p.ci), extra);
  }
  if (precision) {
    out += fmt::format("  {:<12} {:>8}  {:<20} {:>8}  {:<20}\n", "recipe", "rho_N", "95% interval", "rho_D",
                       "95% interval");
    for (const std::string& r : f.recipes()) {
      const auto rn = f.parameter("rho_N", r), rd = f.parameter("rho_D", r);
      auto rho_interval = [&](const char* name, const Interval& ci) {
        if (r == f.options.baseline) return std::string("(baseline)");
        return withheld_interval(f, name, r) ? std::string("(on its bound)") : interval(ci, "{:.4f}");
      };
      out += fmt::format("  {:<12} {:>8}  {:<20} {:>8}  {:<20}{}\n", r, num(rn->value, "{:.4f}"),
                         rho_interval("rho_N", rn->ci), num(rd->value, "{:.4f}"), rho_interval("rho_D", rd->ci),
                         r == f.options.baseline
                             ? ""
                             : fmt::format("  worth a {} model of {:.3g}·N parameters trained on {:.3g}·D tokens",
                                           f.options.baseline, rn->value, rd->value));
    }
  }
  if (!f.predictions.empty()) {
    const bool withheld = unidentified(f);
    out += fmt::format("  {:<10} {:<10} {:<12} {:>8}  {:<20} {:>9}  {}\n", "target N", "D", "recipe", "loss",
                       "95% interval", "gap", "95% interval");
    for (const TargetPrediction& p : f.predictions) {
      const auto [xn, xd] = beyond_grid(f, p.target);
      const bool outside = xn > 1 || xd > 1;
      out += fmt::format("  {:<10} {:<10} {:<12} {:>8}  {:<20} {:>9}  {}{}\n", num(p.target.n, "{:.3g}"),
                         num(p.target.d, "{:.3g}"), p.recipe, num(p.loss.value, "{:.4f}"),
                         interval(p.loss.ci, "{:.4f}"), withheld && !std::isnan(p.gap.value) ? "withheld" : pct(p.gap.value),
                         withheld ? "-" : pct_interval(p.gap.ci),
                         outside ? "   extrapolation of the functional form" : "");
    }
    bool gap_withheld = false;
    for (const TargetPrediction& p : f.predictions) gap_withheld = gap_withheld || (withheld && !std::isnan(p.gap.value));
    if (gap_withheld) out += "  no target gap: the law is flagged unidentified (GUARDRAILS above)\n";
  }
  for (const RecipeGap& g : f.gaps) {
    out += fmt::format("  gap of {} against {} on the grid (gap = L/L_{} - 1): observed on the final eval loss, beside "
                       "it on the paper's train-tail loss (the mean train loss of the last tenth of the logged steps, at "
                       "most 1000), and the law's on the final eval loss:\n",
                       g.recipe, g.baseline, g.baseline);
    out += fmt::format("    {:<10} {:<10} {:>5} {:>9}  {:<22} {:>9}  {:<22} {:>9}  {}\n", "N", "D", "seeds", "observed",
                       "95% interval (seeds)", "tail", "95% interval (seeds)", "fitted", "95% interval");
    for (size_t i = 0; i < g.observed.size(); ++i) {
      const ObservedGap& o = g.observed[i];
      const ObservedGap* tail = i < g.observed_train_tail.size() ? &g.observed_train_tail[i] : nullptr;
      const FittedGap* fit = i < g.fitted.size() ? &g.fitted[i] : nullptr;
      out += fmt::format("    {:<10} {:<10} {:>5} {:>9}  {:<22} {:>9}  {:<22} {:>9}  {}\n", num(o.n, "{:.4g}"),
                         num(o.d, "{:.4g}"), o.seeds, pct(o.mean), pct_interval(o.ci), tail ? pct(tail->mean) : "-",
                         tail ? pct_interval(tail->ci) : "-", fit ? pct(fit->gap.value) : "-",
                         fit ? pct_interval(fit->gap.ci) : "-");
    }
    if (g.observed_train_tail.empty() && !g.observed.empty())
      out += "    tail: not in this stored fit (an older fp4lab stored it; --refit adds it)\n";
    for (size_t i = 0; i < g.observed_train_tail.size() && i < g.observed.size(); ++i)
      if (g.observed_train_tail[i].seeds < g.observed[i].seeds) {
        out += "    tail: over the seeds where both runs have a train-tail loss (a NaN in a tail leaves a run out)\n";
        break;
      }
    out += fmt::format("    trend: {} per tenfold compute (C = 6ND), 95% {} over {} matched runs", pct(g.slope.per_decade.value),
                       pct_interval(g.slope.per_decade.ci), g.slope.points);
    // The train tail's slope: runs with a tail gap but no slope were stored before fp4lab computed it.
    bool tails = false;
    for (const ObservedGap& o : g.observed_train_tail) tails = tails || o.seeds > 0;
    out += g.slope_train_tail.points > 0
               ? fmt::format("; on the train tail {}, 95% {} over {} runs\n", pct(g.slope_train_tail.per_decade.value),
                             pct_interval(g.slope_train_tail.per_decade.ci), g.slope_train_tail.points)
           : tails ? std::string("; on the train tail: not in this stored fit (--refit adds it)\n")
                   : std::string("\n");
  }
  if (precision) table_comparisons(out, f);
  if (f.held_out.done) {
    for (const HeldOutRecipe& h : f.held_out.recipes)
      out += fmt::format("  held out N = {}: {} mean |error| {:.3f}%, max {:.3f}% over {} run{} (refit without them)\n",
                         num(f.held_out.held_out_n, "{:.4g}"), h.recipe, 100 * h.mean_abs_rel_error,
                         100 * h.max_abs_rel_error, h.points.size(), h.points.size() == 1 ? "" : "s");
  } else {
    out += "  held-out check not done: " + f.held_out.reason + "\n";
  }
  double worst = 0;
  for (const Residual& r : f.residuals) worst = std::max(worst, std::fabs(r.log_residual));
  out += fmt::format("  residuals: max |log(observed/fitted)| = {:.4f} over {} points (--format csv lists each)\n",
                     worst, f.residuals.size());
  for (const ExcludedRun& e : f.excluded)
    out += fmt::format("  excluded: {} ({}): {}\n", e.run_name, e.recipe, e.reason);
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}
std::string csv_num(double v) { return std::isnan(v) ? "" : fmt::format("{}", v); }

// The note of a target row whose value is withheld (docs/fit.md, the csv table).
constexpr const char* kWithheldNote = "withheld: the law is flagged unidentified (guardrails)";

void csv_row(std::string& out, const StoredFit& f, const std::string& kind, const std::string& name,
             const std::string& recipe, double n, double d, double value, const Interval& ci, const std::string& note) {
  out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", f.id, f.law, csv_cell(f.scope), kind, csv_cell(name),
                     csv_cell(recipe), csv_num(n), csv_num(d), csv_num(value), csv_num(ci.lo), csv_num(ci.hi),
                     csv_cell(note));
}

void csv_one(std::string& out, const StoredFit& f) {
  for (const ParameterEstimate& p : f.parameters)
    csv_row(out, f, "parameter", p.name, p.recipe, kNaN, kNaN, p.value, p.ci, "");
  csv_row(out, f, "objective", "huber_sum", "", kNaN, kNaN, f.objective, {}, "");
  // A law flagged unidentified gives no target gap in any format (fit/guardrails.h): its rows stay,
  // so a reader sees the target was asked for, with the value left empty and the reason in the note.
  const bool withheld = unidentified(f);
  for (const TargetPrediction& p : f.predictions) {
    csv_row(out, f, "target_loss", "loss", p.recipe, p.target.n, p.target.d, p.loss.value, p.loss.ci, "");
    if (std::isnan(p.gap.value)) continue;
    if (withheld)
      csv_row(out, f, "target_gap", "gap", p.recipe, p.target.n, p.target.d, kNaN, {}, kWithheldNote);
    else
      csv_row(out, f, "target_gap", "gap", p.recipe, p.target.n, p.target.d, p.gap.value, p.gap.ci, "");
  }
  for (const RecipeGap& g : f.gaps) {
    for (const ObservedGap& o : g.observed)
      csv_row(out, f, "observed_gap", "gap", g.recipe, o.n, o.d, o.mean, o.ci, fmt::format("seeds={}", o.seeds));
    for (const ObservedGap& o : g.observed_train_tail)
      csv_row(out, f, "observed_gap_train_tail", "gap", g.recipe, o.n, o.d, o.mean, o.ci, fmt::format("seeds={}", o.seeds));
    for (const FittedGap& x : g.fitted) csv_row(out, f, "fitted_gap", "gap", g.recipe, x.n, x.d, x.gap.value, x.gap.ci, "");
    csv_row(out, f, "gap_slope", "per_decade", g.recipe, kNaN, kNaN, g.slope.per_decade.value, g.slope.per_decade.ci,
            fmt::format("points={}", g.slope.points));
    csv_row(out, f, "gap_slope_train_tail", "per_decade", g.recipe, kNaN, kNaN, g.slope_train_tail.per_decade.value,
            g.slope_train_tail.per_decade.ci, fmt::format("points={}", g.slope_train_tail.points));
  }
  // Comparisons: recipe = A, name = B, the value gap_A - gap_B.
  for (const RecipeComparison& c : f.comparisons) {
    auto counts = [](const ObservedDifference& o) { return fmt::format("points={} wins={}", o.points, o.wins); };
    csv_row(out, f, "compare_observed", c.against, c.recipe, kNaN, kNaN, c.observed.mean, c.observed.ci,
            counts(c.observed));
    for (const ObservedDifference& b : c.observed_by_n)
      csv_row(out, f, "compare_observed_n", c.against, c.recipe, b.n, kNaN, b.mean, b.ci, counts(b));
    for (const ObservedGap& p : c.observed_points)
      csv_row(out, f, "compare_observed_point", c.against, c.recipe, p.n, p.d, p.mean, p.ci,
              fmt::format("seeds={}", p.seeds));
    for (const FittedGap& x : c.fitted)
      csv_row(out, f, "compare_fitted", c.against, c.recipe, x.n, x.d, x.gap.value, x.gap.ci, "");
    for (const FittedGap& x : c.targets)
      if (withheld)
        csv_row(out, f, "compare_target", c.against, c.recipe, x.n, x.d, kNaN, {}, kWithheldNote);
      else
        csv_row(out, f, "compare_target", c.against, c.recipe, x.n, x.d, x.gap.value, x.gap.ci, "");
    csv_row(out, f, "compare_slope", c.against, c.recipe, kNaN, kNaN, c.slope.per_decade.value, c.slope.per_decade.ci,
            fmt::format("points={}", c.slope.points));
  }
  for (const Residual& r : f.residuals)
    csv_row(out, f, "residual", r.run_name, r.recipe, r.n, r.d, r.log_residual, {}, fmt::format("observed={} fitted={}",
                                                                                               r.observed, r.fitted));
  for (const HeldOutRecipe& h : f.held_out.recipes)
    for (const HeldOutPoint& p : h.points)
      csv_row(out, f, "held_out", p.run_name, h.recipe, p.n, p.d, p.rel_error, {},
              fmt::format("observed={} predicted={}", p.observed, p.predicted));
  for (const ExcludedRun& e : f.excluded) csv_row(out, f, "excluded", e.run_name, e.recipe, kNaN, kNaN, kNaN, {}, e.reason);
}

// The paired contrasts over seeds: fit_id is the set's id, law "paired", scope the family. A test
// is a `contrast` row (recipe = A, name = B, n and d its grid point's N and D; value the mean d in
// pp with its 95% t interval) and its three p-values as rows of their own; each carries its metric
// and point in the note, the point last (a label with spaces and commas).
void csv_contrasts(std::string& out, const ContrastSet& set) {
  auto row = [&](const std::string& scope, const std::string& kind, const std::string& name, const std::string& recipe,
                 double n, double d, double value, const Interval& ci, const std::string& note) {
    out += fmt::format("{},paired,{},{},{},{},{},{},{},{},{},{}\n", set.id, csv_cell(scope), kind, csv_cell(name),
                       csv_cell(recipe), csv_num(n), csv_num(d), csv_num(value), csv_num(ci.lo), csv_num(ci.hi),
                       csv_cell(note));
  };
  row("", "contrast_families", "", "", kNaN, kNaN, kNaN, {}, set.source);
  for (const ContrastFamily& f : set.families) {
    row(f.name, "contrast_family", "", "", kNaN, kNaN, kNaN, {},
        fmt::format("metrics={} declared={} metrics_declared={}", fmt::join(f.metrics, "+"), f.declared ? 1 : 0,
                    f.metrics_declared ? 1 : 0));
    for (const ContrastTest& t : f.tests) {
      const double n = static_cast<double>(t.n), d = static_cast<double>(t.tokens);
      const std::string where = fmt::format("metric={} point={}", t.metric, t.point);
      row(f.name, "contrast", t.against, t.recipe, n, d, t.t.mean, t.t.ci,
          fmt::format("metric={} seeds={} wins={} baseline_seeds={} missing_twins={} primary={} point={}", t.metric,
                      t.t.n, t.wins, t.baseline_seeds, t.missing_twins, t.primary ? 1 : 0, t.point));
      row(f.name, "contrast_p_t", t.against, t.recipe, n, d, t.t.p, {}, where);
      row(f.name, "contrast_p_sign_flip", t.against, t.recipe, n, d, t.flip.p, {}, where);
      row(f.name, "contrast_p_holm", t.against, t.recipe, n, d, t.p_holm, {}, where);
    }
    for (const auto& c : f.contrasts)
      for (const std::string& metric : f.metrics) {
        const Trend tr = contrast_trend(f, c, metric);
        if (tr.points < 2) continue;
        row(f.name, "contrast_slope", c.second, c.first, kNaN, kNaN, tr.weighted.slope, tr.weighted.ci,
            fmt::format("metric={} points={} sizes={} weighted=1/se^2 unweighted={} seed_bootstrap=[{} {}] "
                        "size_bootstrap={}",
                        metric, tr.points, tr.sizes, csv_num(tr.unweighted_slope), csv_num(tr.seed_bootstrap.lo),
                        csv_num(tr.seed_bootstrap.hi),
                        tr.size_bootstrap.known()
                            ? "[" + csv_num(tr.size_bootstrap.lo) + " " + csv_num(tr.size_bootstrap.hi) + "]"
                            : std::string("withheld")));
      }
    for (const std::string& u : f.untested) row(f.name, "contrast_untested", "", "", kNaN, kNaN, kNaN, {}, u);
  }
  for (const std::string& note : set.notes) row("", "contrast_note", "", "", kNaN, kNaN, kNaN, {}, note);
}

// The stored predictions as --format json gives them. A law flagged unidentified gives no target
// gap in any format: its target rows stay, so a reader sees the target was asked for, with each
// target gap's and compare-target d's value and interval null and the csv's note beside them. Only
// the output changes: the store's predictions_json keeps the numbers, so a refit or a later fp4lab
// with other guardrails still has them.
json predictions_json(const StoredFit& f, const std::string& stored) {
  json p = json::parse(stored);
  if (!unidentified(f)) return p;
  const json withheld = {{"value", nullptr}, {"lo", nullptr}, {"hi", nullptr}, {"note", kWithheldNote}};
  if (const auto targets = p.find("targets"); targets != p.end() && targets->is_array())
    for (json& t : *targets) {
      const auto gap = t.find("gap");
      // The baseline's own gap is null already (nothing to withhold), as its csv row is absent.
      if (gap != t.end() && gap->is_object() && !gap->value("value", json()).is_null()) *gap = withheld;
    }
  if (const auto comparisons = p.find("comparisons"); comparisons != p.end() && comparisons->is_array())
    for (json& c : *comparisons)
      if (const auto targets = c.find("targets"); targets != c.end() && targets->is_array())
        for (json& t : *targets) t.update(withheld);
  return p;
}

}  // namespace

OutputFormat parse_output_format(const std::string& name) {
  if (name == "table") return OutputFormat::table;
  if (name == "json") return OutputFormat::json;
  if (name == "csv") return OutputFormat::csv;
  throw UserError("--format " + name + ": use table, json or csv");
}

std::string format_fits(const std::vector<StoredFit>& fits, OutputFormat format, const std::vector<std::string>& notes,
                        const std::vector<SkippedFit>& skipped, const ContrastSet* contrasts) {
  std::string out;
  if (format == OutputFormat::table) {
    for (size_t i = 0; i < fits.size(); ++i) {
      if (i > 0) out += "\n";
      table_one(out, fits[i], i < notes.size() ? notes[i] : "");
    }
    if (!skipped.empty()) out += "\n";
    for (const SkippedFit& s : skipped) out += "skipped: " + s.reason + "\n";
    if (contrasts != nullptr) out += "\n" + format_contrasts_table(*contrasts);
  } else if (format == OutputFormat::csv) {
    out = "fit_id,law,scope,kind,name,recipe,n,d,value,lo,hi,note\n";
    for (const StoredFit& f : fits) csv_one(out, f);
    for (const SkippedFit& s : skipped)
      out += fmt::format("0,{},{},skipped,,,,,,,,{}\n", law_name(s.law), csv_cell(s.scope), csv_cell(s.reason));
    if (contrasts != nullptr) csv_contrasts(out, *contrasts);
  } else {
    json all = json::array();
    for (const StoredFit& f : fits) {
      const store::FitRecord r = to_record(f);
      all.push_back({{"id", r.id},
                     {"law", r.law},
                     {"scope", r.scope},
                     {"input_hash", r.input_hash},
                     {"n_points", r.n_points},
                     {"fp4lab_version", r.fp4lab_version},
                     {"created", r.created},
                     {"params", json::parse(r.params_json)},
                     {"intervals", json::parse(r.intervals_json)},
                     {"quality", json::parse(r.quality_json)},
                     {"options", json::parse(r.options_json)},
                     {"predictions", predictions_json(f, r.predictions_json)}});
    }
    const json doc = {{"fits", std::move(all)}, {"contrasts", contrasts != nullptr ? contrast_set_json(*contrasts) : json()}};
    out = doc.dump(1) + "\n";
  }
  return out;
}

}  // namespace fp4::fit
