// study.cpp — see study.h. The SQL here reads the tables and views docs/sweeps.md documents;
// what the Store API already offers (runs, attempts) is read through it.
#include "reports/study.h"

#include "reports/recipe_traits.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

namespace fp4::reports {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One read-only query on the store's connection, stepped row by row.
class Query {
 public:
  Query(const sweeps::Store& store, const char* sql) : store_(store) {
    if (sqlite3_prepare_v2(store.handle(), sql, -1, &stmt_, nullptr) != SQLITE_OK) fail("preparing a query");
  }
  ~Query() { sqlite3_finalize(stmt_); }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  bool next() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("reading");
    return false;
  }
  std::string text(int c) const {
    const auto* t = sqlite3_column_text(stmt_, c);
    return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(stmt_, c))) : "";
  }
  int64_t integer(int c) const { return sqlite3_column_int64(stmt_, c); }
  double real(int c) const { return sqlite3_column_type(stmt_, c) == SQLITE_NULL ? kNaN : sqlite3_column_double(stmt_, c); }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(store_.path().string() + ": " + what + ": " + sqlite3_errmsg(store_.handle()));
  }
  const sweeps::Store& store_;
  sqlite3_stmt* stmt_ = nullptr;
};

nlohmann::json parse_json_or(const std::string& text, nlohmann::json fallback) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

std::vector<StudyGrid> read_grids(const sweeps::Store& store) {
  std::vector<StudyGrid> grids;
  Query q(store, "SELECT id, name, file, base_dir, run_root, axis_names, fit_json, text, text_hash, created "
                 "FROM grids ORDER BY id");
  while (q.next()) {
    StudyGrid g;
    g.id = q.integer(0);
    g.name = q.text(1);
    g.file = q.text(2);
    g.base_dir = q.text(3);
    g.run_root = q.text(4);
    const nlohmann::json axes = parse_json_or(q.text(5), nlohmann::json::array());
    for (const auto& a : axes)
      if (a.is_string()) g.axis_names.push_back(a.get<std::string>());
    g.fit = parse_json_or(q.text(6), nlohmann::json::object());
    g.text = q.text(7);
    g.text_hash = q.text(8);
    g.created = q.real(9);
    grids.push_back(std::move(g));
  }
  Query links(store, "SELECT grid, run, axes_json FROM grid_runs ORDER BY grid, position");
  while (links.next()) {
    const int64_t id = links.integer(0);
    auto it = std::find_if(grids.begin(), grids.end(), [&](const StudyGrid& g) { return g.id == id; });
    if (it == grids.end()) continue;
    ++it->runs;
    it->run_ids.push_back(links.text(1));
    const nlohmann::json axes = parse_json_or(links.text(2), nlohmann::json::object());
    if (!axes.is_object()) continue;
    for (const auto& [axis, value] : axes.items()) {
      const std::string v = value.is_string() ? value.get<std::string>() : value.dump();
      auto& values = it->axis_values[axis];
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
  }
  return grids;
}

// The data fingerprint the trainer reported in its first `run` row (docs/train.md), read from the
// head of the run directory's metrics.jsonl; "" when the directory or the row is not there.
std::string reported_fingerprint(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "metrics.jsonl", std::ios::binary);
  if (!in) return "";
  std::string line;
  for (int k = 0; k < 8 && std::getline(in, line); ++k) {  // the run row comes first; look a little further
    const nlohmann::json row = parse_json_or(line, nullptr);
    if (row.is_object() && row.value("kind", "") == "run" && row.contains("data_fingerprint") &&
        row["data_fingerprint"].is_string())
      return row["data_fingerprint"].get<std::string>();
  }
  return "";
}

nlohmann::json without_seeds(nlohmann::json c) {
  if (c.is_object() && c.contains("train") && c["train"].is_object()) {
    nlohmann::json& t = c["train"];
    const bool same = t.contains("data_seed") && t.contains("seed") && t["data_seed"] == t["seed"];
    t.erase("seed");
    if (same) t.erase("data_seed");
  }
  return c;
}

int64_t probe_every_of(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("probe") || !config["probe"].is_object()) return 0;
  const auto& every = config["probe"]["every"];
  return every.is_number_integer() ? every.get<int64_t>() : 0;
}

