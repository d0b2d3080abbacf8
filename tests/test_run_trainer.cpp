// test_run_trainer.cpp — whole training runs, in process, on tiny models and the synthetic source:
// resumption is bit-exact for every recipe family (SR included), crashes and corrupted checkpoints
// recover as documented, bad inputs are refused before anything is written, and a tiny model
// learns what the source makes learnable.
#include <catch2/catch.hpp>

#include <csignal>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "engine/data/byte_shard_builder.h"
#include "engine/data/markov_chain.h"
#include "engine/data/synthetic_spec.h"
#include "engine/run/checkpoint.h"
#include "engine/run/config.h"
#include "engine/run/trainer.h"
#include "sweeps/metrics_jsonl.h"
#include "tests/run_test_helpers.h"
#include "tests/test_support.h"

#ifdef FP4LAB_HAVE_CUDA
#include "engine/cuda_model/cuda_backend.h"
#endif

using namespace fp4::run;
using namespace fp4::test;
using nlohmann::json;

namespace {

// d1 (d_model 64, d_ff 192), 32-token sequences, 2 sequences per micro-step, 2 micro-steps per
// step: every dimension a multiple of 16 (and of nvfp4's 16×16 tiles).
json tiny_config(const std::string& recipe, int64_t steps = 40) {
  return {{"model", {{"preset", "d1"}, {"seq_len", 32}}},
          {"recipe", recipe},
          {"data", kTinyRunData},
          {"train", {{"steps", steps}, {"batch_tokens", 128}, {"micro_batch", 2}, {"lr", 3e-3}, {"seed", 7}}},
          {"eval", {{"every", 10}, {"tokens", 512}}},
          {"probe", {{"every", recipe == "bf16" ? 0 : 10}}},
          {"checkpoint", {{"every", 20}}},
          {"device", "cpu"}};  // the CPU engine on any machine (without it a visible GPU is picked)
}

TrainResult run_train(const std::filesystem::path& config, const std::filesystem::path& dir, bool resume = false,
                      int64_t stop_after = -1, int threads = 1) {
  const fp4::test::OmpThreads omp(threads);
  return train(quiet_train_options(config, dir, resume, stop_after));
}

// The rows a consumer keeps: the last per (kind, step, layer, linear, slot, gemm), without the
// wall-clock fields and without the per-process "run" rows.
std::map<std::string, json> last_rows(const std::vector<json>& rows) {
  std::map<std::string, json> out;
  for (json r : rows) {
    if (r["kind"] == "run") continue;
    r.erase("tokens_per_s");
    r.erase("elapsed_s");
    std::string key = r["kind"].get<std::string>();
    for (const char* k : {"step", "layer", "linear", "slot", "gemm"})
      if (r.contains(k)) key.append("/").append(r[k].dump());
    out[key] = r;
  }
  return out;
}

void require_same_run(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto ra = last_rows(read_rows(a)), rb = last_rows(read_rows(b));
  REQUIRE(ra.size() == rb.size());
  for (const auto& [key, row] : ra) {
    INFO(key);
    REQUIRE(rb.count(key) == 1);
    CHECK(rb.at(key) == row);  // JSON equality: every number bit for bit
  }
  const CheckpointState sa = final_state(a), sb = final_state(b);
  CHECK(sa.step == sb.step);
  CHECK(sa.tokens_seen == sb.tokens_seen);
  CHECK(sa.data_position == sb.data_position);
  CHECK(same_bits(sa.params, sb.params));
  CHECK(same_bits(sa.adam_m, sb.adam_m));
  CHECK(same_bits(sa.adam_v, sb.adam_v));
}

}  // namespace

