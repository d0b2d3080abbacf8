// contrasts.cpp — see contrasts.h.
#include "fit/contrasts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "base/sha256.h"
#include "fit/stored_fit.h"
#include "fit/trend.h"
#include "store/store.h"

namespace fp4::fit {

using nlohmann::json;

namespace {

json without_seeds(json c) {
  if (c.is_object() && c.contains("train") && c["train"].is_object()) {
    json& t = c["train"];
    const bool same = t.contains("data_seed") && t.contains("seed") && t["data_seed"] == t["seed"];
    t.erase("seed");
    if (same) t.erase("data_seed");
  }
  return c;
}

// 25034752 → "25M", 1500000000 → "1.5B", 65536 → "65.5k": tokens as a point's label shows them
// (three significant digits: a label, not a count).
std::string compact_tokens(int64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return fmt::format("{:.3g}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.3g}k", v / 1e3);
  return std::to_string(n);
}

std::string contrast_name(const std::pair<std::string, std::string>& c) { return c.first + " - " + c.second; }

// A config as dotted paths to leaf values ("train.lr" → "0.0015").
void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out[prefix] = j.dump();
}

// The settings that differ between grid points (their comparison keys), sorted.
std::vector<std::string> varying_settings(const std::set<std::string>& point_keys) {
  std::vector<std::map<std::string, std::string>> flat;
  std::set<std::string> paths;
  for (const std::string& key : point_keys) {
    const json j = json::parse(key, nullptr, false);
    if (j.is_discarded()) continue;
    flat.emplace_back();
    flatten(j, "", flat.back());
    for (const auto& [path, v] : flat.back()) paths.insert(path);
  }
  std::vector<std::string> out;
  for (const std::string& path : paths) {
    std::set<std::string> values;
    for (const auto& f : flat) values.insert(f.count(path) ? f.at(path) : "(unset)");
    if (values.size() > 1) out.push_back(path);
  }
  return out;
}

}  // namespace

std::string replicate_key(const json& config) { return without_seeds(config).dump(); }

std::vector<const ContrastTest*> ContrastFamily::tests_on(const std::string& metric) const {
  std::vector<const ContrastTest*> out;
  for (const ContrastTest& t : tests)
    if (t.metric == metric) out.push_back(&t);
  return out;
}

std::string ContrastFamily::origin() const {
  const std::string on = metrics_declared
                             ? fmt::format("tested on {}, as declared", fmt::join(metrics, " and "))
                             : fmt::format("tested on {} ({})", fmt::join(metrics, " and "),
                                           declared ? "the table names no metrics: every metric, the default"
                                                    : "every metric, the default");
  return (declared ? "declared in the [compare] table; " : "a default family, declared nowhere; ") + on;
}

double ContrastTest::pairing_removed() const {
  const double unpaired = sd_recipe * sd_recipe + sd_against * sd_against;
  return unpaired > 0 ? 1 - t.sd * t.sd / unpaired : kNaN;
}

double ContrastTest::shared_sd() const {
  const double cov = correlation * sd_recipe * sd_against;
  return cov >= 0 ? std::sqrt(cov) : kNaN;
}

int64_t train_tail_steps(int64_t rows) { return std::min<int64_t>(1000, (rows + 9) / 10); }

TrainTail train_tail(const std::vector<store::MetricRow>& rows) {
  const int64_t k = train_tail_steps(static_cast<int64_t>(rows.size()));
  if (k == 0) return {};
  double sum = 0;
  for (size_t i = rows.size() - static_cast<size_t>(k); i < rows.size(); ++i) {
    if (rows[i].is_nan || !std::isfinite(rows[i].value)) return {};
    sum += rows[i].value;
  }
  return {sum / static_cast<double>(k), k};
}

std::string comparison_key(const json& config) {
  json c = without_seeds(config);
  if (c.is_object()) c.erase("recipe");
  return c.dump();
}

