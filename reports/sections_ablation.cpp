// sections_ablation.cpp — the ablations of SCIENCE.md claims 4 and 5, when the study has them:
// mean final loss per ablation recipe at its grid point beside the paper's Table 2 value, with the
// noise floor (the seed spread) so a reader sees which differences are real.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "reports/escape.h"
#include "reports/format.h"
#include "reports/paper.h"
#include "reports/recipe_traits.h"
#include "reports/report_context.h"
#include "reports/stats.h"

namespace fp4::reports {

namespace {

// What a recipe is in the ablation's terms.
struct AblationRole {
  bool member = false;                          // belongs to an ablation family
  bool anchor = false;                          // the full recipe the others are compared with
  const paper::AblationRow* paper_row = nullptr;  // its row of the paper's Table 2, if any
  std::string family;                           // "uniform grid (claim 4)" or "E2M1 clip (claim 5)"
};

AblationRole role_of(const RecipeTraits& t) {
  AblationRole r;
  if (!t.quantized || !t.uniform || t.bf16_layers || t.scale != "fp32" || t.block != 16) return r;
  if (t.grid == "e1m2" && t.clip == 7 && (t.sr_dy_only || t.sr.empty())) {
    r.member = true;
    r.family = "uniform grid (claim 4)";
    for (const auto& row : paper::ablation_rows())
      if (row.rht == t.rht && row.sr_dy == t.sr_dy_only) r.paper_row = &row;
    r.anchor = r.paper_row != nullptr && r.paper_row == &paper::ablation_rows()[4];
  } else if (t.grid == "e2m1" && t.sr_dy_only && (t.clip == 2 || t.clip == 3 || t.clip == 4 || t.clip == 6)) {
    r.member = true;
    r.family = "E2M1 clip (claim 5)";
    r.anchor = t.clip == 6 && t.rht == std::vector<std::string>{"wgrad"};
  }
  return r;
}

}  // namespace

Section ablation_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Ablations"), "Ablations", {}, {}};
  // One role per recipe label, from its first run's resolved recipe.
  std::map<std::string, RecipeTraits> traits;
  for (const StudyRun& r : st.runs) traits.emplace(r.record.recipe, recipe_traits(r.recipe));
  std::map<std::string, AblationRole> roles;
  bool any_variant = false;
  for (const auto& [name, t] : traits) {
    roles[name] = role_of(t);
    any_variant = any_variant || (roles[name].member && !roles[name].anchor);
  }

  // The noise floor: the seed spread of the final loss, relative, pooled over every grid point that
  // has two or more finished seeds.
  std::map<std::tuple<std::string, std::string, int64_t>, std::vector<double>> by_point;
  for (const StudyRun& r : st.runs)
    if (r.record.state == sweeps::RunState::succeeded && r.final_loss)
      by_point[{r.record.recipe, r.record.model, r.record.tokens}].push_back(*r.final_loss);
  double ss = 0;
  int groups = 0;
  for (const auto& [k, losses] : by_point) {
    const Spread sp = spread(losses);
    if (sp.n >= 2) {
      ss += (sp.sd / sp.mean) * (sp.sd / sp.mean);
      ++groups;
    }
  }
  // NaN when no grid point has two seeds.
  const double noise = groups > 0 ? std::sqrt(ss / groups) : std::nan("");

  if (!any_variant) {
    s.blocks.push_back(Paragraph{{text("This study has no ablation recipes: none of its recipes is a variant of UFP4's RHT "
                                       "scope or stochastic rounding (claim 4) or an E2M1 grid with a tighter clip (claim "
                                       "5). Declare them as custom recipes, e.g. "),
                                  code("[recipes.ufp4-no-rht] base = \"ufp4\" rht = []"),
                                  text(", to get the table beside the paper's.")}});
    return s;
  }
  s.blocks.push_back(Paragraph{{text("Mean final validation loss per ablation recipe at each grid point where the study ran "
                                     "them, against the full recipe of its family (UFP4 for the uniform-grid ablation of "
                                     "claim 4, the E2M1 reference for the clip ablation of claim 5), beside the paper's "
                                     "Table 2 on Dense 1.5B (mean LM loss; the paper gives no numbers for claim 5, only "
                                     "that every clip is worse than the reference). Differences smaller than about twice "
                                     "the noise floor are not distinguishable from seed noise.")}});
  if (std::isfinite(noise))
    s.blocks.push_back(Note{{strong("Noise floor: "),
                             text(fmt::format("the seed spread of the final loss is {:.3f}% (sample sd over seeds, "
                                              "relative, pooled over the {} grid points with two or more finished seeds).",
                                              100 * noise, groups))}});
  else
    s.blocks.push_back(Note{{strong("Noise floor unknown: "),
                             text("no grid point of this study has two finished seeds, so the seed spread is not "
                                  "measured here (SCIENCE.md's measurement at d4, 52M tokens: about 0.2–0.3%). Treat "
                                  "differences below that as noise.")}});

