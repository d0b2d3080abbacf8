// test_run_ids_committed.cpp — the run ids of every committed study store are still what this
// build's config resolution gives their stored configs: a new config field (such as "gpus") must
// leave the canonical form, so the id, of every existing run unchanged, or the committed stores
// (results/*/*.db.xz) would no longer match their grids.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/run/config.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

TEST_CASE("run ids: every committed store's runs keep their ids under this build's config resolution",
          "[run][config][gpus]") {
  if (std::system("xz --version >/dev/null 2>&1") != 0) {
    WARN("xz is not installed: the committed stores cannot be read, skipped");
    return;
  }
  const fs::path results = fs::path(FP4LAB_SOURCE_DIR) / "results";
  std::vector<fs::path> stores;
  for (const auto& study : fs::directory_iterator(results))
    if (study.is_directory())
      for (const auto& f : fs::directory_iterator(study.path()))
        if (f.path().string().ends_with(".db.xz")) stores.push_back(f.path());
  REQUIRE_FALSE(stores.empty());
  const fp4::test::ScratchDir tmp;
  int checked = 0;
  for (const fs::path& xz : stores) {
    INFO(xz.string());
    const fs::path db = tmp / (xz.stem().string());
    REQUIRE(std::system(("xz -dc '" + xz.string() + "' > '" + db.string() + "'").c_str()) == 0);
    sqlite3* h = nullptr;
    REQUIRE(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    REQUIRE(sqlite3_prepare_v2(h, "SELECT id, config_json FROM runs", -1, &q, nullptr) == SQLITE_OK);
    while (sqlite3_step(q) == SQLITE_ROW) {
      const std::string id = reinterpret_cast<const char*>(sqlite3_column_text(q, 0));
      const std::string config = reinterpret_cast<const char*>(sqlite3_column_text(q, 1));
      INFO(id);
      const fp4::run::RunConfig c = fp4::run::config_from_text(config, id);
      CHECK(fp4::run::config_hash(c) == id);
      CHECK(c.gpus == 1);
      ++checked;
    }
    sqlite3_finalize(q);
    sqlite3_close(h);
  }
  CHECK(checked > 0);
}
