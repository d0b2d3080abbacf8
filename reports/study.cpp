// study.cpp — see study.h. The SQL here reads the tables and views docs/sweeps.md documents;
// what the Store API already offers (runs, attempts) is read through it.
#include "reports/study.h"

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

}  // namespace

const StudyRun* Study::run(const std::string& id) const {
  for (const StudyRun& r : runs)
    if (r.record.id == id) return &r;
  return nullptr;
}

std::vector<std::string> Study::recipes() const {
  std::set<std::string> s;
  for (const StudyRun& r : runs) s.insert(r.record.recipe);
  return {s.begin(), s.end()};
}

Study load_study(const sweeps::Store* store, const sweeps::SweepSpec* spec) {
  Study st;
  if (spec != nullptr) {
    st.name = spec->name;
    st.spec_file = spec->file;
  }
  if (store != nullptr) {
    st.store_path = store->path();
    st.schema_version = store->schema_version();
    st.grids = read_grids(*store);
    std::map<std::string, std::vector<std::string>> grids_of_run;
    {
      Query q(*store, "SELECT gr.run, g.name FROM grid_runs AS gr JOIN grids AS g ON g.id = gr.grid ORDER BY g.id");
      while (q.next()) grids_of_run[q.text(0)].push_back(q.text(1));
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
      st.fits = fit::read_fits(*store);
    } catch (const std::exception& e) {
      st.fits_error = e.what();
    }
  }
  if (st.name.empty() && !st.grids.empty()) st.name = st.grids.front().name;
  if (st.name.empty() && !st.store_path.empty()) st.name = st.store_path.stem().string();
  if (spec != nullptr) {
    std::set<std::string> known;
    for (const StudyRun& r : st.runs) known.insert(r.record.id);
    for (const sweeps::GridPoint& p : spec->points)
      if (!known.count(p.id))
        st.unrecorded.push_back({p.name, p.recipe_label, p.model_label, p.n_params_nonembedding, p.tokens, p.seed});
  }
  return st;
}

}  // namespace fp4::reports
