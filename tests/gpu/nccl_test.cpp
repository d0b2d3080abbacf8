// nccl_test.cpp — data parallelism through NCCL (docs/train.md, "Several GPUs").
//
// N = 1: a rank of a world of one (RANK=0 WORLD_SIZE=1, as torchrun would start it) goes through
// every piece of the multi-GPU path (the communicator, the all-reduce of the gradients and of the
// per-micro-step losses, the agreed stop) and must give the plain 1-GPU run's bits exactly: a sum
// over one rank adds nothing. This runs on any machine with one GPU.
// N = 2 (skipped, saying so, where fewer than 2 GPUs are visible): two runs give the same bits; a
// run stopped and resumed gives the bits of one that was not; the loss curve stays within the
// documented tolerance of the 1-GPU run (only the all-reduce's summation order differs); resuming
// with another N is refused in one line; a killed rank takes the run down within seconds and the
// run then resumes to the same bits.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cuda_model/cuda_backend.h"
#include "engine/run/checkpoint.h"
#include "engine/run/trainer.h"
#include "tests/run_test_helpers.h"

using fp4::test::final_state;
using fp4::test::plain_rows;
using fp4::test::read_rows;
using fp4::test::require_identical_runs;
using fp4::test::same_bits;
using fp4::test::ScratchDir;
using fp4::test::write_config;
using nlohmann::json;

