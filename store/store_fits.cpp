// store_fits.cpp — the part of the Store (store.h) that `fp4lab fit` uses: the final losses it
// fits, and the `fits` table it writes. The JSON inside a fit row is fit/'s business
// (fit/stored_fit.h); here it is text.
#include <sqlite3.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "base/clock.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace fp4::store {

using detail::Statement;

std::vector<FinalLossRecord> Store::final_losses() const {
  // LEFT JOIN: a run without any eval/loss is still returned (the fitter lists it as excluded).
  Statement s(db_, path_,
              "SELECT r.id, r.name, r.recipe, r.model, r.match_key, r.error, r.baseline, r.n_params, "
              "r.n_params_nonembedding, r.tokens, r.seed, r.state, f.final_step, f.final_loss, f.final_is_nan "
              "FROM runs AS r LEFT JOIN final_losses AS f ON f.id = r.id "
              "ORDER BY r.recipe, r.n_params_nonembedding, r.tokens, r.seed, r.name");
  std::vector<FinalLossRecord> out;
  while (s.step()) {
    FinalLossRecord r;
    r.id = s.column_text(0);
    r.name = s.column_text(1);
    r.recipe = s.column_text(2);
    r.model = s.column_text(3);
    r.match_key = s.column_text(4);
    r.error = s.column_text(5);
    r.baseline = s.column_int64(6) != 0;
    r.n_params = s.column_int64(7);
    r.n_params_nonembedding = s.column_int64(8);
    r.tokens = s.column_int64(9);
    r.seed = static_cast<uint64_t>(s.column_int64(10));  // the uint64's bits (docs/sweeps.md)
    r.state = parse_run_state(s.column_text(11));
    if (!s.is_null(12)) {
      r.final_step = s.column_int64(12);
      r.final_is_nan = s.column_int64(14) != 0;
      r.final_loss = r.final_is_nan ? std::numeric_limits<double>::quiet_NaN() : s.column_real(13);
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

constexpr const char* kFitColumns =
    "id, law, scope, input_hash, params_json, intervals_json, quality_json, options_json, predictions_json, "
    "n_points, fp4lab_version, created";

FitRecord read_fit_row(const Statement& s) {
  FitRecord f;
  f.id = s.column_int64(0);
  f.law = s.column_text(1);
  f.scope = s.column_text(2);
  f.input_hash = s.column_text(3);
  f.params_json = s.column_text(4);
  f.intervals_json = s.column_text(5);
  f.quality_json = s.column_text(6);
  f.options_json = s.column_text(7);
  f.predictions_json = s.column_text(8);
  f.n_points = s.column_int64(9);
  f.fp4lab_version = s.column_text(10);
  f.created = s.column_double(11);
  return f;
}

}  // namespace

int64_t Store::insert_fit(const FitRecord& f) {
  // One statement: atomic by itself, no transaction needed.
  Statement s(db_, path_,
              "INSERT INTO fits (law, scope, input_hash, params_json, intervals_json, quality_json, options_json, "
              "predictions_json, n_points, fp4lab_version, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  s.bind(1, f.law).bind(2, f.scope).bind(3, f.input_hash).bind(4, f.params_json).bind(5, f.intervals_json);
  s.bind(6, f.quality_json).bind(7, f.options_json).bind(8, f.predictions_json).bind(9, f.n_points);
  s.bind(10, f.fp4lab_version).bind(11, f.created != 0 ? f.created : unix_time_s());
  s.run();
  return sqlite3_last_insert_rowid(db_);
}

std::vector<FitRecord> Store::fits() const {
  Statement s(db_, path_, std::string("SELECT ") + kFitColumns + " FROM fits ORDER BY id");
  std::vector<FitRecord> out;
  while (s.step()) out.push_back(read_fit_row(s));
  return out;
}

std::optional<FitRecord> Store::find_fit(const std::string& law, const std::string& scope,
                                         const std::string& input_hash) const {
  Statement s(db_, path_,
              std::string("SELECT ") + kFitColumns +
                  " FROM fits WHERE law = ?1 AND scope = ?2 AND input_hash = ?3 ORDER BY id DESC LIMIT 1");
  s.bind(1, law).bind(2, scope).bind(3, input_hash);
  if (!s.step()) return std::nullopt;
  FitRecord f = read_fit_row(s);
  s.reset();
  return f;
}

// Paired contrasts (fit/contrasts.h). A set and its rows are written in one transaction: a reader
// sees the whole set or none of it.
namespace {

constexpr const char* kContrastColumns =
    "family, is_primary, recipe, against, baseline, metric, point, model, n_params_nonembedding, tokens, seeds, "
    "wins, baseline_seeds, missing_twins, baseline_mean, mean_pp, sd_pp, se_pp, lo_pp, hi_pp, p_t, p_sign_flip, "
    "sign_flip_method, p_holm, d_json, sd_recipe_pp, sd_against_pp, correlation";

ContrastRecord read_contrast_row(const Statement& s) {
  ContrastRecord c;
  c.family = s.column_text(0);
  c.primary = s.column_int64(1) != 0;
  c.recipe = s.column_text(2);
  c.against = s.column_text(3);
  c.baseline = s.column_text(4);
  c.metric = s.column_text(5);
  c.point = s.column_text(6);
  c.model = s.column_text(7);
  c.n_params_nonembedding = s.column_int64(8);
  c.tokens = s.column_int64(9);
  c.seeds = s.column_int64(10);
  c.wins = s.column_int64(11);
  c.baseline_seeds = s.column_int64(12);
  c.missing_twins = s.column_int64(13);
  c.baseline_mean = s.column_real(14);
  c.mean_pp = s.column_real(15);
  c.sd_pp = s.column_real(16);
  c.se_pp = s.column_real(17);
  c.lo_pp = s.column_real(18);
  c.hi_pp = s.column_real(19);
  c.p_t = s.column_real(20);
  c.p_sign_flip = s.column_real(21);
  c.sign_flip_method = s.column_text(22);
  c.p_holm = s.column_real(23);
  c.d_json = s.column_text(24);
  c.sd_recipe_pp = s.column_real(25);
  c.sd_against_pp = s.column_real(26);
  c.correlation = s.column_real(27);
  return c;
}

constexpr const char* kContrastSetColumns = "id, grid, input_hash, source, families_json, notes_json, fp4lab_version, created";

ContrastSetRecord read_contrast_set_row(const Statement& s) {
  ContrastSetRecord r;
  r.id = s.column_int64(0);
  r.grid = s.column_text(1);
  r.input_hash = s.column_text(2);
  r.source = s.column_text(3);
  r.families_json = s.column_text(4);
  r.notes_json = s.column_text(5);
  r.fp4lab_version = s.column_text(6);
  r.created = s.column_double(7);
  return r;
}

void read_contrast_rows(sqlite3* db, const std::filesystem::path& path, ContrastSetRecord& set) {
  Statement s(db, path,
              std::string("SELECT ") + kContrastColumns + " FROM contrasts WHERE contrast_set = ?1 ORDER BY position");
  s.bind(1, set.id);
  while (s.step()) set.contrasts.push_back(read_contrast_row(s));
}

}  // namespace

int64_t Store::insert_contrast_set(const ContrastSetRecord& r) {
  detail::WriteTransaction tx(db_, path_);
  Statement set(db_, path_,
                "INSERT INTO contrast_sets (grid, input_hash, source, families_json, notes_json, fp4lab_version, created) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  set.bind(1, r.grid).bind(2, r.input_hash).bind(3, r.source).bind(4, r.families_json).bind(5, r.notes_json);
  set.bind(6, r.fp4lab_version).bind(7, r.created != 0 ? r.created : unix_time_s());
  set.run();
  const int64_t id = sqlite3_last_insert_rowid(db_);
  Statement row(db_, path_,
                std::string("INSERT INTO contrasts (contrast_set, position, ") + kContrastColumns +
                    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
                    "?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)");
  int64_t position = 0;
  for (const ContrastRecord& c : r.contrasts) {
    row.bind(1, id).bind(2, position++).bind(3, c.family).bind(4, int64_t{c.primary ? 1 : 0}).bind(5, c.recipe);
    row.bind(6, c.against).bind(7, c.baseline).bind(8, c.metric).bind(9, c.point).bind(10, c.model);
    row.bind(11, c.n_params_nonembedding).bind(12, c.tokens).bind(13, c.seeds).bind(14, c.wins);
    row.bind(15, c.baseline_seeds).bind(16, c.missing_twins).bind(17, c.baseline_mean).bind(18, c.mean_pp);
    row.bind(19, c.sd_pp).bind(20, c.se_pp).bind(21, c.lo_pp).bind(22, c.hi_pp).bind(23, c.p_t);
    row.bind(24, c.p_sign_flip).bind(25, c.sign_flip_method).bind(26, c.p_holm).bind(27, c.d_json);
    row.bind(28, c.sd_recipe_pp).bind(29, c.sd_against_pp).bind(30, c.correlation);
    row.run();
    row.reset();
  }
  tx.commit();
  return id;
}

std::vector<ContrastSetRecord> Store::contrast_sets() const {
  std::vector<ContrastSetRecord> out;
  {
    Statement s(db_, path_, std::string("SELECT ") + kContrastSetColumns + " FROM contrast_sets ORDER BY id");
    while (s.step()) out.push_back(read_contrast_set_row(s));
  }
  for (ContrastSetRecord& set : out) read_contrast_rows(db_, path_, set);
  return out;
}

std::optional<ContrastSetRecord> Store::find_contrast_set(const std::string& grid, const std::string& input_hash) const {
  std::optional<ContrastSetRecord> out;
  {
    Statement s(db_, path_,
                std::string("SELECT ") + kContrastSetColumns +
                    " FROM contrast_sets WHERE grid = ?1 AND input_hash = ?2 ORDER BY id DESC LIMIT 1");
    s.bind(1, grid).bind(2, input_hash);
    if (s.step()) out = read_contrast_set_row(s);
  }
  if (out) read_contrast_rows(db_, path_, *out);
  return out;
}

}  // namespace fp4::store
