// test_sweeps_run.cpp — the orchestrator end to end, through the fp4lab binary: plan writes
// nothing, run is idempotent, survives SIGKILL of itself and of its trainers at random moments
// with bit-identical results, Ctrl-C stops cleanly, a diverging run is a result, failed runs wait
// for --retry-failed, two orchestrators never run one run twice, Slurm jobs and ingest.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "base/directory_lock.h"
#include "store/store.h"
#include "sweeps/spec.h"
#include "tests/sweeps_test_helpers.h"

namespace fs = std::filesystem;
using fp4::store::RunState;
using fp4::store::Store;
using fp4::test::ScratchDir;

namespace {

// 3 recipes × 2 seeds × 2 lengths (50 and 60 steps of 128 tokens) = 12 runs.
const char* kTwelveRuns =
    "recipe = [\"bf16\", \"ufp4\", \"e2m1\"]\n"
    "seed = [0, 1]\n"
    "tokens = [6400, 7680]\n";

// The deterministic metric keys (everything but the two wall-clock fields).
const std::vector<std::string> kKeys = {"train/loss", "train/lr", "train/grad_norm", "eval/loss"};

struct Row {
  int64_t step, tokens;
  double value;
  bool is_nan;
  bool operator==(const Row& o) const {
    return step == o.step && tokens == o.tokens && is_nan == o.is_nan &&
           (is_nan || std::memcmp(&value, &o.value, sizeof value) == 0);
  }
};

// run id → key → rows, for every run of the store.
std::map<std::string, std::map<std::string, std::vector<Row>>> all_rows(const Store& store) {
  std::map<std::string, std::map<std::string, std::vector<Row>>> out;
  for (const auto& r : store.runs())
    for (const std::string& key : kKeys)
      for (const auto& m : store.metrics(r.id, key)) out[r.id][key].push_back({m.step, m.tokens, m.value, m.is_nan});
  return out;
}

int64_t steps_of(const fp4::store::RunRecord& r) {
  return nlohmann::json::parse(r.config_json)["train"]["steps"].get<int64_t>();
}

// Every pid written in a heartbeat under `run_root` that is still a live `fp4lab train`.
// Trainers of runs under `run_root` that are alive: every process whose command line is a trainer
// of that root (found in /proc, so one that has started but not yet written its heartbeat counts
// too, or a round could begin beside it).
std::vector<pid_t> live_trainers(const fs::path& run_root) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    const std::string name = p.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = fp4::test::slurp(p.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(" train ") != std::string::npos && cmd.find(run_root.string()) != std::string::npos)
      pids.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return pids;
}

// Train rows in one run directory's metrics.jsonl, re-done steps included.
int64_t train_rows_of_run(const fs::path& run_dir) {
  int64_t rows = 0;
  const std::string text = fp4::test::slurp(run_dir / "metrics.jsonl");
  for (size_t p = text.find("\"kind\":\"train\""); p != std::string::npos; p = text.find("\"kind\":\"train\"", p + 1))
    ++rows;
  return rows;
}

// Train rows written under `run_root` so far, re-done steps included: the sweep's progress clock.
int64_t train_rows(const fs::path& run_root) {
  int64_t rows = 0;
  std::error_code ec;
  if (!fs::is_directory(run_root, ec)) return 0;
  for (const auto& d : fs::directory_iterator(run_root, ec)) rows += train_rows_of_run(d.path());
  return rows;
}

// Runs under `run_root` whose trainer has written a train row. train() installs the trainer's stop
// handler before anything else, so such a trainer checkpoints on a SIGTERM; one still starting up
// (loading its libraries) dies of it, with nothing trained and nothing to checkpoint.
int runs_with_train_rows(const fs::path& run_root) {
  int runs = 0;
  std::error_code ec;
  if (!fs::is_directory(run_root, ec)) return 0;
  for (const auto& d : fs::directory_iterator(run_root, ec)) runs += train_rows_of_run(d.path()) > 0;
  return runs;
}

}  // namespace

