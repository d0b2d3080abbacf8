// study.cpp — see study.h.
#include "reports/study.h"

#include "reports/recipe_traits.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <stdexcept>

namespace fp4::reports {

namespace {

nlohmann::json parse_json_or(const std::string& text, nlohmann::json fallback) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

std::vector<StudyGrid> read_grids(const store::Store& store) {
  std::vector<StudyGrid> grids;
  for (store::StoredGrid& sg : store.grids()) {
    StudyGrid g;
    g.id = sg.id;
    g.name = std::move(sg.name);
    g.file = std::move(sg.file);
    g.base_dir = std::move(sg.base_dir);
    g.run_root = std::move(sg.run_root);
    g.axis_names = std::move(sg.axis_names);
    g.fit = std::move(sg.fit);
    g.text = std::move(sg.text);
    g.text_hash = std::move(sg.text_hash);
    g.created = sg.created;
    for (const store::StoredGrid::Link& link : sg.links) {
      ++g.runs;
      g.run_ids.push_back(link.run_id);
      if (!link.axes.is_object()) continue;
      for (const auto& [axis, value] : link.axes.items()) {
        const std::string v = value.is_string() ? value.get<std::string>() : value.dump();
        auto& values = g.axis_values[axis];
        if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
      }
    }
    grids.push_back(std::move(g));
  }
  return grids;
}

int64_t probe_every_of(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("probe") || !config["probe"].is_object()) return 0;
  const auto& every = config["probe"]["every"];
  return every.is_number_integer() ? every.get<int64_t>() : 0;
}

}  // namespace

const StudyRun* Study::run(const std::string& id) const {
  for (const StudyRun& r : runs)
    if (r.record.id == id) return &r;
  return nullptr;
}

std::vector<std::string> Study::recipes() const {
  std::set<std::string> s;
  for (const StudyRun& r : runs) s.insert(r.record.recipe);
  for (const UnrecordedPoint& p : unrecorded) s.insert(p.recipe);
  return {s.begin(), s.end()};
}

std::vector<const StudyRun*> Study::main_runs() const {
  std::vector<const StudyRun*> out;
  for (const StudyRun& r : runs)
    if (in_main(r)) out.push_back(&r);
  return out;
}

std::vector<const StudyRun*> Study::replicates(const StudyRun& r) const {
  std::vector<const StudyRun*> out;
  for (const StudyRun& o : runs)
    if (o.replicate_key == r.replicate_key) out.push_back(&o);
  std::stable_sort(out.begin(), out.end(), [](const StudyRun* a, const StudyRun* b) { return a->record.seed < b->record.seed; });
  return out;
}

std::map<std::string, PointFacts> Study::points() const {
  std::map<std::string, PointFacts> out;
  for (const StudyRun& r : runs)
    out[r.record.id] = {r.record.id, r.record.name, r.record.recipe, r.record.model, r.recipe, r.probe_every,
                        r.record.seed, r.replicate_key, r.comparison_key, &r};
  for (const UnrecordedPoint& u : unrecorded)
    out.emplace(u.id, PointFacts{u.id, u.name, u.recipe, u.model, u.recipe_json, u.probe_every, u.seed,
                                 u.replicate_key, u.comparison_key, nullptr});
  return out;
}

std::vector<const DeclaredGrid*> Study::grids_with(bool DeclaredGrid::*flag) const {
  std::vector<const DeclaredGrid*> out;
  for (const DeclaredGrid& g : declared)
    if (g.*flag) out.push_back(&g);
  return out;
}

