// sections_ablation.cpp — the ablations of SCIENCE.md claims 4 and 5, when the study has them: at
// each grid point where ablation recipes ran beside their family's full recipe (runs that differ
// only in recipe and seed), the mean final loss of each recipe with its seed spread (the noise
// floor), its difference to the full recipe paired seed by seed with a 95% interval, beside the
// paper's Table 2, so a reader sees which differences are real.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "base/sha256.h"
#include "fit/contrasts.h"
#include "reports/escape.h"
#include "reports/format.h"
#include "reports/pairs.h"
#include "reports/paper.h"
#include "reports/recipe_traits.h"
#include "reports/report_context.h"
#include "reports/stats.h"

namespace fp4::reports {

namespace {

// "+0.512% [+0.31%, +0.70%]", or the mean alone with fewer than two pairs.
std::string percent_with_interval(const Spread& s) {
  if (s.n == 0) return "—";
  std::string out = fmt_percent(s.mean);
  if (s.has_interval()) out += " [" + fmt_percent(s.lo) + ", " + fmt_percent(s.hi) + "]";
  return out;
}

// The stored paired test (fit/contrasts.h) of `variant` against `anchor` on the final eval loss at
// the grid point of `group_key` (a comparison key), or null. The contrasts name a point by its label
// (model, tokens, the grids declaring it, and its key's hash when two points would share a label),
// so a test matches on recipe, N, D and model, then on the hash or the grids.
const fit::ContrastTest* stored_test(const std::optional<fit::ContrastSet>& set, const std::string& variant,
                                     const std::string& anchor, const std::string& group_key, const StudyRun& example,
                                     const std::string& grids) {
  if (!set) return nullptr;
  const std::string hash_tag = " #" + sha256_hex(group_key).substr(0, 8), grids_tag = "(" + grids + ")";
  std::vector<const fit::ContrastTest*> candidates;
  for (const fit::ContrastFamily& f : set->families)
    for (const fit::ContrastTest& t : f.tests)
      if (t.metric == "final_eval" && t.recipe == variant && t.against == anchor && t.model == example.record.model &&
          t.n == example.record.n_params_nonembedding && t.tokens == example.record.tokens)
        candidates.push_back(&t);
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const fit::ContrastTest* t : candidates)
    if (ends_with(t->point, hash_tag)) return t;
  for (const fit::ContrastTest* t : candidates)
    if (t->point.find(" #") == std::string::npos && ends_with(t->point, grids_tag)) return t;
  return candidates.size() == 1 ? candidates.front() : nullptr;
}

// What a recipe against its family's full recipe reads as. The verdict is the family-wise one: the
// stored paired test's Holm-adjusted sign-flip p (docs/statistics.md), as "Recipe against recipe"
// shows it; an interval over the seeds that excludes 0 is not a finding when the family holds
// several tests of the same runs (the first study's ufp4-rht-wgrad: interval above 0, Holm p 0.28).
// Without a stored test the unadjusted interval is named as such.
std::string reading(const Spread& d, const fit::ContrastTest* test) {
  if (d.n == 0) return "no paired seeds";
  if (!d.has_interval()) return "one seed: no interval";
  if (test != nullptr && std::isfinite(test->p_holm)) {
    if (test->p_holm >= 0.05) return fmt::format("not significant after Holm (p = {:.3g})", test->p_holm);
    return fmt::format("{} (significant after Holm, p = {:.3g})", test->t.mean > 0 ? "worse" : "better", test->p_holm);
  }
  const std::string interval = d.sign() > 0 ? "interval above 0" : d.sign() < 0 ? "interval below 0" : "interval holds 0";
  return "no adjusted test stored (fp4lab fit STUDY.toml); unadjusted " + interval;
}

// Finished runs of one comparison group (same config but recipe and seed), by recipe.
using Group = std::map<std::string, std::vector<const StudyRun*>>;

// "first-study-ablation, first-study" — the grids that declare a group's runs.
std::string grids_of(const Group& g) {
  std::set<std::string> names;
  for (const auto& [recipe, runs] : g)
    for (const StudyRun* r : runs) names.insert(r->grids.begin(), r->grids.end());
  return names.empty() ? std::string("no grid") : fmt::format("{}", fmt::join(names, ", "));
}

// How far the grids declaring ablation recipes have got.
Note progress_note(const Study& st, const std::vector<const DeclaredGrid*>& grids) {
  std::map<std::string, const StudyRun*> run_of;
  for (const StudyRun& r : st.runs) run_of[r.record.id] = &r;
  std::vector<std::string> parts;
  for (const DeclaredGrid* g : grids) {
    int done = 0;
    for (const std::string& id : g->ids)
      if (const auto it = run_of.find(id); it != run_of.end() && finished_with_loss(*it->second)) ++done;
    parts.push_back(fmt::format("{} ({}): {} of {} runs finished", g->name, g->file, done, g->ids.size()));
  }
  return Note{{strong("Not finished: "), text(fmt::format("{}.", fmt::join(parts, "; ")))}};
}

const std::vector<std::string> kCsvHeader = {
    "grids", "model", "n_params_nonembedding", "tokens", "recipe", "setting", "family", "seeds", "loss_mean", "loss_sd",
    "delta_pairs", "delta_vs_full", "delta_lo", "delta_hi", "p_holm", "reading", "gap_vs_bf16", "gap_lo", "gap_hi",
    "train_gap_vs_bf16", "train_gap_lo", "train_gap_hi", "paper_row", "paper_loss"};

}  // namespace

