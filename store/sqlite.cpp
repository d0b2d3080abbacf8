// sqlite.cpp — see sqlite.h.
#include "store/sqlite.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <thread>

namespace fp4::store::detail {

namespace {

bool is_busy(int rc) { return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED; }

// Sleeps a little longer each time, and says whether the caller may try again: a BUSY that the busy
// handler did not absorb is retried for as long as the handler itself would have waited.
class BusyRetry {
 public:
  bool wait_again() {
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {
      started_ = true;
      first_ = now;
    }
    if (now - first_ > std::chrono::milliseconds(kBusyTimeoutMs)) return false;
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(64000));
    return true;
  }

 private:
  bool started_ = false;
  std::chrono::steady_clock::time_point first_;
  std::chrono::microseconds delay_{500};
};

}  // namespace

void throw_sqlite_error(sqlite3* db, const std::filesystem::path& path, std::string_view what) {
  const char* message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
  throw std::runtime_error(path.string() + ": " + std::string(what) + ": " + message);
}

void exec(sqlite3* db, const std::filesystem::path& path, const char* sql, std::string_view what) {
  // Only a statement run outside a transaction can be repeated safely after BUSY: inside one, the
  // earlier statements of the transaction would have to be repeated too.
  const bool may_retry = sqlite3_get_autocommit(db) != 0;
  BusyRetry retry;
  for (;;) {
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if (may_retry && is_busy(rc) && retry.wait_again()) continue;
    throw_sqlite_error(db, path, what);
  }
}

Statement::Statement(sqlite3* db, const std::filesystem::path& path, std::string_view sql) : db_(db), path_(path) {
  if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK)
    throw_sqlite_error(db, path, "preparing \"" + std::string(sql.substr(0, 60)) + "\"");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::check_bind(int rc, int index) {
  if (rc != SQLITE_OK)
    throw_sqlite_error(db_, path_, "binding parameter " + std::to_string(index) + " of \"" +
                                       std::string(sqlite3_sql(stmt_)).substr(0, 60) + "\"");
}

Statement& Statement::bind(int index, int64_t value) {
  check_bind(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  check_bind(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
  check_bind(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8), index);
  return *this;
}

Statement& Statement::bind_null(int index) {
  check_bind(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

bool Statement::step() {
  BusyRetry retry;
  for (;;) {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) {
      rows_delivered_ = true;
      return true;
    }
    const bool may_retry = !rows_delivered_;
    rows_delivered_ = false;
    if (rc == SQLITE_DONE) {
      sqlite3_reset(stmt_);
      return false;
    }
    // sqlite3_reset repeats the step's error code; the message stays readable until then.
    const std::string message = sqlite3_errmsg(db_);
    sqlite3_reset(stmt_);
    // Repeating is safe only before any row was handed out, and outside a transaction.
    if (may_retry && is_busy(rc) && sqlite3_get_autocommit(db_) != 0 && retry.wait_again()) continue;
    throw std::runtime_error(path_.string() + ": running \"" + std::string(sqlite3_sql(stmt_)).substr(0, 60) +
                             "\": " + message);
  }
}

void Statement::reset() {
  rows_delivered_ = false;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

int64_t Statement::column_int64(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::column_double(int column) const { return sqlite3_column_double(stmt_, column); }
double Statement::column_real(int column) const {
  return is_null(column) ? std::numeric_limits<double>::quiet_NaN() : column_double(column);
}

std::string Statement::column_text(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  if (text == nullptr) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

WriteTransaction::WriteTransaction(sqlite3* db, const std::filesystem::path& path) : db_(db), path_(path) {
  exec(db, path, "BEGIN IMMEDIATE", "starting a write transaction");
}

WriteTransaction::~WriteTransaction() {
  // After a failed statement SQLite may already have rolled back; ROLLBACK then only reports that
  // no transaction is active, which is harmless here.
  if (open_ && sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void WriteTransaction::commit() {
  // COMMIT that meets BUSY leaves the transaction open, so repeating it is safe (exec cannot know
  // that: it only retries outside transactions).
  BusyRetry retry;
  for (;;) {
    const int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) break;
    if (is_busy(rc) && sqlite3_get_autocommit(db_) == 0 && retry.wait_again()) continue;
    throw_sqlite_error(db_, path_, "committing");
  }
  open_ = false;
}

}  // namespace fp4::store::detail