// The same file, however it was named (one of them may not exist yet).
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb ? ca == cb : a.lexically_normal() == b.lexically_normal();
}

}  // namespace

std::string replicate_key(const nlohmann::json& config) { return without_seeds(config).dump(); }

std::string comparison_key(const nlohmann::json& config) {
  nlohmann::json c = without_seeds(config);
  if (c.is_object()) c.erase("recipe");
  return c.dump();
}

StudySpecs find_study_specs(const sweeps::SweepSpec* main) {
  StudySpecs out;
  out.main = main;
  if (main == nullptr) return out;
  // Named as the main TOML is: "results/first-study/ablation.toml" beside "results/first-study/study.toml".
  const std::filesystem::path dir = main->file.parent_path();
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::filesystem::path file = dir / e.path().filename();
    if (file.extension() == ".toml" && e.is_regular_file(ec) && !same_file(file, main->file)) files.push_back(file);
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      sweeps::SweepSpec s = sweeps::load_sweep_spec(f);
      if (same_file(s.store, main->store)) out.others.push_back(std::move(s));
    } catch (const std::exception& e) {
      out.unreadable.push_back(e.what());
    }
  }
  return out;
}

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

}  // namespace

Study load_study(const sweeps::Store* store, const StudySpecs& specs) {
  Study st;
  const sweeps::SweepSpec* spec = specs.main;
  if (spec != nullptr) {
    st.name = spec->name;
    st.spec_file = spec->file;
  }
  st.unreadable_specs = specs.unreadable;
  if (store != nullptr) {
    st.store_path = store->path();
    st.store_display = st.store_path.string();
    std::error_code ec;
    const auto abs = std::filesystem::absolute(st.store_path, ec);
    const auto cwd = std::filesystem::current_path(ec);
    if (!ec) {
      const auto rel = abs.lexically_normal().lexically_relative(cwd);
      if (!rel.empty() && *rel.begin() != "..") st.store_display = rel.string();
    }
    st.schema_version = store->schema_version();
    st.grids = read_grids(*store);
    std::map<std::string, std::vector<std::string>> grids_of_run;
    {
      Query q(*store, "SELECT gr.run, g.name FROM grid_runs AS gr JOIN grids AS g ON g.id = gr.grid ORDER BY g.id");
      while (q.next()) {
        auto& names = grids_of_run[q.text(0)];
        if (std::find(names.begin(), names.end(), q.text(1)) == names.end()) names.push_back(q.text(1));
      }
    }
    for (sweeps::RunRecord& rec : store->runs()) {
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
      r.data_fingerprint = reported_fingerprint(rec.dir);
      r.grids = grids_of_run[rec.id];
      r.record = std::move(rec);
      st.runs.push_back(std::move(r));
    }
    {
      Query q(*store, "SELECT id, final_step, final_loss, final_is_nan FROM final_losses");
      std::map<std::string, StudyRun*> by_id;
      for (StudyRun& r : st.runs) by_id[r.record.id] = &r;
      while (q.next()) {
        const auto it = by_id.find(q.text(0));
        if (it == by_id.end()) continue;
        StudyRun& r = *it->second;
        r.final_step = q.integer(1);
        r.final_is_nan = q.integer(3) != 0;
        if (!r.final_is_nan && std::isfinite(q.real(2))) r.final_loss = q.real(2);
      }
    }
    {
      Query q(*store, "SELECT run, key, step, tokens, value, is_nan FROM metrics ORDER BY run, key, step");
      while (q.next()) {
        sweeps::MetricRow m;
        m.key = q.text(1);
        m.step = q.integer(2);
        m.tokens = q.integer(3);
        m.is_nan = q.integer(5) != 0;
        m.value = m.is_nan ? kNaN : q.real(4);
        st.curves[q.text(0)][m.key].push_back(std::move(m));
      }
    }
    {
      Query q(*store, "SELECT id, name, recipe, model, state, bf16_id, bf16_state, n_params_nonembedding, tokens, "
                      "final_step, bf16_step, seed, loss, bf16_loss, gap FROM bf16_gap "
                      "ORDER BY recipe, n_params_nonembedding, tokens, seed, name");
      while (q.next()) {
        GapRow g;
        g.id = q.text(0);
        g.name = q.text(1);
        g.recipe = q.text(2);
        g.model = q.text(3);
        g.state = q.text(4);
        g.bf16_id = q.text(5);
        g.bf16_state = q.text(6);
        g.n_params_nonembedding = q.integer(7);
        g.tokens = q.integer(8);
        g.final_step = q.integer(9);
        g.bf16_step = q.integer(10);
        g.seed = static_cast<uint64_t>(q.integer(11));
        g.loss = q.real(12);
        g.bf16_loss = q.real(13);
        g.gap = q.real(14);
        st.gaps.push_back(std::move(g));
      }
    }
    {
      Query q(*store, "SELECT run, step, layer, linear, slot, gemm, alpha, nmse, sqnr_db, shrink, b_eff, count, "
                      "nonfinite FROM probes ORDER BY run, step, layer, linear, slot");
      while (q.next()) {
        ProbeSlotRow p;
        p.run_id = q.text(0);
        p.row.step = q.integer(1);
        p.row.layer = static_cast<int>(q.integer(2));
        p.row.linear = q.text(3);
        p.row.slot = q.text(4);
        p.row.gemm = q.text(5);
        p.row.alpha = q.real(6);
        p.row.nmse = q.real(7);
        p.row.sqnr_db = q.real(8);
        p.row.shrink = q.real(9);
        p.row.b_eff = q.real(10);
        p.row.count = q.integer(11);
        p.row.nonfinite = q.integer(12);
        st.probes.push_back(std::move(p));
      }
    }
    {
      Query q(*store, "SELECT run, step, layer, linear, gemm, alpha_a, alpha_b, eta FROM probe_gemms "
                      "ORDER BY run, step, layer, linear, gemm");
      while (q.next()) {
        ProbeGemmRow p;
        p.run_id = q.text(0);
        p.row.step = q.integer(1);
        p.row.layer = static_cast<int>(q.integer(2));
        p.row.linear = q.text(3);
        p.row.gemm = q.text(4);
        p.row.alpha_a = q.real(5);
        p.row.alpha_b = q.real(6);
        p.row.eta = q.real(7);
        st.probe_gemms.push_back(std::move(p));
      }
    }
    for (const StudyRun& r : st.runs)
      for (auto& a : store->attempts(r.record.id)) st.attempts.push_back(std::move(a));
    std::sort(st.attempts.begin(), st.attempts.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    // A fit row that cannot be read costs the fitted sections, not the report.
    try {
      st.fits = fit::read_all_fits(*store);
    } catch (const std::exception& e) {
      st.fits_error = e.what();
    }
  }
  if (st.name.empty() && !st.grids.empty()) st.name = st.grids.front().name;
  if (st.name.empty() && !st.store_path.empty()) st.name = st.store_path.stem().string();
  // The study's grids: its TOMLs (the main one first), else the grids the store recorded.
  std::vector<const sweeps::SweepSpec*> all_specs;
  if (spec != nullptr) all_specs.push_back(spec);
  for (const sweeps::SweepSpec& o : specs.others) all_specs.push_back(&o);
  std::set<std::string> known;
  for (const StudyRun& r : st.runs) known.insert(r.record.id);
  for (const sweeps::SweepSpec* s : all_specs) {
    DeclaredGrid g;
    g.name = s->name;
    g.file = s->file.string();
    g.main = s == spec;
    g.text_hash = s->text_hash;
    for (const sweeps::GridPoint& p : s->points) {
      g.ids.push_back(p.id);
      if (known.insert(p.id).second) {
        UnrecordedPoint u;
        u.id = p.id;
        u.name = p.name;
        u.recipe = p.recipe_label;
        u.model = p.model_label;
        u.grid = s->name;
        u.n_params_nonembedding = p.n_params_nonembedding;
        u.tokens = p.tokens;
        u.seed = p.seed;
        if (p.config.is_object() && p.config.contains("recipe")) u.recipe_json = p.config["recipe"];
        u.probe_every = probe_every_of(p.config);
        u.replicate_key = replicate_key(p.config);
        u.comparison_key = comparison_key(p.config);
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