Section ablation_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Ablations"), "Ablations", {}, {}};
  std::map<std::string, RecipeTraits> traits;
  std::map<std::string, AblationRole> roles;
  for (const StudyRun& r : st.runs)
    if (traits.emplace(r.record.recipe, recipe_traits(r.recipe)).second)
      roles[r.record.recipe] = ablation_role(traits[r.record.recipe]);
  const std::vector<const DeclaredGrid*> declared = st.grids_with(&DeclaredGrid::ablation);

  // Groups of runs comparable seed by seed; a table for each that holds an ablation variant and the
  // full recipe of its family.
  std::map<std::string, Group> groups;
  for (const StudyRun& r : st.runs)
    if (finished_with_loss(r)) groups[r.comparison_key][r.record.recipe].push_back(&r);
  std::vector<const Group*> shown;
  for (const auto& [key, g] : groups) {
    std::set<std::string> anchors, variants;
    for (const auto& [recipe, runs] : g) {
      const AblationRole& role = roles[recipe];
      if (role.member) (role.anchor ? anchors : variants).insert(role.family);
    }
    bool comparable = false;
    for (const std::string& f : variants) comparable = comparable || anchors.count(f);
    if (comparable) shown.push_back(&g);
  }
  // Most seeds first (the ablation grid before a one-seed grid that happens to compare recipes).
  std::stable_sort(shown.begin(), shown.end(), [](const Group* a, const Group* b) {
    size_t na = 0, nb = 0;
    for (const auto& [r, runs] : *a) na = std::max(na, runs.size());
    for (const auto& [r, runs] : *b) nb = std::max(nb, runs.size());
    return na > nb;
  });

  if (shown.empty()) {
    if (!declared.empty()) {
      s.blocks.push_back(Paragraph{{text("The study declares ablation recipes, but no grid point has finished runs of an "
                                         "ablation recipe and of its family's full recipe yet, so there is no ablation "
                                         "table.")}});
      s.blocks.push_back(progress_note(st, declared));
    } else {
      s.blocks.push_back(Paragraph{{text("This study has no ablation recipes: none of its recipes is a variant of UFP4's "
                                         "RHT scope or stochastic rounding (claim 4) or of the E2M1 reference's RHT scope "
                                         "or clip (claims 2 and 5). Declare them as custom recipes, e.g. "),
                                    code("[recipes.ufp4-rht-none] base = \"ufp4\" rht = []"),
                                    text(", to get the table beside the paper's.")}});
    }
    ctx.csv("ablation.csv", kCsvHeader, {});
    return s;
  }
  s.blocks.push_back(Paragraph{
      {text("At each grid point where ablation recipes ran beside the full recipe of their family (UFP4 for the uniform "
            "grid of claim 4; the E2M1 reference, RHT on wgrad only, for E2M1's RHT scope and clip of claims 2 and 5), "
            "from runs that differ only in recipe and seed: the mean final validation loss of each recipe ± its seed "
            "spread (sample sd: the noise floor at this point), and its difference to the full recipe paired seed by "
            "seed (L_r / L_full − 1 for each seed, whose two runs share initial weights and batches) with the 95% "
            "Student-t interval over the seeds. The reading is the family-wise test, not the interval: the stored "
            "paired test of the recipe against its full recipe (Recipe against recipe, its family's sign-flip p "
            "Holm-adjusted over the family's tests), significant when the Holm p is below 0.05; an interval that "
            "excludes 0 alone is one test among the family's, which share the full recipe's runs. Beside it, the "
            "paper's Table 2 on Dense 1.5B (mean LM loss; the paper gives no numbers for claim 5, only that every "
            "restricted E2M1 is worse than the reference).")}});
  if (std::any_of(declared.begin(), declared.end(), [&](const DeclaredGrid* g) {
        for (const std::string& id : g->ids)
          if (const StudyRun* r = st.run(id); r == nullptr || !finished_with_loss(*r)) return true;
        return false;
      }))
    s.blocks.push_back(progress_note(st, declared));

  std::vector<std::vector<std::string>> csv;
  for (const Group* gp : shown) {
    const Group& g = *gp;
    const StudyRun* example = g.begin()->second.front();
    size_t max_seeds = 0;
    for (const auto& [recipe, runs] : g) max_seeds = std::max(max_seeds, runs.size());
    Table t;
    t.caption = fmt::format("Ablation at {} (N = {}), D = {}: grid {}, up to {} seed{}", one_line(example->record.model),
                            fmt_count(static_cast<double>(example->record.n_params_nonembedding)),
                            fmt_count(static_cast<double>(example->record.tokens)), grids_of(g), max_seeds,
                            max_seeds == 1 ? "" : "s");
    t.header = {"recipe", "setting", "family", "seeds", "loss (mean ± sd)", "seed sd (rel.)", "Δ vs full, paired [95%]",
                "reading", "gap to BF16, paired [95%]", "on the train tail [95%]", "paper row", "paper loss",
                "paper Δ vs all three"};
    t.numeric = {false, false, false, true, true, true, true, false, true, true, false, true, true};
    const auto bf16 = std::find_if(g.begin(), g.end(), [](const auto& kv) { return kv.second.front()->record.baseline; });
    std::vector<double> rel_sds;
    // BF16, then each family's full recipe and its variants in the paper's row order, then the rest.
    std::vector<std::string> order;
    for (const std::string& recipe : ctx.palette.order())
      if (g.count(recipe)) order.push_back(recipe);
    auto rank = [&](const std::string& recipe) {
      const AblationRole& r = roles[recipe];
      const int family = g.at(recipe).front()->record.baseline ? 0 : !r.member ? 3 : r.family.rfind("uniform", 0) == 0 ? 1 : 2;
      const long row = r.paper_row ? r.paper_row - paper::ablation_rows().data() : 99;
      return std::make_tuple(family, r.anchor ? 0 : 1, row);
    };
    std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
    for (const std::string& recipe : order) {
      const auto it = g.find(recipe);
      const AblationRole& role = roles[recipe];
      std::vector<double> losses;
      for (const StudyRun* r : it->second) losses.push_back(*r->final_loss);
      const Spread sp = spread(losses);
      if (sp.n >= 2) rel_sds.push_back(sp.sd / sp.mean);
      // The full recipe of the same family at this grid point.
      const std::vector<const StudyRun*>* anchor = nullptr;
      for (const auto& [other, runs] : g)
        if (roles[other].anchor && role.member && roles[other].family == role.family) anchor = &runs;
      const bool compared = anchor != nullptr && !role.anchor;
      const Spread delta = compared ? paired_difference(it->second, *anchor).diff : Spread{};
      std::string anchor_recipe;
      if (compared) anchor_recipe = anchor->front()->record.recipe;
      const fit::ContrastTest* test =
          compared ? stored_test(st.contrasts, recipe, anchor_recipe, example->comparison_key, *example, grids_of(g)) : nullptr;
      const bool has_gap = bf16 != g.end() && !it->second.front()->record.baseline;
      const Spread gap = has_gap ? paired_difference(it->second, bf16->second).diff : Spread{};
      const Spread train_gap = has_gap ? paired_train_tail_difference(st, it->second, bf16->second).diff : Spread{};
      const double paper_full = paper::ablation_rows()[4].loss;
      const std::string setting = describe(traits[recipe]);
      t.rows.push_back({ctx.recipe_cell(recipe), {setting}, {role.member ? role.family : ""}, {std::to_string(sp.n)},
                        {sp.n > 1 ? fmt_loss(sp.mean) + " ± " + fmt::format("{:.4f}", sp.sd) : fmt_loss(sp.mean)},
                        {sp.n > 1 ? fmt::format("{:.3f}%", 100 * sp.sd / sp.mean) : "—"},
                        {role.anchor ? "(full)" : compared ? percent_with_interval(delta) : "—"},
                        {compared ? reading(delta, test) : ""}, {has_gap ? percent_with_interval(gap) : "—"},
                        {has_gap ? percent_with_interval(train_gap) : "—"},
                        {role.paper_row ? role.paper_row->label : ""},
                        {role.paper_row ? fmt::format("{:.5f}", role.paper_row->loss) : ""},
                        {role.paper_row ? fmt_percent(role.paper_row->loss / paper_full - 1) : ""}});
      csv.push_back({csv_field(grids_of(g)), csv_field(example->record.model),
                     std::to_string(example->record.n_params_nonembedding), std::to_string(example->record.tokens),
                     csv_field(recipe), csv_field(setting), csv_field(role.member ? role.family : ""),
                     std::to_string(sp.n), csv_number(sp.mean), csv_number(sp.sd), compared ? std::to_string(delta.n) : "",
                     compared ? csv_number(delta.mean) : "", compared ? csv_number(delta.lo) : "", compared ? csv_number(delta.hi) : "",
                     test != nullptr ? csv_number(test->p_holm) : "", compared ? csv_field(reading(delta, test)) : "",
                     has_gap ? csv_number(gap.mean) : "", has_gap ? csv_number(gap.lo) : "", has_gap ? csv_number(gap.hi) : "",
                     has_gap ? csv_number(train_gap.mean) : "", has_gap ? csv_number(train_gap.lo) : "",
                     has_gap ? csv_number(train_gap.hi) : "",
                     role.paper_row ? csv_field(role.paper_row->label) : "",
                     role.paper_row ? csv_number(role.paper_row->loss) : ""});
    }
    t.csv = "ablation.csv";
    s.blocks.push_back(std::move(t));
    double ss = 0;
    for (double v : rel_sds) ss += v * v;
    if (!rel_sds.empty())
      s.blocks.push_back(Note{{strong("Noise floor here: "),
                               text(fmt::format("the seed spread of the final loss is {:.3f}% (relative sample sd, root "
                                                "mean square over the {} recipes with two or more seeds). The paired "
                                                "differences beside it are tighter when the recipes' seeds move together.",
                                                100 * std::sqrt(ss / static_cast<double>(rel_sds.size())), rel_sds.size()))}});
    else
      s.blocks.push_back(Note{{strong("Noise floor unknown here: "),
                               text("one seed per recipe at this grid point, so no difference has an interval; SCIENCE.md "
                                    "puts the seed spread at about 0.2–0.3% of the loss at this scale.")}});
  }
  ctx.csv("ablation.csv", kCsvHeader, csv);
  return s;
}

}  // namespace fp4::reports
