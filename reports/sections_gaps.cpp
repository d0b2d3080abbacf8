// sections_gaps.cpp — the gap table: per recipe and grid point the observed BF16-relative gap
// (mean ± sd over seeds, from the store's bf16_gap view), the gap the fitted laws give there and
// at the fit's targets, beside the UFP4 paper's reported gaps.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "reports/escape.h"
#include "reports/format.h"
#include "reports/pairs.h"
#include "reports/paper.h"
#include "reports/report_context.h"
#include "reports/stats.h"

namespace fp4::reports {

namespace {

struct PointKey {
  std::string recipe, model;
  int64_t n = 0, d = 0;
  bool operator<(const PointKey& o) const { return std::tie(recipe, n, d, model) < std::tie(o.recipe, o.n, o.d, o.model); }
};

struct ObservedPoint {
  std::vector<double> gaps, losses, bf16_losses, train_gaps;
  std::vector<std::string> runs;
};

// The finished pairs of the bf16_gap view, by grid point; unfinished ones are counted apart.
std::map<PointKey, ObservedPoint> observed_points(const ReportContext& ctx, int* unfinished, int* excluded) {
  const Study& st = ctx.study;
  std::map<std::string, const TwinPair*> pair_of;
  const Twins twins = bf16_twins(st);
  for (const TwinPair& p : twins.pairs) pair_of[p.run->record.id] = &p;
  std::map<PointKey, ObservedPoint> out;
  *unfinished = *excluded = 0;
  auto left_out = [](const std::string& state) { return state == "failed" || state == "diverged"; };
  for (const GapRow& g : st.gaps) {
    if (left_out(g.state) || left_out(g.bf16_state)) {
      ++*excluded;
      continue;
    }
    if (g.state != "succeeded" || g.bf16_state != "succeeded") {
      ++*unfinished;
      continue;
    }
    ObservedPoint& p = out[{g.recipe, g.model, g.n_params_nonembedding, g.tokens}];
    p.gaps.push_back(g.gap);
    p.losses.push_back(g.loss);
    p.bf16_losses.push_back(g.bf16_loss);
    p.runs.push_back(g.name);
    // The paper's measure: the train losses' trailing means at the last step.
    if (const auto it = pair_of.find(g.id); it != pair_of.end()) {
      const GapCurve c = train_gap_curve(st, *it->second, smoothing_window(ctx.options, it->second->run->steps));
      p.train_gaps.push_back(c.gap.empty() ? std::nan("") : c.gap.back());
    }
  }
  return out;
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
                                              fmt_count(largest_n), fmt_count(largest_d), fmt_count(1.5e9 / largest_n)))}});
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
                                     "batches); above 0 the 4-bit recipe trains worse. Observed gaps are the mean over "
                                     "seeds ± their sample standard deviation (n − 1). The train-loss column is the "
                                     "paper's measure: the gap of the two train losses' trailing means at the end of "
                                     "training.")}});
  int unfinished = 0, excluded = 0;
  const auto observed = observed_points(ctx, &unfinished, &excluded);
  Table t;
  t.id = "gap-table";
  t.caption = "Observed gap per recipe and grid point";
  t.header = {"recipe", "model", "N", "D", "seeds", "loss", "BF16 loss", "gap (mean ± sd)", "range", "train-loss gap"};
  t.numeric = {false, false, true, true, true, true, true, true, true, true};
  std::vector<std::vector<std::string>> csv;
  for (const std::string& recipe : ctx.palette.order())
    for (const auto& [k, p] : observed) {
      if (k.recipe != recipe) continue;
      const Spread g = spread(p.gaps), l = spread(p.losses), b = spread(p.bf16_losses), tg = spread(p.train_gaps);
      t.rows.push_back({ctx.recipe_cell(k.recipe), {k.model}, {fmt_count(static_cast<double>(k.n))},
                        {fmt_count(static_cast<double>(k.d))}, {std::to_string(g.n)}, {fmt_loss(l.mean)},
                        {fmt_loss(b.mean)}, {mean_sd_percent(g)},
                        {g.n > 1 ? fmt_percent(g.min) + " … " + fmt_percent(g.max) : "—"}, {fmt_percent(tg.mean)}});
      auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.17g}", v) : std::string(); };
      csv.push_back({csv_field(k.recipe), csv_field(k.model), std::to_string(k.n), std::to_string(k.d),
                     std::to_string(g.n), num(l.mean), num(b.mean), num(g.mean), num(g.sd), num(g.min), num(g.max),
                     num(tg.mean)});
    }
  t.csv = ctx.csv("gaps.csv",
                  {"recipe", "model", "n_params_nonembedding", "tokens", "seeds", "loss_mean", "bf16_loss_mean",
                   "gap_mean", "gap_sd", "gap_min", "gap_max", "train_gap_mean"},
                  csv);
  if (t.rows.empty())
    s.blocks.push_back(Note{{text("No finished quantized run has a finished BF16 twin yet: no gap to show.")}});
  else s.blocks.push_back(std::move(t));
  if (unfinished > 0)
    s.blocks.push_back(Note{{text(fmt::format("{} pair{} where the run or its BF16 twin has not finished {} left out of this "
                                              "table.",
                                              unfinished, unfinished == 1 ? "" : "s", unfinished == 1 ? "is" : "are"))}});
  if (excluded > 0)
    s.blocks.push_back(Note{{text(fmt::format("{} pair{} where the run or its BF16 twin diverged or failed {} left out (see "
                                              "Excluded and missing runs).",
                                              excluded, excluded == 1 ? "" : "s", excluded == 1 ? "is" : "are"))}});
  const Twins twins = bf16_twins(ctx.study);
  if (!twins.without.empty())
    s.blocks.push_back(Note{{text(fmt::format("{} quantized run{} without a BF16 twin in the store ha{} no gap (see Loss "
                                              "curves).",
                                              twins.without.size(), twins.without.size() == 1 ? "" : "s",
                                              twins.without.size() == 1 ? "s" : "ve"))}});
  s.subsections.push_back(paper_subsection(ctx, observed));
  return s;
}

}  // namespace fp4::reports
