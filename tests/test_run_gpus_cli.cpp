// test_run_gpus_cli.cpp — `fp4lab train --gpus N` and the rank variables as a user meets them on
// any machine: every way a multi-GPU run cannot start is one line and exit 2 before anything is
// written, and a run resumed with another number of GPUs is refused in one line.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/run/config.h"
#include "tests/test_support.h"

using fp4::test::run_fp4lab;
using fp4::test::ScratchDir;
using nlohmann::json;

namespace {

json cpu_run() {
  return json::parse(R"({"model": {"preset": "d1", "seq_len": 32}, "data": "synthetic:markov?order=1&vocab=64",
                         "train": {"steps": 4, "batch_tokens": 128, "micro_batch": 2},
                         "eval": {"every": 0, "tokens": 128}, "device": "cpu"})");
}

std::string q(const std::filesystem::path& p) {
  std::string s = "'";
  s += p.string();
  s += "'";
  return s;
}

// The run is refused with one line on stderr that contains `what`, exit 2, and DIR stays empty.
void check_refused(const fp4::test::CliRun& r, const std::string& what, const std::filesystem::path& dir) {
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_THAT(r.err, Catch::Contains(what));
  CHECK_FALSE(std::filesystem::exists(dir / "config.json"));
  CHECK_FALSE(std::filesystem::exists(dir / "metrics.jsonl"));
}

}  // namespace

// `fp4lab train ARGS` with environment assignments `env` ("RANK=0 WORLD_SIZE=2 ") before it.
fp4::test::CliRun train_with_env(const std::string& env, const std::string& args, const ScratchDir& tmp) {
  const auto out = tmp / "out.txt", err = tmp / "err.txt";
  const std::string cmd = env + "'" + std::string(FP4LAB_BINARY) + "' train " + args + " >" + q(out) + " 2>" + q(err) +
                          " </dev/null";
  const int status = std::system(cmd.c_str());
  fp4::test::CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = fp4::test::slurp(out);
  r.err = fp4::test::slurp(err);
  return r;
}

TEST_CASE("train --gpus: a multi-GPU run that cannot start is one line, exit 2, nothing written", "[run][gpus]") {
  ScratchDir tmp;
  const auto config = tmp / "run.json";
  std::ofstream(config) << cpu_run().dump();
  const std::string args = "--config " + q(config) + " --dir " + q(tmp / "run") + " --quiet ";
  check_refused(train_with_env("", args + "--gpus 2", tmp), "--gpus: gpus = 2 needs device \"cuda\"", tmp / "run");
#ifdef FP4LAB_HAVE_CUDA
  // 2 micro-steps per step: 3 GPUs cannot share them (whatever this machine has).
  check_refused(train_with_env("", args + "--gpus 3 --device cuda", tmp),
                "--gpus: gpus = 3 does not divide the 2 micro-steps", tmp / "run");
#else
  check_refused(train_with_env("", args + "--gpus 3 --device cuda", tmp), "this fp4lab was built without CUDA",
                tmp / "run");
#endif
  CHECK(train_with_env("", args + "--gpus 0", tmp).exit_code == 2);
  // The rank variables: both or neither, whole numbers, a rank trains on CUDA, WORLD_SIZE = gpus.
  check_refused(train_with_env("RANK=0 ", args, tmp), "RANK is set but WORLD_SIZE is not", tmp / "run");
  check_refused(train_with_env("RANK=0 WORLD_SIZE=two ", args, tmp), "WORLD_SIZE=two: must be a whole number",
                tmp / "run");
  check_refused(train_with_env("RANK=2 WORLD_SIZE=2 ", args, tmp), "RANK=2: must be a whole number from 0 to 1",
                tmp / "run");
  check_refused(train_with_env("RANK=0 WORLD_SIZE=1 ", args, tmp), "which trains on device \"cuda\"", tmp / "run");
}

TEST_CASE("train --gpus: resuming with another number of GPUs is refused in one line", "[run][gpus]") {
  ScratchDir tmp;
  const auto config = tmp / "run.json";
  std::ofstream(config) << cpu_run().dump();
  // A run directory as a 2-GPU run leaves it (only its config.json matters to the refusal).
  json two = fp4::run::config_to_json(fp4::run::config_from_json(cpu_run(), "run.json"));
  two["device"] = "cuda";
  two["gpus"] = 2;
  std::filesystem::create_directories(tmp / "run");
  std::ofstream(tmp / "run" / "config.json") << two.dump(2);
  const fp4::test::CliRun r =
      train_with_env("", "--config " + q(config) + " --dir " + q(tmp / "run") + " --resume --quiet", tmp);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_THAT(r.err, Catch::Contains("cannot resume: "));
  CHECK_THAT(r.err, Catch::Contains("was trained on 2 GPU(s), this run asks for 1: resume with --gpus 2"));
  CHECK_FALSE(std::filesystem::exists(tmp / "run" / "metrics.jsonl"));
}