TEST_CASE("train: a run writes its directory as documented", "[run][trainer]") {
  ScratchDir tmp;
  const auto config = write_config(tmp, tiny_config("ufp4"));
  const auto dir = tmp / "run";
  const TrainResult r = run_train(config, dir);
  CHECK(r.outcome == Outcome::succeeded);
  CHECK(r.step == 40);
  CHECK(exit_code(r) == 0);
  for (const char* f : {"config.json", "metrics.jsonl", "heartbeat", "status.json", "train.log"})
    CHECK(std::filesystem::exists(dir / f));
  CHECK(json::parse(slurp(dir / "status.json"))["state"] == "succeeded");
  // config.json is the resolved config: reading it gives the same config (and hash).
  CHECK(config_hash(load_config(dir / "config.json")) == config_hash(load_config(config)));
  const auto ckpts = list_checkpoints(dir / "checkpoints");
  REQUIRE(ckpts.size() == 2);
  CHECK(ckpts[0].filename() == "step_0000000020.ckpt");
  CHECK(ckpts[1].filename() == "step_0000000040.ckpt");
  CHECK(json::parse(slurp(dir / "heartbeat"))["step"] == 40);

  const auto rows = read_rows(dir);
  int train = 0, eval = 0, probe = 0, probe_gemm = 0, run = 0;
  for (const json& row : rows) {
    const std::string kind = row["kind"];
    CHECK(row.contains("step"));
    CHECK(row.contains("tokens"));
    if (kind == "train") {
      ++train;
      CHECK(row["tokens"] == row["step"].get<int64_t>() * 128);
      for (const char* k : {"loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"}) CHECK(row.contains(k));
    } else if (kind == "eval") {
      ++eval;
      CHECK(row["eval_tokens"] == 512);
      CHECK_FALSE(row.contains("bpb"));  // vocabulary 64: not the byte tokenizer
    } else if (kind == "probe") {
      ++probe;
      for (const char* k : {"layer", "linear", "slot", "gemm", "alpha", "nmse", "sqnr_db", "shrink", "b_eff"})
        CHECK(row.contains(k));
    } else if (kind == "probe_gemm") {
      ++probe_gemm;
      CHECK(row["eta"].get<double>() == row["alpha_a"].get<double>() * row["alpha_b"].get<double>());
    } else if (kind == "run") {
      ++run;
      CHECK(row["n_params_nonembedding"].get<int64_t>() > 0);
      CHECK(row["tokens_total"] == 40 * 128);
    }
  }
  CHECK(train == 40);
  CHECK(eval == 5);                 // steps 0, 10, 20, 30, 40
  CHECK(probe == 5 * 4 * 6);        // 5 probes × 4 linears × 6 slots
  CHECK(probe_gemm == 5 * 4 * 3);   // × 3 GEMMs
  CHECK(run == 1);
}

TEST_CASE("train: 40 steps straight equal 20 + resume + 20, bit for bit", "[run][trainer][resume]") {
  const std::string recipe = GENERATE(as<std::string>{}, "bf16", "e2m1", "ufp4", "nvfp4");
  INFO("recipe " << recipe);
  ScratchDir tmp;
  const auto config = write_config(tmp, tiny_config(recipe));
  const auto straight = tmp / "straight", split = tmp / "split";
  REQUIRE(run_train(config, straight).outcome == Outcome::succeeded);

  const TrainResult first = run_train(config, split, false, 20);
  CHECK(first.outcome == Outcome::interrupted);
  CHECK(first.step == 20);
  CHECK(exit_code(first) == 128 + SIGTERM);
  CHECK_FALSE(std::filesystem::exists(split / "status.json"));  // not final: resumable
  const TrainResult second = run_train(config, split, true);
  CHECK(second.outcome == Outcome::succeeded);
  CHECK(second.step == 40);

  // No step was repeated, so even the row sequences are identical.
  CHECK(plain_rows(read_rows(straight)) == plain_rows(read_rows(split)));
  require_same_run(straight, split);
}

TEST_CASE("train: the same config gives the same bits with one thread or two", "[run][trainer]") {
  ScratchDir tmp;
  const auto config = write_config(tmp, tiny_config("ufp4", 6));
  REQUIRE(run_train(config, tmp / "one", false, -1, 1).outcome == Outcome::succeeded);
  REQUIRE(run_train(config, tmp / "two", false, -1, 2).outcome == Outcome::succeeded);
  require_same_run(tmp / "one", tmp / "two");
}

