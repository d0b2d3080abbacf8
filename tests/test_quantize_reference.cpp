// The CPU reference quantizer over whole tensors (kernels/cpu/quantize.h): shape checks, blocking
// geometry and scale layouts, 16x16 weight tiles, and non-finite inputs (NUMERICS.md §1-§4).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/numerics.h"
#include "tests/numerics_test_helpers.h"

using fp4::BlockAlong;
using fp4::ScaleMode;
using fp4::cpu::QuantizedTensor;
using fp4test::bf;
using fp4test::fl;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

enum class Layout { row, column, tile };

const char* name(Layout l) { return l == Layout::row ? "row" : (l == Layout::column ? "column" : "tile"); }

fp4::QuantSpec spec_for(Layout l, ScaleMode mode, int block) {
  fp4::QuantSpec s;
  s.scale = mode;
  s.block = block;
  s.along = l == Layout::column ? BlockAlong::column : BlockAlong::row;
  s.tile_2d = l == Layout::tile;
  return s;
}

// The documented geometry (quantize.h): the block of element (r, c) and the block grid's shape.
struct Geo {
  int grid_rows, grid_cols;
  int block_row, block_col;
};
Geo geometry(Layout l, int R, int C, int B, int r, int c) {
  switch (l) {
    case Layout::row: return {R, C / B, r, c / B};
    case Layout::column: return {R / B, C, r / B, c};
    default: return {R / B, C / B, r / B, c / B};
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------

TEST_CASE("shape_error: a blocked dimension that is not a multiple of the block is named", "[quantize][shape]") {
  using fp4::cpu::shape_error;
  const fp4::QuantSpec row = spec_for(Layout::row, ScaleMode::fp32, 16);
  const fp4::QuantSpec col = spec_for(Layout::column, ScaleMode::fp32, 16);
  const fp4::QuantSpec tile = spec_for(Layout::tile, ScaleMode::fp32, 16);
  const fp4::QuantSpec mx = spec_for(Layout::row, ScaleMode::e8m0, 32);
  // Row blocks run along the columns: only the column count must be a multiple.
  CHECK(shape_error(32, 40, row) == "columns (40) are not a multiple of the block size 16");
  CHECK(shape_error(40, 32, row).empty());
  CHECK(shape_error(3, 16, row).empty());
  // Column blocks run along the rows.
  CHECK(shape_error(40, 32, col) == "rows (40) are not a multiple of the block size 16");
  CHECK(shape_error(32, 40, col).empty());
  CHECK(shape_error(16, 3, col).empty());
  // Tiles need both.
  CHECK(shape_error(32, 40, tile) == "columns (40) are not a multiple of the block size 16");
  CHECK(shape_error(40, 32, tile) == "rows (40) are not a multiple of the block size 16");
  CHECK(shape_error(32, 48, tile).empty());
  // Block 32.
  CHECK(shape_error(4, 48, mx) == "columns (48) are not a multiple of the block size 32");
  CHECK(shape_error(4, 64, mx).empty());
  // Block sizes other than 16 and 32, and empty shapes.
  fp4::QuantSpec bad = row;
  bad.block = 24;
  CHECK(shape_error(48, 48, bad) == "block size 24 is not supported (use 16 or 32)");
  CHECK(shape_error(0, 16, row) == "tensor shape 0x16 is empty");
  CHECK(shape_error(16, -16, row) == "tensor shape 16x-16 is empty");
}

TEST_CASE("quantize() refuses a bad shape with std::invalid_argument and shape_error's message", "[quantize][shape]") {
  const std::vector<uint16_t> x(40 * 40, bf(1.0f));
  const fp4::QuantSpec row = spec_for(Layout::row, ScaleMode::fp32, 16);
  const fp4::QuantSpec col = spec_for(Layout::column, ScaleMode::e4m3x2, 16);
  fp4::QuantSpec col_rht = col;
  col_rht.rht = true;
  CHECK_THROWS_AS(fp4::cpu::quantize(x.data(), 32, 40, row), std::invalid_argument);
  CHECK_THROWS_WITH(fp4::cpu::quantize(x.data(), 32, 40, row), "columns (40) are not a multiple of the block size 16");
  CHECK_THROWS_WITH(fp4::cpu::quantize(x.data(), 40, 32, col), "rows (40) are not a multiple of the block size 16");
  CHECK_THROWS_WITH(fp4::cpu::quantize(x.data(), 40, 32, col_rht), "rows (40) are not a multiple of the block size 16");
  CHECK_THROWS_AS(fp4::cpu::quantize(x.data(), 4, 48, spec_for(Layout::row, ScaleMode::e8m0, 32)), std::invalid_argument);
  CHECK_NOTHROW(fp4::cpu::quantize(x.data(), 40, 32, row));
  CHECK_NOTHROW(fp4::cpu::quantize(x.data(), 32, 40, col));
}

// ---------------------------------------------------------------------------------------------
// Blocking geometry
// ---------------------------------------------------------------------------------------------

TEST_CASE("blocking geometry: row, column and tile scale layouts as documented in quantize.h", "[quantize][layout]") {
  // Each block k (row-major over the block grid) gets weight w_k = 2^(k - 60): its first element
  // (in row-major order) is +-6 w_k and the others 3 w_k. fp32 scale: s = 6 w_k / 6 = w_k exactly,
  // t = 3 -> q = 3 (code 5), out = 3 w_k; the marker goes to +-6 w_k (code 7 / 15).
  const int R = 32, C = 48, B = 16;
  for (Layout l : {Layout::row, Layout::column, Layout::tile}) {
    INFO("layout " << name(l));
    const Geo g0 = geometry(l, R, C, B, 0, 0);
    std::vector<float> value(R * C);
    std::vector<bool> seen(g0.grid_rows * g0.grid_cols, false);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const Geo g = geometry(l, R, C, B, r, c);
        const int k = g.block_row * g.grid_cols + g.block_col;
        const float w = std::ldexp(1.0f, k - 60);
        value[r * C + c] = seen[k] ? 3.0f * w : (k % 2 ? -6.0f : 6.0f) * w;
        seen[k] = true;
      }
    const std::vector<uint16_t> x = fp4test::to_bf(value);
    const fp4::QuantSpec spec = spec_for(l, ScaleMode::fp32, B);
    const fp4::cpu::ScaleGrid sg = fp4::cpu::scale_grid(R, C, spec);
    CHECK(sg.rows == g0.grid_rows);
    CHECK(sg.cols == g0.grid_cols);
    const QuantizedTensor q = fp4::cpu::quantize(x.data(), R, C, spec);
    CHECK(q.rows == R);
    CHECK(q.cols == C);
    REQUIRE(q.scales.size() == static_cast<size_t>(g0.grid_rows * g0.grid_cols));
    REQUIRE(q.dequant.size() == static_cast<size_t>(R * C));
    for (size_t k = 0; k < q.scales.size(); ++k) {
      INFO("block " << k);
      CHECK(q.scales[k] == std::ldexp(1.0f, static_cast<int>(k) - 60));
    }
    int bad = 0;
    // Output layout is the source's row-major layout, whatever the blocking: every value is
    // reproduced exactly (3 and 6 are grid points, the scale is a power of two).
    for (int i = 0; i < R * C; ++i) bad += fl(q.dequant[i]) != value[i];
    CHECK(bad == 0);
    // Codes: 3 w -> +3 (5); markers +-6 (7 or 15).
    int markers = 0;
    for (int i = 0; i < R * C; ++i) {
      const int code = q.codes[i];
      if (code == 5) continue;
      CHECK((code == 7 || code == 15));
      ++markers;
    }
    CHECK(markers == g0.grid_rows * g0.grid_cols);
  }
}

TEST_CASE("16x16 weight tiles: the row and column copies of W are the same values", "[quantize][layout][tile]") {
  struct Mode {
    ScaleMode scale;
    int block;
    fp4::Rounding rounding;
  };
  const Mode modes[] = {{ScaleMode::fp32, 16, fp4::Rounding::rn},   {ScaleMode::e4m3x2, 16, fp4::Rounding::rn},
                        {ScaleMode::e8m0, 32, fp4::Rounding::rn},   {ScaleMode::fp32, 16, fp4::Rounding::sr},
                        {ScaleMode::e4m3x2, 16, fp4::Rounding::sr}};
  const int R = 64, C = 96;
  fp4test::TestRng rng(11);
  std::vector<uint16_t> w(R * C);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) w[r * C + c] = fp4test::bf_trunc(rng.sym() * static_cast<float>(1 + (r * 7 + c) % 13));
  for (const Mode& m : modes) {
    INFO("scale " << int(m.scale) << ", block " << m.block << ", rounding " << int(m.rounding));
    fp4::QuantSpec fprop = spec_for(Layout::tile, m.scale, m.block);  // W blocked along K (rows)
    fprop.rounding = m.rounding;
    fprop.seed = 77;
    fprop.stream = 123;
    fp4::QuantSpec dgrad = fprop;  // W blocked along N (columns)
    dgrad.along = BlockAlong::column;
    const QuantizedTensor a = fp4::cpu::quantize(w.data(), R, C, fprop);
    const QuantizedTensor b = fp4::cpu::quantize(w.data(), R, C, dgrad);
    CHECK(a.scales.size() == static_cast<size_t>((R / m.block) * (C / m.block)));
    CHECK(a.scales == b.scales);
    CHECK(a.codes == b.codes);
    CHECK(a.dequant == b.dequant);
    CHECK(a.tensor_scale == b.tensor_scale);
    // One scale per tile: for fp32, s = (max |w| over the B x B tile) / 6.
    if (m.scale == ScaleMode::fp32) {
      for (int tr = 0; tr < R / m.block; ++tr)
        for (int tc = 0; tc < C / m.block; ++tc) {
          float amax = 0;
          for (int r = tr * m.block; r < (tr + 1) * m.block; ++r)
            for (int c = tc * m.block; c < (tc + 1) * m.block; ++c) amax = std::max(amax, std::abs(fl(w[r * C + c])));
          CHECK(a.scales[tr * (C / m.block) + tc] == amax / 6.0f);
        }
    }
    // The 1 x B copies are not the same thing (sanity: tiles really share one scale).
    fp4::QuantSpec rows1 = fprop;
    rows1.tile_2d = false;
    const QuantizedTensor c1 = fp4::cpu::quantize(w.data(), R, C, rows1);
    CHECK(c1.scales.size() == static_cast<size_t>(R * (C / m.block)));
    CHECK(c1.dequant != a.dequant);
  }
}

