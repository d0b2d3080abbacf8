// test_run_memory.cpp — sizes: absurd ones refused by the config, and a run too large for the
// machine refused by the trainer before it allocates, saying what it needs; the estimate it uses
// follows what the CPU backend really takes.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "engine/run/config.h"
#include "engine/run/memory_need.h"
#include "tests/test_support.h"

using nlohmann::json;
using fp4::test::ScratchDir;

namespace {

json tiny() {
  return json::parse(R"({"model": {"preset": "d1", "seq_len": 64}, "data": "synthetic:markov?order=1&vocab=64",
                         "train": {"steps": 1, "batch_tokens": 64, "micro_batch": 1}, "eval": {"every": 0, "tokens": 64},
                         "device": "cpu"})");
}

std::string error_of(const json& j) {
  try {
    fp4::run::config_from_json(j, "run.json");
  } catch (const fp4::UserError& e) {
    return e.what();
  }
  return "(accepted)";
}

// Peak resident set of the children waited for so far, bytes.
double children_peak_rss() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_maxrss) * 1024;
}

}  // namespace

TEST_CASE("run config: sizes beyond any model this tool trains are refused before anything depends on them",
          "[run][config]") {
  json j = tiny();
  j["model"]["seq_len"] = 1e9;
  CHECK(error_of(j) == "run.json: model.seq_len must be at most 1048576 (a context of 2^20 tokens), got 1000000000");
  j = tiny();
  j["model"] = {{"n_layers", 1}, {"d_model", 1 << 20}, {"n_heads", 1 << 14}};
  CHECK(error_of(j).find("model.d_model must be at most 65536") != std::string::npos);
  j = tiny();
  j["model"]["d_ff"] = 1 << 20;
  CHECK(error_of(j).find("model.d_ff must be at most 262144") != std::string::npos);
  j = tiny();
  j["model"]["seq_len"] = 1 << 20;
  j["train"]["micro_batch"] = 4096;
  j["train"]["batch_tokens"] = int64_t{4096} << 20;
  j["eval"]["tokens"] = 1 << 20;
  CHECK(error_of(j).find("train.micro_batch × model.seq_len = 4096 × 1048576 = 4294967296 tokens per micro-step "
                         "exceeds 2147483647") != std::string::npos);
  j = tiny();
  j["eval"]["tokens"] = int64_t{64} << 30;
  CHECK(error_of(j).find("eval.tokens must be at most 2147483647") != std::string::npos);
}

TEST_CASE("a run too large for the machine is refused before anything is allocated or written", "[run][memory]") {
  ScratchDir tmp;
  // Within every bound, but terabytes of activations: no machine has them.
  json j = tiny();
  j["model"]["seq_len"] = 1 << 20;
  j["train"]["micro_batch"] = 2047;
  j["train"]["batch_tokens"] = int64_t{2047} << 20;
  j["eval"]["tokens"] = 1 << 20;
  fp4::test::spit(tmp / "huge.json", j.dump());
  const auto r = fp4::test::run_fp4lab("train --config '" + (tmp / "huge.json").string() + "' --dir '" +
                                           (tmp / "run").string() + "'",
                                       tmp);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find("the run needs about ") != std::string::npos);
  CHECK(r.err.find(" of host memory (weights and optimizer ") != std::string::npos);
  CHECK(r.err.find("lower train.micro_batch (2047) or model.seq_len (1048576)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp / "run" / "config.json"));

  // The advice follows the largest part: a model whose weights dominate.
  const fp4::run::RunConfig big = fp4::run::config_from_json(
      json::parse(R"({"model": {"preset": "d64", "seq_len": 64}, "data": "synthetic:markov", "train": {"steps": 1,
                      "batch_tokens": 64, "micro_batch": 1}, "eval": {"tokens": 64}, "device": "cpu"})"),
      "big.json");
  const fp4::run::MemoryNeed need = fp4::run::host_memory_need(big, 256);
  CHECK(need.weights > 100e9);  // 12.9 billion parameters
  try {
    fp4::run::check_memory(need, 16e9, "host memory", big);
    FAIL("accepted");
  } catch (const fp4::UserError& e) {
    CHECK(std::string(e.what()).find("and 14.9 GiB is available: choose a smaller model") != std::string::npos);
  }
  CHECK_NOTHROW(fp4::run::check_memory(need, 0, "host memory", big));  // unknown: not refused
}

TEST_CASE("the host memory estimate follows what a CPU run takes", "[run][memory]") {
  // Two runs that differ only in the micro-batch's size: the estimate's difference must be the
  // difference of the trainers' peak resident sets, within a quarter (allocator slack, the
  // attention's per-thread scratch).
  ScratchDir tmp;
  const auto peak_of = [&](int micro_batch, int seq_len) {
    json j = tiny();
    j["model"]["seq_len"] = seq_len;
    j["train"]["micro_batch"] = micro_batch;
    j["train"]["batch_tokens"] = micro_batch * seq_len;
    j["eval"]["tokens"] = seq_len;
    std::string name = "m";  // appended, not "m" + ...: GCC 12 warns (-Wrestrict, a false positive)
    name += std::to_string(micro_batch);
    fp4::test::spit(tmp / (name + ".json"), j.dump());
    const auto r = fp4::test::run_fp4lab("train --quiet --config '" + (tmp / (name + ".json")).string() + "' --dir '" +
                                             (tmp / name).string() + "'",
                                         tmp);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const fp4::run::RunConfig c = fp4::run::config_from_json(j, "run.json");
    return std::make_pair(children_peak_rss(), fp4::run::host_memory_need(c, 64).total());
  };
  const auto [small_rss, small_need] = peak_of(1, 1024);
  const auto [large_rss, large_need] = peak_of(48, 1024);
  const double measured = large_rss - small_rss, estimated = large_need - small_need;
  INFO("measured " << measured / 1e6 << " MB, estimated " << estimated / 1e6 << " MB");
  CHECK(estimated > 300e6);
  CHECK(estimated > 0.75 * measured);
  CHECK(estimated < 1.25 * measured);
}
