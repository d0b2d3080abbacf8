// markov_chain.cpp — building the chain's rows, sampling from them, and its entropies.
#include "engine/data/markov_chain.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "base/user_error.h"

namespace fp4::data {
namespace {

constexpr double kLn2 = 0.6931471805599453094;
constexpr uint64_t kMassUnit = uint64_t{1} << 32;

// ln(x) for finite x > 0 with + - * / only: libm's log may differ in the last bit between
// platforms, and these values decide which tokens get generated. frexp/ldexp are exact.
double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752) {
    m = m * 2.0;
    e -= 1;
  }
  // ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), |s| <= 0.172, so 30 terms are ample.
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s;
  double term = s, sum = 0.0;
  for (int k = 1; k < 60; k += 2) {
    double t = term / k;
    sum = sum + t;
    term = term * s2;
  }
  double scaled = static_cast<double>(e) * kLn2;
  return 2.0 * sum + scaled;
}

// exp(y) with + - * / only (see portable_log), for |y| well inside double range.
double portable_exp(double y) {
  double n = std::floor(y / kLn2 + 0.5);
  double nl = n * kLn2;
  double r = y - nl;  // |r| <= ~0.35
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 30; ++k) {
    term = term * r / k;
    sum = sum + term;
  }
  return std::ldexp(sum, static_cast<int>(n));
}

// Zipf masses r^-alpha, r = 1..branch, as integers summing to 2^32, each at least 1 (every token of
// a row stays possible); the rounding remainder goes to rank 1.
std::vector<uint64_t> zipf_masses(uint32_t branch, double alpha) {
  std::vector<double> w(branch);
  double total = 0.0;
  for (uint32_t r = 0; r < branch; ++r) {
    double lr = portable_log(static_cast<double>(r + 1));
    w[r] = portable_exp(-alpha * lr);
    total = total + w[r];
  }
  std::vector<uint64_t> m(branch);
  int64_t sum = 0;
  for (uint32_t r = 0; r < branch; ++r) {
    double share = w[r] / total;
    m[r] = std::max<uint64_t>(1, static_cast<uint64_t>(share * static_cast<double>(kMassUnit)));
    sum += static_cast<int64_t>(m[r]);
  }
  m[0] = static_cast<uint64_t>(static_cast<int64_t>(m[0]) + (static_cast<int64_t>(kMassUnit) - sum));
  return m;
}

// A de Bruijn sequence of order k over {0..V-1}: a cyclic sequence of length V^k in which every
// k-token window occurs exactly once. It is the concatenation, in lexicographic order, of the
// Lyndon words whose length divides k, which Duval's algorithm enumerates.
std::vector<uint16_t> de_bruijn(uint32_t vocab, uint32_t k, uint64_t length) {
  std::vector<uint16_t> seq;
  seq.reserve(length);
  std::vector<int64_t> w{-1};
  while (!w.empty()) {
    w.back() += 1;
    size_t m = w.size();
    if (k % m == 0)
      for (int64_t x : w) seq.push_back(static_cast<uint16_t>(x));
    while (w.size() < k) w.push_back(w[w.size() - m]);
    while (!w.empty() && w.back() == static_cast<int64_t>(vocab) - 1) w.pop_back();
  }
  return seq;
}

double entropy_of(const std::vector<double>& probs) {
  double h = 0.0;
  for (double p : probs)
    if (p > 0.0) h -= p * std::log(p);
  return h;
}

}  // namespace

std::string check_markov_params(const MarkovParams& p) {
  if (p.vocab < 2 || p.vocab > 65536) return "vocab=" + std::to_string(p.vocab) + " is outside 2..65536";
  if (p.order > kMaxMarkovOrder)
    return "order=" + std::to_string(p.order) + " is above " + std::to_string(kMaxMarkovOrder);
  if (p.branch < 1 || p.branch > p.vocab)
    return "branch=" + std::to_string(p.branch) + " is outside 1..vocab (" + std::to_string(p.vocab) + ")";
  if (!std::isfinite(p.alpha) || p.alpha < 0.0 || p.alpha > kMaxMarkovAlpha)
    return "alpha must be a number in 0..16 (the Zipf exponent of each row)";
  uint64_t contexts = 1;
  for (uint32_t i = 0; i < p.order; ++i) {
    contexts *= p.vocab;
    if (contexts > kMaxMarkovContexts)
      return "vocab^order is above " + std::to_string(kMaxMarkovContexts) +
             " contexts; lower the order or the vocabulary";
  }
  if (contexts * p.branch > kMaxMarkovTableEntries)
    return "vocab^order * branch is above " + std::to_string(kMaxMarkovTableEntries) +
           " table entries; lower the branch, order or vocabulary";
  return "";
}

