// docs/recipes.md's presets and recipe fields (engine/recipe): what each preset sets, the JSON round
// trip, the §5 recipes' JSON untouched, bf16_layers shares and the refusals.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "engine/recipe.h"

using namespace fp4;
using namespace fp4::engine;
using nlohmann::json;

namespace {

const std::vector<std::string> kSection5 = {"bf16", "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3"};
const std::vector<std::string> kNew = {"nvfp4-te", "four-over-six", "tetrajet-v2", "quartet-ii"};

std::string error_of(const json& j) {
  try {
    recipe_from_json(j);
  } catch (const UserError& e) {
    return e.what();
  }
  FAIL("no error for " << j.dump());
  return {};
}

}  // namespace

TEST_CASE("recipe presets of docs/recipes.md set what the doc says", "[recipes]") {
  const Recipe te = recipe_preset("nvfp4-te");
  const Recipe nv = recipe_preset("nvfp4");
  CHECK(te.bf16_layers == std::vector<std::string>{"last:15%"});
  CHECK(recipe_to_json(te)["slots"] == recipe_to_json(nv)["slots"]);  // nvfp4's slots, bit for bit

  const Recipe fos = recipe_preset("four-over-six");
  Recipe without = fos;
  for (SlotRecipe& s : without.slots) {
    CHECK(s.four_over_six);
    s.four_over_six = false;
  }
  CHECK(recipe_to_json(without)["slots"] == recipe_to_json(nv)["slots"]);  // otherwise nvfp4

  const Recipe tj = recipe_preset("tetrajet-v2");
  for (int i = 0; i < kSlotCount; ++i) {
    const Slot slot = static_cast<Slot>(i);
    const SlotRecipe& s = tj.slots[i];
    INFO(slot_name(slot));
    CHECK(s.outer_block == 128);
    CHECK(s.scale == ScaleMode::e4m3x2);
    CHECK_FALSE(s.weight_block_2d);
    CHECK(s.sr == (slot_gemm(slot) != Gemm::fprop));
    CHECK(s.rht == (slot_gemm(slot) != Gemm::fprop));
    if (s.rht) CHECK(s.rht_signs == RhtSigns::per_call);
    CHECK(s.rht_size == 16);
  }

  const Recipe q2 = recipe_preset("quartet-ii");
  for (int i = 0; i < kSlotCount; ++i) {
    const Slot slot = static_cast<Slot>(i);
    const SlotRecipe& s = q2.slots[i];
    INFO(slot_name(slot));
    const bool forward = slot_gemm(slot) == Gemm::fprop;
    CHECK(s.four_over_six == forward);
    CHECK(s.ms_eden == !forward);
    CHECK(s.rht == !forward);
    CHECK(s.rht_size == (forward ? 16 : 128));
    CHECK_FALSE(s.sr);
    CHECK_FALSE(s.weight_block_2d);
  }
}

TEST_CASE("recipe JSON: the new presets round-trip, and the §5 presets write none of the new fields",
          "[recipes]") {
  for (const std::string& name : kNew) {
    INFO(name);
    const Recipe r = recipe_preset(name);
    CHECK(recipe_error(r).empty());
    const json j = recipe_to_json(r);
    CHECK(recipe_to_json(recipe_from_json(j)) == j);
  }
  for (const std::string& name : kSection5) {
    INFO(name);
    const std::string text = recipe_to_json(recipe_preset(name)).dump();
    for (const char* key : {"four_over_six", "outer_block", "ms_eden", "rht_size", "per_call"})
      CHECK(text.find(key) == std::string::npos);
  }
  // Overrides as fields of any recipe, and per slot.
  const Recipe r = recipe_from_json(json{{"base", "e2m1"}, {"four_over_six", true},
                                          {"slots", {{"wgrad_x", {{"four_over_six", false}}}}}});
  CHECK(r.slots[static_cast<int>(Slot::fprop_x)].four_over_six);
  CHECK_FALSE(r.slots[static_cast<int>(Slot::wgrad_x)].four_over_six);
}

TEST_CASE("recipe fields of docs/recipes.md are refused in one line where they do not fit", "[recipes]") {
  CHECK_THAT(error_of({{"base", "ufp4"}, {"four_over_six", true}}), Catch::Contains("four_over_six needs"));
  CHECK_THAT(error_of({{"base", "mxfp4"}, {"four_over_six", true}}), Catch::Contains("four_over_six needs"));
  CHECK_THAT(error_of({{"base", "e2m1"}, {"outer_block", 128}}), Catch::Contains("outer_block must be 128, with the full e2m1 grid"));
  CHECK_THAT(error_of({{"base", "nvfp4"}, {"outer_block", 64}}), Catch::Contains("outer_block must be 0 or 128"));
  CHECK_THAT(error_of({{"base", "nvfp4"}, {"outer_block", 128}}), Catch::Contains("2D tiles"));
  CHECK_THAT(error_of({{"base", "nvfp4"}, {"ms_eden", true}}), Catch::Contains("ms_eden needs"));
  CHECK_THAT(error_of({{"base", "nvfp4"}, {"rht_size", 128}, {"rht", {"wgrad"}}}),
             Catch::Contains("rht_size 128 needs rht_signs \"per_call\""));
  CHECK_THAT(error_of({{"base", "nvfp4"}, {"rht_size", 32}}), Catch::Contains("rht_size must be 16 or 128"));
  CHECK_THAT(error_of({{"base", "tetrajet-v2"}, {"slots", {{"dgrad_w", {{"rht_size", 128}}}}}}),
             Catch::Contains("both operands must use the same RHT setting"));
  for (const std::string& e : {error_of({{"base", "ufp4"}, {"four_over_six", true}}),
                               error_of({{"base", "nvfp4"}, {"ms_eden", true}})})
    CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("bf16_layers shares: last:P% keeps ceil(P% of the blocks)", "[recipes]") {
  CHECK(resolve_bf16_layers({"last:15%"}, 62) == std::vector<int>{52, 53, 54, 55, 56, 57, 58, 59, 60, 61});
  CHECK(resolve_bf16_layers({"last:15%"}, 12) == std::vector<int>{10, 11});
  CHECK(resolve_bf16_layers({"last:15%"}, 4) == std::vector<int>{3});
  CHECK(resolve_bf16_layers({"last:0%"}, 4).empty());
  CHECK(resolve_bf16_layers({"first:50%"}, 5) == std::vector<int>{0, 1, 2});
  CHECK(resolve_bf16_layers({"first:2", "last:100%"}, 3) == std::vector<int>{0, 1, 2});
  CHECK_THROWS_WITH(resolve_bf16_layers({"last:101%"}, 4), Catch::Contains("0% to 100%"));
  CHECK_THROWS_WITH(resolve_bf16_layers({"last:%"}, 4), Catch::Contains("last:<percent>%"));
}
