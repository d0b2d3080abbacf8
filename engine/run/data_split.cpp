// data_split.cpp — see data_split.h.
#include "engine/run/data_split.h"

#include <stdexcept>

#include <fmt/format.h>

namespace fp4::run {

RankShare rank_share(int64_t accum, int world, int rank) {
  if (world < 1 || rank < 0 || rank >= world || accum < 1 || accum % world != 0)
    throw std::logic_error(fmt::format("rank_share: rank {} of {} in a step of {} micro-steps", rank, world, accum));
  const int64_t per_rank = accum / world;
  return RankShare{per_rank * rank, per_rank};
}

void read_step(data::TrainStream& stream, int64_t batch, int64_t seq_len, int64_t accum, RankShare share,
               std::span<int32_t> runs, const std::function<void(int64_t k)>& take) {
  for (int64_t k = 0; k < accum; ++k) {
    stream.next_batch(batch, seq_len, runs);
    if (share.contains(k)) take(k);
  }
}

}  // namespace fp4::run
