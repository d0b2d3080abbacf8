// sections_noise.cpp — the noise floor: at every grid point that ran under two or more seeds (runs
// whose configs differ only in the seed, from any grid of the study), the spread of the final loss
// over the seeds, and the spread of the gap to BF16 paired seed by seed. Every difference the report
// shows is to be read against these numbers (SCIENCE.md, "Noise").
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "reports/escape.h"
#include "reports/format.h"
#include "reports/pairs.h"
#include "reports/report_context.h"
#include "reports/stats.h"

namespace fp4::reports {

namespace {

// "+0.512% ± 0.101% [+0.31%, +0.70%]": the mean, the sd over seeds, the interval of the mean.
std::string percent_with_spread(const Spread& s) {
  if (s.n == 0) return "—";
  std::string out = fmt_percent(s.mean);
  if (s.n >= 2) out += " ± " + fmt::format("{:.3f}%", 100 * s.sd);
  if (s.has_interval()) out += " [" + fmt_percent(s.lo) + ", " + fmt_percent(s.hi) + "]";
  return out;
}

// One grid point under several seeds: the finished replicates of one recipe.
struct SeedGroup {
  const StudyRun* example = nullptr;
  std::vector<const StudyRun*> runs;      // finished, by seed
  std::vector<const StudyRun*> bf16;      // the BF16 replicates at the same point (same comparison key)
};

// "first-study-noise, first-study": the grids that declare a group's runs.
std::string grids_of(const std::vector<const StudyRun*>& runs) {
  std::set<std::string> names;
  for (const StudyRun* r : runs) names.insert(r->grids.begin(), r->grids.end());
  return names.empty() ? std::string("no grid") : fmt::format("{}", fmt::join(names, ", "));
}

const std::vector<std::string> kCsvHeader = {"model", "n_params_nonembedding", "tokens", "recipe", "grids", "seeds",
                                             "n_seeds", "loss_mean", "loss_sd", "loss_rel_sd", "loss_min", "loss_max",
                                             "gap_pairs", "gap_mean", "gap_sd", "gap_lo", "gap_hi", "train_gap_pairs",
                                             "train_gap_mean", "train_gap_sd", "train_gap_lo", "train_gap_hi"};

}  // namespace

Section noise_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Noise floor"), "Noise floor", {}, {}};
  // Finished replicates by replicate key; BF16's by comparison key.
  std::map<std::string, std::vector<const StudyRun*>> replicates, bf16_by_comparison;
  for (const StudyRun& r : st.runs)
    if (finished_with_loss(r)) {
      replicates[r.replicate_key].push_back(&r);
      if (r.record.baseline) bf16_by_comparison[r.comparison_key].push_back(&r);
    }
  std::vector<SeedGroup> groups;
  for (auto& [key, runs] : replicates) {
    if (runs.size() < 2) continue;
    std::stable_sort(runs.begin(), runs.end(), [](const StudyRun* a, const StudyRun* b) { return a->record.seed < b->record.seed; });
    SeedGroup g;
    g.example = runs.front();
    g.runs = runs;
    if (!g.example->record.baseline)
      if (const auto it = bf16_by_comparison.find(g.example->comparison_key); it != bf16_by_comparison.end())
        g.bf16 = it->second;
    groups.push_back(std::move(g));
  }
  // By grid point (N, D, then the comparison key: one panel per point), recipes in palette order.
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < ctx.palette.order().size(); ++i) rank[ctx.palette.order()[i]] = i;
  std::stable_sort(groups.begin(), groups.end(), [&](const SeedGroup& a, const SeedGroup& b) {
    const auto& ra = a.example->record;
    const auto& rb = b.example->record;
    return std::tie(ra.n_params_nonembedding, ra.tokens, a.example->comparison_key, rank[ra.recipe]) <
           std::tie(rb.n_params_nonembedding, rb.tokens, b.example->comparison_key, rank[rb.recipe]);
  });

  const std::vector<const DeclaredGrid*> declared = st.grids_with(&DeclaredGrid::noise_floor);
  if (groups.empty()) {
    s.blocks.push_back(Paragraph{{text("No grid point of this study has finished under two or more seeds, so the noise "
                                       "floor is not measured here (SCIENCE.md measured a seed spread of the final loss of "
                                       "about 0.2–0.3% at d4 with 52M tokens). Until it is, read every difference in this "
                                       "report as possibly noise.")}});
    for (const DeclaredGrid* g : declared) {
      int done = 0;
      for (const std::string& id : g->ids)
        if (const StudyRun* r = st.run(id); r != nullptr && finished_with_loss(*r)) ++done;
      s.blocks.push_back(Note{{strong("Not run yet: "),
                               text(fmt::format("the grid {} ({}) declares runs under several seeds; {} of its {} runs "
                                                "have finished.",
                                                g->name, g->file, done, g->ids.size()))}});
    }
    ctx.csv("noise_floor.csv", kCsvHeader, {});
    return s;
  }
  s.blocks.push_back(Paragraph{
      {text("Each row is one grid point run under several seeds (configs equal but for the seed, from any grid of the "
            "study; the seed sets the initial weights and the data order). The final loss's sample sd over the seeds, "
            "relative to the mean, is the noise floor of a single run there. The gap to BF16 is paired seed by seed "
            "(each seed's two runs share initial weights and batches): mean ± sd over the seeds and its 95% Student-t "
            "interval, the interval the gap table's means carry; beside it the same on the UFP4 paper's metric, each "
            "run's mean train loss over the last tenth of its logged steps (at most 1000; fit::train_tail, as the "
            "paired contrasts take it). A gap or an ablation difference smaller than these spreads is not "
            "distinguishable from seed noise.")}});
  Table t;
  t.caption = "Seed spread of the final validation loss, and of the paired gap to BF16";
  t.header = {"model", "N", "D", "recipe", "grids", "seeds", "loss (mean)", "seed sd", "seed sd (rel.)", "range",
              "gap to BF16, paired: mean ± sd [95%]", "on the train tail: mean ± sd [95%]"};
  t.numeric = {false, true, true, false, false, true, true, true, true, true, true, true};
  std::vector<std::vector<std::string>> csv;
  Plot plot;
  plot.columns = 2;
  plot.panel_height = 320;
  std::string panel_key;
  int k = 0;
  for (const SeedGroup& g : groups) {
    const auto& rec = g.example->record;
    std::vector<double> losses;
    for (const StudyRun* r : g.runs) losses.push_back(*r->final_loss);
    const Spread sp = spread(losses);
    const Spread gap = g.bf16.empty() ? Spread{} : paired_difference(g.runs, g.bf16).diff;
    const Spread train_gap = g.bf16.empty() ? Spread{} : paired_train_tail_difference(st, g.runs, g.bf16).diff;
    std::vector<std::string> seeds;
    for (const StudyRun* r : g.runs) seeds.push_back(std::to_string(r->record.seed));
    t.rows.push_back({{rec.model}, {fmt_count(static_cast<double>(rec.n_params_nonembedding))},
                      {fmt_count(static_cast<double>(rec.tokens))}, ctx.recipe_cell(rec.recipe), {grids_of(g.runs)},
                      {std::to_string(sp.n)}, {fmt_loss(sp.mean)}, {fmt::format("{:.4f}", sp.sd)},
                      {fmt::format("{:.3f}%", 100 * sp.sd / sp.mean)},
                      {fmt_loss(sp.min) + " … " + fmt_loss(sp.max)},
                      {rec.baseline ? "(baseline)" : g.bf16.empty() ? "no BF16 run here" : percent_with_spread(gap)},
                      {rec.baseline ? "(baseline)" : g.bf16.empty() ? "no BF16 run here" : percent_with_spread(train_gap)}});
    csv.push_back({csv_field(rec.model), std::to_string(rec.n_params_nonembedding), std::to_string(rec.tokens),
                   csv_field(rec.recipe), csv_field(grids_of(g.runs)), csv_field(fmt::format("{}", fmt::join(seeds, " "))),
                   std::to_string(sp.n), csv_number(sp.mean), csv_number(sp.sd), csv_number(sp.sd / sp.mean), csv_number(sp.min), csv_number(sp.max),
                   std::to_string(gap.n), csv_number(gap.mean), csv_number(gap.sd), csv_number(gap.lo), csv_number(gap.hi),
                   std::to_string(train_gap.n), csv_number(train_gap.mean), csv_number(train_gap.sd), csv_number(train_gap.lo),
                   csv_number(train_gap.hi)});
    // The figure: one panel per grid point, each seed's final loss by recipe with the mean ± sd.
    const std::string key = std::to_string(rec.n_params_nonembedding) + "/" + std::to_string(rec.tokens) + "/" +
                            g.example->comparison_key;
    if (key != panel_key) {
      panel_key = key;
      k = 0;
      Panel p;
      p.title = fmt::format("{}, D = {} ({})", one_line(rec.model), fmt_count(static_cast<double>(rec.tokens)),
                            one_line(grids_of(g.runs)));
      p.y = {"final validation loss (nats/token)", false, TickFormat::number, {}, {}, {}};
      plot.panels.push_back(std::move(p));
    }
    Panel& p = plot.panels.back();
    p.x.categories.push_back({static_cast<double>(k), rec.recipe});
    Series seeds_series = ctx.recipe_series(rec.recipe, SeriesStyle::points, "");
    for (size_t i = 0; i < losses.size(); ++i)
      seeds_series.rows.push_back({k - 0.18 + 0.36 * (losses.size() > 1 ? static_cast<double>(i) / (losses.size() - 1) : 0.5),
                                   losses[i]});
    Series mean = ctx.recipe_series(rec.recipe, SeriesStyle::error_bars, "");
    mean.rows.push_back({static_cast<double>(k) + 0.3, sp.mean, sp.mean - sp.sd, sp.mean + sp.sd});
    p.series.push_back(std::move(seeds_series));
    p.series.push_back(std::move(mean));
    ++k;
  }
  for (Panel& p : plot.panels) {
    p.x.label = "recipe";
    p.x.slanted = p.x.categories.size() > 4;
  }
  const std::string data = ctx.csv("noise_floor.csv", kCsvHeader, csv);
  t.csv = data;
  s.blocks.push_back(std::move(t));
  s.blocks.push_back(ctx.figure("noise-floor", "The final loss of each seed",
                                {text("Each seed's final validation loss (points, side by side) and their mean ± sample "
                                      "sd (bar, right) per recipe, one panel per grid point run under several seeds. The "
                                      "seeds' runs are in final_losses.csv.")},
                                plot, data));
  return s;
}

}  // namespace fp4::reports
