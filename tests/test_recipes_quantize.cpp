// The CPU reference of docs/recipes.md's quantizers (kernels/numerics.h, kernels/cpu/quantize.cpp):
// Four Over Six on hand-worked blocks (4 wins, 6 wins, ties), TetraJet-v2's double-block scales by
// hand, MS-EDEN's pieces by hand and its unbiasedness measured over many draws with a fixed seed,
// the 128-wide RHT, the per-call sign keying (NUMERICS.md §6), and the quant probe's rows for them.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/quantized_linear.h"
#include "engine/recipe.h"
#include "kernels/cpu/quantize.h"
#include "kernels/numerics.h"
#include "quant/quantizer_probe.h"
#include "tests/numerics_test_helpers.h"

using fp4::BlockAlong;
using fp4::Rounding;
using fp4::ScaleMode;
using fp4::cpu::QuantizedTensor;
using fp4test::bf;
using fp4test::fl;

namespace {

fp4::QuantSpec four_over_six_spec(ScaleMode mode) {
  fp4::QuantSpec s;
  s.scale = mode;
  s.four_over_six = true;
  return s;
}

}  // namespace

TEST_CASE("four over six: the block keeps the candidate with the smaller squared error, 6 on a tie",
          "[numerics][recipes]") {
  for (ScaleMode mode : {ScaleMode::fp32, ScaleMode::e4m3x2}) {
    INFO((mode == ScaleMode::fp32 ? "fp32" : "e4m3x2") << " scales");
    // Each block's amax is 6 and the tensor's too, so both modes put 6 on scale 1 (e4m3x2: s_b = 256
    // with S_dec = 1/256) and 4 on scale 1.5 (s_b = 384). Hand-worked squared errors:
    //   {6, 5}: scale 1 rounds 5 (a tie) to 4, error 1; scale 1.5 has 5/1.5 = 3.33 -> 3 = 4.5,
    //           error 0.25, and 6/1.5 = 4 exactly: 4 wins.
    //   {6, 1}: scale 1 is exact; scale 1.5 has 1/1.5 = 0.67 -> 0.5 = 0.75, error 0.0625: 6 wins.
    //   {6, 3}: exact under both (3 = 2 * 1.5): a tie, 6 is kept.
    const std::vector<uint16_t> x = [] {
      std::vector<float> v(48, 0.0f);
      v[0] = 6, v[1] = 5, v[16] = 6, v[17] = 1, v[32] = 6, v[33] = 3;
      return fp4test::to_bf(v);
    }();
    const QuantizedTensor q = fp4::cpu::quantize(x.data(), 1, 48, four_over_six_spec(mode));
    const float unit = mode == ScaleMode::fp32 ? 1.0f : 256.0f;  // the stored scale meaning 1
    REQUIRE(q.scales.size() == 3);
    CHECK(q.scales[0] == 1.5f * unit);
    CHECK(q.scales[1] == unit);
    CHECK(q.scales[2] == unit);
    CHECK(q.tensor_scale == 1.0f / unit);
    auto value = [&](int i) { return fl(q.dequant[i]) * q.tensor_scale; };
    CHECK(value(0) == 6.0f);
    CHECK(value(1) == 4.5f);
    CHECK(q.codes[1] == 5);  // magnitude index of 3
    CHECK(value(16) == 6.0f);
    CHECK(value(17) == 1.0f);
    CHECK(value(32) == 6.0f);
    CHECK(value(33) == 3.0f);

    // Without the option every block takes its amax to 6 (the §5 quantizer): 5 becomes 4.
    fp4::QuantSpec plain = four_over_six_spec(mode);
    plain.four_over_six = false;
    const QuantizedTensor p = fp4::cpu::quantize(x.data(), 1, 48, plain);
    CHECK(fl(p.dequant[1]) * p.tensor_scale == 4.0f);
  }
}

TEST_CASE("four over six: e4m3x2 aims block scales at 256 so the larger candidate fits E4M3",
          "[numerics][recipes]") {
  // A tensor amax of 6 gives S_enc = 256 * 6 / 6 = 256 (not 448 * 6 / 6 = 448).
  const fp4::TensorScale ts = fp4::make_tensor_scale(6.0f, 6.0f, fp4::kFourOverSixScaleMax);
  CHECK(ts.enc == 256.0f);
  // The default keeps TransformerEngine's 448: the §5 recipes' bits.
  CHECK(fp4::make_tensor_scale(6.0f, 6.0f).enc == 448.0f);
  // Candidate 4 of the tensor's largest block is 384 = 1.5 * 256, below E4M3's 448.
  const fp4::BlockScale s4 = fp4::make_block_scale(ScaleMode::e4m3x2, 6.0f, fp4::kFourOverSixLowMax, ts);
  CHECK(s4.stored == 384.0f);
}

