// recipe_traits.h — what a run's resolved recipe (its config's "recipe", NUMERICS.md §7 as
// engine/recipe recipe_to_json writes it) does, in the terms of the paper's ablations: the grid,
// scales, clip, which GEMMs use the RHT and which operands are stochastically rounded.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4::reports {

struct RecipeTraits {
  bool quantized = false;
  bool uniform = true;              // every slot has the same grid, scale, block and clip
  std::string grid, scale;          // of the first slot ("" for bf16)
  int block = 0;
  double clip = 0;
  std::vector<std::string> rht;     // GEMMs with the RHT, sorted: "dgrad", "fprop", "wgrad"
  std::vector<std::string> sr;      // slots with SR, e.g. "dgrad_dy", "wgrad_dy"
  bool sr_dy_only = false;          // SR on exactly the two dY slots
  bool bf16_layers = false;         // some blocks kept in bf16
};
RecipeTraits recipe_traits(const nlohmann::json& resolved_recipe);

// "grid e1m2, fp32 scales 1×16, RHT fprop+dgrad+wgrad, SR dY" — one line for the tables.
std::string describe(const RecipeTraits& t);

}  // namespace fp4::reports
