// synthetic_source.h — a `synthetic:markov?...` spec as a DataSource.
//
// Training stream: the chain's train stream (DataPurpose::train_stream) from the initial context
// (k copies of token 0) at index 0; a position is the token index plus the k tokens before it.
// Validation: the first n tokens of a second, independent stream of the same chain
// (DataPurpose::validation_stream), also from the initial context at index 0; it never overlaps
// the training stream's random words, so it is held out however long training runs.
#pragma once

#include <memory>
#include <string>

#include "engine/data/data_source.h"

namespace fp4::data {

std::unique_ptr<DataSource> open_synthetic_source(const std::string& spec);

// A bound on how many validation tokens one call may generate (memory, not randomness, is the
// limit: the held-out stream itself is endless).
constexpr uint64_t kMaxSyntheticValidationTokens = uint64_t{1} << 31;

}  // namespace fp4::data
