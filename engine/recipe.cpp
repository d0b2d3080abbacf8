// recipe.cpp — presets, validation and the JSON form of a recipe.
#include "engine/recipe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>

#include "base/linear_sites.h"
#include "base/parse_number.h"
#include "base/user_error.h"
#include "kernels/cpu/quantize.h"

namespace fp4::engine {

namespace {

// base/linear_sites.h names the slots and GEMMs in the order of Slot and Gemm.
static_assert(kSlotNames.size() == kSlotCount &&
              kSlotNames[static_cast<int>(Slot::wgrad_x)] == std::string_view("wgrad_x"));
static_assert(kGemmNames[static_cast<int>(Gemm::wgrad)] == std::string_view("wgrad"));
constexpr std::array<const char*, 3> kOperandNames = {"x", "w", "dy"};

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw UserError("recipe " + where + ": " + what);
}

Grid parse_grid(const nlohmann::json& v, const std::string& where) {
  if (v.is_string() && v == "e2m1") return Grid::e2m1;
  if (v.is_string() && v == "e1m2") return Grid::e1m2;
  bad(where, "grid must be \"e2m1\" or \"e1m2\", got " + v.dump());
}
ScaleMode parse_scale(const nlohmann::json& v, const std::string& where) {
  for (ScaleMode s : {ScaleMode::fp32, ScaleMode::e4m3x2, ScaleMode::e8m0})
    if (v.is_string() && v == scale_mode_name(s)) return s;
  bad(where, "scale must be \"fp32\", \"e4m3x2\" or \"e8m0\", got " + v.dump());
}
RhtSigns parse_signs(const nlohmann::json& v, const std::string& where) {
  for (RhtSigns s : {RhtSigns::fixed, RhtSigns::seeded, RhtSigns::per_layer, RhtSigns::per_step, RhtSigns::per_call})
    if (v.is_string() && v == rht_signs_name(s)) return s;
  bad(where, "rht_signs must be fixed, seeded, per_layer, per_step or per_call, got " + v.dump());
}
bool parse_bool(const nlohmann::json& v, const std::string& where, const char* key) {
  if (!v.is_boolean()) bad(where, std::string(key) + " must be true or false, got " + v.dump());
  return v.get<bool>();
}
// A float field (clip): a number a float can hold; converting a larger one is undefined behaviour.
float parse_number(const nlohmann::json& v, const std::string& where, const char* key) {
  if (!v.is_number()) bad(where, std::string(key) + " must be a number, got " + v.dump());
  const double d = v.get<double>();
  if (!(std::fabs(d) <= std::numeric_limits<float>::max()))
    bad(where, std::string(key) + " is out of range, got " + v.dump());
  return static_cast<float>(d);
}
// The block size: exactly 16 or 32 (a fraction or a value beyond int is refused, never truncated).
int parse_block(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number() || (v.get<double>() != 16 && v.get<double>() != 32))
    bad(where, "block must be 16 or 32, got " + v.dump());
  return static_cast<int>(v.get<double>());
}
// A size field with exactly two allowed values (outer_block 0 | 128, rht_size 16 | 128).
int parse_choice(const nlohmann::json& v, const std::string& where, const char* key, int a, int b) {
  if (!v.is_number() || (v.get<double>() != a && v.get<double>() != b))
    bad(where, std::string(key) + " must be " + std::to_string(a) + " or " + std::to_string(b) + ", got " + v.dump());
  return static_cast<int>(v.get<double>());
}

SlotRecipe quantized_slot(Grid grid, ScaleMode scale, int block) {
  SlotRecipe s;
  s.grid = grid;
  s.clip = grid_full_max(grid);
  s.scale = scale;
  s.block = block;
  return s;
}

// Fills a preset's six slots: one element format everywhere, RHT on the listed GEMMs, SR on dY.
Recipe make_preset(const std::string& name, Grid grid, ScaleMode scale, int block, bool w_2d,
                   std::initializer_list<Gemm> rht_gemms) {
  Recipe r;
  r.name = name;
  r.quantized = true;
  for (int i = 0; i < kSlotCount; ++i) {
    const Slot slot = static_cast<Slot>(i);
    SlotRecipe s = quantized_slot(grid, scale, block);
    s.weight_block_2d = w_2d && slot_operand(slot) == Operand::w;
    s.rht = std::find(rht_gemms.begin(), rht_gemms.end(), slot_gemm(slot)) != rht_gemms.end();
    s.sr = slot_operand(slot) == Operand::dy;
    r.slots[i] = s;
  }
  return r;
}

}  // namespace

