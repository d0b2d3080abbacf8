// The synthetic source: spec parsing, the chain's construction, determinism, resumption, and its
// computed entropies against what a long sample shows.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "engine/data/data_source.h"
#include "engine/data/markov_chain.h"
#include "engine/data/synthetic_spec.h"

using namespace fp4::data;

namespace {

std::string refusal(const std::string& spec) {
  try {
    open_data(spec);
  } catch (const fp4::UserError& e) {
    return e.what();
  }
  return "";
}

// The first n tokens of a source's training stream, as one read.
std::vector<uint16_t> train_prefix(const DataSource& src, int64_t n) { return src.train_stream()->next_batch(1, n - 1); }

}  // namespace

TEST_CASE("synthetic specs parse to a canonical form and bad ones are refused in one line", "[data][synthetic]") {
  MarkovParams d = parse_synthetic_spec("synthetic:markov");
  CHECK(d.order == 2);
  CHECK(d.vocab == 64);
  CHECK(d.branch == 8);
  CHECK(d.alpha == 1.1);
  CHECK(d.seed == 0);
  CHECK(canonical_synthetic_spec(d) == "synthetic:markov?order=2&vocab=64&branch=8&alpha=1.1&seed=0");
  MarkovParams p = parse_synthetic_spec("synthetic:markov?seed=18446744073709551615&alpha=0.75&vocab=300&order=1&branch=3");
  CHECK(canonical_synthetic_spec(p) == "synthetic:markov?order=1&vocab=300&branch=3&alpha=0.75&seed=18446744073709551615");
  CHECK(open_data("synthetic:markov?alpha=1.10&seed=0")->spec() ==
        "synthetic:markov?order=2&vocab=64&branch=8&alpha=1.1&seed=0");

  struct Bad {
    const char* spec;
    const char* says;
  };
  for (const Bad& b : {Bad{"synthetic:zipf?order=1", "unknown generator \"zipf\""},
                       Bad{"synthetic:markov?order=2&colour=red", "unknown parameter \"colour\""},
                       Bad{"synthetic:markov?order=2&order=3", "given twice"},
                       Bad{"synthetic:markov?order=two", "order=two is not a non-negative integer"},
                       Bad{"synthetic:markov?order=-1", "not a non-negative integer"},
                       Bad{"synthetic:markov?order=9", "order=9 is outside 0..8"},
                       Bad{"synthetic:markov?vocab=1", "vocab=1 is outside 2..65536"},
                       Bad{"synthetic:markov?vocab=70000", "outside 2..65536"},
                       Bad{"synthetic:markov?branch=65", "branch=65 is outside 1..vocab (64)"},
                       Bad{"synthetic:markov?branch=0", "outside"},
                       Bad{"synthetic:markov?alpha=nan", "not a decimal number"},
                       Bad{"synthetic:markov?alpha=17", "outside 0..16"},
                       Bad{"synthetic:markov?seed=18446744073709551616", "below 2^64"},
                       Bad{"synthetic:markov?order=4&vocab=64", "vocab^order is above"},
                       Bad{"synthetic:markov?order=4&vocab=40&branch=40", "table entries"},
                       Bad{"synthetic:markov?order=2&&vocab=4", "is not key=value"},
                       Bad{"synthetic:markov?order", "is not key=value"}}) {
    std::string msg = refusal(b.spec);
    INFO(b.spec);
    CHECK_THAT(msg, Catch::Contains(std::string("synthetic source \"") + b.spec + "\"") && Catch::Contains(b.says));
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("the Markov chain's rows: Zipf masses summing to 2^32, distinct tokens, irreducible", "[data][synthetic]") {
  MarkovChain chain({.order = 2, .vocab = 16, .branch = 5, .alpha = 1.3, .seed = 3});
  const auto& m = chain.masses();
  REQUIRE(m.size() == 5);
  uint64_t sum = 0;
  for (size_t r = 0; r < m.size(); ++r) {
    sum += m[r];
    if (r > 0) CHECK(m[r] <= m[r - 1]);
    // Within a few units of 2^32 * r^-1.3 / sum_s s^-1.3.
    double z = 0;
    for (int s = 1; s <= 5; ++s) z += std::pow(s, -1.3);
    CHECK(std::fabs(static_cast<double>(m[r]) - 4294967296.0 * std::pow(r + 1.0, -1.3) / z) < 8.0);
  }
  CHECK(sum == (uint64_t{1} << 32));
  CHECK(chain.contexts() == 256);
  for (uint64_t c = 0; c < chain.contexts(); ++c) {
    auto row = chain.row(c);
    std::set<uint16_t> distinct(row.begin(), row.end());
    REQUIRE(distinct.size() == 5);
    REQUIRE(*distinct.rbegin() < 16);
  }
  // One closed class: every context, hence every token, has stationary mass.
  MarkovEntropies e = chain.entropies();
  for (double q : e.unigram_probs) CHECK(q > 1e-6);
  CHECK(e.residual < 1e-12);

  // Sampling follows the masses' running sums: word 0 gives rank 1, the top word the last rank.
  CHECK(chain.sample(7, 0) == chain.row(7)[0]);
  CHECK(chain.sample(7, static_cast<uint32_t>(m[0] - 1)) == chain.row(7)[0]);
  CHECK(chain.sample(7, static_cast<uint32_t>(m[0])) == chain.row(7)[1]);
  CHECK(chain.sample(7, 0xffffffffu) == chain.row(7)[4]);

  // Extreme parameters still give valid masses.
  MarkovChain steep({.order = 1, .vocab = 4096, .branch = 4096, .alpha = 16.0, .seed = 1});
  sum = 0;
  for (uint64_t x : steep.masses()) {
    CHECK(x >= 1);
    sum += x;
  }
  CHECK(sum == (uint64_t{1} << 32));
}

TEST_CASE("synthetic streams are deterministic, pinned, and differ by seed and purpose", "[data][synthetic]") {
  auto a = open_data("synthetic:markov?order=2&vocab=64&branch=8&alpha=1.1&seed=0");
  auto b = open_data("synthetic:markov?seed=0");
  CHECK(a->fingerprint() == b->fingerprint());
  std::vector<uint16_t> ta = train_prefix(*a, 5000);
  CHECK(ta == train_prefix(*b, 5000));
  CHECK(ta != train_prefix(*open_data("synthetic:markov?seed=1"), 5000));
  // Platform independence: the first tokens of the default source, pinned.
  const std::vector<uint16_t> golden = {53, 39, 19, 54, 15, 45, 17, 25, 61, 16, 7,  23,
                                        8,  6,  20, 6,  39, 48, 43, 4,  2,  57, 23, 31};
  CHECK(std::vector<uint16_t>(ta.begin(), ta.begin() + golden.size()) == golden);

  ValidationSet v = a->validation(5000);
  CHECK(v.tokens.size() == 5000);
  CHECK(v.document_bytes == 0);
  CHECK(v.tokens == a->validation(5000).tokens);
  CHECK(v.tokens != ta);
  CHECK(std::vector<uint16_t>(v.tokens.begin(), v.tokens.begin() + 100) == a->validation(100).tokens);
  CHECK_THROWS_AS(a->validation(0), fp4::UserError);
  CHECK(a->train_tokens() == 0);
  CHECK(a->validation_tokens() == 0);
}

TEST_CASE("a synthetic stream resumed from a position equals the tail of the stream from 0", "[data][synthetic]") {
  auto src = open_data("synthetic:markov?order=3&vocab=20&branch=6&alpha=0.9&seed=42");
  const int64_t B = 4, T = 33;
  std::vector<uint16_t> flat = train_prefix(*src, 20 * B * T + 1);

  auto stream = src->train_stream();
  CHECK(stream->position() == src->start());
  CHECK(src->start().context == std::vector<uint16_t>{0, 0, 0});
  std::vector<StreamPosition> positions;
  std::vector<std::vector<uint16_t>> batches;
  for (int step = 0; step < 20; ++step) {
    positions.push_back(stream->position());
    batches.push_back(stream->next_batch(B, T));
    for (int64_t r = 0; r < B; ++r)
      for (int64_t j = 0; j <= T; ++j) REQUIRE(batches.back()[r * (T + 1) + j] == flat[step * B * T + r * T + j]);
  }
  for (int from : {1, 7, 19}) {
    StreamPosition p = StreamPosition::from_json(nlohmann::json::parse(positions[from].to_json().dump()));
    CHECK(p.tokens == static_cast<uint64_t>(from * B * T));
    CHECK(p.context == std::vector<uint16_t>(flat.begin() + from * B * T - 3, flat.begin() + from * B * T));
    auto resumed = src->train_stream(p);
    for (int step = from; step < 20; ++step) REQUIRE(resumed->next_batch(B, T) == batches[step]);
  }
  // Batch shapes do not change the stream: other B and T read the same tokens.
  auto other = src->train_stream();
  std::vector<uint16_t> one = other->next_batch(2, 50);
  CHECK(std::vector<uint16_t>(one.begin(), one.begin() + 51) == std::vector<uint16_t>(flat.begin(), flat.begin() + 51));
  CHECK(other->next_batch(1, 10)[0] == flat[100]);

  CHECK_THROWS_AS(src->train_stream(StreamPosition{5, {1, 2}}), fp4::UserError);
  CHECK_THROWS_AS(src->train_stream(StreamPosition{5, {1, 2, 20}}), fp4::UserError);
  CHECK_THROWS_AS(StreamPosition::from_json(nlohmann::json{{"tokens", -1}}), fp4::UserError);
}

TEST_CASE("the computed entropy rate and unigram entropy match a long sample", "[data][synthetic]") {
  // Tolerance: the plug-in estimates below (with the Miller-Madow correction) have a standard
  // error near 3e-4 nats at 2^22 tokens; 2e-3 nats leaves a wide margin yet would catch any
  // mistake in the chain or the stationary distribution (those shift entropies by 1e-2 or more).
  const double tol = 2e-3;
  const MarkovParams params{.order = 2, .vocab = 16, .branch = 4, .alpha = 1.0, .seed = 7};
  MarkovChain chain(params);
  MarkovEntropies e = chain.entropies();
  const uint64_t N = uint64_t{1} << 22, V = 16, C = chain.contexts();
  std::vector<uint16_t> tokens(N);
  uint64_t ctx = chain.generate(DataPurpose::train_stream, 0, MarkovChain::initial_context(), tokens.data(), 2);
  chain.generate(DataPurpose::train_stream, 2, ctx, tokens.data() + 2, N - 2);

  std::vector<double> pair(C * V, 0.0), context(C, 0.0), unigram(V, 0.0);
  ctx = (uint64_t{tokens[0]} * V + tokens[1]) % C;
  for (uint64_t i = 2; i < N; ++i) {
    pair[ctx * V + tokens[i]] += 1;
    context[ctx] += 1;
    unigram[tokens[i]] += 1;
    ctx = chain.advance(ctx, tokens[i]);
  }
  const double n = static_cast<double>(N - 2);
  double h_cond = 0, h_uni = 0, cells = 0, used_contexts = 0;
  for (uint64_t c = 0; c < C; ++c) {
    if (context[c] > 0) used_contexts += 1;
    for (uint64_t t = 0; t < V; ++t) {
      double k = pair[c * V + t];
      if (k > 0) {
        h_cond += k / n * std::log(context[c] / k);
        cells += 1;
      }
    }
  }
  h_cond += (cells - used_contexts) / (2 * n);
  for (double k : unigram)
    if (k > 0) h_uni -= k / n * std::log(k / n);
  h_uni += (V - 1) / (2 * n);
  CHECK(cells == C * params.branch);  // every row's tokens, and only they, occur
  CHECK(std::fabs(h_cond - e.rate) < tol);
  CHECK(std::fabs(h_uni - e.unigram) < tol);
  CHECK(e.unigram > e.rate + 0.3);  // a model has something to learn beyond token frequencies
  for (uint64_t t = 0; t < V; ++t) CHECK(std::fabs(unigram[t] / n - e.unigram_probs[t]) < 3e-3);
}

TEST_CASE("entropies in closed form: uniform rows, order 0, window floors", "[data][synthetic]") {
  MarkovEntropies flat = MarkovChain({.order = 2, .vocab = 32, .branch = 8, .alpha = 0.0, .seed = 5}).entropies();
  CHECK(flat.rate == Approx(std::log(8.0)).epsilon(1e-9));
  CHECK(flat.unigram > flat.rate);
  CHECK(flat.unigram <= std::log(32.0) + 1e-12);

  MarkovEntropies iid = MarkovChain({.order = 0, .vocab = 100, .branch = 10, .alpha = 1.5, .seed = 9}).entropies();
  CHECK(iid.unigram == Approx(iid.rate).epsilon(1e-12));
  CHECK(iid.window_floor(1) == Approx(iid.rate).epsilon(1e-12));

  // Branch 1: the de Bruijn cycle itself, a deterministic sequence with uniform tokens.
  MarkovEntropies cycle = MarkovChain({.order = 3, .vocab = 7, .branch = 1, .alpha = 1.0, .seed = 2}).entropies();
  CHECK(cycle.rate == 0.0);
  CHECK(cycle.unigram == Approx(std::log(7.0)).epsilon(1e-12));

  MarkovEntropies e = MarkovChain({.order = 3, .vocab = 12, .branch = 4, .alpha = 1.2, .seed = 11}).entropies();
  REQUIRE(e.block.size() == 4);
  CHECK(e.block[1] == Approx(e.unigram).epsilon(1e-12));
  // Sequences of T+1 tokens: the first target is predicted from one token, so the floor of T = 1
  // is H(X_2 | X_1); longer sequences approach the rate from above.
  CHECK(e.window_floor(1) == Approx(e.block[2] - e.block[1]).epsilon(1e-12));
  double previous = e.window_floor(1);
  for (uint64_t T : {2, 3, 8, 64, 1024}) {
    double f = e.window_floor(T);
    CHECK(f < previous);
    CHECK(f > e.rate);
    previous = f;
  }
  CHECK(e.window_floor(1u << 20) - e.rate < 1e-5);

  // A nearly deterministic chain whose stationary distribution does not converge within the work
  // limit is refused with advice, not reported with an unconverged unigram entropy.
  CHECK_THROWS_WITH(MarkovChain({.order = 2, .vocab = 2, .branch = 2, .alpha = 16.0, .seed = 0}).entropies(),
                    Catch::Contains("mixes too slowly") && Catch::Contains("larger branch"));
}
