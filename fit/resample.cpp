// resample.cpp — see resample.h.
#include "fit/resample.h"

#include <limits>
#include <stdexcept>

namespace fp4::fit {

namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  return mix(state_);
}

uint64_t SplitMix64::below(uint64_t n) {
  if (n == 0) throw std::invalid_argument("SplitMix64::below: n must be >= 1");
  // Reject the top partial block of 2^64 so that every residue is equally likely.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  for (;;) {
    const uint64_t r = next();
    if (r < limit) return r % n;
  }
}

SplitMix64 replicate_stream(uint64_t seed, uint64_t replicate) {
  // Two rounds of mixing: seeds and replicate indices are small consecutive integers, and their
  // streams must not overlap or correlate.
  return SplitMix64(mix(mix(seed + 0x9E3779B97F4A7C15ull) ^ (replicate * 0xD1B54A32D192ED03ull + 1)));
}

std::vector<int> resample_counts(uint64_t seed, uint64_t replicate, size_t groups) {
  std::vector<int> counts(groups, 0);
  SplitMix64 rng = replicate_stream(seed, replicate);
  for (size_t i = 0; i < groups; ++i) ++counts[rng.below(groups)];
  return counts;
}

}  // namespace fp4::fit