namespace {

// d1, 32-token sequences, 4 micro-steps of 2 sequences per step (so 2 ranks take 2 each).
json small_run(const std::string& recipe, int64_t steps) {
  return {{"model", {{"preset", "d1"}, {"seq_len", 32}}},
          {"recipe", recipe},
          {"data", fp4::test::kTinyRunData},
          {"device", "cuda"},
          {"train", {{"steps", steps}, {"batch_tokens", 256}, {"micro_batch", 2}, {"lr", 3e-3}, {"seed", 7}}},
          {"eval", {{"every", 10}, {"tokens", 512}}},
          {"checkpoint", {{"every", 10}}}};
}

fp4::run::TrainResult train_in_process(const std::filesystem::path& config, const std::filesystem::path& dir,
                                       bool as_rank, bool resume = false, int64_t stop_after = -1) {
  fp4::run::TrainOptions o = fp4::test::quiet_train_options(config, dir, resume, stop_after);
  if (as_rank) o.rank = fp4::run::RankInfo{0, 1, 0, "nccl-test"};
  return fp4::run::train(o);
}

std::string q(const std::filesystem::path& p) {
  std::string s = "'";
  s += p.string();
  s += "'";
  return s;
}

std::vector<double> losses(const std::filesystem::path& dir) {
  std::vector<double> out;
  for (const json& r : read_rows(dir))
    if (r["kind"] == "train") out.push_back(r["loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("nccl: a rank of a world of one gives the plain 1-GPU run's bits", "[gpu][nccl]") {
  const std::string recipe = GENERATE(as<std::string>{}, "bf16", "nvfp4");  // nvfp4: SR on dY
  INFO("recipe " << recipe);
  ScratchDir tmp;
  const auto config = write_config(tmp, small_run(recipe, 30), "run.json");
  using fp4::run::Outcome;
  REQUIRE(train_in_process(config, tmp / "plain", false).outcome == Outcome::succeeded);
  REQUIRE(train_in_process(config, tmp / "rank", true).outcome == Outcome::succeeded);
  require_identical_runs(tmp / "plain", tmp / "rank");
  // Stopped through the ranks' agreed stop request, resumed as a rank: still the same bits.
  const fp4::run::TrainResult first = train_in_process(config, tmp / "split", true, false, 15);
  CHECK(first.outcome == Outcome::interrupted);
  CHECK(first.step == 15);
  CHECK(train_in_process(config, tmp / "split", true, true).outcome == Outcome::succeeded);
  require_identical_runs(tmp / "plain", tmp / "split");
  std::printf("nccl N=1 %-5s: plain, rank-of-one and rank-of-one 15 + resume + 15 identical\n", recipe.c_str());
}

TEST_CASE("nccl: two GPUs match themselves exactly and one GPU within the summation-order tolerance",
          "[gpu][nccl][two_gpus]") {
  const int visible = fp4::cuda_model::cuda_device_count();
  if (visible < 2) {
    WARN("skipped: " << visible << " GPU visible, the N = 2 test needs 2 (run it on a 2-GPU machine)");
    return;
  }
  ScratchDir tmp;
  const auto config = write_config(tmp, small_run("nvfp4", 40), "run.json");
  const auto train = [&](const std::string& dir, const std::string& extra) {
    return fp4::test::run_fp4lab("train --config " + q(config) + " --dir " + q(tmp / dir) + " --quiet " + extra, tmp);
  };
  REQUIRE(train("one", "").exit_code == 0);
  REQUIRE(train("two-a", "--gpus 2").exit_code == 0);
  REQUIRE(train("two-b", "--gpus 2").exit_code == 0);
  require_identical_runs(tmp / "two-a", tmp / "two-b");
  // Stopped after step 20 (exit 143) and resumed: the bits of the run that was not stopped.
  CHECK(train("two-split", "--gpus 2 --stop-after 20").exit_code == 143);
  const fp4::test::CliRun other = train("two-split", "--gpus 1 --resume");
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Catch::Contains("was trained on 2 GPU(s), this run asks for 1: resume with --gpus 2"));
  CHECK(std::count(other.err.begin(), other.err.end(), '\n') == 1);
  CHECK(train("two-split", "--gpus 2 --resume").exit_code == 0);
  require_identical_runs(tmp / "two-a", tmp / "two-split");
  // Against one GPU: the same batches, the same random numbers, other summation order only.
  const std::vector<double> a = losses(tmp / "one"), b = losses(tmp / "two-a");
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / a[i]);
  std::printf("nccl N=2 vs N=1 (nvfp4, 40 steps): final loss %.6f vs %.6f, max relative difference %.3g\n",
              b.back(), a.back(), worst);
  // Step 1's loss comes before any all-reduce has touched the weights: the same micro-batch losses,
  // summed in the same order, so the same bits.
  CHECK(a.front() == b.front());
  CHECK(worst < 2e-2);  // docs/train.md, "Several GPUs"
}

TEST_CASE("nccl: a killed rank takes the run down within seconds, and the run resumes", "[gpu][nccl][two_gpus]") {
  const int visible = fp4::cuda_model::cuda_device_count();
  if (visible < 2) {
    WARN("skipped: " << visible << " GPU visible, the N = 2 test needs 2 (run it on a 2-GPU machine)");
    return;
  }
  ScratchDir tmp;
  json j = small_run("bf16", 4000);
  j["checkpoint"]["every"] = 50;
  const auto config = write_config(tmp, j, "run.json");
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    const std::string c = config.string(), d = (tmp / "run").string();
    ::execl(FP4LAB_BINARY, FP4LAB_BINARY, "train", "--config", c.c_str(), "--dir", d.c_str(), "--gpus", "2",
            "--quiet", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for the first checkpoint, then kill rank 1 (the launcher's other child).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (fp4::run::list_checkpoints(tmp / "run" / "checkpoints").empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE_FALSE(fp4::run::list_checkpoints(tmp / "run" / "checkpoints").empty());
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  std::vector<pid_t> ranks;
  for (pid_t p; children >> p;) ranks.push_back(p);
  REQUIRE(ranks.size() == 2);
  pid_t rank1 = 0;
  for (pid_t p : ranks) {
    std::ifstream env("/proc/" + std::to_string(p) + "/environ");
    for (std::string kv; std::getline(env, kv, '\0');)
      if (kv == "RANK=1") rank1 = p;
  }
  REQUIRE(rank1 != 0);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(::kill(rank1, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(launcher, &status, 0) == launcher);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("nccl: rank 1 killed, the launcher ended %.2f s later\n", took);
  CHECK(took < 10.0);
  CHECK(WIFSIGNALED(status));  // as the rank ended: an orchestrator resumes it
  CHECK(WTERMSIG(status) == SIGKILL);
  for (pid_t p : ranks) CHECK((::kill(p, 0) != 0 && errno == ESRCH));  // the launcher reaped both
  // The run resumes from its last checkpoint (shortened: the test only needs it to continue).
  const fp4::test::CliRun resumed =
      fp4::test::run_fp4lab("train --config " + q(config) + " --dir " + q(tmp / "run") + " --gpus 2 --resume "
                            "--quiet --stop-after " + std::to_string(final_state(tmp / "run").step + 10), tmp);
  CHECK(resumed.exit_code == 143);
}
