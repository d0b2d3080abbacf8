// sql_test_helpers.h — raw SQL in tests: the docs' example queries (every statement of a block,
// stepped to the end, as a reader pasting it into sqlite3 would), single values of a query, and
// store files as an older fp4lab left them.
#pragma once

#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "store/schema.h"

namespace fp4::test {

struct StatementRun {
  std::string sql;  // the statement and whatever follows it in the block
  int rows = 0;     // how many rows it gave
};

// Prepares and steps each statement of `sql` (one or more, separated by ';') on `db`; the test
// case fails on a statement that does not prepare or does not step to SQLITE_DONE.
inline std::vector<StatementRun> run_statements(sqlite3* db, const std::string& sql_text) {
  std::vector<StatementRun> out;
  const char* sql = sql_text.c_str();
  while (*sql != '\0') {
    sqlite3_stmt* s = nullptr;
    const char* rest = nullptr;
    const int rc = sqlite3_prepare_v2(db, sql, -1, &s, &rest);
    INFO("query: " << sql << "\nerror: " << sqlite3_errmsg(db));
    REQUIRE(rc == SQLITE_OK);
    if (s == nullptr) break;  // only whitespace or comments were left
    StatementRun run{sql, 0};
    int step_rc = SQLITE_ROW;
    while ((step_rc = sqlite3_step(s)) == SQLITE_ROW) ++run.rows;
    CHECK(step_rc == SQLITE_DONE);
    sqlite3_finalize(s);
    out.push_back(std::move(run));
    sql = rest;
  }
  return out;
}

// One SQL value as text, for checks on raw queries ("NULL" for NULL, "<no row>" for no row).
inline std::string query_one(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK);
  std::string out = "<no row>";
  if (sqlite3_step(s) == SQLITE_ROW)
    out = sqlite3_column_type(s, 0) == SQLITE_NULL ? "NULL" : reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  return out;
}

inline int64_t query_int(sqlite3* db, const std::string& sql) { return std::stoll(query_one(db, sql)); }

// Runs `sql` (any number of statements); the test case fails on an error, naming it.
inline void exec_sql(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  INFO(sql << ": " << (error ? error : ""));
  sqlite3_free(error);
  REQUIRE(rc == SQLITE_OK);
}

// A store file at schema `version` (an older fp4lab's), holding the rows `sql` inserts.
inline void write_old_store(const std::filesystem::path& path, int version, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  store::detail::migrate_store(db, path, version);
  exec_sql(db, sql);
  sqlite3_close(db);
}

}  // namespace fp4::test
