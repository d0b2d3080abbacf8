// recipe_traits.cpp — see recipe_traits.h.
#include "reports/recipe_traits.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "reports/format.h"

namespace fp4::reports {

namespace {
const char* const kSlots[] = {"fprop_x", "fprop_w", "dgrad_dy", "dgrad_w", "wgrad_dy", "wgrad_x"};

}  // namespace

RecipeTraits recipe_traits(const nlohmann::json& r) {
  RecipeTraits t;
  if (!r.is_object() || !r.contains("slots") || !r["slots"].is_object()) return t;
  t.quantized = true;
  t.bf16_layers = r.contains("bf16_layers") && r["bf16_layers"].is_array() && !r["bf16_layers"].empty();
  const auto& slots = r["slots"];
  bool first = true;
  for (const char* name : kSlots) {
    if (!slots.contains(name) || !slots[name].is_object()) continue;
    const auto& s = slots[name];
    const std::string grid = s.value("grid", ""), scale = s.value("scale", "");
    const int block = s.value("block", 0);
    const double clip = s.value("clip", 0.0);
    if (first) {
      t.grid = grid;
      t.scale = scale;
      t.block = block;
      t.clip = clip;
      first = false;
    } else if (grid != t.grid || scale != t.scale || block != t.block || clip != t.clip) {
      t.uniform = false;
    }
    if (s.value("rht", false)) {
      const std::string slot(name);
      const std::string gemm = slot.substr(0, slot.find('_'));
      if (std::find(t.rht.begin(), t.rht.end(), gemm) == t.rht.end()) t.rht.push_back(gemm);
    }
    if (s.value("sr", false)) t.sr.push_back(name);
  }
  std::sort(t.rht.begin(), t.rht.end());
  std::vector<std::string> sr = t.sr;
  std::sort(sr.begin(), sr.end());
  t.sr_dy_only = sr == std::vector<std::string>{"dgrad_dy", "wgrad_dy"};
  return t;
}

std::string describe(const RecipeTraits& t) {
  if (!t.quantized) return "bf16 everywhere";
  std::string s = t.uniform ? fmt::format("{} (clip {:g}), {} scales 1×{}", t.grid, t.clip, t.scale, t.block)
                            : "mixed per-slot settings";
  s += ", RHT " + (t.rht.empty() ? std::string("none") : fmt::format("{}", fmt::join(t.rht, "+")));
  s += ", SR " + (t.sr.empty() ? std::string("none") : t.sr_dy_only ? std::string("dY") : fmt::format("{}", fmt::join(t.sr, "+")));
  if (t.bf16_layers) s += ", some blocks bf16";
  return s;
}

AblationRole ablation_role(const RecipeTraits& t) {
  AblationRole r;
  if (!t.quantized || !t.uniform || t.bf16_layers || t.scale != "fp32" || t.block != 16) return r;
  if (t.grid == "e1m2" && t.clip == 7 && (t.sr_dy_only || t.sr.empty())) {
    r.member = true;
    r.family = "uniform grid (claim 4)";
    for (const auto& row : paper::ablation_rows())
      if (row.rht == t.rht && row.sr_dy == t.sr_dy_only) r.paper_row = &row;
    r.anchor = r.paper_row != nullptr && r.paper_row == &paper::ablation_rows()[4];
  } else if (t.grid == "e2m1" && t.sr_dy_only && (t.clip == 2 || t.clip == 3 || t.clip == 4 || t.clip == 6)) {
    r.member = true;
    r.family = "E2M1 (claims 2, 5)";
    r.anchor = t.clip == 6 && t.rht == std::vector<std::string>{"wgrad"};
  }
  return r;
}

}  // namespace fp4::reports
