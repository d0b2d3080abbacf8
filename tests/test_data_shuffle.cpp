// The shuffled training stream (data_source.h, sequence_order.h): each epoch a seeded permutation
// of the training split's windows; resumable bit-exactly; identical for every recipe of a grid
// point; a prefix of it has the corpus's mix, where file order has only its first files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "engine/data/byte_shard_builder.h"
#include "engine/data/data_random.h"
#include "engine/data/data_source.h"
#include "engine/data/manifest.h"
#include "engine/data/sequence_order.h"
#include "engine/run/config.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace fp4::test;
using namespace fp4::data;

namespace {

const std::string kSep = "\n<|endoftext|>\n";

// A two-source corpus laid out as the real one is: every "prose" document (capital letters, which
// the separator does not contain) first, then every "technical" one (digits), with heavy-tailed lengths so that a few long
// documents hold much of the text. Returns the training split's tokens by reading the file-order
// stream.
struct TwoSourceCorpus {
  fs::path dir;
  std::vector<uint16_t> train;  // the training split, in file order
};

std::string heavy_tailed_docs(char first, int letters, int count, uint64_t seed) {
  std::string text;
  for (int n = 0; n < count; ++n) {
    // Pareto-like lengths from one Philox word: 40 / u^0.8 bytes, capped.
    const uint32_t w = data_word(seed, DataPurpose::table, static_cast<uint64_t>(n), 0);
    const double u = (static_cast<double>(w) + 1.0) / 4294967296.0;
    const size_t len = static_cast<size_t>(std::min(60000.0, 40.0 / std::pow(u, 0.8)));
    if (n) text += kSep;
    for (size_t i = 0; i < len; ++i) text.push_back(static_cast<char>(first + (i * 7 + n) % letters));
  }
  return text;
}

TwoSourceCorpus make_two_source_corpus(const ScratchDir& tmp, int prose_docs, int technical_docs) {
  spit(tmp / "prose.txt", heavy_tailed_docs('A', 26, prose_docs, 1));
  spit(tmp / "tech.txt", heavy_tailed_docs('0', 10, technical_docs, 2));
  ByteBuildOptions o;
  o.inputs = {tmp / "prose.txt", tmp / "tech.txt"};
  o.out_dir = tmp / "shards";
  o.shard_tokens = 50000;  // several shards, so windows cross shard boundaries
  build_byte_shards(o);
  TwoSourceCorpus c;
  c.dir = o.out_dir;
  auto src = open_data(c.dir.string());
  c.train = src->train_stream()->next_batch(1, static_cast<int64_t>(src->train_tokens()) - 1);
  return c;
}

bool is_technical(uint16_t t) { return t >= '0' && t <= '9'; }

// The technical share of the document text (separators excluded) among tokens.
double technical_share(const std::vector<uint16_t>& tokens) {
  uint64_t tech = 0, text = 0;
  for (uint16_t t : tokens) {
    if (is_technical(t)) ++tech, ++text;
    else if (t >= 'A' && t <= 'Z') ++text;
  }
  return static_cast<double>(tech) / static_cast<double>(text);
}

}  // namespace

