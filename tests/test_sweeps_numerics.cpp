// test_sweeps_numerics.cpp — numerics never mix silently: every run records the identity it
// trained under (its run row, the store), `sweep run` and `sweep slurm` refuse to start a run whose
// twin (same config but the recipe) trained under another identity unless --mix-numerics is given,
// the report shows each run's identity and marks a gap that spans two, and a checkpoint written
// under another identity is not resumed.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "base/numerics_identity.h"
#include "store/store.h"
#include "tests/report_test_helpers.h"
#include "tests/run_test_helpers.h"
#include "tests/sql_test_helpers.h"
#include "tests/sweeps_test_helpers.h"

namespace fs = std::filesystem;
using fp4::store::Store;

namespace {

// What an older binary would have left: the run trained under identity `identity` (the store is
// written directly, as fp4lab would never write it).
void set_numerics(const fs::path& db_path, const std::string& run_name, int identity) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(db_path.c_str(), &db) == SQLITE_OK);
  fp4::test::exec_sql(db, "UPDATE runs SET numerics = " + std::to_string(identity) + " WHERE name = '" + run_name + "'");
  const int changed = sqlite3_changes(db);
  sqlite3_close(db);
  REQUIRE(changed == 1);
}

}  // namespace

TEST_CASE("sweep run refuses to compare runs of two numerics identities unless told to", "[sweeps][numerics]") {
  fp4::test::ScratchDir dir;
  // The BF16 run first, as under an older build.
  fs::path toml = fp4::test::write_tiny_grid(dir.path(), "mix", "recipe = [\"bf16\"]\ntokens = [1280]\n");
  auto r = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path db = dir / "mix.db";
  {
    auto store = Store::open(db, Store::Mode::read_only);
    REQUIRE(store->runs().size() == 1);
    CHECK(store->runs()[0].numerics == fp4::kNumericsIdentity);  // the trainer's run row, ingested
  }
  const std::string bf16_name = Store::open(db, Store::Mode::read_only)->runs()[0].name;
  set_numerics(db, bf16_name, fp4::kNumericsIdentity - 1);

  // The grid grows a 4-bit recipe: its run would be divided by a BF16 twin of other numerics.
  toml = fp4::test::write_tiny_grid(dir.path(), "mix", "recipe = [\"bf16\", \"e2m1\"]\ntokens = [1280]\n");
  for (const char* command : {"sweep run --plain", "sweep slurm --out job.sbatch"}) {
    INFO(command);
    r = fp4::test::run_fp4lab(std::string(command) + " '" + toml.string() + "'", dir);
    CHECK(r.exit_code == 2);
    CHECK(fp4::test::count_of(r.err, "\n") == 1);  // one line
    CHECK(r.err.find("numerics identity " + std::to_string(fp4::kNumericsIdentity - 1)) != std::string::npos);
    CHECK(r.err.find(bf16_name) != std::string::npos);
    CHECK(r.err.find("--mix-numerics") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "job.sbatch"));
  {
    auto store = Store::open(db, Store::Mode::read_only);
    for (const auto& run : store->runs()) CHECK(run.attempts == (run.name == bf16_name ? 1 : 0));  // nothing started
  }

  // Told to: it runs, and the report shows both identities and marks the gap.
  r = fp4::test::run_fp4lab("sweep run --plain --mix-numerics '" + toml.string() + "'", dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("--mix-numerics") != std::string::npos);
  const auto rep = fp4::test::run_report("'" + toml.string() + "'", dir.path());
  INFO(rep.err);
  REQUIRE(rep.exit_code == 0);
  fp4::test::HtmlDom dom(fp4::test::slurp(dir / "mix-report" / "report.html"));
  bool shown = false;
  for (const auto& t : dom.tables())
    if (t.caption.rfind("Every run in the store", 0) == 0) {
      shown = true;
      REQUIRE(t.rows.size() == 2);
      for (const auto& row : t.rows)
        CHECK(row.back() == std::to_string(row[0] == bf16_name ? fp4::kNumericsIdentity - 1 : fp4::kNumericsIdentity));
    }
  CHECK(shown);
  const std::string text = dom.text();
  CHECK(text.find("1 of the 1 gap pairs (a run and its BF16 twin) compare runs trained under two numerics identities") !=
        std::string::npos);
  CHECK(text.find("the runs of this store trained under 2 numerics identities") != std::string::npos);
  CHECK(fp4::test::slurp(dir / "mix-report" / "final_losses.csv").find(",numerics\n") != std::string::npos);
}

TEST_CASE("a run of one identity is not resumed under another", "[run][numerics]") {
  fp4::test::ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "resume", "recipe = [\"bf16\"]\ntokens = [1280]\n");
  auto r = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  REQUIRE(r.exit_code == 0);
  const auto run = Store::open(dir / "resume.db", Store::Mode::read_only)->runs().at(0);
  // Its checkpoints say which numerics wrote them.
  const fp4::run::CheckpointState st = fp4::test::final_state(run.dir);
  CHECK(st.extra["numerics"] == fp4::kNumericsIdentity);
  // Continued as if the newest checkpoint were another identity's (rewritten in place, and the run
  // made unfinished): refused, exit 2.
  auto loaded = fp4::run::load_latest_checkpoint(fs::path(run.dir) / "checkpoints");
  REQUIRE(loaded.has_value());
  loaded->state.extra["numerics"] = fp4::kNumericsIdentity + 1;
  fp4::run::write_checkpoint(fs::path(run.dir) / "checkpoints", loaded->state);
  fs::remove(fs::path(run.dir) / "status.json");
  r = fp4::test::run_fp4lab("train --resume --dir '" + run.dir + "' --config '" + (fs::path(run.dir) / "config.json").string() + "'",
                            dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("numerics identity " + std::to_string(fp4::kNumericsIdentity + 1)) != std::string::npos);
}
