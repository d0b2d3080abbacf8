// test_sweeps_process.cpp — the executors' building blocks: child processes (argument vectors,
// working directory, environment, output, exit statuses), lease-owner liveness, how attempts are
// judged, and shell quoting for Slurm scripts.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include "sweeps/lease_owner.h"
#include "base/child_process.h"
#include "base/shell_quote.h"
#include "sweeps/sweep_plan.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace fp4;
using namespace fp4::sweeps;

TEST_CASE("spawn passes arguments verbatim, sets cwd and env, and appends output", "[sweeps][sweeps_process]") {
  fp4::test::ScratchDir dir;
  SpawnRequest r;
  // An argument with spaces, quotes and a semicolon reaches the child as one argument: no shell.
  r.argv = {"/bin/sh", "-c", "printf '%s|%s|%s\\n' \"$1\" \"$(pwd)\" \"$FP4LAB_PROBE\"; exit 7", "sh",
            "a b'c;d"};
  r.cwd = dir.path();
  r.env = {{"FP4LAB_PROBE", "value 1"}};
  r.output = dir / "out.log";
  fp4::test::spit(r.output, "earlier\n");
  const ExitStatus st = wait_child(spawn(r));
  CHECK_FALSE(st.signaled);
  CHECK(st.code == 7);
  CHECK(st.shell_code() == 7);
  CHECK(fp4::test::slurp(r.output) ==
        "earlier\na b'c;d|" + fs::canonical(dir.path()).string() + "|value 1\n");
}

TEST_CASE("exit statuses tell signals from codes", "[sweeps][sweeps_process]") {
  SpawnRequest r;
  r.argv = {"/bin/sleep", "30"};
  const pid_t pid = spawn(r);
  CHECK_FALSE(poll_child(pid).has_value());
  ::kill(pid, SIGKILL);
  const ExitStatus st = wait_child(pid);
  CHECK(st.signaled);
  CHECK(st.code == SIGKILL);
  CHECK(st.shell_code() == 137);
  CHECK(st.describe() == "killed by SIGKILL");
  r.argv = {"/no/such/program"};
  const ExitStatus missing = wait_child(spawn(r));
  CHECK(missing.code == 127);
}

TEST_CASE("capture_output returns stdout or nothing", "[sweeps][sweeps_process]") {
  CHECK(capture_output({"/bin/echo", "hello"}) == std::optional<std::string>("hello\n"));
  CHECK_FALSE(capture_output({"/bin/false"}).has_value());
  CHECK_FALSE(capture_output({"no-such-program-fp4lab"}).has_value());
}

TEST_CASE("lease owners are alive while their process lives", "[sweeps][sweeps_process]") {
  CHECK(owner_liveness(current_lease_owner()) == OwnerLiveness::alive);
  SpawnRequest r;
  r.argv = {"/bin/true"};
  const pid_t pid = spawn(r);
  wait_child(pid);
  const std::string me = current_lease_owner();
  const std::string host = me.substr(0, me.find('/'));
  CHECK(owner_liveness(host + "/" + std::to_string(pid) + "/1") == OwnerLiveness::dead);
  // Same pid, other start time: a reused pid is not the owner.
  CHECK(owner_liveness(host + "/" + std::to_string(::getpid()) + "/1") == OwnerLiveness::dead);
  CHECK(owner_liveness("other-host.example/1/1") == OwnerLiveness::unknown);
}

TEST_CASE("attempts are judged failed, interrupted or a result", "[sweeps][sweeps_process]") {
  CHECK_FALSE(attempt_failed(0));
  CHECK_FALSE(attempt_failed(3));
  CHECK_FALSE(attempt_failed(75));
  CHECK_FALSE(attempt_failed(130));
  CHECK_FALSE(attempt_failed(143));
  CHECK_FALSE(attempt_failed(-SIGKILL));
  CHECK_FALSE(attempt_failed(-SIGTERM));
  CHECK(attempt_failed(1));
  CHECK(attempt_failed(2));
  CHECK(attempt_failed(127));
  CHECK(attempt_failed(-SIGSEGV));
  CHECK(attempt_failed(-SIGABRT));
}

TEST_CASE("shell_quote survives a round trip through sh", "[sweeps][sweeps_process]") {
  for (const std::string s : {"plain", "with space", "it's", "$HOME `x` \"q\" \\ ;&|", ""}) {
    const auto out = capture_output({"/bin/sh", "-c", "printf %s " + shell_quote(s)});
    REQUIRE(out.has_value());
    CHECK(*out == s);
  }
}