std::vector<ContrastRun> load_contrast_runs(const store::Store& store) {
  std::map<std::string, std::set<std::string>> grids_of_run;
  for (const store::StoredGrid& g : store.grids())
    for (const store::StoredGrid::Link& l : g.links) grids_of_run[l.run_id].insert(g.name);
  std::map<std::string, const store::FinalLossRecord*> final_of;
  const std::vector<store::FinalLossRecord> finals = store.final_losses();
  for (const store::FinalLossRecord& f : finals) final_of[f.id] = &f;

  std::vector<ContrastRun> out;
  std::map<std::string, std::set<std::string>> grids_of_point;
  for (const store::RunRecord& r : store.runs()) {
    ContrastRun c;
    c.id = r.id;
    c.recipe = r.recipe;
    c.model = r.model;
    c.baseline = r.baseline;
    c.n = r.n_params_nonembedding;
    c.tokens = r.tokens;
    c.seed = r.seed;
    const json config = json::parse(r.config_json, nullptr, /*allow_exceptions=*/false);
    c.point = comparison_key(config.is_discarded() ? json(r.id) : config);
    if (const auto f = final_of.find(r.id); f != final_of.end()) {
      const store::FinalLossRecord& fl = *f->second;
      c.finished = fl.state == store::RunState::succeeded && fl.final_step && !fl.final_is_nan &&
                   std::isfinite(fl.final_loss);
      if (c.finished) c.final_loss = fl.final_loss;
    }
    if (c.finished) {
      const TrainTail tail = train_tail(store.metrics(r.id, "train/loss"));
      c.train_tail = tail.mean;
      c.tail_steps = tail.steps;
    }
    const auto& grids = grids_of_run[r.id];
    grids_of_point[c.point].insert(grids.begin(), grids.end());
    out.push_back(std::move(c));
  }
  std::map<std::string, std::set<std::string>> points_of_label;
  for (ContrastRun& c : out) {
    const auto& grids = grids_of_point[c.point];
    c.point_label = fmt::format("{} {}", c.model, compact_tokens(c.tokens));
    if (!grids.empty()) c.point_label += fmt::format(" ({})", fmt::join(grids, ", "));
    points_of_label[c.point_label].insert(c.point);
  }
  // Two points that differ in another setting only (a learning rate) get their key's hash as well.
  for (ContrastRun& c : out)
    if (points_of_label[c.point_label].size() > 1) c.point_label += " #" + sha256_hex(c.point).substr(0, 8);
  return out;
}

FamilyRequest families_asked(const store::CompareTable& table, const std::string& file,
                             const std::vector<std::string>& main_recipes,
                             const std::map<std::string, std::string>& recipe_bases,
                             const std::vector<ContrastRun>& runs) {
  FamilyRequest r;
  if (table.present) {
    r.declared = true;
    r.source = "[compare] of " + file;
    r.families = table.families;
    r.primary = table.primary;
    for (const auto& c : table.primary) {
      bool named = false;
      for (const store::CompareFamily& f : r.families)
        named = named || std::find(f.contrasts.begin(), f.contrasts.end(), c) != f.contrasts.end();
      if (!named) r.families.insert(r.families.begin(), store::CompareFamily{contrast_name(c), {c}, {}});
    }
    return r;
  }
  std::set<std::string> present, quantized;
  for (const ContrastRun& c : runs) {
    present.insert(c.recipe);
    if (!c.baseline) quantized.insert(c.recipe);
  }
  std::vector<std::string> main;
  for (const std::string& q : quantized)
    if (main_recipes.empty() || std::find(main_recipes.begin(), main_recipes.end(), q) != main_recipes.end())
      main.push_back(q);
  for (size_t j = 0; j < main.size(); ++j)
    for (size_t i = 0; i < j; ++i) r.families.push_back({main[j] + " - " + main[i], {{main[j], main[i]}}, {}});
  store::CompareFamily variants{"variants against their base", {}, {}};
  for (const auto& [recipe, base] : recipe_bases)
    if (present.count(recipe) && present.count(base) && quantized.count(base)) variants.contrasts.emplace_back(recipe, base);
  if (!variants.contrasts.empty()) r.families.push_back(std::move(variants));
  r.source = fmt::format(
      "defaults (no [compare] table{}): one family per pair of the {} 4-bit recipes, each tested at every grid point "
      "with two or more paired seeds{}",
      file.empty() ? "" : " in " + file, main_recipes.empty() ? "store's" : "main grid's",
      recipe_bases.empty() ? "" : "; one family of every recipe declared with `base = X` against X");
  return r;
}

