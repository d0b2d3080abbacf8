// test_run_data_split.cpp — the multi-GPU data split (engine/run/data_split.h): whatever the number
// of ranks, the union of what the ranks train on in a step is the 1-GPU run's batch, and rank 0's
// micro-batches, then rank 1's, ..., are that batch in its order; every rank's stream stands where
// the 1-GPU run's does after every step.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/data/byte_shard_builder.h"
#include "engine/data/data_source.h"
#include "engine/run/data_split.h"
#include "tests/test_support.h"

using fp4::run::rank_share;
using fp4::run::RankShare;
using fp4::run::read_step;

namespace {

using Batch = std::vector<int32_t>;

// Every micro-batch one rank trains on over `steps` steps, with its global micro-step index, and
// the stream's position after each step.
struct RankReads {
  std::vector<std::vector<std::pair<int64_t, Batch>>> steps;  // per step: (k, tokens) in read order
  std::vector<fp4::data::StreamPosition> positions;
};

RankReads read_as_rank(const fp4::data::DataSource& data, const fp4::data::StreamOrder& order, int64_t b,
                       int64_t t, int64_t accum, int world, int rank, int steps) {
  std::unique_ptr<fp4::data::TrainStream> stream = data.train_stream(data.start(), order);
  RankReads out;
  Batch runs(static_cast<size_t>(b * (t + 1)));
  const RankShare share = rank_share(accum, world, rank);
  for (int s = 0; s < steps; ++s) {
    out.steps.emplace_back();
    read_step(*stream, b, t, accum, share, runs, [&](int64_t k) { out.steps.back().emplace_back(k, runs); });
    out.positions.push_back(stream->position());
  }
  return out;
}

void check_split(const fp4::data::DataSource& data, const fp4::data::StreamOrder& order) {
  const int64_t b = 2, t = 16, accum = 12;
  const int steps = 3;
  const RankReads one = read_as_rank(data, order, b, t, accum, 1, 0, steps);
  for (int s = 0; s < steps; ++s) {
    REQUIRE(one.steps[s].size() == static_cast<size_t>(accum));
    for (int64_t k = 0; k < accum; ++k) CHECK(one.steps[s][k].first == k);
  }
  // Different micro-batches differ (the check below could not tell them apart otherwise).
  CHECK(one.steps[0][0].second != one.steps[0][1].second);
  for (const int world : {2, 3, 4, 6, 12}) {
    INFO("world " << world);
    std::vector<RankReads> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(read_as_rank(data, order, b, t, accum, world, r, steps));
    for (int s = 0; s < steps; ++s) {
      // Concatenated in rank order: the 1-GPU step, micro-batch for micro-batch, index for index.
      std::vector<std::pair<int64_t, Batch>> joined;
      for (const RankReads& r : ranks) {
        CHECK(r.steps[s].size() == static_cast<size_t>(accum / world));
        joined.insert(joined.end(), r.steps[s].begin(), r.steps[s].end());
        CHECK(r.positions[s] == one.positions[s]);
      }
      CHECK(joined == one.steps[s]);
    }
  }
}

}  // namespace

TEST_CASE("data split: the ranks' micro-batches, concatenated by rank, are the 1-GPU step (synthetic)",
          "[run][gpus]") {
  const auto data = fp4::data::open_data("synthetic:markov?order=1&vocab=64&branch=4&seed=3");
  check_split(*data, fp4::data::StreamOrder::file_order());
}

TEST_CASE("data split: the ranks' micro-batches, concatenated by rank, are the 1-GPU step (shuffled shards)",
          "[run][gpus]") {
  const fp4::test::ScratchDir tmp;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "document " + std::to_string(i * 7919 % 1000) + " of the corpus\n";
  fp4::test::spit(tmp / "corpus.txt", text);
  fp4::data::ByteBuildOptions o;
  o.inputs = {tmp / "corpus.txt"};
  o.out_dir = tmp / "shards";
  o.shard_tokens = 4000;
  fp4::data::build_byte_shards(o);
  const auto data = fp4::data::open_data((tmp / "shards").string());
  check_split(*data, fp4::data::StreamOrder::shuffled(11, 16));
  check_split(*data, fp4::data::StreamOrder::file_order());
}

TEST_CASE("data split: rank shares are contiguous blocks that tile the step", "[run][gpus]") {
  CHECK(rank_share(8, 1, 0).first == 0);
  CHECK(rank_share(8, 1, 0).count == 8);
  CHECK(rank_share(8, 4, 3).first == 6);
  CHECK(rank_share(8, 4, 3).count == 2);
  CHECK(rank_share(8, 4, 3).contains(7));
  CHECK_FALSE(rank_share(8, 4, 3).contains(5));
  CHECK_THROWS_AS(rank_share(6, 4, 0), std::logic_error);  // 4 does not divide 6
  CHECK_THROWS_AS(rank_share(8, 2, 2), std::logic_error);
  CHECK_THROWS_AS(rank_share(8, 0, 0), std::logic_error);
}
