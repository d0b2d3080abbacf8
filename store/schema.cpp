// schema.cpp — see schema.h. The SQL here is the schema's single definition;
// docs/sweeps.md "The store" explains it table by table.
#include "store/schema.h"

#include <stdexcept>
#include <string>

#include "base/numerics_identity.h"
#include "store/sqlite.h"

namespace fp4::store::detail {

namespace {

// Version 1: what a sweep needs to run — grids, runs and their many-to-many links, attempts, and
// the metric curves.
constexpr const char* kMigration1 = R"sql(
PRAGMA application_id = 1179661395;

CREATE TABLE grids (
  id          INTEGER PRIMARY KEY,
  text_hash   TEXT NOT NULL UNIQUE,      -- SHA-256 of the TOML text: one row per distinct text
  name        TEXT NOT NULL,             -- [sweep] name
  file        TEXT NOT NULL,             -- the TOML file as given when first recorded
  base_dir    TEXT NOT NULL,
  run_root    TEXT NOT NULL,
  axis_names  TEXT NOT NULL,             -- JSON array, declaration order
  fit_json    TEXT NOT NULL,             -- [fit] as JSON, {} when absent
  text        TEXT NOT NULL,             -- the TOML text, byte for byte
  created     REAL NOT NULL
);

CREATE TABLE runs (
  id                     TEXT PRIMARY KEY,   -- SHA-256 of the canonical resolved config
  name                   TEXT NOT NULL,
  config_json            TEXT NOT NULL,
  match_key              TEXT NOT NULL,      -- equal for runs that differ only in their recipe
  recipe                 TEXT NOT NULL,
  baseline               INTEGER NOT NULL CHECK (baseline IN (0, 1)),
  model                  TEXT NOT NULL,
  n_params               INTEGER NOT NULL,
  n_params_nonembedding  INTEGER NOT NULL,
  tokens                 INTEGER NOT NULL,   -- D
  seed                   INTEGER NOT NULL,   -- the uint64 seed's bits as int64
  flops_per_token        REAL NOT NULL,
  state                  TEXT NOT NULL DEFAULT 'pending'
                         CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'diverged', 'orphaned')),
  attempts               INTEGER NOT NULL DEFAULT 0,
  dir                    TEXT NOT NULL,
  error                  TEXT NOT NULL DEFAULT '',
  lease_owner            TEXT NOT NULL DEFAULT '',
  lease_expires          REAL NOT NULL DEFAULT 0,
  created                REAL NOT NULL,
  updated                REAL NOT NULL
);
CREATE INDEX runs_by_match_key ON runs (match_key);
CREATE INDEX runs_by_state ON runs (state);

CREATE TABLE grid_runs (
  grid       INTEGER NOT NULL REFERENCES grids (id),
  run        TEXT NOT NULL REFERENCES runs (id),
  position   INTEGER NOT NULL,           -- the point's index in the grid's order
  name       TEXT NOT NULL,              -- the point's name in this grid
  axes_json  TEXT NOT NULL,              -- {"axis": "value as text", ...} in this grid
  PRIMARY KEY (grid, run)
) WITHOUT ROWID;
CREATE INDEX grid_runs_by_run ON grid_runs (run);

CREATE TABLE attempts (
  id         INTEGER PRIMARY KEY,
  run        TEXT NOT NULL REFERENCES runs (id),
  number     INTEGER NOT NULL,           -- 1 for a run's first attempt
  host       TEXT NOT NULL,
  devices    TEXT NOT NULL,
  pid        INTEGER NOT NULL,
  started    REAL NOT NULL,
  ended      REAL,                       -- NULL while it runs
  exit_code  INTEGER,
  state      TEXT CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'diverged', 'orphaned')),
  error      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX attempts_by_run ON attempts (run);

CREATE TABLE metrics (
  run     TEXT NOT NULL REFERENCES runs (id),
  key     TEXT NOT NULL,                 -- "<kind>/<field>": train/loss, eval/loss, ...
  step    INTEGER NOT NULL,
  tokens  INTEGER NOT NULL,
  value   REAL,                          -- NULL exactly when is_nan
  is_nan  INTEGER NOT NULL DEFAULT 0 CHECK (is_nan IN (0, 1)),
  PRIMARY KEY (run, key, step)
) WITHOUT ROWID;
)sql";

