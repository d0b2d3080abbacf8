// sections_curves.cpp — loss curves: validation loss against tokens (log-log, a panel per model
// size, a colour per recipe), and the paper's headline view, the BF16-relative gap over training
// L_r(t) / L_bf16(t) - 1 from the train losses smoothed by a trailing mean.
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

namespace fp4::reports {

namespace {

constexpr size_t kMaxPointsPerSeries = 400;

// Keeps at most `max` rows, spread evenly in log(x) (the first and the last always kept): a long
// run's curve drawn at the resolution a figure can show.
std::vector<std::vector<double>> thin_log_x(const std::vector<std::vector<double>>& rows, size_t max) {
  if (rows.size() <= max) return rows;
  std::vector<std::vector<double>> out;
  const double lo = std::log(std::max(rows.front()[0], 1.0)), hi = std::log(std::max(rows.back()[0], 1.0));
  double next = lo;
  const double step = (hi - lo) / static_cast<double>(max);
  for (size_t i = 0; i < rows.size(); ++i) {
    const double x = std::log(std::max(rows[i][0], 1.0));
    if (i == 0 || i + 1 == rows.size() || x >= next) {
      out.push_back(rows[i]);
      next = x + step;
    }
  }
  return out;
}

// The model sizes of a set of runs, smallest first: label → N (non-embedding).
std::vector<std::pair<std::string, int64_t>> models_by_size(const std::vector<const StudyRun*>& runs) {
  std::map<std::string, int64_t> n;
  for (const StudyRun* r : runs) n[r->record.model] = r->record.n_params_nonembedding;
  std::vector<std::pair<std::string, int64_t>> out(n.begin(), n.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  });
  return out;
}

std::string panel_title(const std::string& model, int64_t n) {
  return fmt::format("{} (N = {} non-embedding parameters)", one_line(model), fmt_count(static_cast<double>(n)));
}

// Dash types by D, so runs of one recipe at several lengths stay apart in one panel.
std::map<int64_t, int> dash_by_tokens(const std::vector<const StudyRun*>& runs) {
  std::set<int64_t> ds;
  for (const StudyRun* r : runs) ds.insert(r->record.tokens);
  std::map<int64_t, int> out;
  int k = 0;
  for (int64_t d : ds) out[d] = 1 + (k++ % 5);
  return out;
}

Figure loss_curve_figure(ReportContext& ctx, const std::vector<const StudyRun*>& runs) {
  const Study& st = ctx.study;
  const auto dashes = dash_by_tokens(runs);
  Plot plot;
  for (const auto& [model, n] : models_by_size(runs)) {
    Panel p;
    p.title = panel_title(model, n);
    p.x = {"training tokens", true, TickFormat::count, {}, {}, {}};
    p.y = {"validation loss (nats/token)", true, TickFormat::number, {}, {}, {}};
    std::set<std::string> titled;
    for (const std::string& recipe : ctx.palette.order())
      for (const StudyRun* r : runs) {
        if (r->record.model != model || r->record.recipe != recipe) continue;
        const auto run = st.curves.find(r->record.id);
        if (run == st.curves.end() || !run->second.count("eval/loss")) continue;
        const std::string key = dashes.size() > 1 ? recipe + ", D = " + fmt_count(static_cast<double>(r->record.tokens)) : recipe;
        Series s = ctx.recipe_series(recipe, SeriesStyle::lines, titled.insert(key).second ? key : "");
        s.dash = dashes.at(r->record.tokens);
        for (const auto& m : run->second.at("eval/loss"))
          s.rows.push_back({static_cast<double>(m.tokens), m.is_nan ? std::nan("") : m.value});
        s.rows = thin_log_x(s.rows, kMaxPointsPerSeries);
        p.series.push_back(std::move(s));
      }
    plot.panels.push_back(std::move(p));
  }
  Inline caption = {text("Validation loss (mean cross-entropy on the fixed held-out set) at each evaluation against the "
                         "training tokens seen, both axes logarithmic; one panel per model size, one colour per recipe")};
  if (dashes.size() > 1) caption.push_back(text(", one line style per training length D"));
  caption.push_back(text(". Every run of the main grid with evaluations is drawn, including runs not finished yet. Each "
                         "run's last point is its final loss (the Runs table)."));
  return ctx.figure("loss-curves", "Validation loss over training", caption, plot, "curves.csv");
}

}  // namespace