MarkovChain::MarkovChain(const MarkovParams& params) : p_(params) {
  if (std::string err = check_markov_params(p_); !err.empty()) throw UserError(err);
  const uint32_t V = p_.vocab, b = p_.branch, k = p_.order;
  for (uint32_t i = 0; i < k; ++i) contexts_ *= V;
  masses_ = zipf_masses(b, p_.alpha);
  cumulative_.resize(b);
  uint64_t run = 0;
  for (uint32_t r = 0; r < b; ++r) cumulative_[r] = run += masses_[r];

  // The cycle successor of every context (k >= 1), after a random relabelling of the tokens.
  std::vector<uint16_t> cycle_next;
  if (k >= 1) {
    std::vector<uint16_t> sigma(V);
    for (uint32_t t = 0; t < V; ++t) sigma[t] = static_cast<uint16_t>(t);
    for (uint32_t i = V - 1; i > 0; --i) {
      uint32_t j = uniform_below(data_word(p_.seed, DataPurpose::relabel, 0, i), i + 1);
      std::swap(sigma[i], sigma[j]);
    }
    std::vector<uint16_t> seq = de_bruijn(V, k, contexts_);
    if (seq.size() != contexts_) throw std::logic_error("de Bruijn sequence has the wrong length");
    for (uint16_t& t : seq) t = sigma[t];
    cycle_next.assign(contexts_, 0);
    std::vector<bool> seen(contexts_, false);
    uint64_t ctx = 0;
    for (uint32_t j = 0; j < k; ++j) ctx = ctx * V + seq[j];
    for (uint64_t i = 0; i < contexts_; ++i) {
      if (seen[ctx]) throw std::logic_error("de Bruijn sequence repeats a context");
      seen[ctx] = true;
      uint16_t next = seq[(i + k) % contexts_];
      cycle_next[ctx] = next;
      ctx = advance(ctx, next);
    }
  }

  // Rows: a partial Fisher-Yates shuffle of the identity picks the row's tokens (the cycle
  // successor first), then the successor is swapped to a random rank; the shuffle is undone so
  // the next row starts from the identity again, making each row O(branch).
  table_.resize(contexts_ * b);
  std::vector<uint16_t> perm(V);
  for (uint32_t t = 0; t < V; ++t) perm[t] = static_cast<uint16_t>(t);
  std::vector<uint32_t> swapped(b);
  for (uint64_t c = 0; c < contexts_; ++c) {
    uint32_t draw = 0;
    auto word = [&]() { return data_word(p_.seed, DataPurpose::table, c, draw++); };
    uint32_t first = 0;
    if (k >= 1) {
      swapped[0] = cycle_next[c];
      std::swap(perm[0], perm[swapped[0]]);
      first = 1;
    }
    for (uint32_t i = first; i < b; ++i) {
      swapped[i] = i + uniform_below(word(), V - i);
      std::swap(perm[i], perm[swapped[i]]);
    }
    uint16_t* row = table_.data() + c * b;
    std::copy(perm.begin(), perm.begin() + b, row);
    if (k >= 1) std::swap(row[0], row[uniform_below(word(), b)]);
    for (uint32_t i = b; i-- > 0;) std::swap(perm[i], perm[swapped[i]]);
  }
}

uint16_t MarkovChain::sample(uint64_t context, uint32_t word) const {
  auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), static_cast<uint64_t>(word));
  return table_[context * p_.branch + static_cast<uint64_t>(it - cumulative_.begin())];
}

std::vector<uint16_t> MarkovChain::context_tokens(uint64_t context) const {
  std::vector<uint16_t> out(p_.order);
  for (uint32_t i = p_.order; i-- > 0;) {
    out[i] = static_cast<uint16_t>(context % p_.vocab);
    context /= p_.vocab;
  }
  return out;
}

uint64_t MarkovChain::context_index(std::span<const uint16_t> tokens) const {
  if (tokens.size() != p_.order)
    throw UserError("a stream position of this synthetic source needs " + std::to_string(p_.order) +
                    " context tokens, not " + std::to_string(tokens.size()) +
                    "; the checkpoint belongs to another data source");
  uint64_t ctx = 0;
  for (uint16_t t : tokens) {
    if (t >= p_.vocab)
      throw UserError("stream position context token " + std::to_string(t) + " is not below vocab " +
                      std::to_string(p_.vocab) + "; the checkpoint belongs to another data source");
    ctx = ctx * p_.vocab + t;
  }
  return ctx;
}

