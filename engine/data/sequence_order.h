// sequence_order.h — the seeded window permutations of a shuffled training stream
// (data_source.h, StreamOrder::Kind::sequences).
//
// Epoch e of a stream over W windows reads them in the order pi_e, a Fisher–Yates shuffle of
// 0, 1, ..., W-1 driven by Philox4x32-10 (data_random.h: key = the data seed, purpose shuffle,
// block = e). Draw k (k = 0, 1, ..., W-2) is the 64-bit r = word(2k+1) << 32 | word(2k), where
// word(i) is data_word(seed, shuffle, e, i), and it swaps pi[i] with pi[j] for i = W-1-k and
// j = floor(r · (i+1) / 2^64). Integer arithmetic only: the order is the same bits on every
// machine, and a script can recompute it (bench/fidelity_peer.py does, to feed another
// implementation the same batches). The bias of j is below (i+1) / 2^64, far below anything a
// training run could notice.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4::data {

// pi_epoch over `windows` windows (windows >= 1): entry k is the window read k-th in that epoch.
std::vector<uint32_t> window_permutation(uint64_t seed, uint64_t epoch, uint32_t windows);

}  // namespace fp4::data