Section curves_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Loss curves"), "Loss curves", {}, {}};
  std::vector<const StudyRun*> with_eval;
  for (const StudyRun* r : st.main_runs())
    if (const auto it = st.curves.find(r->record.id); it != st.curves.end() && it->second.count("eval/loss"))
      with_eval.push_back(r);
  if (!st.main_label.empty())
    s.blocks.push_back(Paragraph{{text("The runs of the main grid, " + st.main_label +
                                       "; the gap over training averages every seed the store holds of its points.")}});
  if (with_eval.empty()) {
    s.blocks.push_back(Note{{text("No run of the main grid has an evaluation yet: no loss curves to draw.")}});
  } else {
    s.blocks.push_back(loss_curve_figure(ctx, with_eval));
  }
  if (std::optional<Figure> load = expert_load_figure(ctx, st.main_runs())) s.blocks.push_back(std::move(*load));

  // The gap over training, averaged over seeds per (recipe, model, D).
  const Twins twins = bf16_twins(st, true);
  struct Key {
    std::string recipe, model;
    int64_t n, d;
    bool operator<(const Key& o) const {
      return std::tie(n, model, d, recipe) < std::tie(o.n, o.model, o.d, o.recipe);
    }
  };
  struct Acc {
    std::map<int64_t, std::pair<int64_t, std::vector<double>>> by_step;  // step → (tokens, gaps over seeds)
    int seeds = 0, window = 1;
  };
  std::map<Key, Acc> groups;
  std::vector<const StudyRun*> drawn;
  for (const TwinPair& p : twins.pairs) {
    const int window = smoothing_window(ctx.options, p.run->steps);
    const GapCurve g = train_gap_curve(st, p, window);
    if (g.steps.empty()) continue;
    Acc& acc = groups[{p.run->record.recipe, p.run->record.model, p.run->record.n_params_nonembedding, p.run->record.tokens}];
    ++acc.seeds;
    acc.window = window;
    for (size_t i = 0; i < g.steps.size(); ++i) {
      auto& slot = acc.by_step[g.steps[i]];
      slot.first = g.tokens[i];
      slot.second.push_back(g.gap[i]);
    }
    drawn.push_back(p.run);
  }
  if (groups.empty()) {
    s.blocks.push_back(Note{{text("No quantized run has a BF16 twin with training losses yet, so there is no gap over "
                                  "training to draw.")}});
  } else {
    std::vector<std::vector<std::string>> csv;
    std::set<int> windows;
    const auto dashes = dash_by_tokens(drawn);
    Plot plot;
    for (const auto& [model, n] : models_by_size(drawn)) {
      Panel panel;
      panel.title = panel_title(model, n);
      panel.x = {"training tokens", true, TickFormat::count, {}, {}, {}};
      panel.y = {"gap to BF16, smoothed train loss (%)", false, TickFormat::percent, {}, {}, {}};
      panel.y_lines = {0.0};
      for (const std::string& recipe : ctx.palette.order())
        for (const auto& [key, acc] : groups) {
          if (key.model != model || key.recipe != recipe) continue;
          const std::string title =
              dashes.size() > 1 ? recipe + ", D = " + fmt_count(static_cast<double>(key.d)) : recipe;
          Series series = ctx.recipe_series(recipe, SeriesStyle::lines, title);
          series.dash = dashes.at(key.d);
          windows.insert(acc.window);
          for (const auto& [step, slot] : acc.by_step) {
            double sum = 0;
            for (double v : slot.second) sum += v;
            const double mean = sum / static_cast<double>(slot.second.size());
            series.rows.push_back({static_cast<double>(slot.first), 100 * mean});
            csv.push_back({csv_field(recipe), csv_field(model), std::to_string(key.n), std::to_string(key.d),
                           std::to_string(slot.second.size()), std::to_string(acc.window), std::to_string(step),
                           std::to_string(slot.first), fmt::format("{:.17g}", mean)});
          }
          series.rows = thin_log_x(series.rows, kMaxPointsPerSeries);
          panel.series.push_back(std::move(series));
        }
      plot.panels.push_back(std::move(panel));
    }
    const std::string data =
        ctx.csv("gap_over_training.csv",
                {"recipe", "model", "n_params_nonembedding", "tokens_D", "seeds", "window_steps", "step", "tokens", "gap"},
                csv);
    std::vector<std::string> ws;
    for (int w : windows) ws.push_back(std::to_string(w));
    Inline caption = {
        text("The UFP4 paper's headline view: the BF16-relative gap L_r(t) / L_bf16(t) − 1 over training, per model size, "
             "from each run and its BF16 twin (same model, D, seed and batches). Both train losses are smoothed by a "
             "trailing mean over the last "),
        strong(ctx.options.smooth_steps > 0 ? std::to_string(ctx.options.smooth_steps) + " steps"
                                            : "5% of the run's steps (" + fmt::format("{}", fmt::join(ws, ", ")) +
                                                  (ws.size() == 1 && ws[0] == "1" ? " step here)" : " steps here)")),
        text(" before dividing (the paper averages the last 1000 steps); where a recipe has several seeds the line is "
             "their mean. Above 0 the 4-bit recipe trains worse than BF16; the dashed line is no gap.")};
    s.blocks.push_back(ctx.figure("gap-over-training", "Gap to BF16 over training", caption, plot, data));
  }
  if (!twins.without.empty()) {
    std::vector<std::string> names;
    for (const StudyRun* r : twins.without) names.push_back(r->record.name);
    s.blocks.push_back(Note{{strong("No BF16 twin: "),
                             text(fmt::format("{} quantized run{} ha{} no BF16 run at the same grid point in the store, so "
                                              "no gap is shown for {}: ",
                                              twins.without.size(), twins.without.size() == 1 ? "" : "s",
                                              twins.without.size() == 1 ? "s" : "ve",
                                              twins.without.size() == 1 ? "it" : "them")),
                             text(fmt::format("{}", fmt::join(names, ", "))), text(". Add bf16 to the grid's recipe axis to measure them.")}});
  }
  return s;
}

}  // namespace fp4::reports