// ---------------------------------------------------------------------------------------------
// Non-finite inputs
// ---------------------------------------------------------------------------------------------

namespace {

struct NonFiniteSetup {
  ScaleMode scale;
  int block;
};

}  // namespace

TEST_CASE("non-finite input: flag, NaN block with kNonFiniteCode, other blocks untouched", "[quantize][nonfinite]") {
  const int R = 64, C = 64;
  // Background in [-1, 1), a spike of 100 at (3, 5) that keeps the tensor amax (even after an RHT,
  // which spreads it to +-25 while the rest stays below 4) away from the bad block.
  fp4test::TestRng rng(5);
  std::vector<uint16_t> base(R * C);
  for (auto& h : base) h = fp4test::bf_trunc(rng.sym());
  base[3 * C + 5] = bf(100.0f);
  const int br = 37, bc = 45;  // the element that goes bad
  const NonFiniteSetup setups[] = {{ScaleMode::fp32, 16}, {ScaleMode::e4m3x2, 16}, {ScaleMode::e8m0, 32}};
  for (const NonFiniteSetup& su : setups)
    for (Layout l : {Layout::row, Layout::column, Layout::tile})
      for (bool rht : {false, true})
        for (float bad : {kNaN, kInf, -kInf}) {
          INFO("scale " << int(su.scale) << ", layout " << name(l) << ", rht " << rht << ", bad " << bad);
          fp4::QuantSpec spec = spec_for(l, su.scale, su.block);
          spec.rht = rht;
          spec.rht_signs = fp4::kRhtFixedSigns;
          std::vector<uint16_t> dirty = base, clean = base;
          dirty[br * C + bc] = fp4test::bf_trunc(bad);
          clean[br * C + bc] = bf(0.5f);
          const QuantizedTensor qd = fp4::cpu::quantize(dirty.data(), R, C, spec);
          const QuantizedTensor qc = fp4::cpu::quantize(clean.data(), R, C, spec);
          CHECK(qd.nonfinite);
          CHECK_FALSE(qc.nonfinite);
          // e4m3x2's amax_t ignores the non-finite values: same tensor scale as the clean tensor.
          CHECK(std::isfinite(qd.amax));
          CHECK(qd.amax == qc.amax);
          CHECK(qd.tensor_scale == qc.tensor_scale);
          CHECK(std::isfinite(qd.tensor_scale));
          const Geo gbad = geometry(l, R, C, su.block, br, bc);
          const int kbad = gbad.block_row * gbad.grid_cols + gbad.block_col;
          REQUIRE(qd.scales.size() == static_cast<size_t>(gbad.grid_rows * gbad.grid_cols));
          for (size_t k = 0; k < qd.scales.size(); ++k) {
            if (static_cast<int>(k) == kbad) CHECK(std::isnan(qd.scales[k]));
            else if (!(qd.scales[k] == qc.scales[k])) FAIL_CHECK("scale " << k << " changed");
          }
          int in_block = 0, wrong_in = 0, wrong_out = 0;
          for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) {
              const int i = r * C + c;
              const Geo g = geometry(l, R, C, su.block, r, c);
              if (g.block_row == gbad.block_row && g.block_col == gbad.block_col) {
                ++in_block;
                // Never a finite made-up value: NaN and the marker code for the whole block.
                wrong_in += !(fp4test::bf_is_nan(qd.dequant[i]) && qd.codes[i] == fp4::kNonFiniteCode);
              } else {
                wrong_out += qd.dequant[i] != qc.dequant[i] || qd.codes[i] != qc.codes[i];
              }
            }
          CHECK(in_block == (l == Layout::tile ? su.block * su.block : su.block));
          CHECK(wrong_in == 0);
          CHECK(wrong_out == 0);
        }
}