// Version 2: the probe, provenance and fits; incremental ingest; the views.
constexpr const char* kMigration2 = R"sql(
ALTER TABLE runs ADD COLUMN ingested_bytes INTEGER NOT NULL DEFAULT 0;

CREATE TABLE probes (
  run        TEXT NOT NULL REFERENCES runs (id),
  step       INTEGER NOT NULL,
  layer      INTEGER NOT NULL,
  linear     TEXT NOT NULL,
  slot       TEXT NOT NULL,
  gemm       TEXT NOT NULL,
  alpha      REAL,                       -- NULL: not finite
  nmse       REAL,
  sqnr_db    REAL,
  shrink     REAL,
  b_eff      REAL,
  count      INTEGER NOT NULL,
  nonfinite  INTEGER NOT NULL,
  PRIMARY KEY (run, step, layer, linear, slot)
) WITHOUT ROWID;

CREATE TABLE probe_gemms (
  run      TEXT NOT NULL REFERENCES runs (id),
  step     INTEGER NOT NULL,
  layer    INTEGER NOT NULL,
  linear   TEXT NOT NULL,
  gemm     TEXT NOT NULL,
  alpha_a  REAL,
  alpha_b  REAL,
  eta      REAL,
  PRIMARY KEY (run, step, layer, linear, gemm)
) WITHOUT ROWID;

CREATE TABLE provenance (
  attempt         INTEGER PRIMARY KEY REFERENCES attempts (id),
  gpu_name        TEXT NOT NULL,
  gpu_driver      TEXT NOT NULL,
  cuda_version    TEXT NOT NULL,
  git_commit      TEXT NOT NULL,
  git_dirty       INTEGER NOT NULL CHECK (git_dirty IN (0, 1)),
  fp4lab_version  TEXT NOT NULL,
  libraries_json  TEXT NOT NULL          -- {"sqlite": "3.40.1", ...}
);

CREATE TABLE fits (
  id              INTEGER PRIMARY KEY,
  law             TEXT NOT NULL,
  scope           TEXT NOT NULL,         -- a recipe label, or "joint"
  input_hash      TEXT NOT NULL,         -- SHA-256 of the fitted data
  params_json     TEXT NOT NULL,
  intervals_json  TEXT NOT NULL DEFAULT '{}',
  quality_json    TEXT NOT NULL DEFAULT '{}',
  options_json    TEXT NOT NULL DEFAULT '{}',
  n_points        INTEGER NOT NULL,
  fp4lab_version  TEXT NOT NULL,
  created         REAL NOT NULL
);
CREATE INDEX fits_by_input ON fits (law, scope, input_hash);

CREATE VIEW final_losses AS
SELECT r.id, r.name, r.recipe, r.baseline, r.model, r.n_params, r.n_params_nonembedding, r.tokens,
       r.seed, r.state, r.match_key,
       m.step AS final_step, m.value AS final_loss, m.is_nan AS final_is_nan
FROM runs AS r
JOIN metrics AS m ON m.run = r.id AND m.key = 'eval/loss'
WHERE m.step = (SELECT MAX(step) FROM metrics WHERE run = r.id AND key = 'eval/loss');

CREATE VIEW bf16_gap AS
SELECT q.id, q.name, q.recipe, q.model, q.n_params, q.n_params_nonembedding, q.tokens, q.seed,
       q.state, q.final_step, q.final_loss AS loss,
       b.id AS bf16_id, b.state AS bf16_state, b.final_step AS bf16_step, b.final_loss AS bf16_loss,
       q.final_loss / b.final_loss - 1.0 AS gap
FROM final_losses AS q
JOIN final_losses AS b ON b.match_key = q.match_key AND b.baseline = 1 AND b.final_is_nan = 0
WHERE q.baseline = 0;

CREATE VIEW run_progress AS
SELECT r.id, r.name, r.recipe, r.model, r.state, r.attempts, r.tokens,
       t.step AS last_step, t.tokens AS last_tokens, t.value AS last_train_loss,
       CAST(coalesce(t.tokens, 0) AS REAL) / r.tokens AS done
FROM runs AS r
LEFT JOIN metrics AS t ON t.run = r.id AND t.key = 'train/loss'
  AND t.step = (SELECT MAX(step) FROM metrics WHERE run = r.id AND key = 'train/loss');
)sql";

