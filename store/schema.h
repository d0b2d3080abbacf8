// schema.h — the store's schema as a list of migrations (private to store/ and its tests).
//
// Migration k takes a file from `PRAGMA user_version` k-1 to k. Each runs in its own BEGIN
// IMMEDIATE transaction that re-reads user_version first (another orchestrator may have migrated the
// file while this one waited for the lock) and sets it last, so a file is always at exactly one
// version, whatever was interrupted. Migrations are append-only: once released, a step is never
// edited; a change to the schema is a new step. docs/sweeps.md "The store" describes the result.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <vector>

namespace fp4::store::detail {

// PRAGMA application_id of a sweep store ("FP4S"): tells our files from other SQLite databases.
inline constexpr int32_t kStoreApplicationId = 0x46503453;

struct Migration {
  int to_version;       // the user_version this step produces
  const char* summary;  // one line, for docs and messages
  const char* sql;      // the DDL, run with sqlite3_exec
};

// Every step, in order: element k-1 produces version k.
const std::vector<Migration>& store_migrations();
int latest_store_version();

// PRAGMA user_version / application_id of an open connection (throws std::runtime_error naming
// `path` on failure).
int read_user_version(sqlite3* db, const std::filesystem::path& path);

// Applies the missing steps up to `target_version` (at most latest_store_version()), all in one
// transaction (a reader sees the old version or the target, nothing between). Store::open calls it with the latest version; tests call it with an older one to
// make an old file.
void migrate_store(sqlite3* db, const std::filesystem::path& path, int target_version);

}  // namespace fp4::store::detail
