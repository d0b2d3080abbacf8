// test_run_launcher.cpp — `fp4lab train --gpus N`'s rank launcher (engine/run/rank_launcher.h) with
// stand-in ranks (/bin/sh scripts that read RANK), so its failure handling is tested without GPUs:
// a rank that dies takes the others down at once, rank 0's end ends the launch, a stop request
// reaches every rank once, and the launch ends as the run did.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "base/clock.h"
#include "engine/run/rank_launcher.h"
#include "tests/test_support.h"

using fp4::run::launch_ranks;
using fp4::run::LaunchOutcome;
using fp4::run::LaunchRequest;

namespace {

// Each rank runs `script` under /bin/sh (long sleeps are exec'd, so that a killed rank leaves no
// child behind holding the test's output open) with RANK, WORLD_SIZE, ... in its environment. "Forever"
// is 60 s: a launcher that failed to stop a rank makes the test slow and then fail, never hang.
LaunchOutcome run_script(const std::string& script, int world, double grace_s = 5.0) {
  LaunchRequest r;
  r.argv = {"/bin/sh", "-c", script};
  r.world = world;
  r.grace_s = grace_s;
  return launch_ranks(r);
}

}  // namespace

TEST_CASE("rank launcher: every rank gets its place and the launch's token", "[run][gpus][launcher]") {
  const fp4::test::ScratchDir tmp;
  const std::string out = (tmp / "ranks").string();
  const LaunchOutcome o = run_script(
      "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $FP4LAB_RENDEZVOUS_TOKEN\" >> '" + out + "'", 3);
  CHECK_FALSE(o.signaled);
  CHECK(o.code == 0);
  CHECK(o.message.empty());
  std::set<std::string> ranks, tokens;
  std::istringstream lines(fp4::test::slurp(tmp / "ranks"));
  std::string rank, world, local, local_world, token;
  while (lines >> rank >> world >> local >> local_world >> token) {
    ranks.insert(rank);
    tokens.insert(token);
    CHECK(world == "3");
    CHECK(local == rank);
    CHECK(local_world == "3");
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2"});
  CHECK(tokens.size() == 1);  // one token per launch...
  CHECK(*tokens.begin() != fp4::run::new_rendezvous_token());  // ...and a fresh one for the next
}

TEST_CASE("rank launcher: a rank that fails takes the others down within a poll", "[run][gpus][launcher]") {
  const double start = fp4::monotonic_s();
  // Rank 1 fails after a moment; ranks 0 and 2 would run for a minute.
  const LaunchOutcome o = run_script("if [ \"$RANK\" = 1 ]; then sleep 0.2; exit 1; fi; exec sleep 60", 3);
  CHECK(fp4::monotonic_s() - start < 20.0);
  CHECK_FALSE(o.signaled);
  CHECK(o.code == 1);
  CHECK_THAT(o.message, Catch::StartsWith("rank 1 of 3 (pid "));
  CHECK_THAT(o.message, Catch::Contains("exited with code 1: stopping the other ranks"));
}

TEST_CASE("rank launcher: a killed rank makes the launch end killed by the same signal", "[run][gpus][launcher]") {
  const double start = fp4::monotonic_s();
  const LaunchOutcome o = run_script("if [ \"$RANK\" = 1 ]; then sleep 0.2; kill -KILL $$; fi; exec sleep 60", 2);
  CHECK(fp4::monotonic_s() - start < 20.0);
  CHECK(o.signaled);  // an orchestrator then sees an interrupted run, and resumes it
  CHECK(o.code == SIGKILL);
  CHECK_THAT(o.message, Catch::Contains("rank 1 of 2"));
  CHECK_THAT(o.message, Catch::Contains("was killed by SIGKILL"));
}

TEST_CASE("rank launcher: rank 0's end is the run's, the others get the grace period", "[run][gpus][launcher]") {
  const double start = fp4::monotonic_s();
  // Rank 0 ends as diverged (3); rank 1 waits on a collective that will never come.
  const LaunchOutcome o = run_script("if [ \"$RANK\" = 0 ]; then exit 3; fi; exec sleep 60", 2, 0.5);
  CHECK(fp4::monotonic_s() - start < 20.0);
  CHECK_FALSE(o.signaled);
  CHECK(o.code == 3);
  CHECK(o.message.empty());
  // Ranks that end cleanly before rank 0 are waited for; the outcome is still rank 0's.
  const LaunchOutcome p = run_script("if [ \"$RANK\" = 1 ]; then exit 0; fi; sleep 0.3; exit 143", 2);
  CHECK(p.code == 143);
}

TEST_CASE("rank launcher: a stop request reaches every rank once", "[run][gpus][launcher]") {
  const fp4::test::ScratchDir tmp;
  const std::string out = (tmp / "stopped").string(), ready = (tmp / "ready").string();
  // Each rank checkpoints (appends a line) on its first SIGTERM and exits 143, as a trainer does.
  // It says it is ready once its trap is set; the stop request waits for both (for 30 s at most:
  // then it is sent anyway, and the count below fails instead of the test hanging).
  std::thread signaller([&] {
    const double deadline = fp4::monotonic_s() + 30.0;
    while (fp4::monotonic_s() < deadline) {
      const std::string lines = fp4::test::slurp(ready);
      if (std::count(lines.begin(), lines.end(), '\n') == 2) break;
      fp4::sleep_s(0.01);
    }
    ::kill(::getpid(), SIGTERM);
  });
  const LaunchOutcome o = run_script("trap 'kill $!; echo $RANK >> \"" + out + "\"; exit 143' TERM; echo $RANK >> \"" +
                                         ready + "\"; sleep 60 & wait",
                                     2);
  signaller.join();
  CHECK_FALSE(o.signaled);
  CHECK(o.code == 143);
  const std::string lines = fp4::test::slurp(tmp / "stopped");
  CHECK(std::count(lines.begin(), lines.end(), '\n') == 2);
}