namespace {

// What each declared grid brings to the report, from its points' configs.
void mark_grids(Study& st) {
  const std::map<std::string, PointFacts> facts = st.points();
  std::map<std::string, std::set<std::string>> main_keys;  // replicate key → main ids
  for (const std::string& id : st.main_ids)
    if (const auto f = facts.find(id); f != facts.end()) main_keys[f->second.replicate_key].insert(id);
  for (DeclaredGrid& g : st.declared) {
    std::map<std::string, int> per_key;
    for (const std::string& id : g.ids) {
      const auto f = facts.find(id);
      if (f == facts.end()) continue;
      const PointFacts& p = f->second;
      if (++per_key[p.replicate_key] == 2) g.noise_floor = true;
      if (!g.main)
        if (const auto m = main_keys.find(p.replicate_key); m != main_keys.end() && !m->second.count(id))
          g.seeds_of_main = true;
      const AblationRole role = ablation_role(recipe_traits(p.recipe_json));
      g.ablation = g.ablation || (role.member && !role.anchor);
      g.probes = g.probes || p.probe_every > 0;
    }
  }
}

// The root of the git work tree holding `file` (a directory with a .git entry: a directory, or the
// file a worktree or submodule has); empty when there is none.
std::filesystem::path work_tree_of(const std::filesystem::path& file) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(file, ec).lexically_normal().parent_path();
  if (ec) return {};
  for (;;) {
    if (std::filesystem::exists(dir / ".git", ec)) return dir;
    if (!dir.has_relative_path()) return {};
    dir = dir.parent_path();
  }
}

}  // namespace

std::string display_path(const std::string& path, const std::filesystem::path& repo_root) {
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (ec || path.empty()) return path;
  std::filesystem::path p(path);
  if (p.is_relative()) {
    if (!std::filesystem::exists(p, ec)) return path;
    p = cwd / p;
  }
  p = p.lexically_normal();
  const auto inside = [&](const std::filesystem::path& dir) -> std::optional<std::string> {
    if (dir.empty()) return std::nullopt;
    const std::filesystem::path rel = p.lexically_relative(dir);
    if (rel.empty() || *rel.begin() == "..") return std::nullopt;
    return rel.string();
  };
  if (const auto rel = inside(repo_root)) return *rel;
  if (const auto rel = inside(cwd)) return *rel;
  return path;
}