ContrastSet compute_contrasts(const std::vector<ContrastRun>& runs, const FamilyRequest& request, const std::string& grid) {
  ContrastSet set;
  set.grid = grid;
  set.source = request.source;
  set.fp4lab_version = FP4LAB_VERSION;

  // Runs by point; the points ordered by N, D and label.
  std::map<std::string, std::vector<const ContrastRun*>> by_point;
  for (const ContrastRun& r : runs) by_point[r.point].push_back(&r);
  std::vector<std::string> points;
  for (const auto& [key, rs] : by_point) points.push_back(key);
  std::sort(points.begin(), points.end(), [&](const std::string& a, const std::string& b) {
    const ContrastRun& x = *by_point[a][0];
    const ContrastRun& y = *by_point[b][0];
    return std::tie(x.n, x.tokens, x.point_label, a) < std::tie(y.n, y.tokens, y.point_label, b);
  });

  json hashed = {{"grid", grid}, {"families", json::array()}, {"primary", request.primary}, {"runs", json::array()}};
  for (const store::CompareFamily& f : request.families) {
    // Metrics only where the table names them: a family without `metrics` asks what it asked before.
    json family = {f.name, f.contrasts};
    if (!f.metrics.empty()) family.push_back(f.metrics);
    hashed["families"].push_back(std::move(family));
  }
  for (const ContrastRun& r : runs)
    hashed["runs"].push_back({r.id, r.recipe, r.point, r.seed, r.baseline, r.finished, r.finished ? r.final_loss : 0.0,
                              std::isnan(r.train_tail) ? 0.0 : r.train_tail, r.tail_steps});

  std::set<std::string> noted;
  for (const store::CompareFamily& asked : request.families) {
    ContrastFamily family{asked.name, asked.contrasts, {}, {}};
    family.declared = request.declared;
    family.metrics_declared = !asked.metrics.empty();
    if (family.metrics_declared) {
      // In kContrastMetrics' order, whatever order the table lists them in.
      family.metrics.clear();
      for (const char* m : store::kContrastMetrics)
        if (std::find(asked.metrics.begin(), asked.metrics.end(), m) != asked.metrics.end()) family.metrics.push_back(m);
    }
    for (const std::string& metric : family.metrics) {
      const bool eval = metric == "final_eval";
      // A point's untested reasons are the same on every metric: listed with the first one.
      const bool first_metric = metric == family.metrics.front();
      // The loss of a run on this metric, NaN when it has none.
      auto loss_of = [&](const ContrastRun& r) { return !r.finished ? kNaN : eval ? r.final_loss : r.train_tail; };
      const size_t first_test = family.tests.size();
      for (const auto& contrast : asked.contrasts) {
        // A primary contrast is primary on the primary metric: its train-tail tests are secondary
        // (the second study's plan: the primary endpoint is d on the final loss).
        const bool primary = eval && std::find(request.primary.begin(), request.primary.end(), contrast) !=
                                         request.primary.end();
        bool anywhere = false;
        std::vector<std::string> one_seed, unpaired;  // points with one pair, with none
        for (const std::string& key : points) {
          std::map<uint64_t, double> a, b;
          std::vector<const ContrastRun*> base;
          bool has_a = false, has_b = false;
          for (const ContrastRun* r : by_point[key]) {
            has_a = has_a || r->recipe == contrast.first;
            has_b = has_b || r->recipe == contrast.second;
            if (std::isnan(loss_of(*r))) continue;
            if (r->recipe == contrast.first) a[r->seed] = loss_of(*r);
            if (r->recipe == contrast.second) b[r->seed] = loss_of(*r);
            if (r->baseline) base.push_back(r);
          }
          if (!has_a || !has_b) continue;
          anywhere = true;
          const ContrastRun& first = *by_point[key][0];
          std::vector<uint64_t> seeds;
          for (const auto& [seed, loss] : a)
            if (b.count(seed)) seeds.push_back(seed);
          if (seeds.size() < 2) {
            if (first_metric) (seeds.empty() ? unpaired : one_seed).push_back(first.point_label);
            continue;
          }
          if (base.empty()) {
            const std::string note = fmt::format("{}: no finished baseline (bf16) run, so no d is normalised there",
                                                 first.point_label);
            if (noted.insert(note).second) set.notes.push_back(note);
            if (first_metric)
              family.untested.push_back(fmt::format("{} at {}: no baseline run", contrast_name(contrast), first.point_label));
            continue;
          }
          ContrastTest t;
          t.family = asked.name;
          t.recipe = contrast.first;
          t.against = contrast.second;
          t.primary = primary;
          t.metric = metric;
          t.point = first.point_label;
          t.model = first.model;
          t.n = first.n;
          t.tokens = first.tokens;
          std::set<std::string> base_recipes;
          std::set<uint64_t> base_seeds;
          double sum = 0;
          for (const ContrastRun* r : base) {
            base_recipes.insert(r->recipe);
            base_seeds.insert(r->seed);
            sum += loss_of(*r);
          }
          t.baseline = fmt::format("{}", fmt::join(base_recipes, "+"));
          t.baseline_seeds = static_cast<int64_t>(base.size());
          t.baseline_mean = sum / static_cast<double>(base.size());
          // As analysis.py: one scale for the point, d = scale · (L_A − L_B).
          const double scale = 100.0 / t.baseline_mean;
          std::vector<double> d;
          for (uint64_t s : seeds) {
            d.push_back(scale * (a[s] - b[s]));
            t.d.emplace_back(s, d.back());
            if (d.back() < 0) ++t.wins;
            if (!base_seeds.count(s)) ++t.missing_twins;
          }
          if (!eval)
            for (const ContrastRun* r : by_point[key])
              if (r->tail_steps > 0 && (r->recipe == contrast.first || r->recipe == contrast.second || r->baseline)) {
                t.tail_steps_min = t.tail_steps_min == 0 ? r->tail_steps : std::min(t.tail_steps_min, r->tail_steps);
                t.tail_steps_max = std::max(t.tail_steps_max, r->tail_steps);
              }
          t.t = paired_t(d);
          t.flip = sign_flip_p(d);
          std::vector<double> xa, xb;
          for (uint64_t seed : seeds) {
            xa.push_back(scale * a[seed]);
            xb.push_back(scale * b[seed]);
          }
          const MeanSpread ma = mean_spread(xa), mb = mean_spread(xb);
          double cov = 0;
          for (size_t i = 0; i < xa.size(); ++i) cov += (xa[i] - ma.mean) * (xb[i] - mb.mean);
          cov /= static_cast<double>(xa.size() - 1);
          t.sd_recipe = ma.sd;
          t.sd_against = mb.sd;
          t.correlation = ma.sd > 0 && mb.sd > 0 ? cov / (ma.sd * mb.sd) : kNaN;
          family.tests.push_back(std::move(t));
        }
        if (!anywhere && first_metric)
          family.untested.push_back(fmt::format("{}: no grid point has runs of both recipes", contrast_name(contrast)));
        if (!one_seed.empty())
          family.untested.push_back(fmt::format("{}: one paired seed (a test needs two) at {}", contrast_name(contrast),
                                                fmt::join(one_seed, ", ")));
        if (!unpaired.empty())
          family.untested.push_back(fmt::format("{}: no finished pair at {}", contrast_name(contrast),
                                                fmt::join(unpaired, ", ")));
      }
      // Holm within the family, one metric at a time (each metric asks the family's question once).
      std::vector<double> p;
      for (size_t i = first_test; i < family.tests.size(); ++i) p.push_back(family.tests[i].flip.p);
      const std::vector<double> adjusted = holm_adjust(p);
      for (size_t i = 0; i < adjusted.size(); ++i) family.tests[first_test + i].p_holm = adjusted[i];
    }
    set.families.push_back(std::move(family));
  }
  // What changes along the tested points besides the recipe and the seed: a trend with size is a
  // trend with all of it.
  std::set<std::string> tested_keys;
  for (const ContrastFamily& f : set.families)
    for (const ContrastTest& t : f.tests)
      for (const ContrastRun& r : runs)
        if (r.point_label == t.point) tested_keys.insert(r.point);
  const std::vector<std::string> varying = varying_settings(tested_keys);
  if (!varying.empty())
    set.notes.push_back(fmt::format("the tested grid points differ in {}: a trend across them is a trend in all of these "
                                    "together",
                                    fmt::join(varying, ", ")));
  set.input_hash = sha256_hex(hashed.dump());
  return set;
}