TEST_CASE("sweep plan writes nothing and run is idempotent", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "small", "recipe = [\"bf16\", \"ufp4\"]\ntokens = [1280]\n");
  auto plan = fp4::test::run_fp4lab("sweep plan '" + toml.string() + "'", dir);
  REQUIRE(plan.exit_code == 0);
  CHECK(plan.out.find("new 2") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "small.db"));  // plan never writes
  CHECK(Store::open(dir / "small.db", Store::Mode::read_if_present) == nullptr);
  CHECK_FALSE(fs::exists(dir / "small-runs"));

  auto run = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  auto store = Store::open(dir / "small.db", Store::Mode::read_only);
  const auto runs = store->runs();
  REQUIRE(runs.size() == 2);
  std::map<std::string, int> attempts;
  for (const auto& r : runs) {
    CHECK(r.state == RunState::succeeded);
    CHECK(r.attempts == 1);
    CHECK(store->metrics(r.id, "train/loss").size() == static_cast<size_t>(steps_of(r)));
    CHECK(store->final_loss(r.id).has_value());
    attempts[r.id] = r.attempts;
  }
  store.reset();

  plan = fp4::test::run_fp4lab("sweep plan '" + toml.string() + "'", dir);
  CHECK(plan.out.find("done 2") != std::string::npos);
  run = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  REQUIRE(run.exit_code == 0);
  store = Store::open(dir / "small.db", Store::Mode::read_only);
  for (const auto& r : store->runs()) CHECK(r.attempts == attempts[r.id]);  // nothing ran again

  // Adding an axis value adds runs and leaves the others alone.
  fp4::test::write_tiny_grid(dir.path(), "small", "recipe = [\"bf16\", \"ufp4\", \"e2m1\"]\ntokens = [1280]\n");
  plan = fp4::test::run_fp4lab("sweep plan '" + toml.string() + "'", dir);
  CHECK(plan.out.find("new 1") != std::string::npos);
  CHECK(plan.out.find("done 2") != std::string::npos);

  const auto status = fp4::test::run_fp4lab("sweep status '" + toml.string() + "'", dir);
  REQUIRE(status.exit_code == 0);
  CHECK(status.out.find("by recipe:") != std::string::npos);
}