TEST_CASE("window_permutation is a seeded permutation, new each epoch, uniform over orders", "[data][shuffle]") {
  const std::vector<uint32_t> p = window_permutation(7, 0, 1000);
  std::vector<uint32_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0u);
  CHECK(sorted == identity);
  CHECK(p != identity);
  CHECK(window_permutation(7, 0, 1000) == p);  // deterministic
  CHECK(window_permutation(7, 1, 1000) != p);  // a new order every epoch
  CHECK(window_permutation(8, 0, 1000) != p);  // and for every seed
  CHECK(window_permutation(7, 0, 1) == std::vector<uint32_t>{0});
  // The documented algorithm (docs/data.md), as an independent implementation computes it
  // (bench/fidelity_peer.py --check asserts the same values): another implementation can feed its
  // model fp4lab's batches only while these hold.
  CHECK(std::vector<uint32_t>(p.begin(), p.begin() + 8) == std::vector<uint32_t>{81, 271, 63, 703, 887, 382, 773, 495});
  const std::vector<uint32_t> q = window_permutation(123456789012345ull, 3, 50);
  CHECK(std::vector<uint32_t>(q.begin(), q.begin() + 8) == std::vector<uint32_t>{22, 36, 30, 5, 39, 31, 9, 40});
  CHECK_THROWS_AS(window_permutation(7, 0, 0), std::invalid_argument);

  // Fisher–Yates draws every one of the 24 orders of 4 windows equally often; an off-by-one in
  // the swap range would make some orders impossible and others twice as likely.
  std::map<std::vector<uint32_t>, int> seen;
  const int draws = 24000;
  for (int e = 0; e < draws; ++e) ++seen[window_permutation(3, static_cast<uint64_t>(e), 4)];
  REQUIRE(seen.size() == 24);
  double chi2 = 0;
  for (const auto& [order, n] : seen) chi2 += (n - 1000.0) * (n - 1000.0) / 1000.0;
  CHECK(chi2 < 49.7);  // chi-square, 23 degrees of freedom: p = 0.001
}

TEST_CASE("a shuffled stream reads the file-order windows in the permuted order, across epochs", "[data][shuffle]") {
  ScratchDir tmp;
  const TwoSourceCorpus corpus = make_two_source_corpus(tmp, 300, 400);
  auto src = open_data(corpus.dir.string());
  const int64_t T = 128, B = 5;
  const uint64_t windows = (src->train_tokens() - 1) / T;
  const StreamOrder order = StreamOrder::shuffled(11, T);
  auto stream = src->train_stream(src->start(), order);

  // Three epochs and a bit, in batches that straddle each epoch's end.
  const uint64_t sequences = 3 * windows + 17;
  std::vector<uint32_t> pi;
  uint64_t epoch = UINT64_MAX;
  StreamPosition mid;
  std::vector<std::vector<uint16_t>> after_mid;
  for (uint64_t k = 0; k < sequences; k += B) {
    if (k / B == 40) mid = stream->position();
    const std::vector<uint16_t> batch = stream->next_batch(B, T);
    if (k / B >= 40 && k / B < 44) after_mid.push_back(batch);
    for (int64_t r = 0; r < B; ++r) {
      const uint64_t seq = k + static_cast<uint64_t>(r);
      if (seq / windows != epoch) {
        epoch = seq / windows;
        pi = window_permutation(11, epoch, static_cast<uint32_t>(windows));
      }
      const uint64_t start = static_cast<uint64_t>(pi[seq % windows]) * T;
      INFO("sequence " << seq << " should be window " << pi[seq % windows]);
      REQUIRE(std::equal(batch.begin() + r * (T + 1), batch.begin() + (r + 1) * (T + 1),
                         corpus.train.begin() + static_cast<int64_t>(start)));
    }
    REQUIRE(stream->position().tokens == (k + B) * T);
  }

  // Resuming from a saved position (through its JSON form) gives the same batches, also widened.
  auto resumed = src->train_stream(StreamPosition::from_json(nlohmann::json::parse(mid.to_json().dump())), order);
  for (const auto& want : after_mid) CHECK(resumed->next_batch(B, T) == want);
  std::vector<int32_t> wide(static_cast<size_t>(B * (T + 1)));
  src->train_stream(mid, order)->next_batch(B, T, std::span<int32_t>(wide));
  for (size_t i = 0; i < wide.size(); ++i) REQUIRE(wide[i] == after_mid[0][i]);

  // Another seed is another order; the file order is untouched by all this.
  CHECK(src->train_stream(src->start(), StreamOrder::shuffled(12, T))->next_batch(B, T) !=
        src->train_stream(src->start(), order)->next_batch(B, T));
  CHECK(src->train_stream()->next_batch(1, T) ==
        std::vector<uint16_t>(corpus.train.begin(), corpus.train.begin() + T + 1));

  // Misuse is refused: another sequence length, a position inside a window, a synthetic source.
  CHECK_THROWS_AS(src->train_stream(src->start(), order)->next_batch(B, T + 1), std::invalid_argument);
  CHECK_THROWS_AS(src->train_stream(StreamPosition{T + 1, {}}, order), fp4::UserError);
  CHECK_THROWS_AS(src->train_stream(src->start(), StreamOrder::shuffled(11, static_cast<int64_t>(src->train_tokens()))),
                  fp4::UserError);
  auto synthetic = open_data("synthetic:markov?order=1&vocab=16");
  CHECK_THROWS_AS(synthetic->train_stream(synthetic->start(), StreamOrder::shuffled(1, T)), std::invalid_argument);
}