// Version 3: a fit's predictions (at its targets) and BF16-relative gaps get their own JSON column
// (fit/stored_fit.h, docs/fit.md).
constexpr const char* kMigration3 = R"sql(
ALTER TABLE fits ADD COLUMN predictions_json TEXT NOT NULL DEFAULT '{}';
)sql";

// Version 4: the data fingerprint each run's trainer reported (its `run` row), so that the report
// reads it from the store rather than from run directories. ingested_bytes goes back to 0: the next
// ingest of a run directory reads its metrics.jsonl from the first line again (upserts make that
// change nothing else) and finds the `run` row that carries the fingerprint.
constexpr const char* kMigration4 = R"sql(
ALTER TABLE runs ADD COLUMN data_fingerprint TEXT NOT NULL DEFAULT '';
UPDATE runs SET ingested_bytes = 0;
)sql";

// Version 5: the numerics identity each run trained under (base/numerics_identity.h), from the
// trainer's `run` row at ingest; NULL while not known (a run not started, or recorded by a binary of
// a commit fp4lab does not know). Runs recorded before it get theirs from the git commit of their
// latest attempt's binary (fp4_numerics_of_commit, registered by migrate_store: 1 before 5ac9441,
// 2 from it on).
constexpr const char* kMigration5 = R"sql(
ALTER TABLE runs ADD COLUMN numerics INTEGER;
UPDATE runs SET numerics = (
  SELECT nullif(fp4_numerics_of_commit(p.git_commit), 0)
  FROM attempts AS a JOIN provenance AS p ON p.attempt = a.id
  WHERE a.run = runs.id ORDER BY a.number DESC, a.id DESC LIMIT 1);
)sql";

// fp4_numerics_of_commit(text): base/numerics_identity.h's table as an SQL function, for
// kMigration5's backfill; 0 for what is not a known commit (NULL included).
void numerics_of_commit(sqlite3_context* context, int, sqlite3_value** argv) {
  const unsigned char* text = sqlite3_value_text(argv[0]);
  sqlite3_result_int(context, text == nullptr ? 0 : numerics_identity_of_commit(reinterpret_cast<const char*>(text)));
}

// Version 6: paired contrasts over seeds (fit/contrasts.h, docs/statistics.md), stored by
// `fp4lab fit` beside its fits: one contrast_sets row per computation (the families asked, where
// they came from), one contrasts row per test (a contrast at a grid point, one metric).
constexpr const char* kMigration6 = R"sql(
CREATE TABLE contrast_sets (
  id              INTEGER PRIMARY KEY,
  grid            TEXT NOT NULL,         -- the study's [sweep] name; '' for every run of the store
  input_hash      TEXT NOT NULL,         -- SHA-256 of the losses read and the families asked
  source          TEXT NOT NULL,         -- where the families came from: "[compare] of FILE" or "defaults"
  families_json   TEXT NOT NULL,         -- [{"name": ..., "contrasts": [["A", "B"], ...]}, ...] as asked
  notes_json      TEXT NOT NULL DEFAULT '[]',  -- what was left out and why, one line each
  fp4lab_version  TEXT NOT NULL,
  created         REAL NOT NULL
);
CREATE INDEX contrast_sets_by_input ON contrast_sets (grid, input_hash);