TEST_CASE("a sweep killed at random moments ends bit-identical to an uninterrupted one", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  // The same grid twice, with separate stores and run roots (neither changes a run's identity).
  const fs::path calm = fp4::test::write_tiny_grid(dir.path(), "calm", kTwelveRuns);
  const fs::path rough = fp4::test::write_tiny_grid(dir.path(), "rough", kTwelveRuns);
  auto r = fp4::test::run_fp4lab("sweep run --plain '" + calm.string() + "'", dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);

  // Kills are timed by what the sweep has done, never by the clock, so that a slow or loaded
  // machine and a fast one interrupt it alike: each round starts an orchestrator, waits until a
  // trainer is alive and has trained a random 0-3 more steps, then (half the time) SIGKILLs that
  // trainer and waits for a random 0-3 more steps, then SIGKILLs the orchestrator (its trainers get
  // SIGTERM from their parent's death and checkpoint). Rounds repeat until at least 20 kills have
  // landed on an orchestrator with a live trainer, 3 of them after a trainer kill, within a bound
  // of 200 rounds. A round's kills come within a few steps of its start, and a round makes at
  // most a few steps of progress, so the 12 runs (660 steps) cannot finish before that.
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int> steps_before_kill(0, 3);
  int kills_of_orchestrator = 0, kills_of_trainers = 0, rounds = 0;
  const auto enough = [&] { return kills_of_orchestrator >= 20 && kills_of_trainers >= 3; };
  // Waits (polling) until `done()` holds or the orchestrator exits; false if it exited. The bound
  // only catches a hang: nothing here should take more than seconds.
  const auto wait_for = [&](pid_t orch, const std::function<bool()>& done) {
    for (int i = 0; i < 60000; ++i) {
      if (done()) return true;
      if (::waitpid(orch, nullptr, WNOHANG) == orch) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    FAIL("the sweep made no progress for 300 s");
    return false;
  };
  while (!enough()) {
    REQUIRE(rounds < 200);
    ++rounds;
    // A trainer of the last round may still be checkpointing after its parent's death: let it go.
    for (int i = 0; i < 60000 && !live_trainers(dir / "rough-runs").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(live_trainers(dir / "rough-runs").empty());
    const pid_t orch = fp4::test::start_fp4lab({"sweep", "run", "--plain", rough.string()}, dir / "rough.log");
    const int64_t at_start = train_rows(dir / "rough-runs");
    const int64_t first_kill_at = at_start + steps_before_kill(rng);
    bool alive = wait_for(orch, [&] {
      return !live_trainers(dir / "rough-runs").empty() && train_rows(dir / "rough-runs") >= first_kill_at;
    });
    INFO(fp4::test::slurp(dir / "rough.log"));
    REQUIRE(alive);  // the orchestrator cannot have finished the grid this early
    if (rng() % 2 == 0) {
      const auto pids = live_trainers(dir / "rough-runs");
      if (!pids.empty() && ::kill(pids[rng() % pids.size()], SIGKILL) == 0) {
        ++kills_of_trainers;
        const int64_t second_kill_at = train_rows(dir / "rough-runs") + steps_before_kill(rng);
        alive = wait_for(orch, [&] {
          return !live_trainers(dir / "rough-runs").empty() && train_rows(dir / "rough-runs") >= second_kill_at;
        });
        REQUIRE(alive);
      }
    }
    const bool had_trainer = !live_trainers(dir / "rough-runs").empty();
    REQUIRE(::kill(orch, SIGKILL) == 0);
    CHECK(fp4::test::wait_fp4lab(orch) == 128 + SIGKILL);
    kills_of_orchestrator += had_trainer;
  }
  // The runs the kills interrupted, most of them still unfinished: the kills landed while there was work.
  {
    auto mid = Store::open(dir / "rough.db", Store::Mode::read_only);
    int finished = 0;
    for (const auto& run : mid->runs()) finished += run.state == RunState::succeeded;
    WARN("after " << rounds << " interrupted rounds (" << kills_of_orchestrator << " orchestrator and "
                  << kills_of_trainers << " trainer kills): " << finished << " of 12 runs finished");
    CHECK(finished <= 10);
  }
  // Then uninterrupted to the end (a trainer orphaned by the last kill may still be checkpointing:
  // the orchestrator waits for its directory lock).
  const pid_t last = fp4::test::start_fp4lab({"sweep", "run", "--plain", rough.string()}, dir / "rough.log");
  const int code = fp4::test::wait_fp4lab(last);
  INFO(fp4::test::slurp(dir / "rough.log"));
  REQUIRE(code == 0);

  auto a = Store::open(dir / "calm.db", Store::Mode::read_only);
  auto b = Store::open(dir / "rough.db", Store::Mode::read_only);
  const auto runs = b->runs();
  REQUIRE(runs.size() == 12);
  for (const auto& run : runs) {
    INFO(run.name);
    CHECK(run.state == RunState::succeeded);
    // No missing or duplicated rows: one train row per step, evaluations at 0, every 10, the end.
    const auto loss = b->metrics(run.id, "train/loss");
    REQUIRE(loss.size() == static_cast<size_t>(steps_of(run)));
    for (size_t i = 0; i < loss.size(); ++i) CHECK(loss[i].step == static_cast<int64_t>(i + 1));
    const auto evals = b->metrics(run.id, "eval/loss");
    std::set<int64_t> want{0, steps_of(run)};
    for (int64_t s = 10; s < steps_of(run); s += 10) want.insert(s);
    std::set<int64_t> got;
    for (const auto& e : evals) got.insert(e.step);
    CHECK(got == want);
    // Every attempt was closed with an exit code, even those whose orchestrator was killed.
    for (const auto& attempt : b->attempts(run.id)) CHECK(attempt.end != 0);
    // Final losses bit-identical to the calm sweep.
    const auto fa = a->final_loss(run.id), fb = b->final_loss(run.id);
    REQUIRE(fa.has_value());
    REQUIRE(fb.has_value());
    CHECK(std::memcmp(&*fa, &*fb, sizeof(double)) == 0);
  }
  // Every deterministic metric row, bit for bit.
  CHECK(all_rows(*a) == all_rows(*b));
  // And the kills did cut attempts short: every killed trainer's run was started again.
  int64_t attempts = 0;
  for (const auto& run : runs) attempts += run.attempts;
  CHECK(attempts >= 12 + kills_of_trainers);
}

TEST_CASE("Ctrl-C stops a sweep cleanly and the rerun finishes it", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "stop", "recipe = [\"bf16\", \"ufp4\"]\ntokens = [6400]\n");
  const pid_t orch = fp4::test::start_fp4lab({"sweep", "run", "--plain", toml.string()}, dir / "stop.log");
  // Wait until both runs have trained a step, then interrupt as a terminal would. Waiting for the
  // processes alone (and a fixed pause) was not enough on a loaded machine: a trainer still loading
  // its libraries when the orchestrator's SIGTERM came died of it, leaving no checkpoint to check.
  // On a slow machine this waits longer; if both runs finish first, the checks below still hold.
  for (int i = 0; i < 6000 && runs_with_train_rows(dir / "stop-runs") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(runs_with_train_rows(dir / "stop-runs") == 2);
  ::kill(orch, SIGINT);
  const int code = fp4::test::wait_fp4lab(orch);
  INFO(fp4::test::slurp(dir / "stop.log"));
  CHECK(code == 130);
  {
    auto store = Store::open(dir / "stop.db", Store::Mode::read_only);
    for (const auto& r : store->runs()) {
      CHECK((r.state == RunState::orphaned || r.state == RunState::succeeded));
      CHECK(r.lease_owner.empty());
      if (r.state == RunState::orphaned) CHECK(fs::exists(fs::path(r.dir) / "checkpoints"));
    }
  }
  CHECK(live_trainers(dir / "stop-runs").empty());
  const auto rerun = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  INFO(rerun.err);
  CHECK(rerun.exit_code == 0);
}

TEST_CASE("a diverging run ends diverged and the sweep goes on", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "wild", "\"train.lr\" = [3e-3, 1e30]\ntokens = [1280]\n");
  const auto r = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  INFO(r.err);
  CHECK(r.exit_code == 0);  // a divergence is a result
  auto store = Store::open(dir / "wild.db", Store::Mode::read_only);
  int diverged = 0, succeeded = 0;
  for (const auto& run : store->runs()) {
    diverged += run.state == RunState::diverged;
    succeeded += run.state == RunState::succeeded;
  }
  CHECK(diverged == 1);
  CHECK(succeeded == 1);
  // Not re-run.
  const auto again = fp4::test::run_fp4lab("sweep plan '" + toml.string() + "'", dir);
  CHECK(again.out.find("diverged 1") != std::string::npos);
  CHECK(again.out.find("would start or resume 0") != std::string::npos);
}

TEST_CASE("failed runs are retried only with --retry-failed, up to the cap", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  // A trainer that fails every attempt the way fp4lab reports bad input (one error line, exit 2):
  // the orchestrator runs FP4LAB_TRAINER instead of itself. (A missing data source, the natural
  // cause, is now refused when the spec is loaded, before any run starts.)
  fp4::test::TinyGrid g;
  g.grid = "tokens = [1280]\n";
  g.executor = "max_attempts = 2\n";
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "broken", g);
  const fs::path trainer = dir / "failing-trainer.sh";
  fp4::test::write_script(trainer, "#!/bin/sh\necho 'fp4lab: error: no-such-shards: not a directory' >&2\nexit 2\n");
  const fp4::test::EnvSetting override_trainer("FP4LAB_TRAINER", trainer.c_str());
  auto r = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  CHECK(r.exit_code == 1);
  auto status = fp4::test::run_fp4lab("sweep status '" + toml.string() + "'", dir);
  CHECK(status.out.find("failed 1") != std::string::npos);
  CHECK(status.out.find("no-such-shards") != std::string::npos);  // the error line
  CHECK(status.out.find("output.log") != std::string::npos);      // and where the log is
  r = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  CHECK(r.exit_code == 1);
  {
    auto store = Store::open(dir / "broken.db", Store::Mode::read_only);
    CHECK(store->runs().at(0).attempts == 1);  // not retried without the flag
  }
  r = fp4::test::run_fp4lab("sweep run --plain --retry-failed '" + toml.string() + "'", dir);
  r = fp4::test::run_fp4lab("sweep run --plain --retry-failed '" + toml.string() + "'", dir);
  {
    auto store = Store::open(dir / "broken.db", Store::Mode::read_only);
    CHECK(store->runs().at(0).attempts == 2);  // the cap: max_attempts = 2 failures
  }
}

