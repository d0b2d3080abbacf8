// golden_bits_test.cpp — the GPU's training bits are pinned, as tests/test_golden_bits.cpp pins the
// CPU's: one tiny run per NUMERICS.md §5 preset on the CUDA engine ends in the losses and weights below, bit for
// bit, at numerics identity kPinnedIdentity, on any Hopper GPU (the promise of docs/train.md
// "Reproducibility": H100 and H200 give the same bits). A change of training bits fails here until
// kNumericsIdentity is bumped, the change is named in bench/RESULTS.md and the bits are pinned
// again; the failure prints the lines to paste.
//
// Pinned from the test's own output on an H100 (bench/RESULTS.md names the run); a recipe with no
// pinned line fails, since a golden test that passed without pins would check nothing.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/numerics_identity.h"
#include "tests/golden_bits.h"
#include "tests/test_support.h"

namespace {

// Identity 4 moved the bits of CUDA MoE models only: these dense runs keep identity 3's bits.
constexpr int kPinnedIdentity = 4;

// NUMERICS.md §5's presets, which the CUDA engine has run from the start; docs/recipes.md's join
// this list when the CUDA engine runs them and their bits are pinned.
const std::vector<std::string> kRecipes = {"bf16", "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3"};

const std::vector<fp4::test::GoldenBits> kPinned = {
    {"bf16", 0x4001423f8a000000, 0x40001285dc000000, "8b1bb5caacd97a8b"},
    {"e2m1", 0x4001455e78c00000, 0x4000257b96b00000, "f363f46d44f4cccf"},
    {"ufp4", 0x4001440d0f000000, 0x4000221ba5100000, "253adf43ca893991"},
    {"nvfp4", 0x400150d291400000, 0x40001d32d2500000, "36f48d08edb2a8cc"},
    {"mxfp4", 0x40012b1727400000, 0x4000004e82900000, "8b213e4efba0dba0"},
    {"ufp4-e4m3", 0x40015438bfa00000, 0x40001f33a4d00000, "c18a01fbf348a33c"},
};

}  // namespace

TEST_CASE("golden bits: a tiny GPU run of each recipe ends in the pinned bits", "[gpu][golden]") {
  REQUIRE(fp4::kNumericsIdentity == kPinnedIdentity);  // bumped: pin the bits of the new identity below
  fp4::test::ScratchDir tmp;
  std::string repin;
  for (const std::string& recipe : kRecipes) {
    INFO("recipe " << recipe);
    const fp4::test::GoldenBits got = fp4::test::golden_run(recipe, "cuda", tmp / recipe);
    const fp4::test::GoldenBits* want = nullptr;
    for (const auto& g : kPinned)
      if (g.recipe == recipe) want = &g;
    if (want == nullptr || !(got == *want)) repin += "    " + fp4::test::golden_line(got) + "\n";
    CHECK(want != nullptr);
    if (want != nullptr) CHECK(got == *want);
  }
  if (!repin.empty())
    FAIL("the GPU training bits are not the pinned ones (or none are pinned yet): if a change moved them, bump "
         "kNumericsIdentity (base/numerics_identity.h) and name it in bench/RESULTS.md; pin these in "
         "tests/gpu/golden_bits_test.cpp (docs/train.md \"Numerics identity\"):\n"
         << repin);
}
