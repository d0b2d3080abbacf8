// data_random.h — where the data module's random numbers come from: Philox4x32-10
// (kernels/numerics.h), so synthetic data is the same bits on every platform and can be recomputed
// from any position.
//
// Counter layout of a data draw (key = the source's 64-bit seed):
//   word 0  block index, low 32 bits
//   word 1  0x80000000 | (block index >> 32) & 0x3fffffff
//   word 2  purpose (DataPurpose)
//   word 3  sub-counter within the block
// NUMERICS.md §6 gives quantizer draws word 1 = element index >> 34 (top bits 00 for any tensor
// below 2^64 elements) and non-element draws word 1 = 0xffffffff (top bits 11); data draws have top
// bits 10, so no data draw shares a counter with a quantizer draw even when the data seed equals
// the run seed.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"

namespace fp4::data {

enum class DataPurpose : uint32_t {
  train_stream = 0,       // the synthetic training stream: block = token index / 4
  validation_stream = 1,  // the synthetic held-out stream: block = token index / 4
  table = 2,              // building a Markov chain's rows: block = context, sub = draw / 4
  relabel = 3,            // the random relabelling of the chain's de Bruijn cycle: block 0
  shuffle = 4,            // a shard directory's window permutations: block = epoch, sub = draw / 2
};

inline Philox4 data_philox(uint64_t seed, DataPurpose purpose, uint64_t block, uint32_t sub) {
  return philox4x32_10(static_cast<uint32_t>(block),
                       0x80000000u | (static_cast<uint32_t>(block >> 32) & 0x3fffffffu),
                       static_cast<uint32_t>(purpose), sub, static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32));
}

// The i-th 32-bit word of a sequence of draws: one Philox call serves four consecutive words.
inline uint32_t data_word(uint64_t seed, DataPurpose purpose, uint64_t block, uint32_t i) {
  return data_philox(seed, purpose, block, i >> 2).w[i & 3];
}

// An integer in [0, n) from one word by multiply-shift. Its bias is below n / 2^32; it is only
// used to shape which random chain is drawn, never to sample tokens, so no entropy depends on it.
inline uint32_t uniform_below(uint32_t word, uint32_t n) {
  return static_cast<uint32_t>((static_cast<uint64_t>(word) * n) >> 32);
}

}  // namespace fp4::data