TEST_CASE("two orchestrators on one store never run a run twice", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "pair", "recipe = [\"bf16\", \"ufp4\"]\nseed = [0, 1, 2]\ntokens = [1280]\n");
  const pid_t a = fp4::test::start_fp4lab({"sweep", "run", "--plain", toml.string()}, dir / "a.log");
  const pid_t b = fp4::test::start_fp4lab({"sweep", "run", "--plain", toml.string()}, dir / "b.log");
  // status works while they run
  const auto status = fp4::test::run_fp4lab("sweep status '" + toml.string() + "'", dir);
  CHECK(status.exit_code == 0);
  const int ca = fp4::test::wait_fp4lab(a), cb = fp4::test::wait_fp4lab(b);
  INFO(fp4::test::slurp(dir / "a.log") + fp4::test::slurp(dir / "b.log"));
  CHECK(ca == 0);
  CHECK(cb == 0);
  auto store = Store::open(dir / "pair.db", Store::Mode::read_only);
  REQUIRE(store->runs().size() == 6);
  for (const auto& r : store->runs()) {
    CHECK(r.state == RunState::succeeded);
    CHECK(r.attempts == 1);
  }
}

TEST_CASE("a Slurm array job trains the pending runs and ingest imports them", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "cluster", "recipe = [\"bf16\", \"ufp4\"]\ntokens = [1280]\n");
  const fs::path job = dir / "job.sbatch";
  auto r = fp4::test::run_fp4lab("sweep slurm '" + toml.string() + "' --out '" + job.string() +
                                     "' --sbatch=--partition=gpu --max-parallel 4",
                                 dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string script = fp4::test::slurp(job);
  CHECK(script.find("#SBATCH --array=0-1%4") != std::string::npos);
  CHECK(script.find("#SBATCH --partition=\"gpu\"\n") != std::string::npos);
  // Execute task 1 the way Slurm would (the #SBATCH lines are comments to bash).
  const std::string cmd = "cd '" + dir.path().string() + "' && SLURM_ARRAY_TASK_ID=1 bash '" + job.string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  r = fp4::test::run_fp4lab("sweep ingest --spec '" + toml.string() + "'", dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  r = fp4::test::run_fp4lab("sweep ingest --spec '" + toml.string() + "'", dir);  // idempotent
  REQUIRE(r.exit_code == 0);
  auto store = Store::open(dir / "cluster.db", Store::Mode::read_only);
  int done = 0;
  for (const auto& run : store->runs()) {
    if (run.state != RunState::succeeded) continue;
    ++done;
    CHECK(run.attempts == 1);
    CHECK(store->metrics(run.id, "train/loss").size() == static_cast<size_t>(steps_of(run)));
  }
  CHECK(done == 1);
  // The next job holds only the run still to do.
  r = fp4::test::run_fp4lab("sweep slurm '" + toml.string() + "' --out '" + job.string() + "'", dir);
  CHECK(fp4::test::slurp(job).find("#SBATCH --array=0-0\n") != std::string::npos);
}

TEST_CASE("fp4lab train refuses a run directory another process holds", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "lock", "tokens = [1280]\n");
  auto r = fp4::test::run_fp4lab("sweep slurm '" + toml.string() + "' --out '" + (dir / "j.sbatch").string() + "'", dir);
  REQUIRE(r.exit_code == 0);
  auto store = Store::open(dir / "lock.db", Store::Mode::read_only);
  const fs::path run_dir = store->runs().at(0).dir;
  fp4::DirectoryLock held(run_dir);
  r = fp4::test::run_fp4lab("train --config '" + (run_dir / "run.json").string() + "' --dir '" + run_dir.string() +
                                "' --resume --quiet",
                            dir);
  CHECK(r.exit_code == 75);
  CHECK(r.err.find("in use") != std::string::npos);
  CHECK_FALSE(fs::exists(run_dir / "metrics.jsonl"));
}