TEST_CASE("a prefix of the shuffled stream has the corpus's mix, file order has only its first source", "[data][shuffle]") {
  ScratchDir tmp;
  const TwoSourceCorpus corpus = make_two_source_corpus(tmp, 12000, 16000);
  auto src = open_data(corpus.dir.string());
  const double whole = technical_share(corpus.train);
  REQUIRE(whole > 0.3);
  REQUIRE(whole < 0.8);
  const int64_t T = 128;
  const int64_t prefix_sequences = static_cast<int64_t>(0.05 * static_cast<double>(src->train_tokens()) / T);
  REQUIRE(prefix_sequences > 1500);

  // File order: the first 5% is all prose — the confound the shuffle removes.
  CHECK(technical_share(src->train_stream()->next_batch(prefix_sequences, T)) == 0.0);

  // Shuffled, for several data seeds: within a few percent of the whole corpus's share.
  for (uint64_t seed : {0ull, 1ull, 2ull, 3ull, 12345ull}) {
    const double share =
        technical_share(src->train_stream(src->start(), StreamOrder::shuffled(seed, T))->next_batch(prefix_sequences, T));
    INFO("data seed " << seed << ": technical share " << share << " of the first 5%, " << whole << " overall");
    CHECK(std::fabs(share - whole) < 0.04);
  }
}

TEST_CASE("the real corpus: the first 5% of the shuffled stream has its prose/technical mix", "[data][shuffle][corpus]") {
  const fs::path corpus = fs::path(FP4LAB_SOURCE_DIR) / ".." / "shared" / "data" / "corpus";
  if (!fs::exists(corpus / "prose-v1.txt.xz") || !fs::exists(corpus / "tech-v1.txt.xz")) {
    WARN("../shared/data/corpus is not here: the real-corpus check did not run");
    return;
  }
  ScratchDir tmp;
  ByteBuildOptions prose;
  prose.inputs = {corpus / "prose-v1.txt.xz"};
  prose.out_dir = tmp / "prose";
  const uint64_t prose_tokens = build_byte_shards(prose).manifest.train.tokens;
  ByteBuildOptions both = prose;
  both.inputs.push_back(corpus / "tech-v1.txt.xz");
  both.out_dir = tmp / "both";
  build_byte_shards(both);
  auto src = open_data(both.out_dir.string());
  const uint64_t total = src->train_tokens();
  REQUIRE(prose_tokens < total);
  const double whole = static_cast<double>(total - prose_tokens) / static_cast<double>(total);

  // The study's shape: windows of 1024 tokens; the training stream's sequence k is window
  // pi(k) (checked against the stream itself for the first batch), which lies in the technical
  // part when it starts at or after the prose's last token.
  const int64_t T = 1024;
  const uint32_t windows = static_cast<uint32_t>((total - 1) / T);
  const uint64_t prefix = static_cast<uint64_t>(0.05 * windows);
  for (uint64_t seed : {0ull, 1ull, 2ull}) {
    const std::vector<uint32_t> pi = window_permutation(seed, 0, windows);
    const std::vector<uint16_t> first = src->train_stream(src->start(), StreamOrder::shuffled(seed, T))->next_batch(1, T);
    const std::vector<uint16_t> window = src->train_stream(StreamPosition{uint64_t{pi[0]} * T, {}})->next_batch(1, T);
    REQUIRE(first == window);
    uint64_t technical = 0;
    for (uint64_t k = 0; k < prefix; ++k) technical += uint64_t{pi[k]} * T >= prose_tokens;
    const double share = static_cast<double>(technical) / static_cast<double>(prefix);
    INFO("data seed " << seed << ": technical share " << share << " of the first 5%, " << whole << " overall");
    CHECK(std::fabs(share - whole) < 0.03);
  }
}

