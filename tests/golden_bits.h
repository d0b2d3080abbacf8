// golden_bits.h — what the golden-bits tests share (tests/test_golden_bits.cpp on the CPU,
// tests/gpu/golden_bits_test.cpp on a GPU): one tiny training run per recipe and the bits it ends
// in. A change of training bits fails those tests until kNumericsIdentity (base/numerics_identity.h)
// is bumped, the change is named in bench/RESULTS.md and the bits are pinned again (docs/train.md
// "Numerics identity").
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/numerics_identity.h"
#include "base/sha256.h"
#include "engine/run/trainer.h"
#include "tests/run_test_helpers.h"

namespace fp4::test {

// The pinned outcome of one recipe's run: the final train and validation losses as the bits of
// the doubles metrics.jsonl holds, and the first 16 hex digits of the SHA-256 of the final weights.
struct GoldenBits {
  std::string recipe;
  uint64_t train_loss = 0, eval_loss = 0;
  std::string weights;
  bool operator==(const GoldenBits&) const = default;
};

// The line of a pinned table that `got` would be, to paste when re-pinning.
inline std::string golden_line(const GoldenBits& got) {
  return fmt::format("{{\"{}\", 0x{:016x}, 0x{:016x}, \"{}\"}},", got.recipe, got.train_loss, got.eval_loss, got.weights);
}

// Two layers of d_model 128 (two heads of 64) with d_ff 384, 32-token sequences, 4 sequences per
// micro-step, 2 micro-steps per step, 20 steps on the first-order Markov source, one evaluation at
// the end: every recipe's quantizers, the optimizer and the evaluation run; a few seconds on the
// CPU. Every GEMM dimension is a multiple of 128, which the 128-wide RHT and double-block scales of
// docs/recipes.md's presets need.
inline nlohmann::json golden_config(const std::string& recipe, const std::string& device) {
  return {{"model", {{"n_layers", 2}, {"d_model", 128}, {"n_heads", 2}, {"d_ff", 384}, {"seq_len", 32}}},
          {"recipe", recipe},
          {"data", kTinyRunData},
          {"train", {{"steps", 20}, {"batch_tokens", 256}, {"micro_batch", 4}, {"lr", 3e-3}, {"seed", 7}}},
          {"eval", {{"every", 20}, {"tokens", 512}}},
          {"checkpoint", {{"every", 20}}},
          {"device", device}};
}

// Trains `recipe` on `device` in DIR and reads back its golden bits.
inline GoldenBits golden_run(const std::string& recipe, const std::string& device, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path config = dir / "config.json";
  spit(config, golden_config(recipe, device).dump(2));
  run::TrainOptions o;
  o.config = config;
  o.dir = dir / "run";
  o.echo = false;
  const run::TrainResult r = run::train(o);
  REQUIRE(r.outcome == run::Outcome::succeeded);
  double train = 0, eval = 0;
  for (const nlohmann::json& row : read_rows(o.dir)) {
    if (row["kind"] == "train") train = row["loss"].get<double>();
    if (row["kind"] == "eval") eval = row["loss"].get<double>();
    if (row["kind"] == "run") CHECK(row["numerics"] == kNumericsIdentity);  // every run records it
  }
  const run::CheckpointState st = final_state(o.dir);
  const std::string weights =
      sha256_hex(std::string_view(reinterpret_cast<const char*>(st.params.data()), st.params.size() * sizeof(float)));
  return {recipe, std::bit_cast<uint64_t>(train), std::bit_cast<uint64_t>(eval), weights.substr(0, 16)};
}

}  // namespace fp4::test