TEST_CASE("a trainer whose heartbeat falls silent is killed and its run resumed later", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  fp4::test::TinyGrid g;
  g.grid = "tokens = [1280]\n";
  g.executor = "heartbeat_timeout_s = 1\nmax_attempts = 2\n";
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "hung", g);
  // A "trainer" that never beats: the orchestrator must not wait on it forever.
  const fs::path fake = dir / "hung-trainer.sh";
  fp4::test::write_script(fake, "#!/bin/sh\nexec sleep 60\n");
  const std::string cmd = "FP4LAB_TRAINER='" + fake.string() + "' '" + FP4LAB_BINARY + "' sweep run --plain '" +
                          toml.string() + "' >'" + (dir / "hung.log").string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string log = fp4::test::slurp(dir / "hung.log");
  INFO(log);
  CHECK(WEXITSTATUS(status) == 1);  // not finished: left orphaned after max_attempts interruptions
  CHECK(log.find("no heartbeat") != std::string::npos);
  auto store = Store::open(dir / "hung.db", Store::Mode::read_only);
  CHECK(store->runs().at(0).state == RunState::orphaned);
  CHECK(store->runs().at(0).attempts == 3);  // the first try and two resumes
}

#ifdef FP4LAB_HAVE_CUDA
// Runs on device "cuda" go to GPU slots: --gpus names the GPUs, runs_per_gpu runs share one, and
// each child sees only its GPU through CUDA_VISIBLE_DEVICES. A stand-in trainer reports what it was
// given and whether another run held its GPU while it ran (start and end markers the trainers leave
// in a shared directory: their own account, no clock), so this runs on any machine (a build with
// CUDA is needed only to accept device "cuda").
TEST_CASE("runs on device cuda are spread over the GPU slots, two at once on a GPU", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  fp4::test::TinyGrid g;
  g.grid = "seed = [0, 1, 2, 3, 4, 5]\ntokens = [1280]\n";
  g.executor = "runs_per_gpu = 2\n";
  g.device = "cuda";
  fs::path toml = fp4::test::write_tiny_grid(dir.path(), "gpus", g);
  const fs::path share = dir / "share";
  fs::create_directories(share);
  const fs::path fake = dir / "fake-trainer.sh";
  // argv: train --config DIR/run.json --dir DIR --resume --quiet. A trainer waits (a few seconds at
  // most) until it sees another run's start marker without its end marker on the same GPU.
  fp4::test::write_script(fake,
                          "#!/bin/sh\n"
                          "gpu=\"$CUDA_VISIBLE_DEVICES\"\n"
                          "me='" + share.string() + "'/\"$gpu.$(basename \"$5\")\"\n"
                          ": > \"$me.start\"\n"
                          "shared=alone\n"
                          "i=0\n"
                          "while [ $shared = alone ] && [ $i -lt 100 ]; do\n"
                          "  for s in '" + share.string() + "'/\"$gpu\".*.start; do\n"
                          "    peer=\"${s%.start}\"\n"
                          "    if [ \"$peer\" != \"$me\" ] && [ ! -e \"$peer.end\" ]; then shared=shared; fi\n"
                          "  done\n"
                          "  [ $shared = alone ] && sleep 0.05\n"
                          "  i=$((i + 1))\n"
                          "done\n"
                          "printf '%s %s' \"$gpu\" $shared > \"$5/gpu.txt\"\n"
                          ": > \"$me.end\"\n"
                          "printf '{\"state\": \"succeeded\", \"step\": 10}' > \"$5/status.json\"\n");
  const std::string cmd = "CUDA_VISIBLE_DEVICES=7 FP4LAB_TRAINER='" + fake.string() + "' '" + FP4LAB_BINARY +
                          "' sweep run --plain --gpus 2,5 '" + toml.string() + "' >'" + (dir / "gpus.log").string() +
                          "' 2>&1";
  const int status = std::system(cmd.c_str());
  INFO(fp4::test::slurp(dir / "gpus.log"));
  CHECK(WEXITSTATUS(status) == 0);
  auto store = Store::open(dir / "gpus.db", Store::Mode::read_only);
  std::map<std::string, int> per_gpu, shared_on;
  for (const auto& run : store->runs()) {
    CHECK(run.state == RunState::succeeded);
    const std::string seen = fp4::test::slurp(fs::path(run.dir) / "gpu.txt");
    const std::string gpu = seen.substr(0, seen.find(' '));
    per_gpu[gpu] += 1;
    if (seen.substr(seen.find(' ') + 1) == "shared") shared_on[gpu] += 1;
    const auto attempts = store->attempts(run.id);
    REQUIRE(attempts.size() == 1);
    CHECK((attempts[0].provenance.devices == "cuda:2" || attempts[0].provenance.devices == "cuda:5"));
  }
  // --gpus wins over CUDA_VISIBLE_DEVICES (7 is never seen); 6 runs over 2 GPUs × 2 slots each, and
  // on each GPU some run found another running beside it.
  CHECK(per_gpu.size() == 2);
  CHECK(per_gpu["2"] + per_gpu["5"] == 6);
  CHECK(shared_on["2"] >= 1);
  CHECK(shared_on["5"] >= 1);
}