store::ContrastSetRecord to_record(const ContrastSet& set) {
  store::ContrastSetRecord r;
  r.grid = set.grid;
  r.input_hash = set.input_hash;
  r.source = set.source;
  json families = json::array();
  for (const ContrastFamily& f : set.families) {
    json u = {{"name", f.name},         {"contrasts", f.contrasts},           {"untested", f.untested},
              {"metrics", f.metrics},   {"metrics_declared", f.metrics_declared}, {"declared", f.declared}};
    families.push_back(std::move(u));
  }
  r.families_json = families.dump();
  r.notes_json = json(set.notes).dump();
  r.fp4lab_version = set.fp4lab_version;
  r.created = set.created;
  for (const ContrastFamily& f : set.families)
    for (const ContrastTest& t : f.tests) {
      store::ContrastRecord c;
      c.family = f.name;
      c.primary = t.primary;
      c.recipe = t.recipe;
      c.against = t.against;
      c.baseline = t.baseline;
      c.metric = t.metric;
      c.point = t.point;
      c.model = t.model;
      c.n_params_nonembedding = t.n;
      c.tokens = t.tokens;
      c.seeds = t.t.n;
      c.wins = t.wins;
      c.baseline_seeds = t.baseline_seeds;
      c.missing_twins = t.missing_twins;
      c.baseline_mean = t.baseline_mean;
      c.mean_pp = t.t.mean;
      c.sd_pp = t.t.sd;
      c.se_pp = t.t.se;
      c.lo_pp = t.t.ci.lo;
      c.hi_pp = t.t.ci.hi;
      c.p_t = t.t.p;
      c.p_sign_flip = t.flip.p;
      c.sign_flip_method = t.flip.method();
      c.p_holm = t.p_holm;
      c.d_json = json(t.d).dump();
      c.sd_recipe_pp = t.sd_recipe;
      c.sd_against_pp = t.sd_against;
      c.correlation = t.correlation;
      r.contrasts.push_back(std::move(c));
    }
  return r;
}

