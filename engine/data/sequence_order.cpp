// sequence_order.cpp — the Fisher–Yates shuffle of sequence_order.h.
#include "engine/data/sequence_order.h"

#include <numeric>
#include <stdexcept>
#include <utility>

#include "engine/data/data_random.h"

namespace fp4::data {

std::vector<uint32_t> window_permutation(uint64_t seed, uint64_t epoch, uint32_t windows) {
  if (windows == 0) throw std::invalid_argument("window_permutation: no windows to order");
  std::vector<uint32_t> order(windows);
  std::iota(order.begin(), order.end(), 0u);
  for (uint64_t k = 0; k + 1 < windows; ++k) {
    // Words 2k and 2k+1 are one half of Philox call k / 2.
    const Philox4 p = data_philox(seed, DataPurpose::shuffle, epoch, static_cast<uint32_t>(k >> 1));
    const unsigned half = static_cast<unsigned>(k & 1) * 2;
    const uint64_t r = (static_cast<uint64_t>(p.w[half + 1]) << 32) | p.w[half];
    const uint64_t i = windows - 1 - k;
    const uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace fp4::data