// CUDA_VISIBLE_DEVICES is read by the same parser as --gpus: a UUID entry is a GPU like an index
// and reaches its runs as written, a malformed entry is refused.
TEST_CASE("GPU UUIDs in CUDA_VISIBLE_DEVICES are slots too, handed on as written", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  fp4::test::TinyGrid g;
  g.grid = "seed = [0, 1]\ntokens = [1280]\n";
  g.device = "cuda";
  fs::path toml = fp4::test::write_tiny_grid(dir.path(), "uuid", g);
  const fs::path fake = dir / "fake-trainer.sh";
  fp4::test::write_gpu_recording_trainer(fake);
  const std::string uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  const auto sweep = [&](const std::string& visible) {
    const std::string cmd = "CUDA_VISIBLE_DEVICES='" + visible + "' FP4LAB_TRAINER='" + fake.string() + "' '" +
                            FP4LAB_BINARY + "' sweep run --plain '" + toml.string() + "' >'" +
                            (dir / "uuid.log").string() + "' 2>&1";
    return WEXITSTATUS(std::system(cmd.c_str()));
  };
  CHECK(sweep(uuid + ",zero") == 2);
  CHECK(fp4::test::slurp(dir / "uuid.log").find("CUDA_VISIBLE_DEVICES=" + uuid + ",zero: \"zero\" is not a GPU") !=
        std::string::npos);
  REQUIRE(sweep(uuid + ",3") == 0);
  std::set<std::string> seen;
  auto store = Store::open(dir / "uuid.db", Store::Mode::read_only);
  for (const auto& run : store->runs()) seen.insert(fp4::test::slurp(fs::path(run.dir) / "gpu.txt"));
  CHECK(seen == std::set<std::string>{uuid, "3"});
}
#else
// A build without CUDA reads a GPU study (to plan, fit and report it) but refuses to run it: one
// line before anything starts, exit 2, no run attempted.
TEST_CASE("a build without CUDA plans a device cuda sweep and refuses to run it", "[sweeps][sweeps_run]") {
  ScratchDir dir;
  fp4::test::TinyGrid g;
  g.grid = "seed = [0, 1]\ntokens = [1280]\n";
  g.device = "cuda";
  fs::path toml = fp4::test::write_tiny_grid(dir.path(), "nocuda", g);
  const auto sweep = [&](const std::string& verb) {
    const std::string cmd = "'" + std::string(FP4LAB_BINARY) + "' sweep " + verb + " '" + toml.string() + "' >'" +
                            (dir / (verb.substr(0, verb.find(' ')) + ".log")).string() + "' 2>&1";
    return WEXITSTATUS(std::system(cmd.c_str()));
  };
  CHECK(sweep("plan") == 0);
  CHECK(sweep("run --plain") == 2);
  const std::string log = fp4::test::slurp(dir / "run.log");
  INFO(log);
  CHECK(log.find("runs use device \"cuda\": this fp4lab was built without CUDA; ") != std::string::npos);
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  if (fs::exists(dir / "nocuda.db")) {
    auto store = Store::open(dir / "nocuda.db", Store::Mode::read_only);
    for (const auto& run : store->runs()) CHECK(run.attempts == 0);
  }
}
#endif

