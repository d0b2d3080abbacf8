// synthetic_spec.h — the text form of a synthetic source: `synthetic:NAME?key=value&...`.
//
// The one generator is `markov` (markov_chain.h), with parameters (defaults in brackets):
//   order   context length k, 0..8                      [2]
//   vocab   vocabulary size V, 2..65536                 [64]
//   branch  tokens per row, 1..V                        [8]
//   alpha   Zipf exponent of each row, 0..16            [1.1]
//   seed    64-bit seed of the chain and its streams    [0]
// with V^k <= 2^22 and V^k * branch <= 2^25. Parameters may come in any order; each at most once.
// The canonical form names every parameter in the order above (alpha in its shortest exact
// decimal form), so equal sources have equal strings, e.g.
//   synthetic:markov?order=2&vocab=64&branch=8&alpha=1.1&seed=0
#pragma once

#include <string>
#include <string_view>

#include "engine/data/markov_chain.h"

namespace fp4::data {

constexpr std::string_view kSyntheticPrefix = "synthetic:";

bool is_synthetic_spec(std::string_view spec);

// Throws UserError: `synthetic source "SPEC": what is wrong; what to do`.
MarkovParams parse_synthetic_spec(std::string_view spec);

std::string canonical_synthetic_spec(const MarkovParams& params);

}  // namespace fp4::data
