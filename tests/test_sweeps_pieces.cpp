// A study run in pieces (issue 17): `sweep run --time-limit` (durations as people write them, runs
// that would end after the limit are not started, the limit stops the running ones as Ctrl-C does,
// resumably), and a store carried to a machine that lacks its run directories. The trainer is a
// stand-in shell script where the test needs to set what it does, so nothing here depends on how
// fast the machine is: the assertions are about outcomes, never about seconds.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/duration.h"
#include "store/store.h"
#include "sweeps/local_executor.h"
#include "tests/sweeps_test_helpers.h"

namespace fs = std::filesystem;
using fp4::store::RunState;
using fp4::store::Store;
using fp4::test::ScratchDir;

namespace {

// argv: train --config DIR/run.json --dir DIR --resume --quiet. Sleeps $STAND_IN_TENTHS tenths of a
// second in small naps (so a SIGTERM is answered within one), then succeeds; SIGTERM exits 143
// as a checkpointing trainer does.
void write_stand_in_trainer(const fs::path& path) {
  fp4::test::write_script(path,
                          "#!/bin/sh\n"
                          "trap 'exit 143' TERM\n"
                          "i=0\n"
                          "while [ \"$i\" -lt \"${STAND_IN_TENTHS:-10}\" ]; do sleep 0.1; i=$((i + 1)); done\n"
                          "printf '{\"state\": \"succeeded\", \"step\": 10}' > \"$5/status.json\"\n");
}

int sweep_run(const fs::path& toml, const fs::path& trainer, const fs::path& log, int tenths,
              const std::string& extra_args) {
  const std::string cmd = "STAND_IN_TENTHS=" + std::to_string(tenths) + " FP4LAB_TRAINER='" + trainer.string() +
                          "' '" + FP4LAB_BINARY + "' sweep run --plain " + extra_args + " '" + toml.string() +
                          "' >'" + log.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("durations: units from days to seconds, refusals", "[sweeps][time_limit]") {
  CHECK(fp4::parse_duration_s("600") == 600.0);
  CHECK(fp4::parse_duration_s("90s") == 90.0);
  CHECK(fp4::parse_duration_s("9m30s") == 570.0);
  CHECK(fp4::parse_duration_s("1h30m") == 5400.0);
  CHECK(fp4::parse_duration_s("1.5h") == 5400.0);
  CHECK(fp4::parse_duration_s("2d") == 172800.0);
  CHECK(fp4::parse_duration_s("0s") == 0.0);
  for (const char* bad : {"", "m", "10x", "1h30", "30m1h", "1h1h", "-5s", "1e3s", "1..5h", " 5s", "5s ", "nan"})
    CHECK_FALSE(fp4::parse_duration_s(bad).has_value());
}

TEST_CASE("sweep run --time-limit stops running runs at the limit, resumably", "[sweeps][time_limit]") {
  ScratchDir dir;
  const fs::path trainer = dir / "stand-in.sh";
  write_stand_in_trainer(trainer);
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "limit", "seed = [0, 1]\ntokens = [1280]\n");

  // Runs of 100 s under a limit of 1 s: both start (nothing is known about their length yet) and
  // are stopped at the limit.
  const int code = sweep_run(toml, trainer, dir / "first.log", 1000, "--time-limit 1s");
  const std::string log = fp4::test::slurp(dir / "first.log");
  INFO(log);
  CHECK(code == fp4::sweeps::kExitTimeLimit);
  CHECK(log.find("time limit reached: 2 running run(s) will checkpoint and exit") != std::string::npos);
  CHECK(log.find("time limit: 2 run(s) left for the next `sweep run`") != std::string::npos);
  {
    auto store = Store::open(dir / "limit.db", Store::Mode::read_only);
    for (const auto& r : store->runs()) {
      CHECK(r.state == RunState::orphaned);
      CHECK(r.lease_owner.empty());
      REQUIRE(store->attempts(r.id).size() == 1);
      CHECK(store->attempts(r.id)[0].exit_code == 143);
    }
  }
  // The next invocation, without a limit, finishes them.
  CHECK(sweep_run(toml, trainer, dir / "second.log", 1, "") == 0);
  auto store = Store::open(dir / "limit.db", Store::Mode::read_only);
  for (const auto& r : store->runs()) CHECK(r.state == RunState::succeeded);

  // A bad limit is one line, exit 2, before anything runs.
  for (const char* bad : {"soon", "0", "1h30"}) {
    const auto r = fp4::test::run_fp4lab(std::string("sweep run --time-limit '") + bad + "' '" + toml.string() + "'",
                                         dir.path());
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--time-limit") != std::string::npos);
  }
}

TEST_CASE("sweep run --time-limit does not start a run the store says would not end in time", "[sweeps][time_limit]") {
  ScratchDir dir;
  const fs::path trainer = dir / "stand-in.sh";
  write_stand_in_trainer(trainer);
  // One finished run measures how long a d1 bf16 run takes per token here.
  const fs::path first = fp4::test::write_tiny_grid(dir.path(), "fit", "tokens = [1280]\n");
  REQUIRE(sweep_run(first, trainer, dir / "first.log", 5, "") == 0);

  // The same grid with a run of the same length (another seed) and one 10000 times longer, under a
  // limit of an hour: the short one runs, the long one (at least 10000 × 0.5 s) does not start.
  std::string text = fp4::test::slurp(first);
  text.replace(text.find("tokens = [1280]"), std::string("tokens = [1280]").size(), "tokens = [1280, 12800000]\nseed = [1]");
  const fs::path second = dir / "fit-longer.toml";
  fp4::test::spit(second, text);
  const int code = sweep_run(second, trainer, dir / "second.log", 5, "--time-limit 1h");
  const std::string log = fp4::test::slurp(dir / "second.log");
  INFO(log);
  CHECK(code == fp4::sweeps::kExitTimeLimit);
  CHECK(log.find("not starting d1-12.8M-bf16-s1: expected to take") != std::string::npos);
  CHECK(log.find("d1-1.28k-bf16-s1 succeeded") != std::string::npos);
  auto store = Store::open(dir / "fit.db", Store::Mode::read_only);
  int pending = 0, succeeded = 0;
  for (const auto& r : store->runs()) {
    if (r.tokens == 12800000) {
      CHECK(r.state == RunState::pending);
      CHECK(store->attempts(r.id).empty());
      ++pending;
    } else {
      CHECK(r.state == RunState::succeeded);
      ++succeeded;
    }
  }
  CHECK(pending == 1);
  CHECK(succeeded == 2);
}

TEST_CASE("a store carried to a machine without its run directories finishes its orphaned runs whole",
          "[sweeps][time_limit]") {
  ScratchDir dir;
  // The reference: the grid run through once.
  const fs::path ref = fp4::test::write_tiny_grid(dir.path(), "ref", "seed = [0, 1]\ntokens = [25600]\n");
  REQUIRE(fp4::test::run_fp4lab("sweep run --plain '" + ref.string() + "'", dir.path()).exit_code == 0);

  // The same grid in another store, first "trained" on another machine by a stand-in that wrote 12
  // rows of wrong, padded losses and was interrupted: the store ingested them and holds the byte
  // offset it reached in a metrics.jsonl that this machine does not have.
  std::string text = fp4::test::slurp(ref);
  for (const char* from : {"\"ref\"", "\"ref.db\"", "\"ref-runs\""}) {
    const std::string to = std::string(from).replace(1, 3, "moved");
    text.replace(text.find(from), std::string(from).size(), to);
  }
  const fs::path moved = dir / "moved.toml";
  fp4::test::spit(moved, text);
  const fs::path partial = dir / "partial.sh";
  fp4::test::write_script(partial,
                          "#!/bin/sh\n"
                          "for s in 1 2 3 4 5 6 7 8 9 10 11 12; do\n"
                          "  printf '{\"kind\": \"train\", \"step\": %s, \"tokens\": %s, \"loss\": -1, \"lr\": 0, \"grad_norm\": 0, "
                          "\"pad\": \"%0200d\"}\\n' \"$s\" \"$((s * 128))\" 0 >> \"$5/metrics.jsonl\"\n"
                          "done\n"
                          "exit 143\n");
  const std::string cmd = "FP4LAB_TRAINER='" + partial.string() + "' '" + FP4LAB_BINARY + "' sweep run --plain '" +
                          moved.string() + "' >'" + (dir / "partial.log").string() + "' 2>&1";
  CHECK(std::system(cmd.c_str()) != 0);  // interrupted, again and again, up to the attempt cap
  {
    auto store = Store::open(dir / "moved.db", Store::Mode::read_only);
    for (const auto& r : store->runs()) {
      CHECK(r.state == RunState::orphaned);
      CHECK(r.ingested_bytes > 12 * 50);
    }
  }
  fs::remove_all(dir / "moved-runs");  // the other machine's run directories stay there
  // What the runs write here outgrows that offset, so resuming from it would read from mid-file.
  {
    auto a = Store::open(dir / "ref.db", Store::Mode::read_only);
    auto b = Store::open(dir / "moved.db", Store::Mode::read_only);
    for (const auto& r : a->runs()) REQUIRE(r.ingested_bytes > 2 * b->run(r.id)->ingested_bytes);
  }

  // Here the runs start over, and everything they write is ingested from its first byte.
  const auto rerun = fp4::test::run_fp4lab("sweep run --plain '" + moved.string() + "'", dir.path());
  INFO(rerun.err);
  REQUIRE(rerun.exit_code == 0);
  auto a = Store::open(dir / "ref.db", Store::Mode::read_only);
  auto b = Store::open(dir / "moved.db", Store::Mode::read_only);
  for (const auto& r : a->runs()) {
    const auto other = b->run(r.id);
    REQUIRE(other);
    CHECK(other->state == RunState::succeeded);
    CHECK(other->ingested_bytes == static_cast<int64_t>(fs::file_size(fs::path(other->dir) / "metrics.jsonl")));
    for (const char* key : {"train/loss", "train/grad_norm", "eval/loss"}) {
      const auto want = a->metrics(r.id, key), got = b->metrics(r.id, key);
      REQUIRE(want.size() == got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO(key << " step " << want[i].step);
        CHECK(got[i].step == want[i].step);
        CHECK(got[i].value == want[i].value);
      }
    }
  }
}
