// Stacked groups of rows (an MoE block's expert groups, each padded to whole blocks along the
// tokens) quantized in one call against each group's own call (kernels/cpu/quantize.h's
// blocks_quantize_alone, the rule by which the CUDA MoE blocks quantize all groups at once): where
// the rule holds, every group's rows get its own call's bits; where it does not (SR draws keyed by
// the row, a tensor-wide e4m3x2 or MS-EDEN scale), some group's do not, so the rule is not looser
// than the quantizer.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/numerics.h"
#include "tests/quant_presets.h"

namespace {

struct Case {
  std::string name;
  fp4::QuantSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const fp4::test::QuantPreset& b : fp4::test::kSection5Presets)
    for (fp4::BlockAlong along : {fp4::BlockAlong::row, fp4::BlockAlong::column})
      for (fp4::Rounding r : {fp4::Rounding::rn, fp4::Rounding::sr})
        for (bool rht : {false, true}) {
          fp4::QuantSpec s = fp4::test::preset_spec(b);
          s.along = along;
          s.rounding = r;
          s.rht = rht;
          s.seed = 5;
          s.stream = 9;
          s.step = 3;
          out.push_back({std::string(b.name) + (along == fp4::BlockAlong::row ? " row" : " column") +
                             (r == fp4::Rounding::rn ? " rn" : " sr") + (rht ? " rht" : ""),
                         s});
          if (b.scale == fp4::ScaleMode::fp32 && b.grid == fp4::Grid::e2m1 && r == fp4::Rounding::rn) {
            s.four_over_six = true;
            out.push_back({out.back().name + " four-over-six", s});
          }
        }
  return out;
}

}  // namespace

TEST_CASE("stacked expert groups quantize in one call to each group's own bits exactly where "
          "blocks_quantize_alone says so",
          "[quantize][moe]") {
  const int cols = 64;
  const std::vector<int> group_rows = {37, 0, 5, 128, 70};
  std::mt19937_64 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int checked_alone = 0, checked_not = 0;
  for (const Case& c : cases()) {
    INFO(c.name);
    REQUIRE(fp4::cpu::spec_error(c.spec).empty());
    // Along the columns a group is padded to whole blocks of its axis; along the rows padding is
    // the dispatch's (16 here), harmless either way.
    const int pad = c.spec.along == fp4::BlockAlong::column ? fp4::cpu::axis_multiple(c.spec) : 16;
    std::vector<int> first = {0};
    for (int r : group_rows) first.push_back(first.back() + (r + pad - 1) / pad * pad);
    const int total = first.back();
    std::vector<fp4::bf16_t> x(static_cast<size_t>(total) * cols, fp4::bf16_t(0));
    for (size_t g = 0; g < group_rows.size(); ++g)
      for (int r = 0; r < group_rows[g]; ++r)
        for (int k = 0; k < cols; ++k)
          x[static_cast<size_t>(first[g] + r) * cols + k] = fp4::float_to_bf16(normal(rng) * (1.0f + g));
    const fp4::cpu::QuantizedTensor all = fp4::cpu::quantize(x.data(), total, cols, c.spec);
    bool every_group_same = true;
    for (size_t g = 0; g < group_rows.size(); ++g) {
      if (group_rows[g] == 0) continue;
      const int padded = first[g + 1] - first[g];
      const int rows = c.spec.along == fp4::BlockAlong::column ? padded : group_rows[g];
      const fp4::bf16_t* xg = x.data() + static_cast<size_t>(first[g]) * cols;
      const fp4::cpu::QuantizedTensor own = fp4::cpu::quantize(xg, rows, cols, c.spec);
      const size_t n = static_cast<size_t>(group_rows[g]) * cols;
      if (std::memcmp(own.dequant.data(), all.dequant.data() + static_cast<size_t>(first[g]) * cols,
                      n * sizeof(fp4::bf16_t)) != 0)
        every_group_same = false;
    }
    const bool alone = fp4::cpu::blocks_quantize_alone(c.spec);
    CHECK(every_group_same == alone);
    ++(alone ? checked_alone : checked_not);
  }
  CHECK(checked_alone >= 8);  // e2m1, ufp4, mxfp4 round to nearest, both axes, with and without the RHT
  CHECK(checked_not >= 8);
}