TEST_CASE("non-finite input: several bad blocks, SR, and every block of a row", "[quantize][nonfinite]") {
  // One row, 4 blocks: NaN in block 0, +Inf in block 2; blocks 1 and 3 finite. SR on.
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>((i % 13) - 6) * 0.5f;
  std::vector<uint16_t> x = fp4test::to_bf(v);
  x[3] = fp4test::bf_trunc(kNaN);
  x[40] = fp4test::bf_trunc(kInf);
  fp4::QuantSpec s;
  s.rounding = fp4::Rounding::sr;
  s.seed = 1;
  const QuantizedTensor q = fp4::cpu::quantize(x.data(), 1, 64, s);
  CHECK(q.nonfinite);
  for (int i = 0; i < 64; ++i) {
    INFO("element " << i);
    const bool bad_block = i < 16 || (i >= 32 && i < 48);
    CHECK(fp4test::bf_is_nan(q.dequant[i]) == bad_block);
    CHECK((q.codes[i] == fp4::kNonFiniteCode) == bad_block);
  }
  CHECK(std::isnan(q.scales[0]));
  CHECK(q.scales[1] == 3.0f / 6.0f);  // block 1 amax: |(16..31 % 13) - 6| * 0.5 max = 3
  CHECK(std::isnan(q.scales[2]));
  CHECK(q.scales[3] == 3.0f / 6.0f);
}