TEST_CASE("four over six is refused where it is not defined", "[numerics][recipes]") {
  fp4::QuantSpec s = four_over_six_spec(ScaleMode::e8m0);
  s.block = 32;
  CHECK_THAT(fp4::cpu::spec_error(s), Catch::Contains("four_over_six"));
  s = four_over_six_spec(ScaleMode::fp32);
  s.grid = fp4::Grid::e1m2;
  s.gmax = 7.0f;
  CHECK_THAT(fp4::cpu::spec_error(s), Catch::Contains("four_over_six"));
  s = four_over_six_spec(ScaleMode::fp32);
  s.gmax = 4.0f;  // a clipped e2m1 grid
  CHECK_THAT(fp4::cpu::spec_error(s), Catch::Contains("four_over_six"));
  CHECK(fp4::cpu::spec_error(four_over_six_spec(ScaleMode::e4m3x2)).empty());
}

TEST_CASE("double-block scales: an fp32 scale per 128 values and an E4M3 scale per 16, by hand",
          "[numerics][recipes]") {
  // Row 0: amax 2688 = 448 * 6, so s_outer = 2688 / 448 / 6 = 1. Its blocks:
  //   0: amax 2688 -> s_inner = 2688 / 1 / 6 = 448, 2688 / 448 = 6 exactly;
  //   1: amax 12   -> s_inner = 2, values 12 and 3 are 6 and 1.5 exactly;
  //   2: all zero  -> the quotient 0 becomes 2^-9 (TetraJet-v2), every output 0;
  //   3: amax 1000 -> 166.67 rounds to E4M3 160 (quantum 16 in [128, 256)); 1000 / 160 = 6.25 -> 6,
  //      so 1000 dequantizes to 960;
  //   4-7: zero.
  // Row 1: all zero: s_outer = 1 (a zero scale becomes 1), every inner scale 2^-9.
  std::vector<float> v(256, 0.0f);
  v[0] = 2688, v[16] = 12, v[17] = -3, v[48] = 1000;
  const std::vector<uint16_t> row_major = fp4test::to_bf(v);
  fp4::QuantSpec s;
  s.scale = ScaleMode::e4m3x2;
  s.outer_block = 128;
  for (BlockAlong along : {BlockAlong::row, BlockAlong::column}) {
    INFO((along == BlockAlong::row ? "along rows" : "along columns"));
    s.along = along;
    // The same values laid out so each 128-group runs down a column: the transpose [128, 2].
    std::vector<uint16_t> x = row_major;
    int rows = 2, cols = 128;
    if (along == BlockAlong::column) {
      rows = 128, cols = 2;
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 128; ++c) x[c * 2 + r] = row_major[r * 128 + c];
    }
    const QuantizedTensor q = fp4::cpu::quantize(x.data(), rows, cols, s);
    auto at = [&](int r, int c) { return along == BlockAlong::row ? r * 128 + c : c * 2 + r; };
    // Scale grids: [2, 8] along rows, [8, 2] along columns; outer scales [2, 1] or [1, 2].
    REQUIRE(q.outer_scales.size() == 2);
    CHECK(q.outer_scales[0] == 1.0f);
    CHECK(q.outer_scales[1] == 1.0f);
    auto inner = [&](int r, int b) { return along == BlockAlong::row ? q.scales[r * 8 + b] : q.scales[b * 2 + r]; };
    CHECK(inner(0, 0) == 448.0f);
    CHECK(inner(0, 1) == 2.0f);
    CHECK(inner(0, 2) == 0.001953125f);
    CHECK(inner(0, 3) == 160.0f);
    for (int b = 0; b < 8; ++b) CHECK(inner(1, b) == 0.001953125f);
    CHECK(q.tensor_scale == 1.0f);
    CHECK(fl(q.dequant[at(0, 0)]) == 2688.0f);
    CHECK(fl(q.dequant[at(0, 16)]) == 12.0f);
    CHECK(fl(q.dequant[at(0, 17)]) == -3.0f);
    CHECK(fl(q.dequant[at(0, 48)]) == 960.0f);
    CHECK(fl(q.dequant[at(0, 32)]) == 0.0f);
  }

  // A smaller outer amax shrinks the outer scale and so raises the inner ones: amax 6 gives
  // s_outer = 6 / 448 / 6 = 1/448 (rounded in fp32), and a block of amax 6 has s_inner = 448.
  std::vector<float> w(128, 0.0f);
  w[5] = 6.0f, w[20] = 1.5f;
  const std::vector<uint16_t> xw = fp4test::to_bf(w);
  s.along = BlockAlong::row;
  const QuantizedTensor q = fp4::cpu::quantize(xw.data(), 1, 128, s);
  const float outer = (6.0f / 448.0f) / 6.0f;
  CHECK(q.outer_scales[0] == outer);
  CHECK(q.scales[0] == fp4::e4m3_rn_satfinite((6.0f / outer) / 6.0f));
  CHECK(q.scales[0] == 448.0f);
  // 1.5 is the amax of block 1: s_inner = 112 and 1.5 maps to 6.
  CHECK(q.scales[1] == fp4::e4m3_rn_satfinite((1.5f / outer) / 6.0f));
  CHECK(q.codes[20] == 7);
  // A width that is not a multiple of 128 is refused with the reason.
  CHECK_THAT(fp4::cpu::shape_error(1, 64, s), Catch::Contains("128"));
}

