// markov_chain.h — the synthetic source's sequence model: a sparse order-k Markov chain over a
// vocabulary of V tokens whose exact entropy rate is known.
//
// Construction (all randomness from Philox, data_random.h; key = seed):
//   * Contexts are the last k tokens, encoded as the base-V number whose lowest digit is the most
//     recent token; there are C = V^k of them (one empty context when k = 0).
//   * Every row (the next-token distribution of one context) puts mass on `branch` distinct
//     tokens, with the Zipf masses m_r ∝ r^-alpha for ranks r = 1..branch. The masses are integers
//     in units of 2^-32 summing to exactly 2^32, the same for every row; a token is drawn by
//     comparing one 32-bit Philox word with their running sums, so each token has probability
//     exactly m_r / 2^32. The r^-alpha are computed with +, -, *, / only (no libm), so the masses,
//     and with them every generated token, are the same bits on every IEEE-754 machine.
//   * Which tokens a row holds, and in which rank order, is random, with one constraint that makes
//     the chain irreducible: for k >= 1 each row contains the successor of its context along a
//     fixed de Bruijn cycle of order k (a randomly relabelled one), a cycle through all V^k
//     contexts. The chain therefore has a unique stationary distribution pi over contexts.
//
// Entropies (nats per token):
//   * entropy rate = sum_c pi(c) H(row c) = H(masses): all rows share one mass vector, so the rate is
//     exact whatever pi is;
//   * unigram entropy = H of the stationary token marginal, from pi computed by power iteration on
//     the lazy chain (P + I)/2 (the same pi, and convergent even for a periodic chain) until the L1
//     change is below 1e-14; the residual ||pi P - pi||_1 is reported;
//   * block entropies H(X_1..X_m), m <= k, from the marginals of pi, which give the lowest mean loss
//     reachable by a model that sees only the tokens of its own sequence (window_floor).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/data/data_random.h"

namespace fp4::data {

struct MarkovParams {
  uint32_t order = 2;
  uint32_t vocab = 64;
  uint32_t branch = 8;
  double alpha = 1.1;
  uint64_t seed = 0;
};

constexpr uint32_t kMaxMarkovOrder = 8;
constexpr uint64_t kMaxMarkovContexts = uint64_t{1} << 22;      // V^k: pi and the table stay small
constexpr uint64_t kMaxMarkovTableEntries = uint64_t{1} << 25;  // V^k * branch tokens (64 MiB)
constexpr double kMaxMarkovAlpha = 16.0;

// Empty when the parameters are usable; otherwise one line saying which is wrong and what to do.
std::string check_markov_params(const MarkovParams& p);

struct MarkovEntropies {
  double rate = 0.0;     // nats per token
  double unigram = 0.0;  // nats per token, entropy of the stationary token marginal
  std::vector<double> block;          // block[m] = H(X_1..X_m) in nats, m = 0..order
  std::vector<double> unigram_probs;  // the stationary token marginal, V entries
  uint64_t iterations = 0;            // power iterations used (0 when pi is known in closed form)
  double residual = 0.0;              // ||pi P - pi||_1 of the final pi

  // Lowest mean loss (nats per target) of any model that predicts the T targets of a sequence of
  // T + 1 consecutive stream tokens from that sequence's own earlier tokens: the first k targets
  // lack part of their context. Equals `rate` for order 0 and tends to it as T grows.
  double window_floor(uint64_t seq_len) const;
};

class MarkovChain {
 public:
  // Throws UserError with check_markov_params' message.
  explicit MarkovChain(const MarkovParams& params);

  const MarkovParams& params() const { return p_; }
  uint64_t contexts() const { return contexts_; }
  // Probability masses by rank, in units of 2^-32, non-increasing, summing to 2^32.
  const std::vector<uint64_t>& masses() const { return masses_; }
  // The tokens of one context's row, by rank.
  std::span<const uint16_t> row(uint64_t context) const {
    return {table_.data() + context * p_.branch, p_.branch};
  }

  uint16_t sample(uint64_t context, uint32_t word) const;
  uint64_t advance(uint64_t context, uint16_t token) const {
    return (context * p_.vocab + token) % contexts_;
  }
  // The context every stream starts from: k copies of token 0.
  static constexpr uint64_t initial_context() { return 0; }
  std::vector<uint16_t> context_tokens(uint64_t context) const;  // oldest first, `order` tokens
  // Inverse of context_tokens; throws UserError for a wrong length or token.
  uint64_t context_index(std::span<const uint16_t> tokens) const;

  // Tokens [index, index + n) of stream `purpose` (train or validation), given the context before
  // token `index`; returns the context after the last one. Token i uses word i of the stream, so
  // any stretch can be regenerated from its first index and context.
  uint64_t generate(DataPurpose purpose, uint64_t index, uint64_t context, uint16_t* out, uint64_t n) const;

  // Entropy rate, unigram and block entropies (runs the power iteration; milliseconds for the
  // default chain, seconds for the largest). Throws UserError if the chain mixes too
  // slowly for pi to converge within the work limit.
  MarkovEntropies entropies() const;

 private:
  MarkovParams p_;
  uint64_t contexts_ = 1;
  std::vector<uint64_t> masses_;
  std::vector<uint64_t> cumulative_;  // running sums of masses_; the last is 2^32
  std::vector<uint16_t> table_;       // contexts_ x branch tokens
};

}  // namespace fp4::data