const char* slot_name(Slot s) { return kSlotNames[static_cast<int>(s)]; }

const char* grid_name(Grid g) { return g == Grid::e2m1 ? "e2m1" : "e1m2"; }
const char* scale_mode_name(ScaleMode s) {
  return s == ScaleMode::fp32 ? "fp32" : (s == ScaleMode::e4m3x2 ? "e4m3x2" : "e8m0");
}
const char* rht_signs_name(RhtSigns s) {
  switch (s) {
    case RhtSigns::fixed: return "fixed";
    case RhtSigns::seeded: return "seeded";
    case RhtSigns::per_layer: return "per_layer";
    case RhtSigns::per_step: return "per_step";
    case RhtSigns::per_call: return "per_call";
  }
  return "fixed";
}

Gemm slot_gemm(Slot s) {
  switch (s) {
    case Slot::fprop_x: case Slot::fprop_w: return Gemm::fprop;
    case Slot::dgrad_dy: case Slot::dgrad_w: return Gemm::dgrad;
    default: return Gemm::wgrad;
  }
}

Operand slot_operand(Slot s) {
  switch (s) {
    case Slot::fprop_x: case Slot::wgrad_x: return Operand::x;
    case Slot::fprop_w: case Slot::dgrad_w: return Operand::w;
    default: return Operand::dy;
  }
}

// Blocks run along the GEMM's reduction dimension (NUMERICS.md §1): X [T,K] and W [N,K] along K
// (a row) in fprop; dY [T,N] along N (a row) and W [N,K] along N (a column) in dgrad; dY and X
// along T (a column) in wgrad.
BlockAlong slot_blocking(Slot s) {
  switch (s) {
    case Slot::fprop_x: case Slot::fprop_w: case Slot::dgrad_dy: return BlockAlong::row;
    default: return BlockAlong::column;
  }
}

const std::vector<std::string>& recipe_preset_names() {
  static const std::vector<std::string> names = {"bf16",     "e2m1",          "ufp4",        "nvfp4",     "mxfp4",
                                                 "ufp4-e4m3", "nvfp4-te", "four-over-six", "tetrajet-v2", "quartet-ii"};
  return names;
}