TEST_CASE("an MoE sweep runs, stores both parameter counts and its routing, and reports its expert load",
          "[sweeps][sweeps_run][moe]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(
      dir.path(), "experts", "model = [\"d1\", \"d1-e4k2\"]\nrecipe = [\"bf16\", \"e2m1\"]\ntokens = [256]\n");
  {  // the model axis sets the preset: the tiny grid's [model] may not
    std::string text = fp4::test::slurp(toml);
    const std::string preset = "preset = \"d1\"\n";
    REQUIRE(text.find(preset) != std::string::npos);
    text.erase(text.find(preset), preset.size());
    fp4::test::spit(toml, text);
  }
  const auto run = fp4::test::run_fp4lab("sweep run --plain '" + toml.string() + "'", dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  {
    auto store = Store::open(dir / "experts.db", Store::Mode::read_only);
    const auto runs = store->runs();
    REQUIRE(runs.size() == 4);
    for (const auto& r : runs) {
      INFO(r.name);
      CHECK(r.state == RunState::succeeded);
      if (r.model == "d1-e4k2") {
        CHECK(r.n_params_active_nonembedding < r.n_params_nonembedding);
        CHECK(store->metrics(r.id, "moe/0/load_cv").size() == static_cast<size_t>(steps_of(r)));
        CHECK(store->metrics(r.id, "train/aux_loss").size() == static_cast<size_t>(steps_of(r)));
      } else {
        CHECK(r.model == "d1");
        CHECK(r.n_params_active_nonembedding == r.n_params_nonembedding);
        CHECK(store->metrics(r.id, "moe/0/load_cv").empty());
      }
    }
  }
  // Each 4-bit run has its BF16 twin of the same model.
  const auto status = fp4::test::run_fp4lab("sweep status '" + toml.string() + "'", dir);
  REQUIRE(status.exit_code == 0);
  CHECK(status.out.find("d1-e4k2") != std::string::npos);
  const auto report = fp4::test::run_fp4lab("report '" + toml.string() + "' --out '" + (dir / "out").string() + "'", dir);
  INFO(report.err);
  REQUIRE(report.exit_code == 0);
  CHECK(fp4::test::slurp(dir / "out" / "report.html").find("id=\"figure-expert-load\"") != std::string::npos);
  CHECK(fs::exists(dir / "out" / "expert_load.csv"));
}
