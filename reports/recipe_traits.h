// recipe_traits.h — what a run's resolved recipe (its config's "recipe", NUMERICS.md §7 as
// engine/recipe recipe_to_json writes it) does, in the terms of the paper's ablations: the grid,
// scales, clip, which GEMMs use the RHT and which operands are stochastically rounded.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/paper.h"

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

// What a recipe is in the terms of the paper's ablations (SCIENCE.md claims 4 and 5):
// - the uniform-grid family (claim 4): every slot the uniform grid e1m2 with fp32 1×16 scales and
//   its full clip, SR on dY or nowhere; the anchor is UFP4 itself (RHT on all three GEMMs, SR on
//   dY); each member's row of the paper's Table 2 is matched by its RHT scope and SR;
// - the E2M1 family (claims 2 and 5): E2M1 with fp32 1×16 scales and SR on dY, at its full range
//   (clip 6) or restricted to 2, 3 or 4, with any RHT scope; the anchor is the E2M1 reference
//   (RHT on wgrad only, clip 6).
struct AblationRole {
  bool member = false;                          // belongs to a family
  bool anchor = false;                          // the family's full recipe the others are compared with
  const paper::AblationRow* paper_row = nullptr;  // its row of the paper's Table 2, if any
  std::string family;                           // "uniform grid (claim 4)" or "E2M1 (claims 2, 5)"
};
AblationRole ablation_role(const RecipeTraits& t);

}  // namespace fp4::reports