ContrastSet from_record(const store::ContrastSetRecord& r) {
  ContrastSet set;
  set.id = r.id;
  set.grid = r.grid;
  set.input_hash = r.input_hash;
  set.source = r.source;
  set.fp4lab_version = r.fp4lab_version;
  set.created = r.created;
  // A set stored before families said whether they were declared: declared exactly when its
  // families came from a [compare] table (families_asked's source says so).
  const bool from_compare_table = r.source.rfind("[compare]", 0) == 0;
  const json notes = json::parse(r.notes_json, nullptr, false);
  if (notes.is_array())
    for (const json& n : notes)
      if (n.is_string()) set.notes.push_back(n);
  const json families = json::parse(r.families_json, nullptr, false);
  if (families.is_array())
    for (const json& f : families) {
      ContrastFamily family;
      family.name = f.value("name", "");
      if (f.contains("contrasts") && f["contrasts"].is_array())
        for (const json& c : f["contrasts"])
          if (c.is_array() && c.size() == 2) family.contrasts.emplace_back(c[0].get<std::string>(), c[1].get<std::string>());
      if (f.contains("untested") && f["untested"].is_array())
        for (const json& u : f["untested"])
          if (u.is_string()) family.untested.push_back(u);
      // A set stored before families named their metrics tested every family on every metric.
      if (f.contains("metrics") && f["metrics"].is_array() && !f["metrics"].empty()) {
        family.metrics.clear();
        for (const json& m : f["metrics"])
          if (m.is_string()) family.metrics.push_back(m);
      }
      family.metrics_declared = f.value("metrics_declared", false);
      family.declared = f.value("declared", from_compare_table);
      set.families.push_back(std::move(family));
    }
  for (const store::ContrastRecord& c : r.contrasts) {
    ContrastTest t;
    t.family = c.family;
    t.primary = c.primary;
    t.recipe = c.recipe;
    t.against = c.against;
    t.baseline = c.baseline;
    t.metric = c.metric;
    t.point = c.point;
    t.model = c.model;
    t.n = c.n_params_nonembedding;
    t.tokens = c.tokens;
    t.baseline_seeds = c.baseline_seeds;
    t.missing_twins = c.missing_twins;
    t.baseline_mean = c.baseline_mean;
    const json d = json::parse(c.d_json, nullptr, false);
    if (d.is_array())
      for (const json& p : d)
        if (p.is_array() && p.size() == 2) t.d.emplace_back(p[0].get<uint64_t>(), p[1].get<double>());
    t.wins = c.wins;
    t.t.n = c.seeds;
    t.t.mean = c.mean_pp;
    t.t.sd = c.sd_pp;
    t.t.se = c.se_pp;
    t.t.ci = {c.lo_pp, c.hi_pp};
    t.t.p = c.p_t;
    t.flip.p = c.p_sign_flip;
    t.flip.n = static_cast<int>(c.seeds);
    t.flip.exact = c.sign_flip_method.rfind("exact", 0) == 0;
    t.p_holm = c.p_holm;
    t.sd_recipe = c.sd_recipe_pp;
    t.sd_against = c.sd_against_pp;
    t.correlation = c.correlation;
    auto family = std::find_if(set.families.begin(), set.families.end(),
                               [&](const ContrastFamily& f) { return f.name == c.family; });
    if (family == set.families.end()) {
      set.families.push_back({c.family, {}, {}, {}});
      set.families.back().declared = from_compare_table;
      family = set.families.end() - 1;
    }
    family->tests.push_back(std::move(t));
  }
  return set;
}