Recipe recipe_preset(const std::string& name) {
  using G = Gemm;
  if (name == "bf16") return Recipe{};
  if (name == "e2m1") return make_preset(name, Grid::e2m1, ScaleMode::fp32, 16, false, {G::wgrad});
  if (name == "ufp4")
    return make_preset(name, Grid::e1m2, ScaleMode::fp32, 16, false, {G::fprop, G::dgrad, G::wgrad});
  if (name == "nvfp4") return make_preset(name, Grid::e2m1, ScaleMode::e4m3x2, 16, true, {G::wgrad});
  if (name == "mxfp4") return make_preset(name, Grid::e2m1, ScaleMode::e8m0, 32, false, {G::wgrad});
  if (name == "ufp4-e4m3")
    return make_preset(name, Grid::e1m2, ScaleMode::e4m3x2, 16, false, {G::fprop, G::dgrad, G::wgrad});
  // docs/recipes.md, each with its sources.
  if (name == "nvfp4-te") {  // NVIDIA's full recipe: nvfp4 with the last ~15% of blocks in bf16
    Recipe r = make_preset(name, Grid::e2m1, ScaleMode::e4m3x2, 16, true, {G::wgrad});
    r.bf16_layers = {"last:15%"};
    return r;
  }
  if (name == "four-over-six") {  // nvfp4 with Four Over Six on every slot
    Recipe r = make_preset(name, Grid::e2m1, ScaleMode::e4m3x2, 16, true, {G::wgrad});
    for (SlotRecipe& s : r.slots) s.four_over_six = true;
    return r;
  }
  if (name == "tetrajet-v2") {  // double-block scales; backward: 16-wide RHT redrawn per call, SR
    Recipe r = make_preset(name, Grid::e2m1, ScaleMode::e4m3x2, 16, false, {G::dgrad, G::wgrad});
    for (int i = 0; i < kSlotCount; ++i) {
      SlotRecipe& s = r.slots[i];
      s.outer_block = 128;
      if (s.rht) s.rht_signs = RhtSigns::per_call;
      s.sr = slot_gemm(static_cast<Slot>(i)) != G::fprop;
    }
    return r;
  }
  if (name == "quartet-ii") {  // forward: 1x16 RTN with Four Over Six; backward: MS-EDEN
    Recipe r = make_preset(name, Grid::e2m1, ScaleMode::e4m3x2, 16, false, {G::dgrad, G::wgrad});
    for (int i = 0; i < kSlotCount; ++i) {
      SlotRecipe& s = r.slots[i];
      s.sr = false;
      if (slot_gemm(static_cast<Slot>(i)) == G::fprop) {
        s.four_over_six = true;
      } else {
        s.ms_eden = true;
        s.rht_size = 128;
        s.rht_signs = RhtSigns::per_call;
      }
    }
    return r;
  }
  std::string known;
  for (const auto& n : recipe_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw UserError("unknown recipe preset \"" + name + "\" (known: " + known + ")");
}

std::vector<int> resolve_bf16_layers(const std::vector<std::string>& spec, int n_layers) {
  std::set<int> out;
  for (const std::string& e : spec) {
    auto count_after = [&](const std::string& prefix) {
      std::string rest = e.substr(prefix.size());
      // "P%": a share of the blocks, rounded up (NVIDIA's recipe keeps about 15% in bf16).
      const bool percent = !rest.empty() && rest.back() == '%';
      if (percent) rest.pop_back();
      if (rest.empty() || rest.find_first_not_of("0123456789") != std::string::npos)
        throw UserError("bf16_layers entry \"" + e + "\" must be " + prefix + "<count> or " + prefix + "<percent>%");
      if (percent) {
        const std::optional<int> p = parse_integer<int>(rest);
        if (!p || *p > 100)
          throw UserError("bf16_layers entry \"" + e + "\": the share must be 0% to 100%");
        return (n_layers * *p + 99) / 100;
      }
      // A count beyond the model's blocks means every block; beyond int it is still only that.
      return parse_integer<int>(rest).value_or(std::numeric_limits<int>::max());
    };
    if (e.rfind("first:", 0) == 0) {
      const int k = count_after("first:");
      for (int i = 0; i < std::min(k, n_layers); ++i) out.insert(i);
    } else if (e.rfind("last:", 0) == 0) {
      const int k = count_after("last:");
      for (int i = std::max(0, n_layers - k); i < n_layers; ++i) out.insert(i);
    } else {
      if (e.empty() || e.find_first_not_of("0123456789") != std::string::npos)
        throw UserError("bf16_layers entry \"" + e +
                        "\" is not a block index, \"first:k\" or \"last:k\"");
      const std::optional<int> index = parse_integer<int>(e);
      if (!index || *index >= n_layers)
        throw UserError("bf16_layers entry " + e + " is out of range: the model has " +
                        std::to_string(n_layers) + " blocks (0.." +
                        std::to_string(n_layers - 1) + ")");
      out.insert(*index);
    }
  }
  return {out.begin(), out.end()};
}

std::string recipe_error(const Recipe& r) {
  if (!r.quantized) return {};
  for (int i = 0; i < kSlotCount; ++i) {
    const SlotRecipe& s = r.slots[i];
    const std::string where = std::string("slot ") + kSlotNames[i] + ": ";
    if (s.block != 16 && s.block != 32) return where + "block must be 16 or 32";
    if (s.block == 32 && s.scale != ScaleMode::e8m0) return where + "block 32 is only allowed with scale e8m0";
    if (s.grid == Grid::e2m1 && s.clip != 2.0f && s.clip != 3.0f && s.clip != 4.0f && s.clip != 6.0f)
      return where + "an e2m1 clip must be 2, 3, 4 or 6";
    if (s.grid == Grid::e1m2 && (s.clip < 1.0f || s.clip > 7.0f || s.clip != static_cast<int>(s.clip)))
      return where + "an e1m2 clip must be an integer from 1 to 7";
    if (s.weight_block_2d && slot_operand(static_cast<Slot>(i)) != Operand::w)
      return where + "weight_block_2d applies to weight slots only";
    if (s.rht && s.rht_size == 128 && s.rht_signs != RhtSigns::per_call)
      return where + "rht_size 128 needs rht_signs \"per_call\" (its signs are drawn for every GEMM call)";
    if (std::string e = cpu::spec_error(slot_quant_spec(s, static_cast<Slot>(i))); !e.empty()) return where + e;
  }
  for (int g = 0; g < 3; ++g) {
    const SlotRecipe& a = r.slots[2 * g];
    const SlotRecipe& b = r.slots[2 * g + 1];
    if (a.rht != b.rht || a.rht_signs != b.rht_signs || (a.rht && a.rht_size != b.rht_size))
      return std::string("GEMM ") + kGemmNames[g] +
             ": both operands must use the same RHT setting (it cancels in the product only then)";
  }
  return {};
}

QuantSpec slot_quant_spec(const SlotRecipe& s, Slot slot) {
  QuantSpec q;
  q.grid = s.grid;
  q.gmax = s.clip;
  q.scale = s.scale;
  q.block = s.block;
  q.tile_2d = s.weight_block_2d && slot_operand(slot) == Operand::w;
  q.along = slot_blocking(slot);
  q.rht = s.rht;
  q.rounding = s.sr ? Rounding::sr : Rounding::rn;
  q.four_over_six = s.four_over_six;
  q.outer_block = s.outer_block;
  q.ms_eden = s.ms_eden;
  q.rht_size = s.rht_size;
  return q;
}

nlohmann::json recipe_to_json(const Recipe& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["base"] = r.quantized ? "custom" : "bf16";
  j["bf16_layers"] = r.bf16_layers;
  if (!r.quantized) return j;
  nlohmann::json slots = nlohmann::json::object();
  for (int i = 0; i < kSlotCount; ++i) {
    const SlotRecipe& s = r.slots[i];
    slots[kSlotNames[i]] = {{"grid", grid_name(s.grid)},         {"clip", s.clip},
                            {"scale", scale_mode_name(s.scale)}, {"block", s.block},
                            {"weight_block_2d", s.weight_block_2d}, {"rht", s.rht},
                            {"rht_signs", rht_signs_name(s.rht_signs)}, {"sr", s.sr}};
    // The newer options are written only when set, so the §5 recipes' JSON (and every hash of it)
    // stays what it was.
    nlohmann::json& o = slots[kSlotNames[i]];
    if (s.four_over_six) o["four_over_six"] = true;
    if (s.outer_block != 0) o["outer_block"] = s.outer_block;
    if (s.ms_eden) o["ms_eden"] = true;
    if (s.rht_size != 16) o["rht_size"] = s.rht_size;
  }
  j["slots"] = slots;
  return j;
}

Recipe recipe_from_json(const nlohmann::json& j) {
  if (j.is_string()) return recipe_preset(j.get<std::string>());
  if (!j.is_object()) bad("", "must be a preset name or an object, got " + j.dump());
  static const std::set<std::string> top_keys = {"name", "base", "grid", "clip", "scale", "block",
                                                 "weight_block_2d", "rht", "rht_signs", "sr",
                                                 "bf16_layers", "slots", "four_over_six", "outer_block",
                                                 "ms_eden", "rht_size"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!top_keys.count(it.key())) bad("", "unknown field \"" + it.key() + "\"");

  // "custom" marks the fully resolved form written by recipe_to_json: every slot is spelled out.
  const std::string base = j.contains("base") ? j.at("base").get<std::string>() : "bf16";
  Recipe r = base == "custom" ? make_preset("custom", Grid::e2m1, ScaleMode::fp32, 16, false, {})
                              : recipe_preset(base);
  r.name = j.contains("name") ? j.at("name").get<std::string>() : base;
  const bool overrides = j.contains("grid") || j.contains("clip") || j.contains("scale") ||
                         j.contains("block") || j.contains("weight_block_2d") || j.contains("rht") ||
                         j.contains("rht_signs") || j.contains("sr") || j.contains("slots") ||
                         j.contains("four_over_six") || j.contains("outer_block") || j.contains("ms_eden") ||
                         j.contains("rht_size");
  if (!r.quantized && overrides)
    bad(r.name, "a bf16 recipe has no quantization fields: set base to a 4-bit preset (e.g. \"ufp4\")");

  // Fields that apply to every slot.
  for (int i = 0; i < kSlotCount && r.quantized; ++i) {
    SlotRecipe& s = r.slots[i];
    const Slot slot = static_cast<Slot>(i);
    if (j.contains("grid")) {
      s.grid = parse_grid(j["grid"], r.name);
      s.clip = grid_full_max(s.grid);
    }
    if (j.contains("clip")) s.clip = parse_number(j["clip"], r.name, "clip");
    if (j.contains("scale")) s.scale = parse_scale(j["scale"], r.name);
    if (j.contains("block")) s.block = parse_block(j["block"], r.name);
    if (j.contains("weight_block_2d"))
      s.weight_block_2d = parse_bool(j["weight_block_2d"], r.name, "weight_block_2d") &&
                          slot_operand(slot) == Operand::w;
    if (j.contains("rht_signs")) s.rht_signs = parse_signs(j["rht_signs"], r.name);
    if (j.contains("four_over_six")) s.four_over_six = parse_bool(j["four_over_six"], r.name, "four_over_six");
    if (j.contains("outer_block")) s.outer_block = parse_choice(j["outer_block"], r.name, "outer_block", 0, 128);
    if (j.contains("ms_eden")) s.ms_eden = parse_bool(j["ms_eden"], r.name, "ms_eden");
    if (j.contains("rht_size")) s.rht_size = parse_choice(j["rht_size"], r.name, "rht_size", 16, 128);
    if (j.contains("rht")) {
      if (!j["rht"].is_array()) bad(r.name, "rht must be a list of GEMMs (fprop, dgrad, wgrad)");
      s.rht = false;
      for (const auto& g : j["rht"]) {
        if (!g.is_string() || std::find(kGemmNames.begin(), kGemmNames.end(), g.get<std::string>()) == kGemmNames.end())
          bad(r.name, "rht entries must be fprop, dgrad or wgrad, got " + g.dump());
        if (g == kGemmNames[static_cast<int>(slot_gemm(slot))]) s.rht = true;
      }
    }
    if (j.contains("sr")) {
      if (!j["sr"].is_array()) bad(r.name, "sr must be a list of operands (x, w, dy)");
      s.sr = false;
      for (const auto& o : j["sr"]) {
        if (!o.is_string() || std::find(kOperandNames.begin(), kOperandNames.end(), o.get<std::string>()) == kOperandNames.end())
          bad(r.name, "sr entries must be x, w or dy, got " + o.dump());
        if (o == kOperandNames[static_cast<int>(slot_operand(slot))]) s.sr = true;
      }
    }
  }
  if (j.contains("bf16_layers")) {
    if (!j["bf16_layers"].is_array()) bad(r.name, "bf16_layers must be a list");
    r.bf16_layers.clear();
    for (const auto& e : j["bf16_layers"]) {
      // An integer as written (2^32 must not wrap to block 0): resolution reads and range-checks it.
      if (e.is_number_integer()) r.bf16_layers.push_back(e.dump());
      else if (e.is_string()) r.bf16_layers.push_back(e.get<std::string>());
      else bad(r.name, "bf16_layers entries are block indices or \"first:k\" / \"last:k\"");
    }
  }

  // Per-slot overrides.
  if (j.contains("slots")) {
    if (!j["slots"].is_object()) bad(r.name, "slots must be a table of slot names");
    static const std::set<std::string> slot_keys = {"grid", "clip", "scale", "block", "weight_block_2d",
                                                    "rht", "rht_signs", "sr", "four_over_six", "outer_block",
                                                    "ms_eden", "rht_size"};
    for (auto it = j["slots"].begin(); it != j["slots"].end(); ++it) {
      auto pos = std::find(kSlotNames.begin(), kSlotNames.end(), it.key());
      if (pos == kSlotNames.end())
        bad(r.name, "unknown slot \"" + it.key() + "\" (slots: fprop_x, fprop_w, dgrad_dy, dgrad_w, wgrad_dy, wgrad_x)");
      SlotRecipe& s = r.slots[pos - kSlotNames.begin()];
      const std::string where = r.name + " slot " + it.key();
      const nlohmann::json& o = it.value();
      for (auto k = o.begin(); k != o.end(); ++k)
        if (!slot_keys.count(k.key())) bad(where, "unknown field \"" + k.key() + "\"");
      if (o.contains("grid")) {
        s.grid = parse_grid(o["grid"], where);
        if (!o.contains("clip")) s.clip = grid_full_max(s.grid);
      }
      if (o.contains("clip")) s.clip = parse_number(o["clip"], where, "clip");
      if (o.contains("scale")) s.scale = parse_scale(o["scale"], where);
      if (o.contains("block")) s.block = parse_block(o["block"], where);
      if (o.contains("weight_block_2d")) s.weight_block_2d = parse_bool(o["weight_block_2d"], where, "weight_block_2d");
      if (o.contains("rht")) s.rht = parse_bool(o["rht"], where, "rht");
      if (o.contains("rht_signs")) s.rht_signs = parse_signs(o["rht_signs"], where);
      if (o.contains("sr")) s.sr = parse_bool(o["sr"], where, "sr");
      if (o.contains("four_over_six")) s.four_over_six = parse_bool(o["four_over_six"], where, "four_over_six");
      if (o.contains("outer_block")) s.outer_block = parse_choice(o["outer_block"], where, "outer_block", 0, 128);
      if (o.contains("ms_eden")) s.ms_eden = parse_bool(o["ms_eden"], where, "ms_eden");
      if (o.contains("rht_size")) s.rht_size = parse_choice(o["rht_size"], where, "rht_size", 16, 128);
    }
  }
  if (std::string err = recipe_error(r); !err.empty()) bad(r.name, err);
  return r;
}

}  // namespace fp4::engine
