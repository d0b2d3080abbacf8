// test_run_cli.cpp — `fp4lab train` as the orchestrator sees it: exit codes, one-line errors,
// SIGTERM (finish the step, checkpoint, exit 143, resumable), and --print-config.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/run/checkpoint.h"
#include "tests/test_support.h"

using namespace fp4::test;
using nlohmann::json;

namespace {

struct Cli {
  int exit_code = -1;
  std::string out, err;
};

// Runs `fp4lab train ARGS` (each argument its own word, no shell) with one OpenMP thread and waits.
// With `on_start`, that is called with the child's pid while it runs.
Cli fp4lab_train(const ScratchDir& tmp, std::vector<std::string> args,
                 const std::function<void(pid_t)>& on_start = {}) {
  const auto out = tmp / "stdout.txt", err = tmp / "stderr.txt";
  args.insert(args.begin(), "train");
  args.insert(args.begin(), FP4LAB_BINARY);
  // Everything the child needs is built before fork(): it only opens, dups and execs.
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"OMP_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    dup2(o, 1);
    dup2(e, 2);
    dup2(in, 0);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (on_start) on_start(pid);
  int status = 0;
  waitpid(pid, &status, 0);
  Cli r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

json tiny(int64_t steps) {
  return {{"model", {{"preset", "d1"}, {"seq_len", 32}}},
          {"recipe", "bf16"},
          {"data", "synthetic:markov?order=1&vocab=64&branch=4&seed=1"},
          {"train", {{"steps", steps}, {"batch_tokens", 128}, {"micro_batch", 2}}},
          {"eval", {{"every", 0}, {"tokens", 256}}},
          {"checkpoint", {{"every", 0}}},
          {"device", "cpu"}};  // the CPU engine on any machine (without it a visible GPU is picked)
}

std::string config_file(const ScratchDir& tmp, const json& j, const std::string& name = "run.json") {
  spit(tmp / name, j.dump());
  return (tmp / name).string();
}

int64_t last_train_step(const std::filesystem::path& dir) {
  int64_t step = -1;
  std::istringstream in(slurp(dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    if (r["kind"] == "train") step = r["step"];
  }
  return step;
}

}  // namespace

TEST_CASE("fp4lab train: exit codes 0, 2, 3 and 143", "[run][cli]") {
  ScratchDir tmp;
  const std::string dir = (tmp / "run").string();
  const std::string config = config_file(tmp, tiny(6));

  // Bad input: one line on stderr, exit 2, nothing written.
  spit(tmp / "bad.json", "{\"model\": {\"preset\": \"d1\"},\n \"data\": }");
  Cli r = fp4lab_train(tmp, {"--config", (tmp / "bad.json").string(), "--dir", dir});
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("fp4lab: error: " + (tmp / "bad.json").string() + ":2:10: malformed JSON:", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_FALSE(std::filesystem::exists(dir));

  // --stop-after acts as SIGTERM: checkpoint, exit 143, no status.
  r = fp4lab_train(tmp, {"--config", config, "--dir", dir, "--stop-after", "3", "--quiet"});
  CHECK(r.exit_code == 143);
  CHECK(r.err.empty());  // --quiet
  CHECK_FALSE(std::filesystem::exists(tmp / "run" / "status.json"));
  CHECK(fp4::run::list_checkpoints(tmp / "run" / "checkpoints").back().filename() == "step_0000000003.ckpt");

  // Into a directory that holds a run, without --resume: refused.
  r = fp4lab_train(tmp, {"--config", config, "--dir", dir});
  CHECK(r.exit_code == 2);
  CHECK(r.err == "fp4lab: error: " + dir + " already holds a run: pass --resume to continue it, or choose a new --dir\n");

  // --resume finishes it: exit 0, status succeeded, progress on stderr.
  r = fp4lab_train(tmp, {"--config", config, "--dir", dir, "--resume"});
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("resuming from step_0000000003.ckpt") != std::string::npos);
  CHECK(json::parse(slurp(tmp / "run" / "status.json"))["state"] == "succeeded");

  // Diverged: exit 3, status.json says why.
  json j = tiny(10);
  j["recipe"] = "ufp4";
  j["train"]["lr"] = 1e30;
  j["train"]["warmup_steps"] = 0;
  j["train"]["grad_clip"] = 0;
  r = fp4lab_train(tmp, {"--config", config_file(tmp, j, "diverge.json"), "--dir", (tmp / "d").string(), "--quiet"});
  CHECK(r.exit_code == 3);
  CHECK(json::parse(slurp(tmp / "d" / "status.json"))["state"] == "diverged");
}

TEST_CASE("fp4lab train: SIGTERM finishes the step, checkpoints, and exits resumable", "[run][cli]") {
  ScratchDir tmp;
  const auto dir = tmp / "run";
  const std::string config = config_file(tmp, tiny(1000000));
  Cli r = fp4lab_train(tmp, {"--config", config, "--dir", dir.string(), "--quiet"}, [&](pid_t pid) {
    // Wait until training is under way (a few train rows written), then ask it to stop.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::filesystem::exists(dir / "metrics.jsonl") && last_train_step(dir) >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGTERM);
  });
  CHECK(r.exit_code == 143);
  const int64_t stopped = last_train_step(dir);
  CHECK(stopped >= 3);
  const auto ckpts = fp4::run::list_checkpoints(dir / "checkpoints");
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0].filename() == fp4::run::checkpoint_file_name(stopped));  // the step it finished
  CHECK_FALSE(std::filesystem::exists(dir / "status.json"));
  CHECK(slurp(dir / "train.log").find("stopped by SIGTERM after step " + std::to_string(stopped)) != std::string::npos);
  CHECK(json::parse(slurp(dir / "heartbeat"))["phase"] == "exited");

  // The resumed run continues at the next step.
  r = fp4lab_train(tmp, {"--config", config, "--dir", dir.string(), "--resume", "--quiet", "--stop-after",
                         std::to_string(stopped + 2)});
  CHECK(r.exit_code == 143);
  CHECK(last_train_step(dir) == stopped + 2);
  int64_t rows_after_stop = 0;
  std::istringstream in(slurp(dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const json row = json::parse(line);
    if (row["kind"] == "train" && row["step"].get<int64_t>() > stopped) ++rows_after_stop;
  }
  CHECK(rows_after_stop == 2);
}

TEST_CASE("fp4lab train --print-config: the resolved config and its hash", "[run][cli]") {
  ScratchDir tmp;
  const Cli r = fp4lab_train(tmp, {"--config", config_file(tmp, tiny(6)), "--print-config"});
  CHECK(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["train"]["steps"] == 6);
  CHECK(j["train"]["beta2"] == 0.95);
  CHECK(j["model"]["d_ff"] == 192);
  CHECK(j["data"] == "synthetic:markov?order=1&vocab=64&branch=4&alpha=1.1&seed=1");  // canonical form
  CHECK(r.err.rfind("config hash ", 0) == 0);
  CHECK(r.err.size() == 12 + 64 + 1);
}