TEST_CASE("train: after a crash the lost steps are redone identically", "[run][trainer][resume]") {
  ScratchDir tmp;
  const auto config = write_config(tmp, tiny_config("ufp4"));
  const auto straight = tmp / "straight", crashed = tmp / "crashed";
  REQUIRE(run_train(config, straight).outcome == Outcome::succeeded);
  REQUIRE(run_train(config, crashed, false, 25).outcome == Outcome::interrupted);
  // A crash (SIGKILL) after step 25 but before its checkpoint: only step 20's is left, while
  // metrics.jsonl already holds steps 21..25, the last one torn mid-line.
  std::filesystem::remove(crashed / "checkpoints" / checkpoint_file_name(25));
  spit(crashed / "metrics.jsonl", slurp(crashed / "metrics.jsonl") + "{\"kind\":\"train\",\"st");
  REQUIRE(run_train(config, crashed, true).outcome == Outcome::succeeded);

  // Steps 21..25 appear twice, and the redone rows equal the first ones.
  const auto rows = read_rows(crashed);
  std::map<int64_t, std::vector<json>> train_rows;
  for (json r : rows)
    if (r["kind"] == "train") {
      r.erase("tokens_per_s");
      r.erase("elapsed_s");
      train_rows[r["step"].get<int64_t>()].push_back(r);
    }
  for (int64_t s = 21; s <= 25; ++s) {
    REQUIRE(train_rows[s].size() == 2);
    CHECK(train_rows[s][0] == train_rows[s][1]);
  }
  CHECK(train_rows[26].size() == 1);
  require_same_run(straight, crashed);
}

TEST_CASE("train: a corrupted newest checkpoint falls back to the previous, with a warning", "[run][trainer][resume]") {
  ScratchDir tmp;
  const auto config = write_config(tmp, tiny_config("nvfp4"));
  const auto straight = tmp / "straight", run = tmp / "run";
  REQUIRE(run_train(config, straight).outcome == Outcome::succeeded);
  REQUIRE(run_train(config, run, false, 25).outcome == Outcome::interrupted);
  const auto newest = run / "checkpoints" / checkpoint_file_name(25);
  SECTION("a flipped byte") {
    std::string bytes = slurp(newest);
    bytes[bytes.size() - 100] ^= 0x40;
    spit(newest, bytes);
  }
  SECTION("truncated") { spit(newest, slurp(newest).substr(0, 5000)); }
  REQUIRE(run_train(config, run, true).outcome == Outcome::succeeded);
  const std::string log = slurp(run / "train.log");
  CHECK(log.find("warning: skipping checkpoint") != std::string::npos);
  CHECK(log.find("step_0000000025.ckpt") != std::string::npos);
  CHECK(log.find("resuming from step_0000000020.ckpt") != std::string::npos);
  require_same_run(straight, run);
}

