// cpu::slot_metric_sums (kernels/cpu/quant_metrics.h): the probe's measurement of a slot from its
// bf16 source, dequantized copy, codes and tensor scale, which the CUDA metrics kernel is held to.
// It must be the very sums quant_metrics takes from the quantizer's kept transformed values, for
// every slot of every recipe preset (RHT along rows and along columns, two-level scales, 2D weight
// tiles, stochastic rounding) and with non-finite blocks left out.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/quantized_linear.h"
#include "engine/recipe.h"
#include "kernels/cpu/quant_metrics.h"
#include "kernels/cpu/quantize.h"
#include "tests/numerics_test_helpers.h"

using fp4::bf16_t;
using fp4::cpu::QuantMetricsSums;

namespace {

// Heavy-tailed bf16 values (a cube of a uniform, times 8), with a NaN in one row-block and an
// infinity in another, so non-finite blocks are left out along either blocking direction.
std::vector<bf16_t> test_tensor(int rows, int cols, uint64_t seed) {
  fp4test::TestRng rng(seed);
  std::vector<bf16_t> x(static_cast<size_t>(rows) * cols);
  for (bf16_t& v : x) {
    const float u = rng.sym();
    v = fp4::float_to_bf16(8.0f * u * u * u + 0.01f * rng.sym());
  }
  x[5] = fp4::float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  x[static_cast<size_t>(3) * cols + 40] = fp4::float_to_bf16(std::numeric_limits<float>::infinity());
  return x;
}

// Field by field, doubles compared by their bits.
void require_same_sums(const QuantMetricsSums& a, const QuantMetricsSums& b) {
  const auto bits = [](double v) {
    uint64_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  CHECK(bits(a.sum_aa) == bits(b.sum_aa));
  CHECK(bits(a.sum_ha) == bits(b.sum_ha));
  CHECK(bits(a.sum_err2) == bits(b.sum_err2));
  CHECK(bits(a.sum_abs_a) == bits(b.sum_abs_a));
  CHECK(bits(a.sum_abs_h) == bits(b.sum_abs_h));
  CHECK(a.count == b.count);
  CHECK(a.coded == b.coded);
  CHECK(a.nonfinite == b.nonfinite);
  CHECK(a.histogram == b.histogram);
}

}  // namespace

TEST_CASE("slot_metric_sums equals quant_metrics on the quantizer's own transformed values, every preset slot",
          "[quant_metrics][probe]") {
  const std::string preset = GENERATE(as<std::string>{}, "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3",
                                      "four-over-six", "tetrajet-v2", "quartet-ii");
  const fp4::engine::Recipe recipe = fp4::engine::recipe_preset(preset);
  fp4::engine::LinearSite site;
  site.recipe = &recipe;
  site.linear_id = 5;
  site.seed = 17;
  site.step = 9;
  // Multiples of 32 and 16: every preset's blocks and tiles fit; of 128 along both axes for the
  // presets that group 128 values (docs/recipes.md: double-block scales, MS-EDEN's RHT).
  const bool wide = !fp4::engine::linear_shape_error(recipe, 64, 96, 64).empty();
  const int rows = wide ? 128 : 64, cols = wide ? 256 : 96;
  const std::vector<bf16_t> x = test_tensor(rows, cols, 3);
  for (int k = 0; k < fp4::engine::kSlotCount; ++k) {
    const auto slot = static_cast<fp4::engine::Slot>(k);
    INFO(preset << " " << fp4::engine::slot_name(slot));
    const fp4::QuantSpec spec = fp4::engine::site_slot_spec(site, slot);
    const fp4::cpu::QuantizedTensor q = fp4::cpu::quantize(x.data(), rows, cols, spec, true);
    fp4::cpu::QuantMetricsAccumulator reference;
    reference.add(q);
    const QuantMetricsSums got =
        fp4::cpu::slot_metric_sums(x.data(), rows, cols, spec, q.dequant.data(), q.codes.data(), q.tensor_scale);
    require_same_sums(got, reference.sums());
    // The non-finite blocks are left out: one block of NaN, one of the infinity (a 16×16 tile, a
    // block of 16 or 32 values, or MS-EDEN's 128-group, over which its RHT spreads them), and
    // nothing else.
    const int64_t per_block = spec.ms_eden ? fp4::kMsEdenGroup : spec.tile_2d ? spec.block * spec.block : spec.block;
    CHECK(got.nonfinite == 2 * per_block);
    CHECK(got.count == int64_t{rows} * cols - got.nonfinite);
    const fp4::cpu::QuantMetrics m = fp4::cpu::metrics_from_sums(got), r = reference.result();
    CHECK(m.alpha == r.alpha);
    CHECK(m.nmse == r.nmse);
    CHECK(m.b_eff == r.b_eff);
    if (spec.rht) {
      // The RHT is really re-applied: without it A is another tensor (same energy, the transform
      // being orthonormal, but not the same magnitudes).
      fp4::QuantSpec plain = spec;
      plain.rht = false;
      const QuantMetricsSums without =
          fp4::cpu::slot_metric_sums(x.data(), rows, cols, plain, q.dequant.data(), q.codes.data(), q.tensor_scale);
      CHECK(without.sum_abs_a != got.sum_abs_a);
      CHECK(without.sum_ha != got.sum_ha);
    }
  }
}

TEST_CASE("metrics_from_sums gives the accumulator's metrics, IEEE results for degenerate sums",
          "[quant_metrics][probe]") {
  QuantMetricsSums s;
  s.sum_aa = 30.0;
  s.sum_ha = 15.0;
  s.sum_err2 = 7.5;
  s.sum_abs_a = 10.0;
  s.sum_abs_h = 5.0;
  s.count = s.coded = 4;
  s.histogram[7 + 1] = s.histogram[7 - 2] = s.histogram[7 + 3] = s.histogram[7 - 4] = 1;
  const fp4::cpu::QuantMetrics m = fp4::cpu::metrics_from_sums(s);
  CHECK(m.alpha == 0.5);
  CHECK(m.nmse == 0.25);
  CHECK(m.shrink == -0.5);
  CHECK(m.b_eff == Approx(4.0 / 15.0).epsilon(1e-14));
  CHECK(m.count == 4);
  const fp4::cpu::QuantMetrics empty = fp4::cpu::metrics_from_sums(QuantMetricsSums{});
  CHECK(std::isnan(empty.alpha));
  CHECK(std::isnan(empty.b_eff));
}

TEST_CASE("slot_metric_sums refuses a blocked axis that 16-vectors do not tile", "[quant_metrics][probe]") {
  const std::vector<bf16_t> x(8 * 40, 0);
  const std::vector<uint8_t> codes(x.size(), 0);
  fp4::QuantSpec spec;
  spec.along = fp4::BlockAlong::row;
  CHECK_THROWS_AS(fp4::cpu::slot_metric_sums(x.data(), 8, 40, spec, x.data(), codes.data(), 1.0f),
                  std::invalid_argument);
  spec.along = fp4::BlockAlong::column;  // 8 rows
  CHECK_THROWS_AS(fp4::cpu::slot_metric_sums(x.data(), 8, 40, spec, x.data(), codes.data(), 1.0f),
                  std::invalid_argument);
}