std::optional<ContrastSet> latest_contrast_set(const store::Store& store, const std::string& grid) {
  std::optional<ContrastSet> out;
  for (const store::ContrastSetRecord& r : store.contrast_sets())
    if (r.grid == grid) out = from_record(r);
  return out;
}

namespace {

std::string fmt_p(double p) { return std::isnan(p) ? "-" : p >= 1e-4 ? fmt::format("{:.4f}", p) : fmt::format("{:.1e}", p); }
std::string fmt_pp(double v) { return std::isnan(v) ? "-" : fmt::format("{:+.3f}", v); }

}  // namespace

std::string metric_in_words(const std::string& metric) {
  if (metric == "final_eval") return "the final validation loss (final_eval, the primary metric)";
  if (metric == "train_tail")
    return "the mean train loss of the last tenth of the logged steps, at most 1000 (train_tail, the paper's metric)";
  return metric;
}

std::string holm_set_in_words(size_t tests) {
  if (tests == 0) return "no test (no grid point with two or more paired seeds)";
  if (tests == 1) return "1 test, its own Holm set (Holm p = sign-flip p)";
  return fmt::format("{} tests, Holm over these {}", tests, tests);
}

std::string declared_in_words(const ContrastSet& set) {
  bool declared = false;
  for (const ContrastFamily& f : set.families) declared = declared || f.declared;
  if (set.families.empty() || !declared)
    return "none. Every family below is one of fp4lab's defaults, tested on every metric; a "
           "[compare] table in the study's TOML declares the families and metrics to test instead";
  return "the families below as the [compare] table names them, on the metrics it names (a family "
         "without `metrics` is tested on every metric, the default); no other test is made";
}

Trend contrast_trend(const ContrastFamily& family, const std::pair<std::string, std::string>& contrast,
                     const std::string& metric) {
  std::vector<TrendPoint> points;
  for (const ContrastTest& t : family.tests) {
    if (t.metric != metric || t.recipe != contrast.first || t.against != contrast.second) continue;
    // A size is one model (one N): its points at several token counts are resampled and left out together.
    TrendPoint p{t.point, std::log10(6.0 * static_cast<double>(t.n) * static_cast<double>(t.tokens)), {}, t.model};
    for (const auto& [seed, d] : t.d) p.values.push_back(d);
    points.push_back(std::move(p));
  }
  std::set<double> xs;
  for (const TrendPoint& p : points) xs.insert(p.x);
  if (xs.size() < 2) return Trend{};
  return fit_trend(points, kTrendReplicates, 0);
}