uint64_t MarkovChain::generate(DataPurpose purpose, uint64_t index, uint64_t context, uint16_t* out,
                               uint64_t n) const {
  Philox4 words{};
  for (uint64_t j = 0; j < n; ++j) {
    uint64_t i = index + j;
    if (j == 0 || (i & 3) == 0) words = data_philox(p_.seed, purpose, i >> 2, 0);
    uint16_t t = sample(context, words.w[i & 3]);
    out[j] = t;
    context = advance(context, t);
  }
  return context;
}

MarkovEntropies MarkovChain::entropies() const {
  const uint32_t V = p_.vocab, b = p_.branch, k = p_.order;
  MarkovEntropies e;
  std::vector<double> probs(b);
  for (uint32_t r = 0; r < b; ++r) probs[r] = static_cast<double>(masses_[r]) / static_cast<double>(kMassUnit);
  e.rate = entropy_of(probs);

  // One step of pi -> pi P, scattering each context's mass along its row.
  auto step = [&](const std::vector<double>& pi, std::vector<double>& next) {
    std::fill(next.begin(), next.end(), 0.0);
    for (uint64_t c = 0; c < contexts_; ++c) {
      double pc = pi[c];
      if (pc == 0.0) continue;
      uint64_t base = (c * V) % contexts_;
      const uint16_t* row = table_.data() + c * b;
      for (uint32_t r = 0; r < b; ++r) next[base + row[r]] += pc * probs[r];
    }
  };

  std::vector<double> pi(contexts_, 1.0 / static_cast<double>(contexts_));
  if (k >= 1 && b >= 2) {
    // With branch 1 the chain is the de Bruijn cycle itself and pi is uniform: no iteration.
    std::vector<double> next(contexts_);
    const uint64_t max_iterations =
        std::max<uint64_t>(1000, std::min<uint64_t>(200000, uint64_t{4'000'000'000} / (contexts_ * b)));
    double change = 1.0;
    while (change >= 1e-14) {
      if (e.iterations == max_iterations) {
        char msg[200];
        std::snprintf(msg, sizeof msg,
                      "the chain mixes too slowly to compute its stationary distribution (L1 change %.1e after %llu "
                      "iterations); use a larger branch or a smaller alpha",
                      change, static_cast<unsigned long long>(e.iterations));
        throw UserError(msg);
      }
      step(pi, next);
      double total = 0.0;
      for (uint64_t c = 0; c < contexts_; ++c) {
        next[c] = 0.5 * (pi[c] + next[c]);  // the lazy chain: same pi, no oscillation
        total += next[c];
      }
      change = 0.0;
      for (uint64_t c = 0; c < contexts_; ++c) {
        next[c] /= total;
        change += std::fabs(next[c] - pi[c]);
      }
      pi.swap(next);
      ++e.iterations;
    }
    step(pi, next);
    for (uint64_t c = 0; c < contexts_; ++c) e.residual += std::fabs(next[c] - pi[c]);
  }

  e.unigram_probs.assign(V, 0.0);
  if (k == 0) {
    for (uint32_t r = 0; r < b; ++r) e.unigram_probs[table_[r]] += probs[r];
  } else {
    for (uint64_t c = 0; c < contexts_; ++c) e.unigram_probs[c % V] += pi[c];
  }
  e.unigram = entropy_of(e.unigram_probs);

  // H(X_1..X_m) from the marginal of pi on its m most recent tokens.
  e.block.assign(k + 1, 0.0);
  uint64_t width = 1;
  for (uint32_t m = 1; m <= k; ++m) {
    width *= V;
    std::vector<double> marginal(width, 0.0);
    for (uint64_t c = 0; c < contexts_; ++c) marginal[c % width] += pi[c];
    e.block[m] = entropy_of(marginal);
  }
  return e;
}

double MarkovEntropies::window_floor(uint64_t seq_len) const {
  if (seq_len == 0) throw std::invalid_argument("sequence length must be at least 1");
  const uint64_t order = block.empty() ? 0 : block.size() - 1;
  const uint64_t tokens = seq_len + 1;
  const uint64_t m = std::min(tokens, order);
  // Sum over targets of H(X_j | X_0..X_{j-1}) = H(X_0..X_T) - H(X_0), with H(X_0..X_T) the block
  // entropy of the first m tokens plus the rate for each token after them.
  double joint = block[m] + static_cast<double>(tokens - m) * rate;
  return (joint - unigram) / static_cast<double>(seq_len);
}

}  // namespace fp4::data