TEST_CASE("train: resuming needs the same config and a verifiable checkpoint", "[run][trainer][resume]") {
  ScratchDir tmp;
  const auto config = write_config(tmp, tiny_config("bf16"));
  const auto dir = tmp / "run";
  REQUIRE(run_train(config, dir, false, 5).outcome == Outcome::interrupted);
  const auto expect_refusal = [&](const std::filesystem::path& cfg, bool resume, const std::string& part) {
    const std::string before = slurp(dir / "metrics.jsonl");
    try {
      run_train(cfg, dir, resume);
      FAIL("no error");
    } catch (const fp4::UserError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(part) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
    CHECK(slurp(dir / "metrics.jsonl") == before);  // nothing was written
  };
  // Without --resume, an existing run is never overwritten.
  expect_refusal(config, false, "already holds a run: pass --resume to continue it, or choose a new --dir");
  // With another config.
  json other = tiny_config("bf16");
  other["train"]["lr"] = 1e-3;
  expect_refusal(write_config(tmp, other, "other.json"), true, "differs from the run's config.json");
  // A checkpoint written under another config (config.json gone, so only the checkpoint can tell).
  std::filesystem::rename(dir / "config.json", tmp / "saved-config.json");
  expect_refusal(write_config(tmp, other, "other.json"), true, "was written by a different config");
  std::filesystem::rename(tmp / "saved-config.json", dir / "config.json");
  // Every checkpoint unreadable: a clear error, the same on every attempt.
  for (const auto& p : list_checkpoints(dir / "checkpoints")) spit(p, "truncated");
  expect_refusal(config, true, "cannot resume: no valid checkpoint in");
  expect_refusal(config, true, "cannot resume: no valid checkpoint in");
}

TEST_CASE("train: --resume without a checkpoint starts from scratch, and a finished run stays finished",
          "[run][trainer][resume]") {
  ScratchDir tmp;
  const auto config = write_config(tmp, tiny_config("bf16", 10));
  const auto dir = tmp / "never-started";
  const TrainResult r = run_train(config, dir, true);
  CHECK(r.outcome == Outcome::succeeded);
  CHECK(slurp(dir / "train.log").find("no checkpoint to resume from: starting from scratch") != std::string::npos);
  const std::string rows = slurp(dir / "metrics.jsonl");
  const TrainResult again = run_train(config, dir, true);
  CHECK(again.outcome == Outcome::succeeded);
  CHECK(again.step == 10);
  CHECK(slurp(dir / "metrics.jsonl") == rows);  // nothing redone
}

TEST_CASE("train: a run that blows up is reported as diverged", "[run][trainer]") {
  ScratchDir tmp;
  json j = tiny_config("e2m1", 20);
  j["train"]["lr"] = 1e30;
  j["train"]["warmup_steps"] = 0;
  j["train"]["grad_clip"] = 0;
  const auto config = write_config(tmp, j);
  const auto dir = tmp / "run";
  const TrainResult r = run_train(config, dir);
  CHECK(r.outcome == Outcome::diverged);
  CHECK(exit_code(r) == kExitDiverged);
  CHECK(r.step < 20);
  const json status = json::parse(slurp(dir / "status.json"));
  CHECK(status["state"] == "diverged");
  CHECK(status["step"] == r.step);
  CHECK(status["reason"].get<std::string>().find("non-finite") != std::string::npos);
  // The diverged step's row is there, with null for what was not finite.
  const auto rows = read_rows(dir);
  CHECK(rows.back()["kind"] == "train");
  CHECK(rows.back()["step"] == r.step);
  CHECK((rows.back()["loss"].is_null() || rows.back()["grad_norm"].is_null() || r.reason.find("quantizer") != std::string::npos));
  // Resuming a diverged run gives the same outcome without training again.
  const TrainResult again = run_train(config, dir, true);
  CHECK(again.outcome == Outcome::diverged);
  CHECK(again.step == r.step);
}

TEST_CASE("train: bad inputs are refused before the run directory is touched", "[run][trainer]") {
  ScratchDir tmp;
  const auto dir = tmp / "run";
  const auto refused = [&](const json& j, const std::string& part) {
    const auto config = write_config(tmp, j);
    try {
      run_train(config, dir);
      FAIL("no error");
    } catch (const fp4::UserError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
    CHECK_FALSE(std::filesystem::exists(dir));
  };
  json j = tiny_config("ufp4");
  j["model"]["d_ff"] = 200;
  refused(j, "model.d_ff = 200 does not fit recipe \"ufp4\"");
  j = tiny_config("bf16");
  j["data"] = (tmp / "no-such-shards").string();
  refused(j, "no-such-shards");
  j = tiny_config("bf16");
  j["data"] = "synthetic:markov?order=1&vocab=1";
  refused(j, "run.json: data:");
  try {
    run_train(tmp / "missing.json", dir);
    FAIL("no error");
  } catch (const fp4::UserError& e) {
    CHECK(std::string(e.what()).find("missing.json") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("train: device cuda without a GPU (or without CUDA) is refused before the directory is touched",
          "[run][trainer]") {
  ScratchDir tmp;
  const auto dir = tmp / "run";
  json j = tiny_config("bf16", 2);
  j["device"] = "cuda";
  try {
    const TrainResult r = run_train(write_config(tmp, j), dir);
    // A machine with a GPU (and a build with CUDA) trains it: nothing to check here.
    CHECK(r.outcome == Outcome::succeeded);
    return;
  } catch (const fp4::UserError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find('\n') == std::string::npos);
#ifdef FP4LAB_HAVE_CUDA
    CHECK(what.rfind("device \"cuda\": no CUDA device is visible", 0) == 0);
#else
    CHECK(what.find("device \"cuda\": this fp4lab was built without CUDA; ") != std::string::npos);
#endif
  }
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("train: a config that names no device trains on a visible GPU, else on the CPU, --device wins",
          "[run][trainer]") {
  ScratchDir tmp;
  json j = tiny_config("bf16", 2);
  j.erase("device");
  const auto config = write_config(tmp, j);
  bool gpu = false;
#ifdef FP4LAB_HAVE_CUDA
  gpu = fp4::cuda_model::cuda_device_visible();
#endif
  const std::string want = gpu ? "cuda" : "cpu";
  // The pick, as --print-config and the trainer make it: part of the config, so of its hash.
  RunConfig c = load_config(config);
  CHECK_FALSE(c.device_named);
  const std::string choice = pick_device(c, "");
  CHECK(c.device == want);
  CHECK(choice.rfind("picked: the config names no device", 0) == 0);
  RunConfig named = load_config(config);
  named.device = want;
  CHECK(config_hash(c) == config_hash(named));
  RunConfig flagged = load_config(config);
  CHECK(pick_device(flagged, "cpu") == "from --device");
  CHECK(flagged.device == "cpu");
  j["device"] = "cpu";
  const auto explicit_config = write_config(tmp, j, "explicit.json");
  RunConfig from_file = load_config(explicit_config);
  CHECK(from_file.device_named);
  CHECK(pick_device(from_file, "") == "from the config");
  CHECK(from_file.device == "cpu");

  // A run: its config.json and run row say the device it picked, and train.log says why.
  const auto dir = tmp / "run";
  REQUIRE(run_train(config, dir).outcome == Outcome::succeeded);
  CHECK(load_config(dir / "config.json").device == want);
  CHECK(slurp(dir / "train.log").find("device " + want + " (picked: the config names no device") != std::string::npos);
}

TEST_CASE("train: byte shards train, report bits per byte, and a damaged shard is refused", "[run][trainer]") {
  ScratchDir tmp;
  // Forty small documents of varied text; every other one is held out.
  std::string text;
  for (int d = 0; d < 40; ++d) {
    for (int w = 0; w < 120; ++w) text += std::string(1, static_cast<char>('a' + (d * 7 + w * w) % 26)) + "xy ";
    text += fp4::data::kDocumentSeparator;
  }
  spit(tmp / "corpus.txt", text);
  fp4::data::ByteBuildOptions build;
  build.inputs = {tmp / "corpus.txt"};
  build.out_dir = tmp / "shards";
  build.validation_every = 2;
  fp4::data::build_byte_shards(build);

  json j = tiny_config("bf16", 6);
  j["data"] = (tmp / "shards").string();
  const auto dir = tmp / "run";
  REQUIRE(run_train(write_config(tmp, j), dir).outcome == Outcome::succeeded);
  bool saw_bpb = false;
  for (const json& row : read_rows(dir))
    if (row["kind"] == "eval") {
      REQUIRE(row.contains("bpb"));
      // bits/byte = nats/token / ln 2 · tokens/bytes, and separators are not text: more than loss/ln 2.
      CHECK(row["bpb"].get<double>() > row["loss"].get<double>() / std::log(2.0));
      saw_bpb = true;
    }
  CHECK(saw_bpb);

  // A shard whose header disagrees with the manifest.
  const auto shard = tmp / "shards" / "train_000.bin";
  std::string bytes = slurp(shard);
  bytes[12] = 0x7f;  // vocabulary word
  spit(shard, bytes);
  try {
    run_train(write_config(tmp, j), tmp / "run2");
    FAIL("no error");
  } catch (const fp4::UserError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("train_000.bin") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(tmp / "run2"));
}

TEST_CASE("train: a tiny model learns the synthetic source down to, not below, its entropy rate", "[run][trainer]") {
  ScratchDir tmp;
  json j = tiny_config("bf16", 150);
  j["train"]["lr"] = 1e-2;
  j["train"]["batch_tokens"] = 256;
  j["train"]["micro_batch"] = 4;
  j["eval"] = {{"every", 50}, {"tokens", 4096}};
  const auto dir = tmp / "run";
  REQUIRE(run_train(write_config(tmp, j), dir).outcome == Outcome::succeeded);
  double final_loss = 0;
  for (const json& row : read_rows(dir))
    if (row["kind"] == "eval") final_loss = row["loss"];
  const fp4::data::MarkovChain chain(fp4::data::parse_synthetic_spec(kTinyRunData));
  const fp4::data::MarkovEntropies h = chain.entropies();
  const double floor = h.window_floor(32);
  INFO("final " << final_loss << ", unigram " << h.unigram << ", rate " << h.rate << ", floor " << floor);
  // Most of the way from the best context-free loss to the best possible one...
  CHECK(final_loss < h.unigram - 0.75 * (h.unigram - floor));
  // ...and not below the floor by more than the noise of 4096 held-out tokens (per-token loss
  // spread is about 1 nat: standard error ≈ 0.016; allow 0.08).
  CHECK(final_loss > floor - 0.08);
}

TEST_CASE("train: a synthetic source with 256 symbols reports no bits per byte (it has no bytes)", "[run][trainer]") {
  ScratchDir tmp;
  json j = tiny_config("bf16", 10);
  j["data"] = "synthetic:markov?order=1&vocab=256&branch=4&seed=1";
  const auto dir = tmp / "run";
  REQUIRE(run_train(write_config(tmp, j), dir).outcome == Outcome::succeeded);
  int evals = 0;
  for (const json& row : read_rows(dir))
    if (row["kind"] == "eval") {
      ++evals;
      CHECK_FALSE(row.contains("bpb"));
    }
  CHECK(evals >= 1);
}

TEST_CASE("train: an MoE model writes its routing per step, and resumes bit for bit", "[run][trainer][moe]") {
  // d1-e4k2: d1 with 4 experts of width 96, top-2, in its one block; e2m1 rounds dY stochastically.
  json j = tiny_config("e2m1", 20);
  j["model"]["preset"] = "d1-e4k2";
  j["probe"]["every"] = 0;  // the probe does not measure experts yet (the config refuses it)
  ScratchDir tmp;
  const auto config = write_config(tmp, j);
  const auto straight = tmp / "straight", split = tmp / "split";
  REQUIRE(run_train(config, straight).outcome == Outcome::succeeded);
  REQUIRE(run_train(config, split, false, 10).outcome == Outcome::interrupted);
  REQUIRE(run_train(config, split, true).outcome == Outcome::succeeded);
  require_same_run(straight, split);

  const std::vector<json> rows = read_rows(straight);
  int moe_rows = 0;
  for (const json& r : rows) {
    if (r["kind"] == "run") {
      CHECK(r["n_params_active_nonembedding"].get<int64_t>() < r["n_params_nonembedding"].get<int64_t>());
      CHECK(r.contains("n_params_active"));
    }
    if (r["kind"] == "train") {
      CHECK(r["aux_loss"].get<double>() > 0.0);  // α·balance + β·z, both positive
    }
    if (r["kind"] != "moe") continue;
    ++moe_rows;
    CHECK(r["layer"] == 0);
    const double lo = r["load_min"].get<double>(), hi = r["load_max"].get<double>();
    CHECK(lo <= 0.25);
    CHECK(hi >= 0.25);
    CHECK(hi <= 1.0);
    CHECK(r["load_cv"].get<double>() >= 0.0);
    CHECK(r["balance"].get<double>() > 0.0);
    CHECK(r["z"].get<double>() > 0.0);
  }
  CHECK(moe_rows == 20);

  // The store's ingest keeps them as metrics "moe/<layer>/<field>" and "train/aux_loss".
  const fp4::store::MetricsBatch batch = fp4::sweeps::parse_metrics_jsonl(slurp(straight / "metrics.jsonl"), "m");
  std::map<std::string, int> keys;
  for (const auto& m : batch.metrics) ++keys[m.key];
  for (const char* k : {"moe/0/load_min", "moe/0/load_max", "moe/0/load_cv", "moe/0/balance", "moe/0/z"}) {
    INFO(k);
    CHECK(keys[k] == 20);
  }
  CHECK(keys["train/aux_loss"] == 20);

  // On more than one GPU it is refused in one line before the directory is touched (the config
  // itself is: with or without CUDA in the build), and a config that names no device trains on
  // the CPU.
  json cuda = j;
  cuda["device"] = "cuda";
  cuda["gpus"] = 2;
  const auto refused = tmp / "cuda";
  try {
    run_train(write_config(tmp, cuda, "cuda.json"), refused);
    FAIL("an MoE model trained on 2 GPUs");
  } catch (const fp4::UserError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find(std::string("gpus = 2: ") + fp4::model::kMoeMultiGpuRefusal) != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(refused));
  json unnamed = tiny_config("bf16", 1);
  unnamed["model"]["preset"] = "d1-e4k2";
  unnamed.erase("device");
  const auto picked = tmp / "picked";
  REQUIRE(run_train(write_config(tmp, unnamed, "unnamed.json"), picked).outcome == Outcome::succeeded);
  CHECK(json::parse(slurp(picked / "config.json"))["device"] == "cpu");
}
