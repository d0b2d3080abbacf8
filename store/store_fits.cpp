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
      const bool nan = r.final_is_nan || s.is_null(13);
      r.final_loss = nan ? std::numeric_limits<double>::quiet_NaN() : s.column_double(13);
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

}  // namespace fp4::store