TEST_CASE("non-finite after the RHT: finite bf16 whose transform overflows fp32 is flagged, not made up",
          "[quantize][nonfinite][rht]") {
  // 16 x 2^127 (finite bf16 0x7F00): the first butterfly stage gives 2^128 = +Inf and the later
  // stages Inf - Inf = NaN. The values v of that block (§3: after the RHT) are non-finite, so §2
  // applies: NaN outputs and the flag. Block 1 is ordinary.
  std::vector<uint16_t> x(32);
  for (int i = 0; i < 16; ++i) x[i] = 0x7F00;
  for (int i = 16; i < 32; ++i) x[i] = bf(static_cast<float>(i - 24) * 0.25f);
  std::vector<uint16_t> clean = x;
  for (int i = 0; i < 16; ++i) clean[i] = 0;
  for (ScaleMode mode : {ScaleMode::fp32, ScaleMode::e4m3x2}) {
    INFO("scale " << int(mode));
    fp4::QuantSpec s;
    s.scale = mode;
    s.rht = true;
    s.rht_signs = 0;
    const QuantizedTensor q = fp4::cpu::quantize(x.data(), 1, 32, s);
    const QuantizedTensor qc = fp4::cpu::quantize(clean.data(), 1, 32, s);
    CHECK(q.nonfinite);
    for (int i = 0; i < 16; ++i) {
      INFO("element " << i);
      CHECK(fp4test::bf_is_nan(q.dequant[i]));
      CHECK(q.codes[i] == fp4::kNonFiniteCode);
    }
    CHECK(std::isnan(q.scales[0]));
    CHECK(q.amax == qc.amax);
    for (int i = 16; i < 32; ++i) {
      CHECK(q.dequant[i] == qc.dequant[i]);
      CHECK(q.codes[i] == qc.codes[i]);
    }
    // Without the RHT the same input is finite and quantizes to finite values. fp32: s = 2^127/6,
    // t = 6 -> out = bf16(6 s) = 2^127. e4m3x2: amax_t = 2^127, S_enc = 2688/2^127, s_b = e4m3(2^127
    // * S_enc/6) = 448, q = 6 -> out = 2688 (the true value is out * S_dec = 2688 * 2^127/2688).
    s.rht = false;
    const QuantizedTensor q0 = fp4::cpu::quantize(x.data(), 1, 32, s);
    CHECK_FALSE(q0.nonfinite);
    const float want = mode == ScaleMode::fp32 ? 0x1p127f : 2688.0f;
    for (int i = 0; i < 16; ++i) CHECK(fl(q0.dequant[i]) == want);
  }
  // e8m0 (block 32) and 2D tiles with the RHT along columns.
  std::vector<uint16_t> big(32 * 32, 0);
  for (int r = 0; r < 16; ++r) big[r * 32 + 3] = 0x7F00;  // column 3, rows 0..15
  fp4::QuantSpec mx;
  mx.scale = ScaleMode::e8m0;
  mx.block = 32;
  mx.tile_2d = true;
  mx.along = BlockAlong::column;
  mx.rht = true;
  mx.rht_signs = 0;
  const QuantizedTensor qm = fp4::cpu::quantize(big.data(), 32, 32, mx);
  CHECK(qm.nonfinite);
  CHECK(fp4test::bf_is_nan(qm.dequant[0]));
  CHECK(qm.codes[31 * 32 + 31] == fp4::kNonFiniteCode);
}
