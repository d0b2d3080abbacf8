// recipe.h — a 4-bit training recipe: what each of a linear layer's six operand slots does
// (NUMERICS.md §1, §5, §7), and which blocks stay in bf16.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/numerics.h"

namespace fp4::engine {

// The six operand slots, in NUMERICS.md §1's order.
enum class Slot : uint8_t { fprop_x = 0, fprop_w, dgrad_dy, dgrad_w, wgrad_dy, wgrad_x };
constexpr int kSlotCount = 6;
const char* slot_name(Slot s);                 // "fprop_x", ...
Gemm slot_gemm(Slot s);                        // the GEMM a slot feeds
Operand slot_operand(Slot s);                  // x, w or dy
BlockAlong slot_blocking(Slot s);              // row for fprop_*, dgrad_dy; column for dgrad_w, wgrad_*

// The one spelling of each grid, scale mode and RHT sign policy: the recipe JSON, the quant probe's
// output and its CLI all use these, so a name cannot drift between them.
const char* grid_name(Grid g);                 // "e2m1", "e1m2"
const char* scale_mode_name(ScaleMode s);      // "fp32", "e4m3x2", "e8m0"
const char* rht_signs_name(RhtSigns s);        // "fixed", "seeded", "per_layer", "per_step"

// One slot's settings (the TOML's recipe fields, resolved).
struct SlotRecipe {
  Grid grid = Grid::e2m1;
  float clip = 6.0f;                 // G_max: grid maximum or a tighter clip
  ScaleMode scale = ScaleMode::fp32;
  int block = 16;
  bool weight_block_2d = false;      // only meaningful on W slots
  bool rht = false;                  // set per GEMM: both slots of a GEMM always agree
  RhtSigns rht_signs = RhtSigns::fixed;
  bool sr = false;
  // docs/recipes.md's options beyond NUMERICS.md §5 (defaults: off, the §5 recipes' bits):
  bool four_over_six = false;        // Four Over Six's per-block choice of 6 or 4 (e2m1, fp32/e4m3x2)
  int outer_block = 0;               // 128: TetraJet-v2's double-block scales (e4m3x2, 1x16)
  bool ms_eden = false;              // Quartet II's MS-EDEN (e4m3x2, 1x16, rht_size 128)
  int rht_size = 16;                 // 16 or 128 (128 needs rht_signs per_call); per GEMM like rht
};

struct Recipe {
  std::string name = "bf16";
  bool quantized = false;                       // false: bf16 everywhere (the baseline)
  std::array<SlotRecipe, kSlotCount> slots{};
  std::vector<std::string> bf16_layers;         // as given: "first:k", "last:k" or block indices
};

// The presets of NUMERICS.md §5 (bf16, e2m1, ufp4, nvfp4, mxfp4, ufp4-e4m3) and of docs/recipes.md
// (nvfp4-te, four-over-six, tetrajet-v2, quartet-ii).
const std::vector<std::string>& recipe_preset_names();
// Throws UserError naming the unknown preset and listing the known ones.
Recipe recipe_preset(const std::string& name);

// Resolves bf16_layers against a model depth: the sorted set of block indices kept in bf16.
// "last:P%" / "first:P%" keep ceil(P% of the blocks), e.g. last:15% of 62 blocks is the last 10.
// Throws UserError for an index out of range or a malformed entry.
std::vector<int> resolve_bf16_layers(const std::vector<std::string>& spec, int n_layers);

// Empty when the recipe is self-consistent; otherwise one line naming the field at fault
// (a GEMM whose two slots disagree on the RHT, block 32 without e8m0, a clip outside the grid...).
std::string recipe_error(const Recipe& r);

// The QuantSpec a slot uses for one tensor copy (the caller fills seed, stream and step for SR).
QuantSpec slot_quant_spec(const SlotRecipe& s, Slot slot);

// JSON: a fully resolved recipe writes every field; reading accepts a full recipe or
// {"base": "<preset>", ...overrides, "slots": {"wgrad_x": {...}}} and validates it.
nlohmann::json recipe_to_json(const Recipe& r);
Recipe recipe_from_json(const nlohmann::json& j);

}  // namespace fp4::engine