Study load_study(const store::Store* store, const store::DeclaredStudy* declared) {
  Study st;
  const store::GridRecord* spec = declared != nullptr ? &declared->main : nullptr;
  if (spec != nullptr) {
    st.name = spec->name;
    st.spec_file = spec->file;
    st.unreadable_specs = declared->unreadable;
    st.entropy_rates = declared->entropy_rates;
  }
  if (spec != nullptr) st.repo_root = work_tree_of(spec->file);
  else if (store != nullptr) st.repo_root = work_tree_of(store->path());
  if (store != nullptr) st.store_display = display_path(store->path().string(), st.repo_root);
  if (store != nullptr) {
    st.store_path = store->path();
    st.schema_version = store->schema_version();
    st.grids = read_grids(*store);
    for (StudyGrid& g : st.grids) g.file = display_path(g.file, st.repo_root);
    std::map<std::string, std::vector<std::string>> grids_of_run;  // by grid id
    for (const StudyGrid& g : st.grids)
      for (const std::string& id : g.run_ids) {
        auto& names = grids_of_run[id];
        if (std::find(names.begin(), names.end(), g.name) == names.end()) names.push_back(g.name);
      }
    for (store::RunRecord& rec : store->runs()) {
      StudyRun r;
      const nlohmann::json config = parse_json_or(rec.config_json, nlohmann::json::object());
      if (config.is_object()) {
        if (config.contains("train") && config["train"].is_object()) {
          r.steps = config["train"].value("steps", int64_t{0});
          r.batch_tokens = config["train"].value("batch_tokens", int64_t{0});
        }
        if (config.contains("data") && config["data"].is_string()) r.data_source = config["data"].get<std::string>();
        if (config.contains("recipe")) r.recipe = config["recipe"];
      }
      r.probe_every = probe_every_of(config);
      r.replicate_key = replicate_key(config);
      r.comparison_key = comparison_key(config);
      r.grids = grids_of_run[rec.id];
      r.record = std::move(rec);
      st.runs.push_back(std::move(r));
    }
    {
      std::map<std::string, StudyRun*> by_id;
      for (StudyRun& r : st.runs) by_id[r.record.id] = &r;
      for (const store::FinalLossRecord& f : store->final_losses()) {
        const auto it = by_id.find(f.id);
        if (it == by_id.end() || !f.final_step) continue;
        StudyRun& r = *it->second;
        r.final_step = *f.final_step;
        r.final_is_nan = f.final_is_nan;
        if (!r.final_is_nan && std::isfinite(f.final_loss)) r.final_loss = f.final_loss;
      }
    }
    st.curves = store->curves();
    st.gaps = store->bf16_gaps();
    st.probes = store->probes();
    st.probe_gemms = store->probe_gemms();
    for (const StudyRun& r : st.runs)
      for (auto& a : store->attempts(r.record.id)) st.attempts.push_back(std::move(a));
    std::sort(st.attempts.begin(), st.attempts.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    // A fit row that cannot be read costs the fitted sections, not the report.
    try {
      st.fits = fit::read_all_fits(*store);
    } catch (const std::exception& e) {
      st.fits_error = e.what();
    }
    if (declared != nullptr) {
      st.contrasts = fit::latest_contrast_set(*store, declared->main.name);
    } else {
      const std::vector<store::ContrastSetRecord> sets = store->contrast_sets();
      if (!sets.empty()) st.contrasts = fit::from_record(sets.back());
    }
  }
  if (st.name.empty() && !st.grids.empty()) st.name = st.grids.front().name;
  if (st.name.empty() && !st.store_path.empty()) st.name = st.store_path.stem().string();
  // The study's grids: its TOMLs (the main one first), else the grids the store recorded.
  std::vector<const store::GridRecord*> all_specs;
  if (spec != nullptr) all_specs.push_back(spec);
  if (declared != nullptr)
    for (const store::GridRecord& o : declared->others) all_specs.push_back(&o);
  std::set<std::string> known;
  for (const StudyRun& r : st.runs) known.insert(r.record.id);
  for (const store::GridRecord* s : all_specs) {
    DeclaredGrid g;
    g.name = s->name;
    g.file = display_path(s->file.string(), st.repo_root);
    g.main = s == spec;
    g.text_hash = s->text_hash;
    for (const store::GridPointRecord& p : s->points) {
      g.ids.push_back(p.id);
      if (known.insert(p.id).second) {
        const nlohmann::json config = parse_json_or(p.config_json, nlohmann::json::object());
        UnrecordedPoint u;
        u.id = p.id;
        u.name = p.name;
        u.recipe = p.recipe;
        u.model = p.model;
        u.grid = s->name;
        u.n_params_nonembedding = p.n_params_nonembedding;
        u.tokens = p.tokens;
        u.seed = p.seed;
        if (config.is_object() && config.contains("recipe")) u.recipe_json = config["recipe"];
        u.probe_every = probe_every_of(config);
        u.replicate_key = replicate_key(config);
        u.comparison_key = comparison_key(config);
        st.unrecorded.push_back(std::move(u));
      }
    }
    st.declared.push_back(std::move(g));
  }
  if (all_specs.empty()) {
    for (const StudyGrid& sg : st.grids) {
      DeclaredGrid g;
      g.name = sg.name;
      g.file = sg.file;
      g.text_hash = sg.text_hash;
      g.ids = sg.run_ids;
      g.main = !sg.fit.empty() && !sg.fit.is_null();
      st.declared.push_back(std::move(g));
    }
    const bool any_main = std::any_of(st.declared.begin(), st.declared.end(), [](const DeclaredGrid& g) { return g.main; });
    if (!any_main)
      for (DeclaredGrid& g : st.declared) g.main = true;
  }
  std::vector<std::string> main_names;
  for (const DeclaredGrid& g : st.declared)
    if (g.main) {
      st.main_ids.insert(g.ids.begin(), g.ids.end());
      if (std::find(main_names.begin(), main_names.end(), g.name + " (" + g.file + ")") == main_names.end())
        main_names.push_back(g.name + " (" + g.file + ")");
    }
  if (spec == nullptr && st.grids.empty())  // an empty store: no grid to restrict to
    for (const StudyRun& r : st.runs) st.main_ids.insert(r.record.id);
  for (const std::string& n : main_names) st.main_label += (st.main_label.empty() ? "" : ", ") + n;
  mark_grids(st);
  return st;
}

}  // namespace fp4::reports
