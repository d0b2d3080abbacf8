// sections_probes.cpp — the shrinkage probe (SCIENCE.md claims 1 and 2), when runs have probe rows:
// alpha per operand slot and eta per GEMM against depth for each recipe at each run's last probed
// step, and the product of eta over the network.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "base/linear_sites.h"
#include "reports/escape.h"
#include "reports/format.h"
#include "reports/recipe_traits.h"
#include "reports/report_context.h"
#include "reports/stats.h"

namespace fp4::reports {

namespace {

const std::vector<std::string> kLinears(kLinearNames.begin(), kLinearNames.end());
const std::vector<std::string> kSlots(kSlotNames.begin(), kSlotNames.end());
const std::vector<std::string> kGemms(kGemmNames.begin(), kGemmNames.end());

// Position in depth: block index plus the linear's place in the block (qkv 0, attn_out 1/4, ...).
double depth(int layer, const std::string& linear) {
  const auto it = std::find(kLinears.begin(), kLinears.end(), linear);
  const double k = it == kLinears.end() ? 0 : static_cast<double>(it - kLinears.begin());
  return layer + k / 4;
}

// Each run's last probed step.
template <typename Row>
std::map<std::string, int64_t> last_steps(const std::vector<Row>& rows) {
  std::map<std::string, int64_t> out;
  for (const Row& r : rows) out[r.run_id] = std::max(out[r.run_id], r.row.step);
  return out;
}

}  // namespace

Section probe_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Shrinkage probe"), "Shrinkage probe", {}, {}};
  const std::vector<const DeclaredGrid*> probe_grids = st.grids_with(&DeclaredGrid::probes);
  if (st.probes.empty() && st.probe_gemms.empty()) {
    if (probe_grids.empty()) {
      s.blocks.push_back(Paragraph{{text("No run of this study has probe rows (the run config's "), code("probe.every"),
                                    text(" is 0, or only BF16 ran). Set "), code("[probe] every = N"),
                                    text(" in the TOML to measure alpha and eta over depth (docs/train.md).")}});
    } else {
      for (const DeclaredGrid* g : probe_grids) {
        int started = 0;
        for (const std::string& id : g->ids) started += st.curves.count(id) ? 1 : 0;
        s.blocks.push_back(Note{{strong("Not run yet: "),
                                 text(fmt::format("the grid {} ({}) probes {} runs; none has probe rows in the store yet "
                                                  "({} of them have reported any metric).",
                                                  g->name, g->file, g->ids.size(), started))}});
      }
    }
    return s;
  }
  s.blocks.push_back(Paragraph{{text("The probe quantizes each operand slot of each linear layer as the recipe does and "
                                     "measures its coherent gain alpha (the least-squares scale between the quantized and "
                                     "the original tensor: alpha < 1 is shrinkage toward zero) and, per GEMM, eta = "
                                     "alpha_A · alpha_B. Shown at each run's last probed step, averaged over the runs of a "
                                     "recipe and model size (seeds, lengths). SCIENCE.md claim 2: the shrinkage compounds, "
                                     "∏ eta ≈ exp(−Σ δ_k) over the network's GEMMs.")}});
  {
    std::set<std::string> probed;
    for (const store::RunProbeRow& p : st.probes) probed.insert(p.run_id);
    const std::map<std::string, PointFacts> facts = st.points();
    for (const DeclaredGrid* g : probe_grids) {
      size_t have = 0, want = 0;
      for (const std::string& id : g->ids) {
        const auto f = facts.find(id);
        if (f == facts.end() || f->second.probe_every == 0 || !recipe_traits(f->second.recipe_json).quantized) continue;
        ++want;
        have += probed.count(id);
      }
      if (have < want)
        s.blocks.push_back(Note{{strong("Not finished: "),
                                 text(fmt::format("{} of the {} probed runs of the grid {} ({}) have probe rows so far.",
                                                  have, want, g->name, g->file))}});
    }
  }
  // (recipe, model) → slot or gemm → depth → values.
  using Curves = std::map<std::pair<std::string, std::string>, std::map<std::string, std::map<double, std::vector<double>>>>;
  std::map<std::string, const StudyRun*> run_of;
  for (const StudyRun& r : st.runs) run_of[r.record.id] = &r;
  std::map<std::string, int64_t> model_n;
  Curves alpha, eta;
  std::vector<std::vector<std::string>> slot_csv, gemm_csv;
  const auto slot_last = last_steps(st.probes);
  for (const store::RunProbeRow& p : st.probes) {
    const StudyRun* r = run_of.count(p.run_id) ? run_of[p.run_id] : nullptr;
    if (r == nullptr) continue;
    auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.17g}", v) : std::string("nan"); };
    slot_csv.push_back({csv_field(r->record.name), p.run_id, csv_field(r->record.recipe), csv_field(r->record.model),
                        std::to_string(p.row.step), std::to_string(p.row.layer), csv_field(p.row.linear),
                        csv_field(p.row.slot), csv_field(p.row.gemm), num(p.row.alpha), num(p.row.nmse),
                        num(p.row.sqnr_db), num(p.row.shrink), num(p.row.b_eff), std::to_string(p.row.count),
                        std::to_string(p.row.nonfinite)});
    if (p.row.step != slot_last.at(p.run_id)) continue;
    model_n[r->record.model] = r->record.n_params_nonembedding;
    alpha[{r->record.recipe, r->record.model}][p.row.slot][depth(p.row.layer, p.row.linear)].push_back(p.row.alpha);
  }
  // ∏ eta per run over its last probed step's linears, per GEMM.
  struct Product {
    double log_sum = 0;
    int k = 0;
    bool finite = true;
  };
  std::map<std::string, std::map<std::string, Product>> products;  // run → gemm → product
  const auto gemm_last = last_steps(st.probe_gemms);
  for (const store::RunProbeGemmRow& p : st.probe_gemms) {
    const StudyRun* r = run_of.count(p.run_id) ? run_of[p.run_id] : nullptr;
    if (r == nullptr) continue;
    auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.17g}", v) : std::string("nan"); };
    gemm_csv.push_back({csv_field(r->record.name), p.run_id, csv_field(r->record.recipe), csv_field(r->record.model),
                        std::to_string(p.row.step), std::to_string(p.row.layer), csv_field(p.row.linear),
                        csv_field(p.row.gemm), num(p.row.alpha_a), num(p.row.alpha_b), num(p.row.eta)});
    if (p.row.step != gemm_last.at(p.run_id)) continue;
    model_n[r->record.model] = r->record.n_params_nonembedding;
    eta[{r->record.recipe, r->record.model}][p.row.gemm][depth(p.row.layer, p.row.linear)].push_back(p.row.eta);
    Product& prod = products[p.run_id][p.row.gemm];
    if (std::isfinite(p.row.eta) && p.row.eta > 0) prod.log_sum += std::log(p.row.eta);
    else prod.finite = false;
    ++prod.k;
  }
  const std::string slots_csv = ctx.csv("probes.csv",
                                        {"run", "run_id", "recipe", "model", "step", "layer", "linear", "slot", "gemm",
                                         "alpha", "nmse", "sqnr_db", "shrink", "b_eff", "count", "nonfinite"},
                                        slot_csv);
  const std::string gemms_csv = ctx.csv(
      "probe_gemms.csv", {"run", "run_id", "recipe", "model", "step", "layer", "linear", "gemm", "alpha_a", "alpha_b", "eta"},
      gemm_csv);

  // Line styles by model size, colours by recipe.
  std::vector<std::pair<int64_t, std::string>> models;
  for (const auto& [m, n] : model_n) models.push_back({n, m});
  std::sort(models.begin(), models.end());
  std::map<std::string, int> dash;
  for (size_t i = 0; i < models.size(); ++i) dash[models[i].second] = 1 + static_cast<int>(i % 5);
  auto panels = [&](const Curves& curves, const std::vector<std::string>& keys, const std::string& ylabel) {
    Plot plot;
    plot.columns = keys.size() == 3 ? 3 : 2;
    plot.panel_width = keys.size() == 3 ? 340 : 460;
    plot.panel_height = 300;
    for (const std::string& key : keys) {
      Panel panel;
      panel.title = key;
      panel.x = {"depth (block; qkv, attn_out, mlp_in, mlp_out within)", false, TickFormat::number, {}, {}, {}};
      panel.y = {ylabel, false, TickFormat::number, {}, {}, {}};
      panel.y_lines = {1.0};
      for (const std::string& recipe : ctx.palette.order())
        for (const auto& [m_n, model] : models) {
          const auto it = curves.find({recipe, model});
          if (it == curves.end() || !it->second.count(key)) continue;
          Series series = ctx.recipe_series(recipe, SeriesStyle::linespoints,
                                            models.size() > 1 ? recipe + ", " + one_line(model) : recipe);
          series.dash = dash[model];
          for (const auto& [x, values] : it->second.at(key)) series.rows.push_back({x, spread(values).mean});
          panel.series.push_back(std::move(series));
        }
      plot.panels.push_back(std::move(panel));
    }
    return plot;
  };
  if (!alpha.empty())
    s.blocks.push_back(ctx.figure("probe-alpha", "Coherent gain alpha per operand slot over depth",
                                  {text("alpha of each of the six operand slots (NUMERICS.md §1) at every linear layer, "
                                        "in depth order; 1 (dashed) is no shrinkage. Colours: recipes"),
                                   text(models.size() > 1 ? "; line styles: model sizes." : ".")},
                                  panels(alpha, kSlots, "alpha"), slots_csv));
  if (!eta.empty())
    s.blocks.push_back(ctx.figure("probe-eta", "Per-GEMM gain eta over depth",
                                  {text("eta = alpha_A · alpha_B of each GEMM at every linear layer, in depth order; 1 "
                                        "(dashed) is no shrinkage.")},
                                  panels(eta, kGemms, "eta"), gemms_csv));

  // The product table: mean over the runs of a (recipe, model).
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::vector<double>>> agg;
  std::map<std::pair<std::string, std::string>, int> count_k;
  std::vector<std::vector<std::string>> prod_csv;
  for (const auto& [run_id, by_gemm] : products) {
    const StudyRun* r = run_of[run_id];
    for (const auto& [gemm, prod] : by_gemm) {
      const double value = prod.finite ? std::exp(prod.log_sum) : std::nan("");
      agg[{r->record.recipe, r->record.model}][gemm].push_back(value);
      count_k[{r->record.recipe, r->record.model}] = prod.k;
      prod_csv.push_back({csv_field(r->record.name), run_id, csv_field(r->record.recipe), csv_field(r->record.model),
                          std::to_string(gemm_last.at(run_id)), csv_field(gemm), std::to_string(prod.k),
                          std::isfinite(value) ? fmt::format("{:.17g}", value) : "nan"});
    }
  }
  if (!agg.empty()) {
    Table t;
    t.caption = "∏ eta over the network's linear layers (each run's last probed step)";
    t.header = {"recipe", "model", "runs", "linears K", "∏ eta fprop", "∏ eta dgrad", "∏ eta wgrad", "−Σ log eta (fprop)"};
    t.numeric = {false, false, true, true, true, true, true, true};
    for (const std::string& recipe : ctx.palette.order())
      for (const auto& [m_n, model] : models) {
        const auto it = agg.find({recipe, model});
        if (it == agg.end()) continue;
        auto cell = [&](const std::string& g) -> Cell {
          const auto v = it->second.find(g);
          return {v == it->second.end() ? "—" : fmt::format("{:.5f}", spread(v->second).mean)};
        };
        const auto fp = it->second.find("fprop");
        const double delta = fp == it->second.end() ? std::nan("") : -std::log(spread(fp->second).mean);
        size_t runs = 0;
        for (const auto& [g, v] : it->second) runs = std::max(runs, v.size());
        t.rows.push_back({ctx.recipe_cell(recipe), {model}, {std::to_string(runs)},
                          {std::to_string(count_k[{recipe, model}])}, cell("fprop"), cell("dgrad"), cell("wgrad"),
                          {fmt_number(delta, 4)}});
      }
    t.csv = ctx.csv("eta_products.csv", {"run", "run_id", "recipe", "model", "step", "gemm", "linears", "eta_product"},
                    prod_csv);
    s.blocks.push_back(std::move(t));
  }
  return s;
}

}  // namespace fp4::reports
