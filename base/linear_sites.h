// linear_sites.h — the quantized linears of a transformer block, the three GEMMs of each, and
// their six operand slots, by name; and the site index that numbers every block linear of a model.
// One table: the engine quantizes and probes the sites by these numbers (each site's Philox stream
// and RHT signs derive from its index), the shrinkage probe's rows carry the names
// (base/probe_rows.h) into metrics.jsonl and the store, and the report reads them back. In base/
// because the engine, the store and the report all need it and none may import another.
#pragma once

#include <array>
#include <cstdint>

namespace fp4 {

// A block's linears in order: position 0..3 (docs/model.md).
inline constexpr std::array<const char*, 4> kLinearNames = {"qkv", "attn_out", "mlp_in", "mlp_out"};
inline constexpr int kLinearsPerBlock = static_cast<int>(kLinearNames.size());
// A linear's GEMMs, in the order of kernels/numerics.h's Gemm.
inline constexpr std::array<const char*, 3> kGemmNames = {"fprop", "dgrad", "wgrad"};
// The operand slots (NUMERICS.md §1), in the order of engine/recipe.h's Slot: two per GEMM.
inline constexpr std::array<const char*, 6> kSlotNames = {"fprop_x", "fprop_w",  "dgrad_dy",
                                                          "dgrad_w", "wgrad_dy", "wgrad_x"};

// The site index of the linear at `position` of `block`: 4·block + position.
constexpr uint32_t linear_site(int block, int position) {
  return static_cast<uint32_t>(kLinearsPerBlock * block + position);
}
constexpr int site_block(uint32_t site) { return static_cast<int>(site) / kLinearsPerBlock; }
constexpr int site_position(uint32_t site) { return static_cast<int>(site) % kLinearsPerBlock; }

}  // namespace fp4
