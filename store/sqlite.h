// sqlite.h — the thin layer over the SQLite C API that the store is written with (private to
// store/: nothing outside the store includes it, except its tests).
//
// Why a layer: every statement is prepared and bound (never formatted with values), every error
// names the store file and what was being done, and the two places where a writer could still meet
// "database is locked" despite the busy timeout are retried here once, for everyone:
//   * a statement run outside a transaction that returns SQLITE_BUSY without waiting (SQLite skips
//     the busy handler where waiting could deadlock, and during WAL recovery), and
//   * BEGIN IMMEDIATE / COMMIT themselves.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace fp4::store::detail {

// How long a writer waits for another writer's lock, in SQLite's busy handler and again in our own
// retries where the handler does not apply. Sweep transactions are milliseconds long; 30 s only
// runs out when another process holds a transaction open for a long time (a stuck `sqlite3` shell).
inline constexpr int kBusyTimeoutMs = 30000;

// "<store path>: <what>: <sqlite message>", as a std::runtime_error: for failures that are not the
// user's (a full disk, an I/O error, a constraint our own code broke).
[[noreturn]] void throw_sqlite_error(sqlite3* db, const std::filesystem::path& path, std::string_view what);

// Runs `sql` (no values bound; one or more statements) with sqlite3_exec, retrying SQLITE_BUSY.
void exec(sqlite3* db, const std::filesystem::path& path, const char* sql, std::string_view what);

// A prepared statement, finalized on destruction. step() returns true while there is a row.
class Statement {
 public:
  Statement(sqlite3* db, const std::filesystem::path& path, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are numbered from 1, as in SQLite. Text is copied (SQLITE_TRANSIENT), so temporaries
  // may be bound.
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, double value);  // NaN is stored as NULL (SQLite's own rule)
  Statement& bind(int index, std::string_view value);
  Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  Statement& bind_null(int index);
  template <typename T>
  Statement& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind_null(index);
  }

  bool step();
  // Steps a statement that returns no rows to completion.
  void run() {
    while (step()) {
    }
  }
  // Makes the statement ready to be bound and run again.
  void reset();

  bool is_null(int column) const;
  int64_t column_int64(int column) const;
  double column_double(int column) const;
  double column_real(int column) const;       // NaN for NULL (a NaN is bound as NULL)
  std::string column_text(int column) const;  // "" for NULL

 private:
  void check_bind(int rc, int index);
  sqlite3* db_;
  const std::filesystem::path& path_;
  sqlite3_stmt* stmt_ = nullptr;
  bool rows_delivered_ = false;  // a row of the current execution was returned
};

// A write transaction: BEGIN IMMEDIATE in the constructor (takes the write lock at once, so two
// writers queue on the lock instead of both reading and then failing to upgrade), ROLLBACK in the
// destructor unless commit() was called.
class WriteTransaction {
 public:
  WriteTransaction(sqlite3* db, const std::filesystem::path& path);
  ~WriteTransaction();
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit();

 private:
  sqlite3* db_;
  const std::filesystem::path& path_;
  bool open_ = true;
};

}  // namespace fp4::store::detail
