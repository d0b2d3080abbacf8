// data_split.h — which micro-batches of an optimizer step each rank of a multi-GPU run trains on.
//
// The rule (docs/train.md, "Several GPUs"): one optimizer step is the A micro-batches k = 0..A-1
// that the 1-GPU run reads from the training stream, in that order. With N ranks (N divides A,
// which the config checks), rank r takes the contiguous block k = r·A/N .. (r+1)·A/N - 1, so
// rank 0's micro-batches, then rank 1's, ..., concatenated, are the 1-GPU run's batch in its order.
// Every rank reads the whole step from its own copy of the stream and keeps only its block: the
// stream's position after a step is the 1-GPU run's on every rank, so a checkpoint's data
// position (written by rank 0) means the same thing whatever N is. A micro-batch keeps its global
// index k as its micro-step in the random streams (NUMERICS.md §6), so a recipe with stochastic
// rounding draws the same numbers for it on any rank and for any N.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "engine/data/data_source.h"

namespace fp4::run {

struct RankShare {
  int64_t first = 0;  // the first micro-step (global index k) this rank trains on
  int64_t count = 0;  // how many, consecutive
  bool contains(int64_t k) const { return k >= first && k < first + count; }
};

// Rank `rank` of `world` in a step of `accum` micro-steps. Throws std::logic_error when world does
// not divide accum or rank is out of range (the config refuses such runs before they start).
RankShare rank_share(int64_t accum, int world, int rank);

// Reads one optimizer step (accum micro-batches of `batch` sequences of seq_len + 1 tokens) from
// `stream` into `runs` (batch·(seq_len + 1) tokens), calling take(k) after micro-batch k is read
// when `share` contains k. Every micro-batch is read, taken or not.
void read_step(data::TrainStream& stream, int64_t batch, int64_t seq_len, int64_t accum, RankShare share,
               std::span<int32_t> runs, const std::function<void(int64_t k)>& take);

}  // namespace fp4::run