  std::map<std::pair<int64_t, int64_t>, std::map<std::string, std::vector<double>>> points;  // (N, D) → recipe → losses
  std::map<std::pair<int64_t, int64_t>, std::string> model_of;
  for (const StudyRun& r : st.runs)
    if (roles[r.record.recipe].member && r.record.state == sweeps::RunState::succeeded && r.final_loss) {
      points[{r.record.n_params_nonembedding, r.record.tokens}][r.record.recipe].push_back(*r.final_loss);
      model_of[{r.record.n_params_nonembedding, r.record.tokens}] = r.record.model;
    }
  std::vector<std::vector<std::string>> csv;
  int tables = 0;
  for (const auto& [point, recipes] : points) {
    bool has_variant = false;
    for (const auto& [name, losses] : recipes) has_variant = has_variant || !roles[name].anchor;
    if (recipes.size() < 2 || !has_variant) continue;
    Table t;
    t.caption = fmt::format("Ablation at {} (N = {}), D = {}", one_line(model_of[point]), fmt_count(static_cast<double>(point.first)),
                            fmt_count(static_cast<double>(point.second)));
    t.header = {"recipe", "setting", "family", "seeds", "loss (mean ± sd)", "Δ vs full", "beyond 2× noise",
                "paper row", "paper loss", "paper Δ vs all three"};
    t.numeric = {false, false, false, true, true, true, false, false, true, true};
    for (const std::string& recipe : ctx.palette.order()) {
      const auto it = recipes.find(recipe);
      if (it == recipes.end()) continue;
      const AblationRole& role = roles[recipe];
      const Spread sp = spread(it->second);
      // The anchor of the same family at this grid point.
      std::optional<double> anchor;
      for (const auto& [other, losses] : recipes)
        if (roles[other].anchor && roles[other].family == role.family) anchor = spread(losses).mean;
      const double delta = anchor ? sp.mean / *anchor - 1 : std::nan("");
      std::string beyond;
      if (anchor && !role.anchor) beyond = std::isfinite(noise) ? (std::fabs(delta) > 2 * noise ? "yes" : "no") : "unknown";
      const double paper_full = paper::ablation_rows()[4].loss;
      t.rows.push_back({ctx.recipe_cell(recipe), {describe(traits[recipe])}, {role.family}, {std::to_string(sp.n)},
                        {sp.n > 1 ? fmt_loss(sp.mean) + " ± " + fmt::format("{:.4f}", sp.sd) : fmt_loss(sp.mean)},
                        {role.anchor ? "(full)" : fmt_percent(delta)}, {beyond},
                        {role.paper_row ? role.paper_row->label : ""},
                        {role.paper_row ? fmt::format("{:.5f}", role.paper_row->loss) : ""},
                        {role.paper_row ? fmt_percent(role.paper_row->loss / paper_full - 1) : ""}});
      csv.push_back({std::to_string(point.first), std::to_string(point.second), csv_field(recipe),
                     csv_field(describe(traits[recipe])), csv_field(role.family), std::to_string(sp.n),
                     fmt::format("{:.17g}", sp.mean), sp.n > 1 ? fmt::format("{:.17g}", sp.sd) : "",
                     std::isfinite(delta) ? fmt::format("{:.17g}", delta) : "",
                     role.paper_row ? csv_field(role.paper_row->label) : "",
                     role.paper_row ? fmt::format("{:.17g}", role.paper_row->loss) : ""});
    }
    t.csv = "ablation.csv";
    s.blocks.push_back(std::move(t));
    ++tables;
  }
  ctx.csv("ablation.csv",
          {"n_params_nonembedding", "tokens", "recipe", "setting", "family", "seeds", "loss_mean", "loss_sd",
           "delta_vs_full", "paper_row", "paper_loss"},
          csv);
  if (tables == 0)
    s.blocks.push_back(Note{{text("The study declares ablation recipes, but no grid point has finished runs of an "
                                  "ablation recipe and of its family's full recipe yet.")}});
  return s;
}

}  // namespace fp4::reports
