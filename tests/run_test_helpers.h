// run_test_helpers.h — what only the run tests need; the scratch directories and file helpers they
// share with the other tests are in tests/test_support.h.
#pragma once

#include <catch2/catch.hpp>
#include <omp.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/checkpoint.h"
#include "engine/run/trainer.h"
#include "tests/test_support.h"

namespace fp4::test {

// Every row of DIR/metrics.jsonl, in file order.
inline std::vector<nlohmann::json> read_rows(const std::filesystem::path& dir) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// The same rows in file order without the wall-clock fields and the per-process "run" rows: what
// two runs of one config (or a run and its resumed twin) must have bit for bit.
inline std::vector<nlohmann::json> plain_rows(const std::vector<nlohmann::json>& rows) {
  std::vector<nlohmann::json> out;
  for (nlohmann::json r : rows) {
    if (r["kind"] == "run") continue;
    r.erase("tokens_per_s");
    r.erase("elapsed_s");
    out.push_back(r);
  }
  return out;
}

// The state of DIR's newest valid checkpoint (there must be one).
inline run::CheckpointState final_state(const std::filesystem::path& dir) {
  auto loaded = run::load_latest_checkpoint(dir / "checkpoints");
  REQUIRE(loaded.has_value());
  return loaded->state;
}

// Two run directories hold the same run: every metrics row equal as JSON (every number bit for
// bit) and the newest checkpoints' step, stream position, weights and AdamW moments bit-identical.
inline void require_identical_runs(const std::filesystem::path& a, const std::filesystem::path& b) {
  CHECK(plain_rows(read_rows(a)) == plain_rows(read_rows(b)));
  const run::CheckpointState sa = final_state(a), sb = final_state(b);
  CHECK(sa.step == sb.step);
  CHECK(sa.data_position == sb.data_position);
  CHECK(same_bits(sa.params, sb.params));
  CHECK(same_bits(sa.adam_m, sb.adam_m));
  CHECK(same_bits(sa.adam_v, sb.adam_v));
}

// Sets the OpenMP thread count for a scope. The trainer's results do not depend on it (a test
// checks that); on a loaded machine one thread avoids OpenMP's barrier spinning, which turns a
// two-second test into minutes when both cores are taken.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

// J written as DIR/NAME, indented as a person would write a run config; its path.
inline std::filesystem::path write_config(const ScratchDir& dir, const nlohmann::json& j,
                                          const std::string& name = "run.json") {
  const auto path = dir / name;
  spit(path, j.dump(2));
  return path;
}

// The options of an in-process run of CONFIG in DIR that does not echo train.log to stderr (the
// test reads the run's files); the caller adds what else its run needs (a device, a rank).
inline run::TrainOptions quiet_train_options(const std::filesystem::path& config, const std::filesystem::path& dir,
                                             bool resume = false, int64_t stop_after = -1) {
  run::TrainOptions o;
  o.config = config;
  o.dir = dir;
  o.resume = resume;
  o.stop_after = stop_after;
  o.echo = false;
  return o;
}

}  // namespace fp4::test
