// resample.h — the bootstrap's draws: replicate k of a fit resamples the data set's groups (grid
// points × seeds; fit_data.h) with replacement, from its own random stream derived from (seed, k)
// alone. Any thread may compute any replicate, in any order, and get the same draws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4::fit {

// SplitMix64 (Steele, Lea and Flood 2014): a 64-bit state advanced by a constant and mixed; small,
// fast and specified bit for bit, unlike the standard library's distributions.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next();
  // Uniform in [0, n) without modulo bias (n >= 1).
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

// The stream of replicate `replicate` under `seed`: distinct for every (seed, replicate) pair.
SplitMix64 replicate_stream(uint64_t seed, uint64_t replicate);

// How many times each of `groups` groups was drawn in replicate `replicate` (`groups` draws, with
// replacement; the counts sum to `groups`).
std::vector<int> resample_counts(uint64_t seed, uint64_t replicate, size_t groups);

}  // namespace fp4::fit
