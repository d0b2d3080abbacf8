// sections_fits.cpp — what the stored fits say: final loss against N per D with each recipe's
// fitted law and its 95% bootstrap band, final loss against compute, the residuals, the fitted
// parameters, the held-out check; and the precision law's effective-parameter and effective-data
// multipliers rho_N, rho_D per recipe.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "fit/guardrails.h"
#include "reports/escape.h"
#include "reports/fits.h"
#include "reports/format.h"
#include "reports/numerics.h"
#include "reports/report_context.h"

namespace fp4::reports {

namespace {

// "0.347 [0.31, 0.38]"; the value alone without an interval.
std::string with_interval(double value, const fit::Interval& ci, int significant = 4) {
  std::string s = fmt_number(value, significant);
  if (ci.known()) s += fmt::format(" [{}, {}]", fmt_number(ci.lo, significant), fmt_number(ci.hi, significant));
  return s;
}

// The main grid's runs that finished with a finite loss: the points of the scaling figures.
std::vector<const StudyRun*> main_finished_runs(const Study& st) {
  std::vector<const StudyRun*> out;
  for (const StudyRun* r : st.main_runs())
    if (r->record.state == store::RunState::succeeded && r->final_loss) out.push_back(r);
  return out;
}

Note no_fits_note(const ReportContext& ctx, const FitChoice& fits) {
  if (!ctx.study.fits_error.empty())
    return Note{{strong("The stored fits could not be read: "), text(ctx.study.fits_error),
                 text(". Run "), code("fp4lab fit"), text(" again to replace them.")}};
  (void)fits;
  return Note{{strong("No fits in the store. "), text("Run "), code("fp4lab fit STUDY.toml"),
               text(" to fit the scaling laws (docs/fit.md); the report then draws each recipe's law with its 95% "
                    "band, the residuals, the fitted and predicted gaps and the precision law.")}};
}

std::string n_label(const FitChoice& fits) {
  const fit::StoredFit* f = fits.precision;
  if (f == nullptr && !fits.chinchilla.empty()) f = fits.chinchilla.begin()->second;
  return f != nullptr && f->options.n_kind == "total" ? "parameters N (total)" : "parameters N (non-embedding)";
}

// The fits whose law gives no finite loss at the data (a degenerate fit: a parameter that overflowed).
std::vector<std::string> unusable_laws(const FitChoice& fits, const std::vector<const StudyRun*>& runs) {
  std::set<std::string> out;
  for (const StudyRun* r : runs)
    if (const fit::StoredFit* law = law_for(fits, r->record.recipe)) {
      double v = std::nan("");
      try {
        v = fit::predicted_loss(*law, r->record.recipe, fit_n(*law, r->record), static_cast<double>(r->record.tokens));
      } catch (const std::exception&) {
      }
      if (!std::isfinite(v)) out.insert(law->law + " fit of " + (law->law == "chinchilla" ? law->scope : r->record.recipe));
    }
  return {out.begin(), out.end()};
}

Figure loss_vs_n(ReportContext& ctx, const FitChoice& fits, const std::vector<const StudyRun*>& runs) {
  std::set<int64_t> ds;
  for (const StudyRun* r : runs) ds.insert(r->record.tokens);
  Plot plot;
  std::vector<std::vector<std::string>> csv;
  for (int64_t d : ds) {
    Panel p;
    p.title = "D = " + fmt_count(static_cast<double>(d)) + " training tokens";
    p.x = {n_label(fits), true, TickFormat::count, {}, {}, {}};
    p.y = {"final validation loss (nats/token)", true, TickFormat::number, {}, {}, {}};
    double n_lo = INFINITY, n_hi = 0, y_lo = INFINITY, y_hi = 0;
    for (const StudyRun* r : runs)
      if (r->record.tokens == d) {
        const fit::StoredFit* law = law_for(fits, r->record.recipe);
        const double n = law ? fit_n(*law, r->record) : static_cast<double>(r->record.n_params_nonembedding);
        n_lo = std::min(n_lo, n);
        n_hi = std::max(n_hi, n);
        y_lo = std::min(y_lo, *r->final_loss);
        y_hi = std::max(y_hi, *r->final_loss);
      }
    for (const std::string& recipe : ctx.palette.order()) {
      const fit::StoredFit* law = law_for(fits, recipe);
      Series points = ctx.recipe_series(recipe, SeriesStyle::points, recipe);
      for (const StudyRun* r : runs)
        if (r->record.recipe == recipe && r->record.tokens == d)
          points.rows.push_back({law ? fit_n(*law, r->record) : static_cast<double>(r->record.n_params_nonembedding),
                                 *r->final_loss});
      if (points.rows.empty()) continue;
      if (law != nullptr && n_hi > 0) {
        Series band = ctx.recipe_series(recipe, SeriesStyle::band, "");
        Series line = ctx.recipe_series(recipe, SeriesStyle::lines, "");
        // A little beyond the data, no further: a law is a description of the data's range.
        const double lo = std::log(n_lo / 1.25), hi = std::log(n_hi * 1.25);
        for (int k = 0; k <= 48; ++k) {
          const double n = std::exp(lo + (hi - lo) * k / 48);
          const fit::Estimate e = fit::predicted_loss_interval(*law, recipe, n, static_cast<double>(d));
          line.rows.push_back({n, e.value});
          if (n >= n_lo && n <= n_hi && std::isfinite(e.value) && e.value > 0) {
            y_lo = std::min(y_lo, e.value);
            y_hi = std::max(y_hi, e.value);
          }
          if (e.ci.known()) band.rows.push_back({n, e.ci.lo, e.ci.hi});
          csv.push_back({csv_field(law->law), csv_field(law->scope), csv_field(recipe), std::to_string(d), csv_number(n),
                         csv_number(e.value), csv_number(e.ci.lo), csv_number(e.ci.hi)});
        }
        p.series.push_back(std::move(band));
        p.series.push_back(std::move(line));
      }
      p.series.push_back(std::move(points));
    }
    // The loss axis spans the points and the laws over the data's N, not a band that flares where
    // a law is poorly determined (it is clipped at the frame instead).
    if (y_hi > 0) {
      const double pad = y_hi > y_lo ? std::pow(y_hi / y_lo, 0.08) : 1.02;
      p.y.min = y_lo / pad;
      p.y.max = y_hi * pad;
    }
    plot.panels.push_back(std::move(p));
  }
  const std::string data = ctx.csv("fitted_curves.csv", {"law", "scope", "recipe", "tokens", "n", "loss", "lo", "hi"}, csv);
  Inline caption = {text("Final validation loss of every finished run of the main grid (points) against the model size N, one panel per "
                         "training length D, both axes logarithmic. ")};
  if (fits.any())
    caption.push_back(text("Lines: each recipe's fitted law at that D (its own chinchilla fit, else the joint precision "
                           "law); shaded: the 95% band, the 2.5th to 97.5th percentile of the law over the bootstrap "
                           "replicates. The points' data: final_losses.csv."));
  else
    caption.push_back(text("No fitted laws are drawn: the store holds no fits yet."));
  return ctx.figure("loss-vs-n", "Final loss against model size", caption, plot, data);
}

Figure loss_vs_compute(ReportContext& ctx, const std::vector<const StudyRun*>& runs) {
  Plot plot;
  plot.columns = 1;
  plot.panel_width = 700;
  plot.panel_height = 380;
  Panel p;
  p.title = "";
  p.x = {"training compute C = 6·N·D (FLOPs, N non-embedding)", true, TickFormat::count, {}, {}, {}};
  p.y = {"final validation loss (nats/token)", true, TickFormat::number, {}, {}, {}};
  for (const std::string& recipe : ctx.palette.order()) {
    Series s = ctx.recipe_series(recipe, SeriesStyle::points, recipe);
    for (const StudyRun* r : runs)
      if (r->record.recipe == recipe)
        s.rows.push_back({6.0 * static_cast<double>(r->record.n_params_nonembedding) * static_cast<double>(r->record.tokens),
                          *r->final_loss});
    if (!s.rows.empty()) p.series.push_back(std::move(s));
  }
  plot.panels.push_back(std::move(p));
  return ctx.figure("loss-vs-compute", "Final loss against compute",
                    {text("Final validation loss of every finished run of the main grid against its training compute C = 6·N·D, both axes "
                          "logarithmic, one colour per recipe. At equal compute a lower point is the better recipe.")},
                    plot, "final_losses.csv");
}

Figure residual_figure(ReportContext& ctx, const FitChoice& fits) {
  Plot plot;
  std::vector<std::vector<std::string>> csv;
  auto add_panel = [&](const std::string& title, const std::vector<const fit::StoredFit*>& from) {
    Panel p;
    p.title = title;
    p.x = {n_label(fits), true, TickFormat::count, {}, {}, {}};
    p.y = {"log residual, log L − log L̂ (%)", false, TickFormat::percent, {}, {}, {}};
    p.y_lines = {0.0};
    for (const std::string& recipe : ctx.palette.order()) {
      Series s = ctx.recipe_series(recipe, SeriesStyle::points, recipe);
      for (const fit::StoredFit* f : from)
        for (const fit::Residual& r : f->residuals)
          if (r.recipe == recipe) {
            s.rows.push_back({r.n, 100 * r.log_residual});
            csv.push_back({csv_field(f->law), csv_field(f->scope), csv_field(r.run_name), r.run_id, csv_field(r.recipe),
                           csv_number(r.n), csv_number(r.d), csv_number(r.observed), csv_number(r.fitted), csv_number(r.log_residual)});
          }
      if (!s.rows.empty()) p.series.push_back(std::move(s));
    }
    plot.panels.push_back(std::move(p));
  };
  std::vector<const fit::StoredFit*> chin;
  for (const auto& [recipe, f] : fits.chinchilla) chin.push_back(f);
  if (!chin.empty()) add_panel("chinchilla, one fit per recipe", chin);
  if (fits.precision != nullptr) add_panel("precision, one joint fit", {fits.precision});
  const std::string data =
      ctx.csv("residuals.csv", {"law", "scope", "run", "run_id", "recipe", "n", "d", "observed", "fitted", "log_residual"}, csv);
  return ctx.figure("residuals", "Residuals of the fits",
                    {text("log(observed) − log(fitted) of every fitted run, in percent, against N: above 0 the run "
                          "lies above the law. A trend with N means the law's form misses something; scatter of the "
                          "size of the noise floor is what a good fit leaves.")},
                    plot, data);
}

std::string rank_reading(const ChosenFit& c, const FitChoice& fits) {
  switch (c.rank) {
    case FitRank::main_grid:
      return "the main grid's fit (fp4lab fit STUDY.toml)";
    case FitRank::main_runs:
      return "of the main grid's runs only, though not fitted as the grid" +
             std::string(fits.main_grids.empty() ? "" : " " + fits.main_grids.front());
    case FitRank::grid_changed:
      return "names the main grid, but of runs it no longer declares";
    case FitRank::other:
      break;
  }
  return "not of the main grid's runs";
}

// Which stored row each fitted number of the report comes from: a store can hold fits of several
// grids and several fits of one, so the reader needs the id, the grid and the input hash to find
// it (docs/fit.md's queries) and the date to see whether it is older than the runs.
Table shown_fits_table(ReportContext& ctx, const FitChoice& fits) {
  Table t;
  t.caption = "The stored fits this report shows";
  t.header = {"fit", "law", "scope", "grid", "points", "input hash", "fitted", "fp4lab", "why this one", "not shown"};
  t.numeric = {true, false, false, false, true, false, false, false, false, true};
  std::vector<std::vector<std::string>> csv;
  for (const ChosenFit& c : fits.chosen) {
    const fit::StoredFit& f = *c.fit;
    t.rows.push_back({{std::to_string(f.id)}, {f.law}, f.law == "chinchilla" ? ctx.recipe_cell(f.scope) : Cell(f.scope),
                      {fit_grid_label(f)}, {std::to_string(f.n_points)}, {f.input_hash.substr(0, 16)},
                      {fmt_utc(f.created)}, {f.fp4lab_version.empty() ? "—" : f.fp4lab_version}, {rank_reading(c, fits)},
                      {c.passed_over == 0 ? "0" : fmt::format("{} other{}", c.passed_over, c.passed_over == 1 ? "" : "s")}});
    csv.push_back({std::to_string(f.id), csv_field(f.law), csv_field(f.scope), csv_field(f.options.grid),
                   csv_field(f.options.source), std::to_string(f.n_points), csv_field(f.input_hash),
                   csv_field(f.options.data_hash), csv_number(f.created), csv_field(fmt_utc(f.created)),
                   csv_field(f.fp4lab_version), std::to_string(static_cast<int>(c.rank)), std::to_string(c.passed_over)});
  }
  t.csv = ctx.csv("fits_shown.csv",
                  {"fit_id", "law", "scope", "grid", "source", "n_points", "input_hash", "data_hash", "created",
                   "created_utc", "fp4lab_version", "rank", "passed_over"},
                  csv);
  return t;
}

Table parameter_table(ReportContext& ctx, const FitChoice& fits) {
  Table t;
  t.caption = "Fitted parameters: point estimate [95% bootstrap interval]";
  t.header = {"law", "scope", "points", "E", "A", "B", "alpha", "beta", "gamma", "objective", "replicates", "optimizer"};
  t.numeric = {false, false, true, true, true, true, true, true, true, true, true, false};
  std::vector<std::vector<std::string>> csv;
  std::vector<const fit::StoredFit*> all;
  for (const auto& [recipe, f] : fits.chinchilla) all.push_back(f);
  if (fits.precision != nullptr) all.push_back(fits.precision);
  for (const fit::StoredFit* f : all) {
    auto cell = [&](const char* name) -> Cell {
      const auto p = f->parameter(name);
      if (!p) return Cell("—");
      return Cell(fit::withheld_interval(*f, name) ? fmt_number(p->value, 4) + " (on its bound: no interval)"
                                                   : with_interval(p->value, p->ci));
    };
    t.rows.push_back({{f->law}, f->law == "chinchilla" ? ctx.recipe_cell(f->scope) : Cell(f->scope),
                      {std::to_string(f->n_points)}, cell("E"), cell("A"), cell("B"), cell("alpha"), cell("beta"),
                      f->law == "precision" ? cell("gamma") : Cell("—"), {fmt_number(f->objective, 4)},
                      {fmt::format("{} of {}", f->samples.size(), f->replicates_asked)},
                      {f->optimizer.termination.empty() ? "—" : f->optimizer.termination}});
    for (const fit::ParameterEstimate& p : f->parameters)
      csv.push_back({std::to_string(f->id), csv_field(f->law), csv_field(f->scope), csv_field(p.name),
                     csv_field(p.recipe), csv_number(p.value), csv_number(p.ci.lo), csv_number(p.ci.hi)});
  }
  t.csv = ctx.csv("fits.csv", {"fit_id", "law", "scope", "parameter", "recipe", "value", "lo", "hi"}, csv);
  return t;
}

// The fitted irreducible loss E of each law beside the true entropy rate of the synthetic source
// the main grid trains on: no model's loss can go below that rate, so an E whose whole interval
// lies below it is a wrong fit, and E above it is the loss the law's models never shed. Only for a
// main grid on one source whose rate is known (a corpus has none): nothing otherwise.
std::vector<Block> entropy_rate_blocks(ReportContext& ctx, const FitChoice& fits) {
  const Study& st = ctx.study;
  std::set<std::string> sources;
  for (const StudyRun* r : st.main_runs()) sources.insert(r->data_source);
  if (sources.size() != 1 || st.entropy_rates.count(*sources.begin()) == 0) return {};
  const std::string& source = *sources.begin();
  const double rate = st.entropy_rates.at(source);
  Table t;
  t.caption = "Irreducible loss E against the source's true entropy rate (nats/token)";
  t.header = {"law", "scope", "E [95% interval]", "entropy rate", "E − rate"};
  t.numeric = {false, false, true, true, true};
  std::vector<const fit::StoredFit*> all;
  for (const auto& [recipe, f] : fits.chinchilla) all.push_back(f);
  if (fits.precision != nullptr) all.push_back(fits.precision);
  std::vector<std::vector<std::string>> csv;
  for (const fit::StoredFit* f : all)
    if (const auto e = f->parameter("E")) {
      t.rows.push_back({{f->law}, f->law == "chinchilla" ? ctx.recipe_cell(f->scope) : Cell(f->scope),
                        {with_interval(e->value, e->ci)}, {fmt_number(rate, 5)}, {fmt_number(e->value - rate, 3)}});
      csv.push_back({std::to_string(f->id), csv_field(f->law), csv_field(f->scope), csv_number(e->value),
                     csv_number(e->ci.lo), csv_number(e->ci.hi), csv_field(source), csv_number(rate)});
    }
  if (t.rows.empty()) return {};
  t.csv = ctx.csv("entropy_rate.csv", {"fit_id", "law", "scope", "E", "lo", "hi", "source", "entropy_rate"}, csv);
  std::vector<Block> blocks;
  blocks.push_back(Paragraph{{text("The main grid trains on "), code(source), text(", whose true entropy rate is "),
                              text(fmt_number(rate, 5)),
                              text(" nats/token (fp4lab data entropy): no model's loss can go below it, so a fitted E "
                                   "whose whole interval lies below it is a wrong fit, and E above it is loss that "
                                   "the law says no size and no length removes.")}});
  blocks.push_back(std::move(t));
  return blocks;
}

// Every guardrail of the shown fits (fit/guardrails.h), first in "Fitted laws": what the laws do not
// support, before their numbers.
std::vector<Block> guardrail_blocks(ReportContext& ctx, const FitChoice& fits) {
  Table t;
  t.id = "guardrails-table";
  t.caption = "Guardrails: what these fits cannot support (docs/statistics.md, \"Guardrails\")";
  t.header = {"law", "scope", "check", "what it means here", "identified?"};
  t.numeric = {false, false, false, false, false};
  std::vector<std::vector<std::string>> csv;
  std::vector<std::string> unchecked, unidentified_laws;
  for (const ChosenFit& c : fits.chosen) {
    const fit::StoredFit& f = *c.fit;
    if (!f.guardrails_checked) unchecked.push_back(f.law + " (" + f.scope + ")");
    if (fit::unidentified(f)) unidentified_laws.push_back(f.law + " (" + f.scope + ")");
    for (const fit::Guardrail& g : f.guardrails) {
      t.rows.push_back({{f.law}, f.law == "chinchilla" ? ctx.recipe_cell(f.scope) : Cell(f.scope), {g.check},
                        {g.message}, {g.unidentified ? "no: no target gap is shown" : "—"}});
      csv.push_back({std::to_string(f.id), csv_field(f.law), csv_field(f.scope), csv_field(g.check),
                     g.unidentified ? "1" : "0", csv_field(g.parameter), csv_field(g.recipe), csv_field(g.message)});
    }
  }
  t.csv = ctx.csv("guardrails.csv", {"fit_id", "law", "scope", "check", "unidentified", "parameter", "recipe", "message"},
                  csv);
  std::vector<Block> blocks;
  if (!unidentified_laws.empty())
    blocks.push_back(Note{{strong("Not identified: "),
                           text(fmt::format("the {} {} flagged unidentified by the guardrails below; {} no target gap "
                                            "and {} numbers at the targets are extrapolation of the functional form.",
                                            fmt::join(unidentified_laws, ", "),
                                            unidentified_laws.size() == 1 ? "law is" : "laws are",
                                            unidentified_laws.size() == 1 ? "it prints" : "they print",
                                            unidentified_laws.size() == 1 ? "its" : "their"))}});
  if (!t.rows.empty()) blocks.push_back(std::move(t));
  else if (unchecked.empty())
    blocks.push_back(Paragraph{{text("Guardrails: none raised by the shown fits (docs/statistics.md, \"Guardrails\").")}});
  if (!unchecked.empty())
    blocks.push_back(Note{{strong("Guardrails not checked: "),
                           text(fmt::format("{} {} stored by an fp4lab without guardrails; ", fmt::join(unchecked, ", "),
                                            unchecked.size() == 1 ? "was" : "were")),
                           code("fp4lab fit STUDY.toml --refit"), text(" checks them.")}});
  return blocks;
}

std::vector<Block> held_out_blocks(ReportContext& ctx, const FitChoice& fits) {
  Table t;
  t.caption = "Held-out check: each law refitted without the largest N, predicting the runs at that N";
  t.header = {"law", "scope", "recipe", "held-out N", "runs", "mean |error|", "max |error|"};
  t.numeric = {false, false, false, true, true, true, true};
  std::vector<std::vector<std::string>> csv;
  std::vector<Inline> not_done;
  std::vector<const fit::StoredFit*> all;
  for (const auto& [recipe, f] : fits.chinchilla) all.push_back(f);
  if (fits.precision != nullptr) all.push_back(fits.precision);
  for (const fit::StoredFit* f : all) {
    if (!f->held_out.done) {
      not_done.push_back({text(f->law + " (" + f->scope + "): " + (f->held_out.reason.empty() ? "not done" : f->held_out.reason))});
      continue;
    }
    for (const fit::HeldOutRecipe& hr : f->held_out.recipes) {
      t.rows.push_back({{f->law}, {f->scope}, ctx.recipe_cell(hr.recipe), {fmt_count(f->held_out.held_out_n)},
                        {std::to_string(hr.points.size())}, {fmt_percent(hr.mean_abs_rel_error, 2).substr(1)},
                        {fmt_percent(hr.max_abs_rel_error, 2).substr(1)}});
      for (const fit::HeldOutPoint& p : hr.points)
        csv.push_back({csv_field(f->law), csv_field(f->scope), csv_field(hr.recipe), csv_field(p.run_name), p.run_id,
                       csv_number(p.n), csv_number(p.d), csv_number(p.observed), csv_number(p.predicted), csv_number(p.rel_error)});
    }
  }
  t.csv = ctx.csv("held_out.csv",
                  {"law", "scope", "recipe", "run", "run_id", "n", "d", "observed", "predicted", "rel_error"}, csv);
  std::vector<Block> blocks;
  blocks.push_back(Paragraph{{text("How well does a law fitted on the smaller models predict the largest one? Each law is "
                                   "refitted without the largest N and its predictions at that N are compared with the "
                                   "runs there (error = predicted / observed − 1).")}});
  if (!t.rows.empty()) blocks.push_back(std::move(t));
  if (!not_done.empty()) blocks.push_back(BulletList{not_done});
  return blocks;
}

}  // namespace

Section scaling_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  const FitChoice fits = choose_fits(st);
  Section s{slug("Scaling"), "Scaling", {}, {}};
  const auto runs = main_finished_runs(st);
  if (!fits.any()) s.blocks.push_back(no_fits_note(ctx, fits));
  if (runs.empty()) {
    s.blocks.push_back(Note{{text("No run of the main grid has finished with a finite final loss yet: nothing to scale.")}});
    return s;
  }
  s.blocks.push_back(loss_vs_n(ctx, fits, runs));
  if (auto note = numerics_span_note(runs, "the main grid (these figures and the fits)")) s.blocks.push_back(std::move(*note));
  if (const auto bad = unusable_laws(fits, runs); !bad.empty())
    s.blocks.push_back(Note{{strong("Not drawn: "),
                             text(fmt::format("the {} give{} no finite loss at this study's runs (a parameter of the "
                                              "fit is not finite: see Fitted laws); fit more sizes and lengths, or check "
                                              "the fit's residuals.",
                                              fmt::join(bad, " and the "), bad.size() == 1 ? "s" : ""))}});
  s.blocks.push_back(loss_vs_compute(ctx, runs));
  if (!fits.any()) return s;
  Section params{slug("Fitted laws"), "Fitted laws", {}, {}};
  params.blocks.push_back(Paragraph{{text("chinchilla: L(N, D) = E + A/N^alpha + B/D^beta, one fit per recipe; precision: "
                                          "L_r(N, D) = E + (A/(N·rho_N,r)^alpha + B/(D·rho_D,r)^beta)^gamma, one joint fit "
                                          "with rho = 1 for BF16 (SCIENCE.md, docs/fit.md). Intervals are the 2.5th and "
                                          "97.5th percentiles over the bootstrap replicates (resampled runs); the objective "
                                          "is the summed Huber loss of log L at the point estimate.")}});
  params.blocks.push_back(Paragraph{{text("A store shared by several TOMLs can hold fits of several grids, and several "
                                          "fits of one. For each law and scope the report shows the latest fit that "
                                          "fp4lab fit made of the main grid (its TOML's [sweep] name, only its runs), else "
                                          "the latest of the main grid's runs only, else the latest at all with a note; "
                                          "the table names each one (its id in the store's fits table, the grid that "
                                          "chose its runs, its input hash and when it was fitted).")}});
  for (Block& b : guardrail_blocks(ctx, fits)) params.blocks.push_back(std::move(b));
  params.blocks.push_back(shown_fits_table(ctx, fits));
  params.blocks.push_back(parameter_table(ctx, fits));
  for (Block& b : entropy_rate_blocks(ctx, fits)) params.blocks.push_back(std::move(b));
  params.blocks.push_back(residual_figure(ctx, fits));
  std::set<std::string> excluded;
  std::vector<const fit::StoredFit*> chosen;
  for (const auto& [recipe, f] : fits.chinchilla) chosen.push_back(f);
  if (fits.precision != nullptr) chosen.push_back(fits.precision);
  for (const fit::StoredFit* f : chosen)
    for (const fit::ExcludedRun& e : f->excluded) excluded.insert(e.run_name + " (" + e.reason + ")");
  if (!excluded.empty())
    params.blocks.push_back(Note{{strong("Not fitted: "), text(fmt::format("{}", fmt::join(excluded, "; "))), text(".")}});
  for (const ChosenFit& c : fits.chosen) {
    const fit::StoredFit& f = *c.fit;
    if (c.rank == FitRank::grid_changed || c.rank == FitRank::other)
      params.blocks.push_back(Note{
          {strong("Not a fit of the main grid: "),
           text(fmt::format("the {} fit ({}) was made of {} points, {} of them not runs of the main grid {}{}; no fit of "
                            "exactly the main grid's runs is stored. It is shown as stored; ",
                            f.law, f.scope, f.residuals.size(), c.runs_outside,
                            st.main_label.empty() ? "" : "(" + st.main_label + ")",
                            c.rank == FitRank::grid_changed ? " (it names the main grid, whose TOML has changed since)"
                                                            : ", fitted on " + fit_grid_label(f))),
           code("fp4lab fit STUDY.toml"), text(" fits the main grid.")}});
    if (c.finished_since > 0)
      params.blocks.push_back(
          Note{{strong("Older than the runs: "),
                text(fmt::format("the {} fit ({}), fit {}, left out {} run{} of the main grid that had not finished "
                                 "then and {} succeeded since; ",
                                 f.law, f.scope, f.id, c.finished_since, c.finished_since == 1 ? "" : "s",
                                 c.finished_since == 1 ? "has" : "have")),
                code("fp4lab fit STUDY.toml"), text(" fits them too.")}});
  }
  s.subsections.push_back(std::move(params));
  Section held{slug("Held-out check"), "Held-out check", held_out_blocks(ctx, fits), {}};
  s.subsections.push_back(std::move(held));
  return s;
}