json contrast_set_json(const ContrastSet& set) {
  json families = json::array();
  for (const ContrastFamily& f : set.families) {
    json tests = json::array();
    for (const ContrastTest& t : f.tests) {
      json d = json::array();
      for (const auto& [seed, v] : t.d) d.push_back({seed, number_or_null(v)});
      tests.push_back({{"recipe", t.recipe},
                       {"against", t.against},
                       {"baseline", t.baseline},
                       {"primary", t.primary},
                       {"metric", t.metric},
                       {"point", t.point},
                       {"model", t.model},
                       {"n_params_nonembedding", t.n},
                       {"tokens", t.tokens},
                       {"seeds", t.t.n},
                       {"wins", t.wins},
                       {"baseline_seeds", t.baseline_seeds},
                       {"missing_twins", t.missing_twins},
                       {"baseline_mean", number_or_null(t.baseline_mean)},
                       {"mean_pp", number_or_null(t.t.mean)},
                       {"sd_pp", number_or_null(t.t.sd)},
                       {"se_pp", number_or_null(t.t.se)},
                       {"lo_pp", number_or_null(t.t.ci.lo)},
                       {"hi_pp", number_or_null(t.t.ci.hi)},
                       {"p_t", number_or_null(t.t.p)},
                       {"p_sign_flip", number_or_null(t.flip.p)},
                       {"sign_flip_method", t.flip.method()},
                       {"p_holm", number_or_null(t.p_holm)},
                       {"d", std::move(d)},
                       {"sd_recipe_pp", number_or_null(t.sd_recipe)},
                       {"sd_against_pp", number_or_null(t.sd_against)},
                       {"correlation", number_or_null(t.correlation)},
                       {"shared_sd_pp", number_or_null(t.shared_sd())},
                       {"pairing_removed", number_or_null(t.pairing_removed())}});
    }
    json trends = json::array();
    for (const auto& c : f.contrasts)
      for (const std::string& metric : f.metrics) {
        const Trend tr = contrast_trend(f, c, metric);
        if (tr.points < 2) continue;
        json loo = json::array();
        for (const LeaveOneOut& l : tr.leave_one_size_out)
          loo.push_back({{"without", l.label}, {"slope_pp", number_or_null(l.slope)}});
        trends.push_back({{"recipe", c.first},
                          {"against", c.second},
                          {"metric", metric},
                          {"points", tr.points},
                          {"slope_pp", number_or_null(tr.weighted.slope)},
                          {"lo_pp", number_or_null(tr.weighted.ci.lo)},
                          {"hi_pp", number_or_null(tr.weighted.ci.hi)},
                          {"sizes", tr.sizes},
                          {"unweighted_slope_pp", number_or_null(tr.unweighted_slope)},
                          {"seed_bootstrap_pp", {number_or_null(tr.seed_bootstrap.lo), number_or_null(tr.seed_bootstrap.hi)}},
                          {"size_bootstrap_pp", {number_or_null(tr.size_bootstrap.lo), number_or_null(tr.size_bootstrap.hi)}},
                          {"size_replicates_dropped", tr.size_replicates_dropped},
                          {"leave_one_size_out", std::move(loo)}});
      }
    families.push_back({{"name", f.name},
                        {"contrasts", f.contrasts},
                        {"metrics", f.metrics},
                        {"metrics_declared", f.metrics_declared},
                        {"declared", f.declared},
                        {"tests", std::move(tests)},
                        {"trends", std::move(trends)},
                        {"untested", f.untested}});
  }
  return {{"id", set.id},
          {"grid", set.grid},
          {"input_hash", set.input_hash},
          {"source", set.source},
          {"fp4lab_version", set.fp4lab_version},
          {"created", set.created},
          {"families", std::move(families)},
          {"notes", set.notes}};
}