TEST_CASE("MS-EDEN's pieces: ties away from zero, E4M3 stochastic rounding, the scale constants",
          "[numerics][recipes]") {
  // Quartet II rounds ties up (t >= midpoint); fp4lab's §2 rounding sends them to the even code.
  CHECK(fp4::round_nearest_up_index_e2m1(0.25f) == 1);
  CHECK(fp4::round_nearest_up_index_e2m1(2.5f) == 5);
  CHECK(fp4::round_nearest_up_index_e2m1(5.0f) == 7);
  CHECK(fp4::round_nearest_up_index_e2m1(4.99f) == 6);
  CHECK(fp4::round_nearest_up_index_e2m1(9.0f) == 7);
  CHECK(fp4::round_nearest_index(fp4::Grid::e2m1, 2.5f, 7) == 4);
  // 3.1 lies between E4M3's 3.0 and 3.25: up with probability 0.4.
  CHECK(fp4::e4m3_stochastic(3.1f, 0.39f) == 3.25f);
  CHECK(fp4::e4m3_stochastic(3.1f, 0.41f) == 3.0f);
  CHECK(fp4::e4m3_stochastic(3.0f, 0.0f) == 3.0f);   // exact: probability 0 of moving
  CHECK(fp4::e4m3_stochastic(500.0f, 0.0f) == 448.0f);
  CHECK(fp4::e4m3_stochastic(0.001f, 0.9f) == 0.0f);   // below the smallest subnormal 2^-9
  CHECK(fp4::e4m3_stochastic(0.001f, 0.1f) == 0.001953125f);
  // G_max stretched by 1 / ((17/16) * 0.93); block scales aimed at 255.99.
  CHECK(fp4::kMsEdenValMax == static_cast<float>(6.0 / 0.988125));
  CHECK(fp4::ms_eden_tensor_scale(0.0f) == 1.0f);
  const float s_dec = fp4::ms_eden_tensor_scale(255.99f * fp4::kMsEdenValMax);
  CHECK(std::abs(s_dec - 1.0f) < 1e-6f);
  CHECK(fp4::ms_eden_block_scale(0.0f, 1.0f) == 1.0f);  // a zero scale becomes 1
}

TEST_CASE("the 128-wide RHT: a unit vector spreads evenly, and applying it twice without signs "
          "returns the input to fp32 rounding", "[numerics][recipes]") {
  std::vector<float> e(128, 0.0f);
  e[0] = 1.0f;
  const uint32_t none[4] = {0, 0, 0, 0};
  fp4::rht128(e.data(), none);
  for (float x : e) CHECK(x == fp4::kRhtWideNorm);
  fp4test::TestRng rng(7);
  std::vector<float> v(128), w;
  for (float& x : v) x = rng.sym();
  w = v;
  const uint32_t signs[4] = {0xdeadbeefu, 0x01234567u, 0x89abcdefu, 0x0f0f0f0fu};
  fp4::rht128(w.data(), signs);
  // Inverse: unsigned transform, then the signs again (c^2 * 128 = 1 within fp32 rounding).
  fp4::rht128(w.data(), none);
  for (int i = 0; i < 128; ++i) {
    const float back = ((signs[i >> 5] >> (i & 31)) & 1u) ? -w[i] : w[i];
    CHECK(std::abs(back - v[i]) < 1e-5f);
  }
}

