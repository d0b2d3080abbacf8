// test_golden_bits.cpp — the training bits are pinned: one tiny CPU run per recipe ends in the
// losses and weights below, bit for bit, at numerics identity kPinnedIdentity. A change that moves
// them (a summation order, a rounding) fails here until it bumps kNumericsIdentity
// (base/numerics_identity.h), names the change in bench/RESULTS.md and pins the new bits: the
// failure prints the lines to paste. tests/gpu/golden_bits_test.cpp does the same on a GPU. Also:
// the table that gives runs recorded before identities theirs agrees with git's history.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "base/numerics_identity.h"
#include "engine/recipe.h"
#include "tests/golden_bits.h"
#include "tests/test_support.h"

namespace {

// The lines `git ARGS` prints in the source tree; nothing when git or the history is not there.
std::vector<std::string> git_lines(const std::string& args) {
  const std::string cmd = std::string("git -C '") + FP4LAB_SOURCE_DIR + "' " + args + " 2>/dev/null";
  std::vector<std::string> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[256];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    out.push_back(s);
  }
  pclose(p);
  return out;
}

// The identity these bits belong to: when kNumericsIdentity is bumped, the bits are pinned again.
// Identities 3 and 4 moved CUDA MoE bits only, so the CPU's dense bits below are identity 2's.
constexpr int kPinnedIdentity = 4;

const std::vector<fp4::test::GoldenBits> kPinned = {
    {"bf16", 0x400142a31a200000, 0x400012a780b00000, "c4f5b7b25316cde5"},
    {"e2m1", 0x40014edf4b400000, 0x40001d62e3f00000, "7d7ffb33ff3bba5c"},
    {"ufp4", 0x40013bdb58e00000, 0x400018edb7800000, "4a250b085eab6e6b"},
    {"nvfp4", 0x400153fa6de00000, 0x40001721ccd00000, "1eed369b36c35d7f"},
    {"mxfp4", 0x40013c11b3800000, 0x400001ba84100000, "c6078404567ca958"},
    {"ufp4-e4m3", 0x400148a300000000, 0x40001ccbba300000, "ce342ec5e3987a4f"},
    {"nvfp4-te", 0x40014bf11a000000, 0x400015dbeab00000, "59a69745a0f637b7"},
    {"four-over-six", 0x40014f7264600000, 0x40002b7b3f000000, "bec6ad298f86eb19"},
    {"tetrajet-v2", 0x40014bbcd0000000, 0x4000164c5f900000, "848d63dc4ee6138a"},
    {"quartet-ii", 0x40014f3092600000, 0x400027c2ee300000, "76f233e5e717eb41"},
};

}  // namespace

TEST_CASE("golden bits: a tiny CPU run of each recipe ends in the pinned bits", "[golden][run]") {
  const fp4::test::OmpThreads omp(1);  // the bits do not depend on it (test_run_trainer.cpp checks)
  REQUIRE(fp4::kNumericsIdentity == kPinnedIdentity);  // bumped: pin the bits of the new identity below
  fp4::test::ScratchDir tmp;
  std::string repin;
  for (const fp4::test::GoldenBits& want : kPinned) {
    INFO("recipe " << want.recipe);
    const fp4::test::GoldenBits got = fp4::test::golden_run(want.recipe, "cpu", tmp / want.recipe);
    if (!(got == want)) repin += "    " + fp4::test::golden_line(got) + "\n";
    CHECK(got == want);
  }
  if (!repin.empty())
    FAIL("the CPU training bits changed: bump kNumericsIdentity (base/numerics_identity.h), name the change in "
         "bench/RESULTS.md and pin these (docs/train.md \"Numerics identity\"):\n"
         << repin);
}

TEST_CASE("golden bits: every recipe preset is pinned", "[golden][run]") {
  std::vector<std::string> pinned;
  for (const auto& g : kPinned) pinned.push_back(g.recipe);
  CHECK(pinned == fp4::engine::recipe_preset_names());
}

TEST_CASE("numerics identity: runs recorded before identities get theirs from their commit, as git's history says",
          "[golden][numerics]") {
  CHECK(fp4::numerics_identity_of_commit("5ac9441") == 2);   // the split-K weight gradients
  CHECK(fp4::numerics_identity_of_commit("8ddfdcd") == 1);   // the first study's binaries
  CHECK(fp4::numerics_identity_of_commit("8de04ec") == 1);
  CHECK(fp4::numerics_identity_of_commit("7d41e4f") == 1);
  CHECK(fp4::numerics_identity_of_commit("b334f98") == 2);   // the second study's
  CHECK(fp4::numerics_identity_of_commit("unknown") == 0);
  CHECK(fp4::numerics_identity_of_commit("") == 0);
  CHECK(fp4::numerics_identity_of_commit("0000000000000000000000000000000000000000") == 0);
  CHECK(fp4::numerics_identity_of_commit("5AC9441") == 0);   // git writes lowercase
  // Against git, where the source is a checkout with its history: 5ac9441's descendants are 2,
  // every other commit the table knows is 1, and every commit up to 5ac9441 is known.
  const std::vector<std::string> older = git_lines("rev-list 5ac9441");
  if (older.empty()) {
    WARN("no git history in " << FP4LAB_SOURCE_DIR << ": the table is not checked against it");
    return;
  }
  for (const std::string& c : older) {
    INFO(c);
    CHECK(fp4::numerics_identity_of_commit(c) == (c.rfind("5ac9441", 0) == 0 ? 2 : 1));
  }
  std::vector<std::string> newer = git_lines("rev-list --ancestry-path 5ac9441..HEAD");
  const std::set<std::string> descendants(newer.begin(), newer.end());
  int known = 0;
  for (const std::string& c : git_lines("rev-list HEAD")) {
    const int id = fp4::numerics_identity_of_commit(c);
    if (id == 0) continue;  // after the table was written: those runs record their identity
    ++known;
    INFO(c);
    CHECK(id == (descendants.count(c) != 0 || c.rfind("5ac9441", 0) == 0 ? 2 : 1));
  }
  CHECK(known >= static_cast<int>(older.size()));
}