std::string format_contrasts_table(const ContrastSet& set) {
  std::string out = "paired contrasts over seeds: d = (L_A - L_B) / mean L_bf16 of the grid point, in percentage points, "
                    "runs of A and B paired by seed; negative: A closer to bf16 (docs/statistics.md)\n";
  out += "  families: " + set.source + "\n";
  out += "  declared tests: " + declared_in_words(set) + "\n";
  out += "  each test: mean d with its 95% Student-t interval over the seeds, the paired t-test, the exact sign-flip "
         "test, and the sign-flip p Holm-adjusted over its family's tests on the same metric; significant: Holm p < "
         "0.05\n";
  if (set.families.empty())
    out += "  no family: fewer than two 4-bit recipes, and no recipe declared with `base = X`: nothing to compare\n";
  for (const ContrastFamily& f : set.families) {
    std::vector<std::string> names;
    for (const auto& c : f.contrasts) names.push_back(contrast_name(c));
    out += fmt::format("  family \"{}\" ({}): {}\n", f.name, fmt::join(names, ", "), f.origin());
    for (const std::string& metric : f.metrics) {
      const std::vector<const ContrastTest*> tests = f.tests_on(metric);
      out += fmt::format("    on {}: {}\n", metric_in_words(metric), holm_set_in_words(tests.size()));
      if (tests.empty()) continue;
      out += fmt::format("    {:<28} {:<44} {:>5} {:>5} {:>8} {:<20} {:>8} {:>8} {:>8}  {}\n", "A - B", "grid point",
                         "seeds", "wins", "mean d", "95% t interval", "p t", "p flip", "p Holm", "reading");
      for (const ContrastTest* tp : tests) {
        const ContrastTest& t = *tp;
        const bool significant = t.p_holm < 0.05;
        std::string reading = significant ? (t.t.mean < 0 ? t.recipe + " closer (significant)" : t.against + " closer (significant)")
                                          : "not significant after Holm";
        if (t.primary) reading += "; primary";
        if (t.missing_twins > 0)
          reading += fmt::format("; {} of {} seeds have no {} twin: every d is normalised by the mean of the point's {} "
                                 "{} run(s)",
                                 t.missing_twins, t.t.n, t.baseline, t.baseline_seeds, t.baseline);
        out += fmt::format("    {:<28} {:<44} {:>5} {:>5} {:>8} {:<20} {:>8} {:>8} {:>8}  {}\n",
                           (t.primary ? "* " : "") + t.recipe + " - " + t.against, t.point, t.t.n, t.wins, fmt_pp(t.t.mean),
                           fmt::format("[{}, {}]", fmt_pp(t.t.ci.lo), fmt_pp(t.t.ci.hi)), fmt_p(t.t.p), fmt_p(t.flip.p),
                           fmt_p(t.p_holm), reading);
      }
    }
    for (const std::string& u : f.untested) out += "    not tested: " + u + "\n";
    bool decomposition = false;
    for (const ContrastTest& t : f.tests) {
      if (t.metric != "final_eval" || t.t.n < 3) continue;
      if (!decomposition)
        out += fmt::format("    variance over the seeds (final eval, pp of the bf16 mean; points with 3 seeds or more): "
                           "each recipe's seed sd, their correlation, the seed-shared sd √cov, the sd of d, and the "
                           "share of the unpaired variance that pairing removes\n"
                           "      {:<28} {:<44} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7}\n",
                           "A - B", "grid point", "sd A", "sd B", "corr", "shared", "sd d", "removed");
      decomposition = true;
      out += fmt::format("      {:<28} {:<44} {:>7.3f} {:>7.3f} {:>+6.2f} {:>8} {:>7.3f} {:>6.0f}%\n",
                         t.recipe + " - " + t.against, t.point, t.sd_recipe, t.sd_against, t.correlation,
                         std::isnan(t.shared_sd()) ? std::string("-") : fmt::format("{:.3f}", t.shared_sd()), t.t.sd,
                         100 * t.pairing_removed());
    }
    // On each metric the family is tested on: the final eval loss, and the paper's train tail beside it.
    for (const auto& c : f.contrasts)
      for (const std::string& metric : f.metrics) {
        const Trend tr = contrast_trend(f, c, metric);
        if (tr.points < 2 || std::isnan(tr.weighted.slope)) continue;
        out += fmt::format("    trend of {} with compute ({}, {} points of {} sizes): weighted {} pp per tenfold C, "
                         "95% [{}, {}] (weights 1/se² from each point's seeds); unweighted {}; seed bootstrap [{}, {}]; "
                         "cluster bootstrap over the sizes {} ({} resamples with one x dropped)\n",
                         contrast_name(c), metric == "final_eval" ? "final eval" : "train tail", tr.points, tr.sizes,
                         fmt_pp(tr.weighted.slope), fmt_pp(tr.weighted.ci.lo),
                         fmt_pp(tr.weighted.ci.hi), fmt_pp(tr.unweighted_slope), fmt_pp(tr.seed_bootstrap.lo),
                         fmt_pp(tr.seed_bootstrap.hi), size_bootstrap_text(tr, [](double v) { return fmt_pp(v); }),
                         tr.size_replicates_dropped);
        for (const LeaveOneOut& l : tr.leave_one_size_out)
          out += fmt::format("      without size {}: weighted {} pp per tenfold C\n", l.label, fmt_pp(l.slope));
      }
  }
  for (const std::string& n : set.notes) out += "  note: " + n + "\n";
  if (!set.families.empty())
    out += "  (* primary contrast; a sign-flip p is exact up to 20 seeds: with n seeds it cannot fall below 2/2^n)\n";
  return out;
}

}  // namespace fp4::fit