TEST_CASE("MS-EDEN is unbiased: the mean of many draws equals the input within its standard error, "
          "where round-to-nearest under the same rotations is not", "[numerics][recipes]") {
  // One 128-vector with a heavy tail, quantized along its row in N draws; draw d is optimizer step d,
  // which redraws the rotation's signs (per_call) and the scales' stochastic rounding (NUMERICS §6).
  fp4test::TestRng rng(2026);
  std::vector<float> x(128);
  for (float& e : x) e = rng.sym() * (rng.sym() > 0.9f ? 8.0f : 1.0f);
  std::vector<uint16_t> xb(128);
  for (int i = 0; i < 128; ++i) xb[i] = fp4test::bf_trunc(x[i]);
  for (int i = 0; i < 128; ++i) x[i] = fl(xb[i]);

  struct Moments {
    std::vector<double> sum = std::vector<double>(128, 0.0), sum2 = std::vector<double>(128, 0.0);
  };
  auto run = [&](bool eden, int draws) {
    Moments m;
    fp4::QuantSpec s;
    s.scale = ScaleMode::e4m3x2;
    s.rht = true;
    s.rht_size = 128;
    s.ms_eden = eden;
    s.seed = 0x5eed;
    s.stream = fp4::philox_stream(3, fp4::Gemm::dgrad, fp4::Operand::dy, 0);
    const uint32_t none[4] = {0, 0, 0, 0};
    for (int d = 0; d < draws; ++d) {
      const fp4::Philox4 call = fp4::rht_call_signs(s.seed, 3, fp4::Gemm::dgrad, 0, static_cast<uint32_t>(d));
      for (int k = 0; k < 4; ++k) s.rht_wide_signs[k] = call.w[k];
      s.step = static_cast<uint32_t>(d);
      const QuantizedTensor q = fp4::cpu::quantize(xb.data(), 1, 128, s);
      std::vector<float> y(128);
      for (int i = 0; i < 128; ++i) y[i] = fl(q.dequant[i]) * q.tensor_scale;
      fp4::rht128(y.data(), none);  // back to the input's coordinates
      for (int i = 0; i < 128; ++i) {
        const double back = ((call.w[i >> 5] >> (i & 31)) & 1u) ? -y[i] : y[i];
        m.sum[i] += back;
        m.sum2[i] += back * back;
      }
    }
    return m;
  };
  const int draws = 3000;
  // Largest |mean - x| in standard errors over the coordinates, and the gain <mean, x> / <x, x>.
  auto summary = [&](const Moments& m, double* gain) {
    double worst = 0.0, dot = 0.0, xx = 0.0;
    for (int i = 0; i < 128; ++i) {
      const double mean = m.sum[i] / draws;
      const double var = std::max(m.sum2[i] / draws - mean * mean, 1e-30);
      const double se = std::sqrt(var / draws);
      worst = std::max(worst, std::abs(mean - x[i]) / se);
      dot += mean * x[i];
      xx += static_cast<double>(x[i]) * x[i];
    }
    *gain = dot / xx;
    return worst;
  };
  double gain_eden = 0.0, gain_rtn = 0.0;
  const double worst_eden = summary(run(true, draws), &gain_eden);
  const double worst_rtn = summary(run(false, draws), &gain_rtn);
  INFO("MS-EDEN: worst coordinate " << worst_eden << " SE, gain " << gain_eden);
  INFO("RTN:     worst coordinate " << worst_rtn << " SE, gain " << gain_rtn);
  // 128 coordinates: a 4.5 SE excursion of an unbiased mean has probability ~1e-3 overall.
  CHECK(worst_eden < 4.5);
  CHECK(std::abs(gain_eden - 1.0) < 2e-3);
  // The control: the same rotations with plain round-to-nearest are biased, far beyond that bound.
  CHECK(worst_rtn > 6.0);
}

