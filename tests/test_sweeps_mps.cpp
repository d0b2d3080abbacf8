// `sweep run` starts an MPS daemon of its own for runs that share a GPU (runs_per_gpu > 1), hands
// it to every child, and stops it at the end; not for one run per GPU, not with [executor] mps =
// "off", not over a daemon the user runs, and it says why. A stand-in nvidia-cuda-mps-control on
// PATH records what it was asked; a stand-in trainer records what it was given.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "store/store.h"
#include "tests/sweeps_test_helpers.h"

#ifdef FP4LAB_HAVE_CUDA
namespace fs = std::filesystem;
using fp4::store::RunState;
using fp4::store::Store;
using fp4::test::ScratchDir;

namespace {

struct MpsFixture {
  ScratchDir dir;
  fs::path bin, control_log, toml;

  explicit MpsFixture(const std::string& executor) {
    bin = dir / "bin";
    fs::create_directories(bin);
    control_log = dir / "control.log";
    // The control program: `-d` starts (here: pretends to), stdin carries commands such as quit.
    fp4::test::write_script(bin / "nvidia-cuda-mps-control",
                            "#!/bin/sh\n"
                            "in=$(cat)\n"
                            "printf 'args=[%s] pipe=[%s] log=[%s] stdin=[%s]\\n' \"$*\" \"$CUDA_MPS_PIPE_DIRECTORY\" "
                            "\"$CUDA_MPS_LOG_DIRECTORY\" \"$in\" >> '" + control_log.string() + "'\n");
    fp4::test::write_script(dir / "trainer.sh",
                            "#!/bin/sh\n"
                            "printf '%s' \"$CUDA_MPS_PIPE_DIRECTORY\" > \"$5/mps.txt\"\n"
                            "printf '{\"state\": \"succeeded\", \"step\": 10}' > \"$5/status.json\"\n");
    fp4::test::TinyGrid g;
    g.grid = "seed = [0, 1, 2]\ntokens = [1280]\n";
    g.executor = executor;
    g.device = "cuda";
    toml = fp4::test::write_tiny_grid(dir.path(), "mps", g);
  }

  // Runs the sweep with the stand-ins, `env` in front; returns the exit code and fills `log`.
  int run(const std::string& env, std::string& log) {
    const std::string cmd = env + " PATH='" + bin.string() + ":/usr/bin:/bin' FP4LAB_TRAINER='" +
                            (dir / "trainer.sh").string() + "' '" + FP4LAB_BINARY + "' sweep run --plain --gpus 0 '" +
                            toml.string() + "' >'" + (dir / "sweep.log").string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    log = fp4::test::slurp(dir / "sweep.log");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::vector<std::string> mps_seen_by_runs() {
    std::vector<std::string> seen;
    auto store = Store::open(dir / "mps.db", Store::Mode::read_only);
    for (const auto& r : store->runs()) {
      CHECK(r.state == RunState::succeeded);
      seen.push_back(fp4::test::slurp(fs::path(r.dir) / "mps.txt"));
    }
    return seen;
  }
};

}  // namespace

TEST_CASE("runs sharing a GPU get an MPS daemon of their own, stopped at the end", "[sweeps][mps]") {
  MpsFixture f("runs_per_gpu = 3\n");
  std::string log;
  REQUIRE(f.run("", log) == 0);
  INFO(log);
  CHECK(log.find("MPS: daemon started") != std::string::npos);
  CHECK(log.find("MPS: daemon stopped") != std::string::npos);
  const std::string calls = fp4::test::slurp(f.control_log);
  INFO(calls);
  // Two calls: `-d` with the private directories, then `quit` on stdin with the same ones.
  const size_t first = calls.find("args=[-d] pipe=[");
  REQUIRE(first == 0);
  const std::string pipe = calls.substr(16, calls.find(']', 16) - 16);
  CHECK(pipe.find("fp4lab-mps-") != std::string::npos);
  CHECK(calls.find("args=[] pipe=[" + pipe + "]") != std::string::npos);
  CHECK(calls.find("stdin=[quit]") != std::string::npos);
  // Every run was given that daemon; its directory is gone afterwards.
  for (const std::string& seen : f.mps_seen_by_runs()) CHECK(seen == pipe);
  CHECK_FALSE(fs::exists(fs::path(pipe).parent_path()));
}

TEST_CASE("no MPS daemon for one run per GPU, with mps = off, or over the user's own", "[sweeps][mps]") {
  std::string log;
  {
    MpsFixture f("runs_per_gpu = 1\n");
    REQUIRE(f.run("", log) == 0);
    CHECK(log.find("MPS") == std::string::npos);
    CHECK_FALSE(fs::exists(f.control_log));
    for (const std::string& seen : f.mps_seen_by_runs()) CHECK(seen.empty());
  }
  {
    MpsFixture f("runs_per_gpu = 2\nmps = \"off\"\n");
    REQUIRE(f.run("", log) == 0);
    CHECK(log.find("MPS") == std::string::npos);
    CHECK_FALSE(fs::exists(f.control_log));
  }
  {
    MpsFixture f("runs_per_gpu = 2\n");
    REQUIRE(f.run("CUDA_MPS_PIPE_DIRECTORY=/users/own/pipe", log) == 0);
    INFO(log);
    CHECK(log.find("MPS: CUDA_MPS_PIPE_DIRECTORY is set (/users/own/pipe): the runs use that daemon") != std::string::npos);
    CHECK_FALSE(fs::exists(f.control_log));
    for (const std::string& seen : f.mps_seen_by_runs()) CHECK(seen == "/users/own/pipe");
  }
  {
    MpsFixture f("runs_per_gpu = 2\n");
    fs::remove(f.bin / "nvidia-cuda-mps-control");
    REQUIRE(f.run("", log) == 0);
    INFO(log);
    CHECK(log.find("MPS: nvidia-cuda-mps-control is not on PATH: runs sharing a GPU take turns") != std::string::npos);
  }
  {
    MpsFixture f("mps = \"always\"\n");
    REQUIRE(f.run("", log) == 2);
    CHECK(log.find("executor.mps: must be \"auto\"") != std::string::npos);
  }
}
#endif
