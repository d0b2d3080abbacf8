// sections_moe.cpp — the expert load of mixture-of-experts runs over training (docs/report.md,
// "Loss curves"): from the `moe/<layer>/load_cv` metrics the trainer writes per step and MoE block
// (docs/train.md), a panel per model, a line per run in its recipe's colour.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "reports/escape.h"
#include "reports/format.h"
#include "reports/report_context.h"

namespace fp4::reports {

namespace {

constexpr size_t kMaxPoints = 400;

// "moe/<layer>/<field>" → field (empty for another key).
std::string moe_field(const std::string& key) {
  if (key.rfind("moe/", 0) != 0) return {};
  const size_t slash = key.find('/', 4);
  return slash == std::string::npos ? std::string() : key.substr(slash + 1);
}

}  // namespace

std::optional<Figure> expert_load_figure(ReportContext& ctx, const std::vector<const StudyRun*>& runs) {
  const Study& st = ctx.study;
  // Per run: step → (tokens, Σ over MoE blocks of load_cv, blocks).
  struct Point {
    int64_t tokens = 0;
    double sum = 0;
    int blocks = 0;
  };
  std::map<std::string, std::map<int64_t, Point>> by_run;
  std::map<std::string, std::set<std::string>> models;  // model → runs
  for (const StudyRun* r : runs) {
    const auto it = st.curves.find(r->record.id);
    if (it == st.curves.end()) continue;
    for (const auto& [key, rows] : it->second) {
      if (moe_field(key) != "load_cv") continue;
      for (const store::MetricRow& m : rows) {
        Point& p = by_run[r->record.id][m.step];
        p.tokens = m.tokens;
        p.sum += m.is_nan ? std::nan("") : m.value;
        ++p.blocks;
      }
      models[r->record.model].insert(r->record.id);
    }
  }
  if (by_run.empty()) return std::nullopt;

  Plot plot;
  std::vector<std::vector<std::string>> csv;
  for (const auto& [model, ids] : models) {
    Panel p;
    p.title = fmt::format("{}: expert load", one_line(model));
    p.x = {"training tokens", true, TickFormat::count, {}, {}, {}};
    p.y = {"load CV over experts (mean over MoE blocks)", false, TickFormat::number, 0.0, {}, {}};
    std::set<std::string> titled;
    for (const std::string& recipe : ctx.palette.order())
      for (const StudyRun* r : runs) {
        if (r->record.model != model || r->record.recipe != recipe || !ids.count(r->record.id)) continue;
        Series s = ctx.recipe_series(recipe, SeriesStyle::lines, titled.insert(recipe).second ? recipe : "");
        const std::map<int64_t, Point>& points = by_run.at(r->record.id);
        const size_t stride = std::max<size_t>(1, (points.size() + kMaxPoints - 1) / kMaxPoints);
        size_t i = 0;
        for (const auto& [step, pt] : points) {
          const double cv = pt.sum / pt.blocks;
          csv.push_back({csv_field(r->record.name), r->record.id, csv_field(model), csv_field(recipe),
                         std::to_string(step), std::to_string(pt.tokens), fmt::format("{:.17g}", cv)});
          if (i++ % stride == 0 || i == points.size()) s.rows.push_back({static_cast<double>(pt.tokens), cv});
        }
        p.series.push_back(std::move(s));
      }
    plot.panels.push_back(std::move(p));
  }
  const Inline caption = {text(
      "The expert load of the mixture-of-experts runs over training: at each step the coefficient of variation "
      "(standard deviation / mean) of the routed experts' shares of the step's token-to-expert assignments, "
      "averaged over the MoE blocks (0: every expert takes the same share; the per-block values, with the least "
      "and most loaded expert's share and the balancing and z losses, are the metrics moe/<layer>/...); one "
      "panel per model, one line per run in its recipe's colour.")};
  ctx.csv("expert_load.csv", {"run", "run_id", "model", "recipe", "step", "tokens", "load_cv_mean"}, csv);
  return ctx.figure("expert-load", "Expert load over training", caption, plot, "expert_load.csv");
}

}  // namespace fp4::reports