TEST_CASE("per-call RHT signs: one draw per GEMM call, shared by its two operands", "[numerics][recipes]") {
  const fp4::engine::Recipe r = fp4::engine::recipe_preset("quartet-ii");
  fp4::engine::LinearSite site{.recipe = &r, .linear_id = 5, .seed = 99, .step = 7, .micro_step = 2};
  using fp4::engine::Slot;
  auto signs = [&](Slot slot) {
    const fp4::QuantSpec q = fp4::engine::site_slot_spec(site, slot);
    return std::vector<uint32_t>(q.rht_wide_signs, q.rht_wide_signs + 4);
  };
  const auto dgrad = signs(Slot::dgrad_dy);
  CHECK(signs(Slot::dgrad_w) == dgrad);  // the W copy draws with the call's micro-step too
  CHECK(signs(Slot::wgrad_dy) == signs(Slot::wgrad_x));
  CHECK(signs(Slot::wgrad_dy) != dgrad);
  site.micro_step = 3;
  CHECK(signs(Slot::dgrad_dy) != dgrad);
  site.micro_step = 2;
  site.step = 8;
  CHECK(signs(Slot::dgrad_dy) != dgrad);
  site.step = 7;
  CHECK(signs(Slot::dgrad_dy) == dgrad);
  // The keying of numerics.h: word 2 of the counter holds "RC", the GEMM and the micro-step.
  const fp4::Philox4 expect = fp4::philox4x32_10(5, 0xffffffffu, 0x52430000u | (1u << 12) | 2u, 7, 99, 0);
  CHECK(dgrad == std::vector<uint32_t>(expect.w, expect.w + 4));
}

TEST_CASE("quant probe --method: the new methods' rows beside plain, each where it is defined",
          "[quant][recipes]") {
  fp4::quant::ProbeConfig c;
  c.dists = {fp4::quant::Dist::gaussian};
  c.rows = 64;
  c.cols = 1024;
  c.methods = fp4::quant::all_methods();
  const fp4::quant::ProbeResult r = fp4::quant::run_probe(c);
  using fp4::quant::Method;
  auto find = [&](const std::string& grid, ScaleMode scale, bool rht, Method m) -> const fp4::quant::ProbeRow* {
    for (const auto& row : r.results)
      if (row.grid == grid && row.scale == scale && row.rht == rht && row.method == m) return &row;
    return nullptr;
  };
  // Defined: four-over-six on e2m1 with fp32 and e4m3x2; double-block and ms-eden on e2m1 e4m3x2
  // (ms-eden only as "rht on"). Not on e1m2, not with e8m0.
  REQUIRE(find("e2m1", ScaleMode::e4m3x2, false, Method::four_over_six));
  REQUIRE(find("e2m1", ScaleMode::fp32, true, Method::four_over_six));
  REQUIRE(find("e2m1", ScaleMode::e4m3x2, false, Method::double_block));
  REQUIRE(find("e2m1", ScaleMode::e4m3x2, true, Method::ms_eden));
  CHECK_FALSE(find("e2m1", ScaleMode::e4m3x2, false, Method::ms_eden));
  CHECK_FALSE(find("e1m2", ScaleMode::fp32, false, Method::four_over_six));
  CHECK_FALSE(find("e2m1", ScaleMode::e8m0, false, Method::four_over_six));
  CHECK_FALSE(find("e1m2", ScaleMode::e4m3x2, false, Method::double_block));
  // Four Over Six keeps, per block, the candidate with the smaller error: with fp32 scales (where
  // candidate 6 is the plain scale) it can only lower the total error.
  const auto* plain = find("e2m1", ScaleMode::fp32, false, Method::plain);
  const auto* fos = find("e2m1", ScaleMode::fp32, false, Method::four_over_six);
  CHECK(fos->metrics.nmse < plain->metrics.nmse);
  // MS-EDEN is unbiased: its gain is 1 to within its noise; round-to-nearest shrinks (alpha < 1).
  const auto* eden = find("e2m1", ScaleMode::e4m3x2, true, Method::ms_eden);
  CHECK(std::abs(eden->metrics.alpha - 1.0) < 2e-3);
  CHECK(find("e2m1", ScaleMode::e4m3x2, true, Method::plain)->metrics.alpha < 1.0 - 2e-3);
  // The output names the method only when asked for more than plain; the default is unchanged.
  CHECK(fp4::quant::format_csv(r).find(",method\n") != std::string::npos);
  fp4::quant::ProbeConfig d = c;
  d.methods = {Method::plain};
  CHECK(fp4::quant::format_csv(fp4::quant::run_probe(d)).find("method") == std::string::npos);
  CHECK_THROWS_WITH(fp4::quant::parse_method("eden"), Catch::Contains("--method"));
}