CREATE TABLE contrasts (
  contrast_set      INTEGER NOT NULL REFERENCES contrast_sets (id),
  position          INTEGER NOT NULL,    -- order within the set: family, then contrast, then point
  family            TEXT NOT NULL,
  is_primary        INTEGER NOT NULL CHECK (is_primary IN (0, 1)),
  recipe            TEXT NOT NULL,       -- A of d = (L_A - L_B) / mean L_baseline
  against           TEXT NOT NULL,       -- B
  baseline          TEXT NOT NULL,
  metric            TEXT NOT NULL,       -- 'final_eval': the last eval/loss; 'train_tail': mean train/loss of the last steps
  point             TEXT NOT NULL,       -- the grid point: model, tokens and the grids that declare it
  model             TEXT NOT NULL,
  n_params_nonembedding INTEGER NOT NULL,
  tokens            INTEGER NOT NULL,
  seeds             INTEGER NOT NULL,    -- pairs (seeds with a finished run of A and of B)
  wins              INTEGER NOT NULL,    -- pairs with d < 0 (A closer to the baseline)
  baseline_seeds    INTEGER NOT NULL,    -- baseline runs whose mean is the denominator
  missing_twins     INTEGER NOT NULL,    -- pairs whose seed has no finished baseline run
  baseline_mean     REAL NOT NULL,
  mean_pp           REAL,                -- d in percentage points of baseline_mean (NULL: not a number)
  sd_pp             REAL,
  se_pp             REAL,
  lo_pp             REAL,                -- 95% Student-t interval of the mean
  hi_pp             REAL,
  p_t               REAL,                -- two-sided paired t-test
  p_sign_flip       REAL,                -- two-sided sign-flip (paired permutation) test
  sign_flip_method  TEXT NOT NULL,
  p_holm            REAL,                -- p_sign_flip, Holm-adjusted within the family
  sd_recipe_pp      REAL,                -- seed sd of L_A, in pp of baseline_mean (the pairs' seeds)
  sd_against_pp     REAL,                -- seed sd of L_B
  correlation       REAL,                -- of L_A and L_B over the seeds: the seed-shared part
  d_json            TEXT NOT NULL,       -- [[seed, d_pp], ...] by seed
  PRIMARY KEY (contrast_set, position)
) WITHOUT ROWID;
)sql";

// Version 7: the non-embedding parameters one token uses (docs/model.md, "Sizes of MoE models"),
// beside n_params_nonembedding, which counts every expert of an MoE model. Runs recorded before are
// dense (MoE models came with this version), so theirs is n_params_nonembedding.
constexpr const char* kMigration7 = R"sql(
ALTER TABLE runs ADD COLUMN n_params_active_nonembedding INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET n_params_active_nonembedding = n_params_nonembedding;
)sql";

static_assert(kStoreApplicationId == 1179661395, "kMigration1 writes this number literally");

}  // namespace

const std::vector<Migration>& store_migrations() {
  static const std::vector<Migration> steps = {
      {1, "grids, runs, grid_runs, attempts, metrics", kMigration1},
      {2, "probes, probe_gemms, provenance, fits; runs.ingested_bytes; views final_losses, bf16_gap, run_progress",
       kMigration2},
      {3, "fits.predictions_json", kMigration3},
      {4, "runs.data_fingerprint; ingested_bytes reset so that the next ingest reads it", kMigration4},
      {5, "runs.numerics, the numerics identity; older runs' from their latest attempt's commit", kMigration5},
      {6, "contrast_sets, contrasts: paired contrasts over seeds", kMigration6},
      {7, "runs.n_params_active_nonembedding (MoE models' active count; the dense count for older runs)", kMigration7},
  };
  return steps;
}

int latest_store_version() { return static_cast<int>(store_migrations().size()); }

int read_user_version(sqlite3* db, const std::filesystem::path& path) {
  Statement s(db, path, "PRAGMA user_version");
  if (!s.step()) throw std::runtime_error(path.string() + ": PRAGMA user_version returned no row");
  const int v = static_cast<int>(s.column_int64(0));
  s.reset();
  return v;
}

void migrate_store(sqlite3* db, const std::filesystem::path& path, int target_version) {
  const auto& steps = store_migrations();
  if (target_version > latest_store_version())
    throw std::logic_error("migrate_store: no migration to version " + std::to_string(target_version));
  if (sqlite3_create_function(db, "fp4_numerics_of_commit", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nullptr,
                              numerics_of_commit, nullptr, nullptr) != SQLITE_OK)
    throw std::runtime_error(path.string() + ": registering fp4_numerics_of_commit: " + sqlite3_errmsg(db));
  WriteTransaction tx(db, path);
  // Read under the write lock: a concurrent opener may have migrated while we waited for it.
  const int version = read_user_version(db, path);
  if (version >= target_version) return;  // the destructor ends the (empty) transaction
  // Every missing step in this one transaction: readers see the file before or after, never between
  // steps. (One transaction per step let `sweep status`, started beside the first `sweep run` of a
  // new store, see version 1 and refuse the store as too old to read.)
  for (int v = version; v < target_version; ++v) {
    const Migration& m = steps[static_cast<size_t>(v)];
    exec(db, path, m.sql, "migrating the schema to version " + std::to_string(m.to_version));
  }
  exec(db, path, ("PRAGMA user_version = " + std::to_string(target_version)).c_str(), "setting the schema version");
  tx.commit();
}

}  // namespace fp4::store::detail