TEST_CASE("run configs: shuffled by default on shards, in file order on synthetic data, the same batches for every recipe",
          "[data][shuffle][config]") {
  ScratchDir tmp;
  const TwoSourceCorpus corpus = make_two_source_corpus(tmp, 300, 400);
  const auto config = [&](const std::string& extra_train, const std::string& recipe) {
    return fp4::run::config_from_text(R"({"model": {"preset": "d1", "seq_len": 64}, "data": ")" + corpus.dir.string() +
                                          R"(", "recipe": ")" + recipe +
                                          R"(", "train": {"steps": 3, "batch_tokens": 1024, "micro_batch": 16, "seed": 5)" +
                                          extra_train + "}}",
                                      "run.json");
  };
  const fp4::run::RunConfig bf16 = config("", "bf16"), ufp4 = config("", "ufp4");
  CHECK(bf16.train.shuffle == fp4::run::Shuffle::sequences);
  CHECK(bf16.train.data_seed == 5);  // the run seed, unless given
  const nlohmann::json resolved = fp4::run::config_to_json(bf16);
  CHECK(resolved["train"]["shuffle"] == "sequences");
  CHECK(resolved["train"]["data_seed"] == 5);
  CHECK(fp4::run::config_from_json(resolved, "again.json").train.data_seed == 5);  // idempotent

  // Two recipes of one grid point read the same batches.
  auto src = open_data(corpus.dir.string());
  auto a = src->train_stream(src->start(), fp4::run::train_stream_order(bf16));
  auto b = src->train_stream(src->start(), fp4::run::train_stream_order(ufp4));
  for (int i = 0; i < 5; ++i) CHECK(a->next_batch(16, 64) == b->next_batch(16, 64));

  // A data seed of its own changes the order and the id, not the initial weights' seed.
  const fp4::run::RunConfig fixed = config(", \"data_seed\": 9", "bf16");
  CHECK(fixed.train.seed == 5);
  CHECK(fixed.train.data_seed == 9);
  CHECK(fp4::run::config_hash(fixed) != fp4::run::config_hash(bf16));
  const fp4::run::RunConfig plain = config(", \"shuffle\": \"none\"", "bf16");
  CHECK(plain.train.shuffle == fp4::run::Shuffle::none);
  CHECK_FALSE(fp4::run::config_to_json(plain)["train"].contains("data_seed"));
  CHECK(fp4::run::train_stream_order(plain).kind == StreamOrder::Kind::file);

  CHECK_THROWS_WITH(config(", \"shuffle\": \"documents\"", "bf16"), Catch::Contains("train.shuffle"));
  CHECK_THROWS_WITH(config(", \"shuffle\": \"none\", \"data_seed\": 3", "bf16"), Catch::Contains("train.data_seed"));

  // Synthetic sources are read in order, and cannot be shuffled.
  const std::string synthetic =
      R"({"model": {"preset": "d1", "seq_len": 64}, "data": "synthetic:markov?order=1&vocab=64", "train": {"steps": 3, "batch_tokens": 1024, "micro_batch": 16)";
  CHECK(fp4::run::config_from_text(synthetic + "}}", "s.json").train.shuffle == fp4::run::Shuffle::none);
  CHECK_THROWS_WITH(fp4::run::config_from_text(synthetic + R"(, "shuffle": "sequences"}})", "s.json"),
                    Catch::Contains("train.shuffle") && Catch::Contains("synthetic"));
}
