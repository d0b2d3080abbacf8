// store.cpp — the Store (store.h): opening and migrating the file, grids and runs, leases,
// attempts, ingesting metrics and reading them back. The SQL layer is sqlite.h, the schema
// schema.h; fits and final losses are store_fits.cpp.
#include "store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/user_error.h"
#include "store/schema.h"
#include "store/sqlite.h"

namespace fp4::store {

using detail::Statement;
using detail::WriteTransaction;
using nlohmann::json;

namespace {

constexpr const char* kStateNames[] = {"pending", "running", "succeeded", "failed", "diverged", "orphaned"};

// SQLite integers are int64; seeds are uint64. The column holds the seed's bits (seeds from 2^63
// up read as negative in SQL), which maps back exactly.
int64_t seed_to_column(uint64_t seed) { return static_cast<int64_t>(seed); }
uint64_t seed_from_column(int64_t bits) { return static_cast<uint64_t>(bits); }

// The columns of `runs` in RunRecord order; read_run() reads them by these indices.
constexpr const char* kRunColumns =
    "id, name, config_json, match_key, recipe, baseline, model, n_params, n_params_nonembedding, tokens, seed, "
    "flops_per_token, state, attempts, dir, error, lease_owner, lease_expires, ingested_bytes, data_fingerprint, numerics, "
    "n_params_active_nonembedding";

RunRecord read_run(const Statement& s) {
  RunRecord r;
  r.id = s.column_text(0);
  r.name = s.column_text(1);
  r.config_json = s.column_text(2);
  r.match_key = s.column_text(3);
  r.recipe = s.column_text(4);
  r.baseline = s.column_int64(5) != 0;
  r.model = s.column_text(6);
  r.n_params = s.column_int64(7);
  r.n_params_nonembedding = s.column_int64(8);
  r.tokens = s.column_int64(9);
  r.seed = seed_from_column(s.column_int64(10));
  r.flops_per_token = s.column_double(11);
  r.state = parse_run_state(s.column_text(12));
  r.attempts = static_cast<int>(s.column_int64(13));
  r.dir = s.column_text(14);
  r.error = s.column_text(15);
  r.lease_owner = s.column_text(16);
  r.lease_expires = s.column_double(17);
  r.ingested_bytes = s.column_int64(18);
  r.data_fingerprint = s.column_text(19);
  if (!s.is_null(20)) r.numerics = static_cast<int>(s.column_int64(20));
  r.n_params_active_nonembedding = s.column_int64(21);
  return r;
}

std::vector<RunRecord> read_runs(Statement& s) {
  std::vector<RunRecord> out;
  while (s.step()) out.push_back(read_run(s));
  return out;
}

// A measured value for a nullable REAL column: NULL for NaN (and the infinities, which JSON cannot
// carry either, so they never arrive from metrics.jsonl).
std::optional<double> finite_or_null(double v) {
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

// The upsert of one kind of probe row into `table`: (run, the row's fields) as columns, the key
// (run and the row's key fields) deciding which row a re-done step replaces.
template <class Row>
std::string probe_upsert_sql(const char* table) {
  std::vector<std::string> columns{"run"}, keys{"run"}, updates;
  Row r;
  Row::for_each_field(r, [&](const char* name, bool key, const auto&) {
    columns.push_back(name);
    if (key)
      keys.push_back(name);
    else
      updates.push_back(fmt::format("{0} = excluded.{0}", name));
  });
  std::vector<std::string> params;
  for (size_t i = 1; i <= columns.size(); ++i) params.push_back(fmt::format("?{}", i));
  return fmt::format("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}", table,
                     fmt::join(columns, ", "), fmt::join(params, ", "), fmt::join(keys, ", "),
                     fmt::join(updates, ", "));
}

// Binds (run_id, the row's fields) to probe_upsert_sql's parameters; a non-finite real is NULL.
template <class Row>
Statement& bind_probe_row(Statement& st, const std::string& run_id, const Row& r) {
  st.reset();
  int index = 1;
  st.bind(index++, run_id);
  Row::for_each_field(r, [&](const char*, bool, const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>)
      st.bind(index++, finite_or_null(v));
    else
      st.bind(index++, v);
  });
  return st;
}

// A JSON column as stored, or `fallback` where its text does not parse (a reader shows what it can).
json json_or(const std::string& text, json fallback) {
  try {
    return json::parse(text);
  } catch (const json::exception&) {
    return fallback;
  }
}

// The SELECT of one kind of probe row from `table`: (run, the row's fields) as columns, ordered by
// run and the row's key.
template <class Row>
std::string probe_select_sql(const char* table) {
  std::vector<std::string> columns{"run"}, keys{"run"};
  Row r;
  Row::for_each_field(r, [&](const char* name, bool key, const auto&) {
    columns.push_back(name);
    if (key) keys.push_back(name);
  });
  return fmt::format("SELECT {} FROM {} ORDER BY {}", fmt::join(columns, ", "), table, fmt::join(keys, ", "));
}

// Reads probe_select_sql's columns into (run id, row); a NULL real is NaN.
template <class RunRow>
std::vector<RunRow> read_probe_rows(Statement& s) {
  std::vector<RunRow> out;
  while (s.step()) {
    RunRow out_row;
    out_row.run_id = s.column_text(0);
    int column = 1;
    decltype(out_row.row)::for_each_field(out_row.row, [&](const char*, bool, auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, std::string>)
        v = s.column_text(column);
      else if constexpr (std::is_same_v<V, double>)
        v = s.column_real(column);
      else
        v = static_cast<V>(s.column_int64(column));
      ++column;
    });
    out.push_back(std::move(out_row));
  }
  return out;
}

// A count from the "run" row when it is there and an integer; nullopt leaves the column as it is.
std::optional<int64_t> run_info_integer(const json& info, const char* name) {
  const auto it = info.find(name);
  if (it == info.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

std::optional<double> run_info_number(const json& info, const char* name) {
  const auto it = info.find(name);
  if (it == info.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<std::string> run_info_text(const json& info, const char* name) {
  const auto it = info.find(name);
  if (it == info.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

const char* run_state_name(RunState s) {
  const auto i = static_cast<size_t>(s);
  if (i >= std::size(kStateNames)) throw std::logic_error("run state " + std::to_string(i) + " has no name");
  return kStateNames[i];
}

RunState parse_run_state(const std::string& text) {
  for (size_t i = 0; i < std::size(kStateNames); ++i)
    if (text == kStateNames[i]) return static_cast<RunState>(i);
  throw UserError("\"" + text +
                  "\" is not a run state (pending, running, succeeded, failed, diverged, orphaned)");
}

std::string sqlite_library_version() { return sqlite3_libversion(); }

// ---- Opening ----------------------------------------------------------------------------------

Store::Store(sqlite3* db, std::filesystem::path path) : db_(db), path_(std::move(path)) {}

Store::~Store() { sqlite3_close_v2(db_); }

int Store::latest_schema_version() { return detail::latest_store_version(); }

int Store::schema_version() const { return detail::read_user_version(db_, path_); }

std::unique_ptr<Store> Store::open(const std::filesystem::path& path, Mode requested) {
  const std::string name = path.string();
  std::error_code ec;
  const bool if_present = requested == Mode::read_if_present;
  const bool migrating = requested == Mode::read_migrating;
  const Mode mode = if_present || migrating ? Mode::read_only : requested;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(name + " is a directory, not a sweep store: the store is one SQLite file; set [sweep] store "
                           "(or --store) to a file path, e.g. " + (path / "study.db").string());
  if (if_present && !std::filesystem::exists(path, ec)) return nullptr;
  if (mode == Mode::read_only && !std::filesystem::exists(path, ec))
    throw UserError(name + ": no such sweep store; check the path (a store is created by the first "
                           "`fp4lab sweep run` of its grid)");

  sqlite3* raw = nullptr;
  const int flags = mode == Mode::read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int rc = sqlite3_open_v2(name.c_str(), &raw, flags, nullptr);
  // From here the Store owns the handle (even a failed open allocates one that must be closed).
  std::unique_ptr<Store> store(new Store(raw, path));
  if (rc != SQLITE_OK) detail::throw_sqlite_error(raw, path, "opening the store");
  sqlite3_busy_timeout(raw, detail::kBusyTimeoutMs);
  sqlite3_extended_result_codes(raw, 1);

  // The first read is where SQLite finds out whether the file is a database at all. One statement,
  // so one snapshot: another orchestrator may be creating the schema right now, and the version
  // and the tables must be seen from the same side of its commit.
  int version = 0, application_id = 0;
  int64_t tables = 0;
  {
    sqlite3_stmt* probe = nullptr;
    int step_rc = sqlite3_prepare_v2(raw,
                                     "SELECT (SELECT user_version FROM pragma_user_version), "
                                     "(SELECT application_id FROM pragma_application_id), "
                                     "(SELECT count(*) FROM sqlite_schema)",
                                     -1, &probe, nullptr);
    if (step_rc == SQLITE_OK) step_rc = sqlite3_step(probe);
    if (step_rc == SQLITE_ROW) {
      version = sqlite3_column_int(probe, 0);
      application_id = sqlite3_column_int(probe, 1);
      tables = sqlite3_column_int64(probe, 2);
    }
    sqlite3_finalize(probe);
    if ((step_rc & 0xff) == SQLITE_NOTADB)
      throw UserError(name + " is not an SQLite database, so not a sweep store; pass the study's .db "
                             "file (or a path that does not exist yet, to create one)");
    if (step_rc != SQLITE_ROW) detail::throw_sqlite_error(raw, path, "reading the schema version");
  }

  const int latest = latest_schema_version();
  if (version > latest)
    throw UserError(name + ": store schema version " + std::to_string(version) +
                    " is newer than this fp4lab knows (" + std::to_string(latest) +
                    "); use the fp4lab that wrote it, or a newer one");
  if ((version > 0 && application_id != detail::kStoreApplicationId) || (version == 0 && tables > 0))
    throw UserError(name + " is an SQLite database but not an fp4lab sweep store; pass the study's "
                           ".db file or a new path");
  if (mode == Mode::read_only) {
    if (version == 0 && if_present) return nullptr;  // being created: nothing recorded yet
    if (version == 0)
      throw UserError(name + " is empty, not a sweep store yet; check the path (a store is created "
                             "by the first `fp4lab sweep run` of its grid)");
    if (version < latest && migrating) {
      store.reset();  // closed before the writable open migrates the file
      open(path, Mode::read_write);
      return open(path, Mode::read_only);
    }
    if (version < latest)
      throw UserError(
          name + ": store schema version " + std::to_string(version) + " is older than this fp4lab's (" +
          std::to_string(latest) + ") and a read-only open cannot migrate it; run a writing sweep command "
                                   "(`fp4lab sweep run` or `fp4lab sweep ingest`) on it once to migrate it");
  } else {
    // WAL lets `sweep status` read while an orchestrator writes. The mode is stored in the file.
    Statement wal(raw, store->path_, "PRAGMA journal_mode = WAL");
    const std::string journal = wal.step() ? wal.column_text(0) : std::string();
    wal.reset();
    if (journal != "wal")
      throw std::runtime_error(name + ": cannot use the WAL journal (SQLite kept \"" + journal +
                                      "\"); put the store on a local file system");
  }
  // Per connection: foreign keys catch a metric for a run that was never recorded; FULL makes a
  // commit survive a power loss (not every SQLite build defaults to it in WAL mode).
  detail::exec(raw, store->path_, "PRAGMA foreign_keys = ON", "enabling foreign keys");
  detail::exec(raw, store->path_, "PRAGMA synchronous = FULL", "setting synchronous");
  if (mode == Mode::read_write) detail::migrate_store(raw, store->path_, latest);
  return store;
}

// ---- Grids and runs ---------------------------------------------------------------------------

int64_t Store::record_grid(const GridRecord& grid) {
  const double now = unix_time_s();
  WriteTransaction tx(db_, path_);

  // A grid is its text: recording the same text again finds the same row.
  Statement insert_grid(db_, path_,
                        "INSERT INTO grids (text_hash, name, file, base_dir, run_root, axis_names, fit_json, text, "
                        "created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (text_hash) DO NOTHING");
  insert_grid.bind(1, grid.text_hash)
      .bind(2, grid.name)
      .bind(3, grid.file.string())
      .bind(4, grid.base_dir.string())
      .bind(5, grid.run_root.string())
      .bind(6, json(grid.axis_names).dump())
      .bind(7, fit_table_json(grid.fit).dump())
      .bind(8, grid.text)
      .bind(9, now);
  insert_grid.run();
  Statement grid_id(db_, path_, "SELECT id FROM grids WHERE text_hash = ?1");
  grid_id.bind(1, grid.text_hash);
  if (!grid_id.step()) throw std::runtime_error(path_.string() + ": grid " + grid.text_hash + " vanished");
  const int64_t id = grid_id.column_int64(0);
  grid_id.reset();

  // A run already present (from this grid or another) keeps its state, name and directory.
  Statement insert_run(db_, path_,
                       "INSERT INTO runs (id, name, config_json, match_key, recipe, baseline, model, n_params, "
                       "n_params_nonembedding, tokens, seed, flops_per_token, dir, created, updated, "
                       "n_params_active_nonembedding) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15) "
                       "ON CONFLICT (id) DO NOTHING");
  Statement link(db_, path_,
                 "INSERT INTO grid_runs (grid, run, position, name, axes_json) VALUES (?1, ?2, ?3, ?4, ?5) "
                 "ON CONFLICT (grid, run) DO UPDATE SET position = excluded.position, name = excluded.name, "
                 "axes_json = excluded.axes_json");
  int64_t position = 0;
  for (const GridPointRecord& p : grid.points) {
    insert_run.reset();
    insert_run.bind(1, p.id)
        .bind(2, p.name)
        .bind(3, p.config_json)
        .bind(4, p.match_key)
        .bind(5, p.recipe)
        .bind(6, int64_t{p.baseline ? 1 : 0})
        .bind(7, p.model)
        .bind(8, p.n_params)
        .bind(9, p.n_params_nonembedding)
        .bind(10, p.tokens)
        .bind(11, seed_to_column(p.seed))
        .bind(12, p.flops_per_token)
        .bind(13, (grid.run_root / p.id).string())
        .bind(14, now)
        .bind(15, p.n_params_active_nonembedding);
    insert_run.run();
    link.reset();
    link.bind(1, id).bind(2, p.id).bind(3, position++).bind(4, p.name).bind(5, json(p.axes).dump());
    link.run();
  }
  tx.commit();
  return id;
}

std::vector<StoredGrid> Store::grids() const {
  std::vector<StoredGrid> grids;
  Statement s(db_, path_,
              "SELECT id, name, file, base_dir, run_root, axis_names, fit_json, text, text_hash, created "
              "FROM grids ORDER BY id");
  while (s.step()) {
    StoredGrid g;
    g.id = s.column_int64(0);
    g.name = s.column_text(1);
    g.file = s.column_text(2);
    g.base_dir = s.column_text(3);
    g.run_root = s.column_text(4);
    for (const json& a : json_or(s.column_text(5), json::array()))
      if (a.is_string()) g.axis_names.push_back(a.get<std::string>());
    g.fit = json_or(s.column_text(6), json::object());
    g.text = s.column_text(7);
    g.text_hash = s.column_text(8);
    g.created = s.column_real(9);
    grids.push_back(std::move(g));
  }
  Statement links(db_, path_, "SELECT grid, run, axes_json FROM grid_runs ORDER BY grid, position");
  while (links.step()) {
    const int64_t id = links.column_int64(0);
    const auto it = std::find_if(grids.begin(), grids.end(), [&](const StoredGrid& g) { return g.id == id; });
    if (it == grids.end()) continue;
    it->links.push_back({links.column_text(1), json_or(links.column_text(2), json::object())});
  }
  return grids;
}

std::optional<RunRecord> Store::run(const std::string& id) const {
  Statement s(db_, path_, std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?1");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  RunRecord r = read_run(s);
  s.reset();
  return r;
}

std::vector<RunRecord> Store::runs() const {
  Statement s(db_, path_, std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY name, id");
  return read_runs(s);
}

std::vector<RunRecord> Store::runs_of_grid(const std::string& text_hash) const {
  // The same columns, qualified: grid_runs has its own `name`.
  Statement s(db_, path_,
              "SELECT r.id, r.name, r.config_json, r.match_key, r.recipe, r.baseline, r.model, r.n_params, "
              "r.n_params_nonembedding, r.tokens, r.seed, r.flops_per_token, r.state, r.attempts, r.dir, r.error, "
              "r.lease_owner, r.lease_expires, r.ingested_bytes, r.data_fingerprint, r.numerics, "
              "r.n_params_active_nonembedding "
              "FROM grids AS g JOIN grid_runs AS gr ON gr.grid = g.id JOIN runs AS r ON r.id = gr.run "
              "WHERE g.text_hash = ?1 ORDER BY gr.position");
  s.bind(1, text_hash);
  return read_runs(s);
}

// ---- Leases -----------------------------------------------------------------------------------

bool Store::try_lease(const std::string& run_id, const std::string& owner, double now, double ttl_s) {
  WriteTransaction tx(db_, path_);
  Statement read(db_, path_, "SELECT state, lease_owner, lease_expires FROM runs WHERE id = ?1");
  read.bind(1, run_id);
  if (!read.step()) throw std::runtime_error(path_.string() + ": try_lease: no run " + run_id + " in the store");
  const RunState state = parse_run_state(read.column_text(0));
  const std::string holder = read.column_text(1);
  const double expires = read.column_double(2);
  read.reset();
  // An outcome is final: nothing may run the run again.
  if (state == RunState::succeeded || state == RunState::diverged) return false;
  if (!holder.empty() && holder != owner && expires >= now) return false;
  Statement take(db_, path_,
                 "UPDATE runs SET state = 'running', lease_owner = ?2, lease_expires = ?3, updated = ?4 WHERE id = ?1");
  take.bind(1, run_id).bind(2, owner).bind(3, now + ttl_s).bind(4, unix_time_s());
  take.run();
  tx.commit();
  return true;
}

void Store::renew_leases(const std::string& owner, double now, double ttl_s) {
  if (owner.empty()) return;  // "" means "no lease": there is nothing to renew
  Statement s(db_, path_, "UPDATE runs SET lease_expires = ?2 WHERE lease_owner = ?1");
  s.bind(1, owner).bind(2, now + ttl_s);
  s.run();
}

void Store::release_lease(const std::string& run_id, const std::string& owner) {
  Statement s(db_, path_,
              "UPDATE runs SET lease_owner = '', lease_expires = 0, updated = ?3 WHERE id = ?1 AND lease_owner = ?2");
  s.bind(1, run_id).bind(2, owner).bind(3, unix_time_s());
  s.run();
}

int Store::mark_orphans(double now) {
  Statement s(db_, path_,
              "UPDATE runs SET state = 'orphaned', lease_owner = '', lease_expires = 0, updated = ?2 "
              "WHERE state = 'running' AND lease_expires < ?1");
  s.bind(1, now).bind(2, unix_time_s());
  s.run();
  return sqlite3_changes(db_);
}

// ---- Attempts ---------------------------------------------------------------------------------

int64_t Store::begin_attempt(const std::string& run_id, const Provenance& p, double start_time, int pid) {
  WriteTransaction tx(db_, path_);
  Statement count(db_, path_, "UPDATE runs SET attempts = attempts + 1, updated = ?2 WHERE id = ?1 RETURNING attempts");
  count.bind(1, run_id).bind(2, unix_time_s());
  if (!count.step()) throw std::runtime_error(path_.string() + ": begin_attempt: no run " + run_id + " in the store");
  const int64_t number = count.column_int64(0);
  count.reset();

  Statement attempt(db_, path_,
                    "INSERT INTO attempts (run, number, host, devices, pid, started) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  attempt.bind(1, run_id).bind(2, number).bind(3, p.host).bind(4, p.devices).bind(5, pid).bind(6, start_time);
  attempt.run();
  const int64_t attempt_id = sqlite3_last_insert_rowid(db_);

  Statement provenance(db_, path_,
                       "INSERT INTO provenance (attempt, gpu_name, gpu_driver, cuda_version, git_commit, git_dirty, "
                       "fp4lab_version, libraries_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  provenance.bind(1, attempt_id)
      .bind(2, p.gpu_name)
      .bind(3, p.gpu_driver)
      .bind(4, p.cuda_version)
      .bind(5, p.git_commit)
      .bind(6, int64_t{p.git_dirty ? 1 : 0})
      .bind(7, p.fp4lab_version)
      .bind(8, (p.libraries.is_null() ? json::object() : p.libraries).dump());
  provenance.run();
  tx.commit();
  return attempt_id;
}

void Store::end_attempt(int64_t attempt_id, const AttemptEnd& end, double end_time) {
  WriteTransaction tx(db_, path_);
  Statement attempt(db_, path_,
                    "UPDATE attempts SET ended = ?2, exit_code = ?3, state = ?4, error = ?5 WHERE id = ?1 RETURNING run");
  attempt.bind(1, attempt_id).bind(2, end_time).bind(3, end.exit_code).bind(4, run_state_name(end.state)).bind(5, end.error);
  if (!attempt.step())
    throw std::runtime_error(path_.string() + ": end_attempt: no attempt " + std::to_string(attempt_id) + " in the store");
  const std::string run_id = attempt.column_text(0);
  attempt.reset();
  Statement run(db_, path_, "UPDATE runs SET state = ?2, error = ?3, updated = ?4 WHERE id = ?1");
  run.bind(1, run_id).bind(2, run_state_name(end.state)).bind(3, end.error).bind(4, unix_time_s());
  run.run();
  tx.commit();
}

void Store::set_state(const std::string& run_id, RunState s, const std::string& error) {
  Statement st(db_, path_, "UPDATE runs SET state = ?2, error = ?3, updated = ?4 WHERE id = ?1");
  st.bind(1, run_id).bind(2, run_state_name(s)).bind(3, error).bind(4, unix_time_s());
  st.run();
  if (sqlite3_changes(db_) == 0)
    throw std::runtime_error(path_.string() + ": set_state: no run " + run_id + " in the store");
}

std::vector<Store::AttemptRecord> Store::attempts(const std::string& run_id) const {
  Statement s(db_, path_,
              "SELECT a.id, a.run, a.started, a.ended, a.exit_code, a.error, a.host, a.devices, p.gpu_name, "
              "p.gpu_driver, p.cuda_version, p.git_commit, p.git_dirty, p.fp4lab_version, p.libraries_json "
              "FROM attempts AS a LEFT JOIN provenance AS p ON p.attempt = a.id WHERE a.run = ?1 ORDER BY a.id");
  s.bind(1, run_id);
  std::vector<AttemptRecord> out;
  while (s.step()) {
    AttemptRecord a;
    a.id = s.column_int64(0);
    a.run_id = s.column_text(1);
    a.start = s.column_double(2);
    a.end = s.column_double(3);  // NULL (still running) reads as 0
    a.exit_code = static_cast<int>(s.column_int64(4));
    a.error = s.column_text(5);
    a.provenance.host = s.column_text(6);
    a.provenance.devices = s.column_text(7);
    a.provenance.gpu_name = s.column_text(8);
    a.provenance.gpu_driver = s.column_text(9);
    a.provenance.cuda_version = s.column_text(10);
    a.provenance.git_commit = s.column_text(11);
    a.provenance.git_dirty = s.column_int64(12) != 0;
    a.provenance.fp4lab_version = s.column_text(13);
    // Attempts recorded before schema version 2 have no provenance row.
    a.provenance.libraries = s.is_null(14) ? json::object() : json::parse(s.column_text(14));
    out.push_back(std::move(a));
  }
  return out;
}

// ---- Metrics ----------------------------------------------------------------------------------

void Store::ingest(const std::string& run_id, const MetricsBatch& batch, int64_t new_offset) {
  WriteTransaction tx(db_, path_);
  // First, so that an unknown run is reported as such (not as a foreign-key failure). The trainer's
  // own counts replace the spec's estimates; absent fields leave the columns alone.
  Statement run(db_, path_,
                "UPDATE runs SET n_params = coalesce(?2, n_params), "
                "n_params_nonembedding = coalesce(?3, n_params_nonembedding), "
                "flops_per_token = coalesce(?4, flops_per_token), tokens = coalesce(?5, tokens), "
                "data_fingerprint = coalesce(?8, data_fingerprint), numerics = coalesce(?9, numerics), "
                "n_params_active_nonembedding = coalesce(?10, n_params_active_nonembedding), "
                "ingested_bytes = ?6, updated = ?7 WHERE id = ?1");
  const json info = batch.run_info.is_object() ? batch.run_info : json::object();
  run.bind(1, run_id)
      .bind(2, run_info_integer(info, "n_params"))
      .bind(3, run_info_integer(info, "n_params_nonembedding"))
      .bind(4, run_info_number(info, "flops_per_token"))
      .bind(5, run_info_integer(info, "tokens_total"))
      .bind(6, new_offset)
      .bind(7, unix_time_s())
      .bind(8, run_info_text(info, "data_fingerprint"))
      .bind(9, run_info_integer(info, "numerics"))
      .bind(10, run_info_integer(info, "n_params_active_nonembedding"));
  run.run();
  if (sqlite3_changes(db_) == 0)
    throw std::runtime_error(path_.string() + ": ingest: no run " + run_id + " in the store");

  // Rows are applied in file order, so within one batch too the last row per key wins.
  Statement metric(db_, path_,
                   "INSERT INTO metrics (run, key, step, tokens, value, is_nan) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                   "ON CONFLICT (run, key, step) DO UPDATE SET tokens = excluded.tokens, value = excluded.value, "
                   "is_nan = excluded.is_nan");
  for (const MetricRow& m : batch.metrics) {
    metric.reset();
    metric.bind(1, run_id).bind(2, m.key).bind(3, m.step).bind(4, m.tokens);
    // A non-finite value the caller did not flag is still not a number to SQL.
    const bool is_nan = m.is_nan || !std::isfinite(m.value);
    if (is_nan)
      metric.bind_null(5);
    else
      metric.bind(5, m.value);
    metric.bind(6, int64_t{is_nan ? 1 : 0});
    metric.run();
  }

  Statement probe(db_, path_, probe_upsert_sql<ProbeRow>("probes"));
  for (const ProbeRow& p : batch.probes) bind_probe_row(probe, run_id, p).run();
  Statement gemm(db_, path_, probe_upsert_sql<ProbeGemmRow>("probe_gemms"));
  for (const ProbeGemmRow& g : batch.probe_gemms) bind_probe_row(gemm, run_id, g).run();

  tx.commit();
}

void Store::reset_metrics(const std::string& run_id) {
  WriteTransaction tx(db_, path_);
  for (const char* sql : {"DELETE FROM metrics WHERE run = ?1", "DELETE FROM probes WHERE run = ?1",
                          "DELETE FROM probe_gemms WHERE run = ?1",
                          "UPDATE runs SET ingested_bytes = 0 WHERE id = ?1"}) {
    Statement s(db_, path_, sql);
    s.bind(1, run_id);
    s.run();
  }
  tx.commit();
}

std::vector<MetricRow> Store::metrics(const std::string& run_id, const std::string& key) const {
  Statement s(db_, path_, "SELECT key, step, tokens, value, is_nan FROM metrics WHERE run = ?1 AND key = ?2 ORDER BY step");
  s.bind(1, run_id).bind(2, key);
  std::vector<MetricRow> out;
  while (s.step()) {
    MetricRow m;
    m.key = s.column_text(0);
    m.step = s.column_int64(1);
    m.tokens = s.column_int64(2);
    m.is_nan = s.column_int64(4) != 0;
    m.value = m.is_nan ? std::numeric_limits<double>::quiet_NaN() : s.column_real(3);
    out.push_back(std::move(m));
  }
  return out;
}

int64_t Store::metric_count(const std::string& run_id) const {
  Statement s(db_, path_, "SELECT count(*) FROM metrics WHERE run = ?1");
  s.bind(1, run_id);
  const int64_t n = s.step() ? s.column_int64(0) : 0;
  s.reset();
  return n;
}

std::optional<double> Store::final_loss(const std::string& run_id) const {
  Statement s(db_, path_,
              "SELECT value, is_nan FROM metrics WHERE run = ?1 AND key = 'eval/loss' ORDER BY step DESC LIMIT 1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  // A non-finite final loss (a diverged evaluation) is reported as NaN, not as "no loss".
  const double v = s.column_int64(1) != 0 ? std::numeric_limits<double>::quiet_NaN() : s.column_real(0);
  s.reset();
  return v;
}

Curves Store::curves() const {
  Statement s(db_, path_, "SELECT run, key, step, tokens, value, is_nan FROM metrics ORDER BY run, key, step");
  Curves out;
  while (s.step()) {
    MetricRow m;
    m.key = s.column_text(1);
    m.step = s.column_int64(2);
    m.tokens = s.column_int64(3);
    m.is_nan = s.column_int64(5) != 0;
    m.value = m.is_nan ? std::numeric_limits<double>::quiet_NaN() : s.column_real(4);
    out[s.column_text(0)][m.key].push_back(std::move(m));
  }
  return out;
}

std::vector<Bf16GapRow> Store::bf16_gaps() const {
  Statement s(db_, path_,
              "SELECT id, name, recipe, model, state, bf16_id, bf16_state, n_params_nonembedding, tokens, "
              "final_step, bf16_step, seed, loss, bf16_loss, gap FROM bf16_gap "
              "ORDER BY recipe, n_params_nonembedding, tokens, seed, name");
  std::vector<Bf16GapRow> rows;
  while (s.step()) {
    Bf16GapRow r;
    r.id = s.column_text(0);
    r.name = s.column_text(1);
    r.recipe = s.column_text(2);
    r.model = s.column_text(3);
    r.state = s.column_text(4);
    r.bf16_id = s.column_text(5);
    r.bf16_state = s.column_text(6);
    r.n_params_nonembedding = s.column_int64(7);
    r.tokens = s.column_int64(8);
    r.final_step = s.column_int64(9);
    r.bf16_step = s.column_int64(10);
    r.seed = seed_from_column(s.column_int64(11));
    r.loss = s.column_real(12);
    r.bf16_loss = s.column_real(13);
    r.gap = s.column_real(14);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<RunProbeRow> Store::probes() const {
  Statement s(db_, path_, probe_select_sql<ProbeRow>("probes"));
  return read_probe_rows<RunProbeRow>(s);
}

std::vector<RunProbeGemmRow> Store::probe_gemms() const {
  Statement s(db_, path_, probe_select_sql<ProbeGemmRow>("probe_gemms"));
  return read_probe_rows<RunProbeGemmRow>(s);
}

}  // namespace fp4::store