Section precision_section(ReportContext& ctx) {
  const FitChoice fits = choose_fits(ctx.study);
  Section s{slug("Precision law"), "Precision law", {}, {}};
  if (fits.precision == nullptr) {
    s.blocks.push_back(Paragraph{{text("No precision-law fit is stored. "), code("fp4lab fit"),
                                  text(" with law \"precision\" fits it jointly over the recipes: rho_N and rho_D per "
                                       "recipe are the effective-parameter and effective-data multipliers (BF16 at 1).")}});
    return s;
  }
  const fit::StoredFit& f = *fits.precision;
  s.blocks.push_back(Paragraph{{text("The joint precision law gives each recipe an effective-parameter multiplier rho_N and "
                                     "an effective-data multiplier rho_D (BF16 at exactly 1): rho_N = 0.9 means the recipe "
                                     "trains like a model with 90% of its parameters, rho_D = 0.9 like a run on 90% of its "
                                     "tokens. Intervals: 95% bootstrap percentiles.")}});
  Table t;
  t.caption = "Effective-parameter and effective-data multipliers";
  t.header = {"recipe", "rho_N [95%]", "rho_D [95%]"};
  t.numeric = {false, true, true};
  Plot plot;
  plot.panel_height = 320;
  Panel pn, pd;
  pn.title = "rho_N: effective parameters";
  pd.title = "rho_D: effective data";
  std::vector<std::pair<double, std::string>> categories;
  int k = 0;
  for (const std::string& recipe : ctx.palette.order()) {
    const auto rn = f.parameter("rho_N", recipe), rd = f.parameter("rho_D", recipe);
    if (!rn && !rd) continue;
    auto shown = [&](const char* name, const std::optional<fit::ParameterEstimate>& e) -> std::string {
      if (!e) return "—";
      return fit::withheld_interval(f, name, recipe) ? fmt_number(e->value, 4) + " (on its bound: no interval)"
                                                     : with_interval(e->value, e->ci);
    };
    t.rows.push_back({ctx.recipe_cell(recipe), {shown("rho_N", rn)}, {shown("rho_D", rd)}});
    categories.push_back({static_cast<double>(k), recipe});
    for (auto [panel, est] : {std::make_pair(&pn, rn), std::make_pair(&pd, rd)}) {
      if (!est) continue;
      Series sr = ctx.recipe_series(recipe, SeriesStyle::error_bars, "");
      const double lo = est->ci.known() ? est->ci.lo : est->value, hi = est->ci.known() ? est->ci.hi : est->value;
      sr.rows.push_back({static_cast<double>(k), est->value, lo, hi});
      panel->series.push_back(std::move(sr));
    }
    ++k;
  }
  t.csv = "fits.csv";
  s.blocks.push_back(std::move(t));
  for (Panel* p : {&pn, &pd}) {
    p->x = {"recipe", false, TickFormat::number, {}, {}, categories};
    p->y = {"multiplier (1 = as good as BF16)", false, TickFormat::number, {}, {}, {}};
    p->y_lines = {1.0};
    plot.panels.push_back(std::move(*p));
  }
  if (!categories.empty())
    s.blocks.push_back(ctx.figure("precision-law", "The precision law's multipliers",
                                  {text("rho_N and rho_D per recipe with their 95% bootstrap intervals (error bars); the "
                                        "dashed line is BF16's 1.")},
                                  plot, "fits.csv"));
  return s;
}

}  // namespace fp4::reports
