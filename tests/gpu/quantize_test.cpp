// [gpu] The fused CUDA quantizers against the CPU reference (kernels/cpu/quantize.h): codes, scales,
// dequantized values, tensor scale, amax and the non-finite flag must be bit-identical, for every
// preset of NUMERICS.md §5, each slot kind (row copy, column copy, 2D tiles), RN and SR, with and
// without the RHT, on many shapes and input distributions; and docs/recipes.md's options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quantize/quantize.cuh"
#include "kernels/cuda/quantize/quantize_recipes.cuh"  // the span path on the §5 presets
#include "tests/quant_presets.h"

namespace {

using namespace fp4;

using fp4::cuda::DeviceArray;

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

enum class Dist { gaussian, student_t3, outliers, zeros, nonfinite, tiny, huge, rht_overflow };

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::gaussian: return "gaussian";
    case Dist::student_t3: return "student-t(3)";
    case Dist::outliers: return "outliers";
    case Dist::zeros: return "zeros";
    case Dist::nonfinite: return "non-finite";
    case Dist::tiny: return "tiny (subnormal)";
    case Dist::huge: return "huge";
    case Dist::rht_overflow: return "RHT overflow";
  }
  return "?";
}

const Dist kAllDists[] = {Dist::gaussian, Dist::student_t3, Dist::outliers, Dist::zeros,
                          Dist::nonfinite, Dist::tiny,      Dist::huge,     Dist::rht_overflow};

std::vector<bf16_t> make_input(int rows, int cols, Dist d, uint64_t seed) {
  const size_t n = static_cast<size_t>(rows) * cols;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> student(3.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<bf16_t> x(n);
  for (size_t i = 0; i < n; ++i) {
    float v = 0.0f;
    switch (d) {
      case Dist::gaussian:
      case Dist::nonfinite: v = normal(rng); break;
      case Dist::student_t3: v = student(rng); break;
      case Dist::outliers:
        v = normal(rng);
        if (uniform(rng) < 0.002f) v *= 200.0f + 800.0f * uniform(rng);
        break;
      case Dist::zeros: v = i % 3 == 0 ? -0.0f : 0.0f; break;  // signed zeros too
      case Dist::tiny: v = std::ldexp(normal(rng), -128); break;  // bf16 and fp32 subnormals
      case Dist::huge: v = std::ldexp(normal(rng), 100); break;   // large, but the RHT cannot overflow
      case Dist::rht_overflow: {
        // Finite bf16 values whose RHT overflows fp32: in every other 32x32 region (a checkerboard,
        // so both copies' blocks and 2D tiles of 16 and 32 meet them, and are wholly in or out of a
        // region: some blocks stay finite) magnitudes in [2^125, 2^127) with random
        // signs: the butterfly's sum of squares is 16x the inputs', so some output of a 16-vector
        // of values >= 2^126 reaches 2^128 (Inf), and Inf - Inf makes NaNs; vectors with smaller
        // values may or may not overflow. Elsewhere large values that never overflow.
        const size_t r = i / static_cast<size_t>(cols), c = i % static_cast<size_t>(cols);
        if ((r / 32 + c / 32) % 2 == 0) {
          v = std::ldexp(1.0f + uniform(rng), uniform(rng) < 0.75f ? 126 : 125);
          if (uniform(rng) < 0.5f) v = -v;
        } else {
          v = std::ldexp(normal(rng), 120);
        }
        break;
      }
    }
    x[i] = float_to_bf16(v);
  }
  if (d == Dist::nonfinite) {
    x[0] = kBf16QuietNaN;
    x[n / 3] = 0x7f80;      // +Inf
    x[n / 2 + 1] = 0xff80;  // -Inf
    x[n - 1] = 0xffc1;      // a negative NaN with a payload
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// Specs
// ---------------------------------------------------------------------------------------------

using Preset = fp4::test::QuantPreset;

// NUMERICS.md §5, in its order, plus a clipped e2m1 for the clip path.
const std::vector<Preset> kPresets = [] {
  std::vector<Preset> p(std::begin(fp4::test::kSection5Presets), std::end(fp4::test::kSection5Presets));
  p.push_back({"e2m1-clip4", Grid::e2m1, 4.0f, ScaleMode::fp32, 16});
  return p;
}();

struct Variant {
  bool rht;
  Rounding rounding;
  bool tile_2d;
};

std::vector<Variant> all_variants() {
  std::vector<Variant> v;
  for (bool tile_2d : {false, true})
    for (bool rht : {false, true})
      for (Rounding r : {Rounding::rn, Rounding::sr}) v.push_back({rht, r, tile_2d});
  return v;
}

QuantSpec make_spec(const Preset& p, BlockAlong along, const Variant& v) {
  QuantSpec s = fp4::test::preset_spec(p);
  s.tile_2d = v.tile_2d;
  s.along = along;
  s.rht = v.rht;
  // The two copies use different sign vectors and Philox streams, as two slots would.
  s.rht_signs = along == BlockAlong::row ? kRhtFixedSigns : static_cast<uint16_t>(0x9c35);
  s.rounding = v.rounding;
  s.seed = 0x0123456789abcdefull;
  s.stream = philox_stream(7, along == BlockAlong::row ? Gemm::dgrad : Gemm::wgrad, Operand::dy, 3);
  s.step = 11;
  return s;
}

std::string describe(const QuantSpec& s) {
  std::ostringstream o;
  o << (s.along == BlockAlong::row ? "row" : "column") << " copy: grid " << (s.grid == Grid::e2m1 ? "e2m1" : "e1m2")
    << " gmax " << s.gmax << " scale "
    << (s.scale == ScaleMode::fp32 ? "fp32" : s.scale == ScaleMode::e4m3x2 ? "e4m3x2" : "e8m0") << " block "
    << s.block << (s.tile_2d ? " 2D" : "") << (s.rht ? " rht" : "") << (s.rounding == Rounding::sr ? " sr" : " rn");
  return o.str();
}

// ---------------------------------------------------------------------------------------------
// Running the GPU quantizer
// ---------------------------------------------------------------------------------------------

struct GpuCopy {
  std::vector<bf16_t> dequant;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  float tensor_scale = 0.0f;
  float amax = 0.0f;
};

struct GpuResult {
  std::optional<GpuCopy> row, col;
  bool nonfinite = false;
};

// A byte pattern no output produces, so an element a kernel failed to write shows up.
constexpr unsigned char kPoison = 0xA5;

// Device outputs of one copy, poisoned before the call.
struct DeviceCopy {
  DeviceArray<bf16_t> dequant;
  DeviceArray<uint8_t> codes;
  DeviceArray<float> scales;
  DeviceArray<float> scalars;  // tensor_scale, amax
  cpu::ScaleGrid grid;

  DeviceCopy(int rows, int cols, const QuantSpec& s)
      : dequant(static_cast<size_t>(rows) * cols),
        codes(static_cast<size_t>(rows) * cols),
        scales(std::max<size_t>(1, static_cast<size_t>(cpu::scale_grid(rows, cols, s).rows) *
                                       cpu::scale_grid(rows, cols, s).cols)),
        scalars(2),
        grid(cpu::scale_grid(rows, cols, s)) {
    dequant.fill_bytes(kPoison);
    codes.fill_bytes(kPoison);
    scales.fill_bytes(kPoison);
    scalars.fill_bytes(kPoison);
  }

  cuda::CopyOut out(const QuantSpec& s, bool want_amax, bool want_codes) {
    cuda::CopyOut o;
    o.spec = s;
    o.dequant = dequant.get();
    o.codes = want_codes ? codes.get() : nullptr;
    o.scales = scales.get();
    o.tensor_scale = scalars.get();
    o.amax = want_amax ? scalars.get() + 1 : nullptr;
    return o;
  }

  GpuCopy fetch() const {
    GpuCopy g;
    g.dequant = dequant.download();
    g.codes = codes.download();
    g.scales = scales.download();
    g.scales.resize(static_cast<size_t>(grid.rows) * grid.cols);
    const std::vector<float> s = scalars.download();
    g.tensor_scale = s[0];
    g.amax = s[1];
    return g;
  }
};

cuda::Workspace& workspace() {
  static cuda::Workspace ws;  // shared by every call, as one stream's calls would share it
  return ws;
}

// want_codes = false leaves the codes out, as training does (the kernels then skip them entirely);
// the fetched codes are then empty.
// source_rows: quantize_fused's (uploaded), or null. span_path: the copies by quantize_recipes.cu's
// kernels (which quantize_fused takes for docs/recipes.md's options only), with no shape checks:
// the caller passes specs that fit.
// groups: quantize_fused's (offsets, linear ids: uploaded), or null.
struct HostGroups {
  std::vector<int64_t> offsets;
  std::vector<uint32_t> linear_ids;
};

GpuResult run_gpu(const std::vector<bf16_t>& x, int rows, int cols, const QuantSpec* row, const QuantSpec* col,
                  bool want_amax, bool want_codes = true, const std::vector<int32_t>* source_rows = nullptr,
                  bool span_path = false, const HostGroups* groups = nullptr) {
  DeviceArray<bf16_t> dx(x.size());
  dx.upload(x);
  DeviceArray<int32_t> dsrc(source_rows != nullptr ? source_rows->size() : 1);
  if (source_rows != nullptr) dsrc.upload(*source_rows);
  DeviceArray<int64_t> doffsets(groups != nullptr ? groups->offsets.size() : 1);
  DeviceArray<uint32_t> dids(groups != nullptr ? groups->linear_ids.size() : 1);
  cuda::GroupStreams gs;
  if (groups != nullptr) {
    doffsets.upload(groups->offsets);
    dids.upload(groups->linear_ids);
    gs.offsets = doffsets.get();
    gs.linear_ids = dids.get();
    gs.count = static_cast<int>(groups->linear_ids.size());
  }
  DeviceArray<unsigned> flag(1);
  FP4_CUDA_CHECK(cudaMemset(flag.get(), 0, sizeof(unsigned)));
  std::unique_ptr<DeviceCopy> drow, dcol;
  cuda::CopyOut orow, ocol;
  if (row != nullptr) {
    drow = std::make_unique<DeviceCopy>(rows, cols, *row);
    orow = drow->out(*row, want_amax, want_codes);
  }
  if (col != nullptr) {
    dcol = std::make_unique<DeviceCopy>(rows, cols, *col);
    ocol = dcol->out(*col, want_amax, want_codes);
  }
  const int32_t* src_rows = source_rows != nullptr ? dsrc.get() : nullptr;
  if (span_path)
    cuda::detail::quantize_recipe_copies(dx.get(), rows, cols, row != nullptr ? &orow : nullptr,
                                         col != nullptr ? &ocol : nullptr, flag.get(), src_rows, workspace(), nullptr);
  else
    cuda::quantize_fused(dx.get(), rows, cols, row != nullptr ? &orow : nullptr, col != nullptr ? &ocol : nullptr,
                         flag.get(), workspace(), nullptr, src_rows, groups != nullptr ? &gs : nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  GpuResult r;
  if (drow) r.row = drow->fetch();
  if (dcol) r.col = dcol->fetch();
  if (!want_codes) {
    if (r.row) r.row->codes.clear();
    if (r.col) r.col->codes.clear();
  }
  r.nonfinite = flag.download()[0] != 0;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------------------------

template <class T>
uint64_t bits_of(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

// Number of elements whose bits differ; `first` describes the first of them.
template <class T>
size_t mismatches(const std::vector<T>& want, const std::vector<T>& got, int cols, std::string& first) {
  size_t n = 0;
  if (want.size() != got.size()) {
    first = "sizes differ: " + std::to_string(want.size()) + " vs " + std::to_string(got.size());
    return std::max(want.size(), got.size());
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (bits_of(want[i]) == bits_of(got[i])) continue;
    if (n++ == 0) {
      std::ostringstream o;
      o << "first at [" << i / cols << ", " << i % cols << "]: cpu 0x" << std::hex << bits_of(want[i]) << " gpu 0x"
        << bits_of(got[i]);
      first = o.str();
    }
  }
  return n;
}

void check_copy(const cpu::QuantizedTensor& ref, const GpuCopy& got, bool want_amax) {
  std::string first;
  const size_t bad_dequant = mismatches(ref.dequant, got.dequant, ref.cols, first);
  INFO("dequant: " << first);
  first.clear();
  const size_t bad_codes = got.codes.empty() ? 0 : mismatches(ref.codes, got.codes, ref.cols, first);  // not asked for
  INFO("codes: " << first);
  first.clear();
  const size_t bad_scales = mismatches(ref.scales, got.scales, std::max(1, cpu::scale_grid(ref.rows, ref.cols, ref.spec).cols), first);
  INFO("scales: " << first);
  CHECK(bad_dequant == 0);
  CHECK(bad_codes == 0);
  CHECK(bad_scales == 0);
  CHECK(bits_of(got.tensor_scale) == bits_of(ref.tensor_scale));
  if (want_amax) CHECK(bits_of(got.amax) == bits_of(ref.amax));
}

// Quantizes x into the row and the column copy with one fused call and compares both with the
// reference. When a spec does not fit the shape, the fused call must be refused with the
// reference's message, and the copy that fits is checked alone.
// span_path: run_gpu's (specs that fit only).
void compare(const std::vector<bf16_t>& x, int rows, int cols, const QuantSpec& rs, const QuantSpec& cs,
             bool want_amax, const std::string& label, bool want_codes = true, bool span_path = false) {
  INFO(label);
  INFO("codes " << (want_codes ? "asked for" : "not asked for"));
  INFO(describe(rs));
  INFO(describe(cs));
  const std::string row_err = cpu::shape_error(rows, cols, rs);
  const std::string col_err = cpu::shape_error(rows, cols, cs);
  const QuantSpec* row = row_err.empty() ? &rs : nullptr;
  const QuantSpec* col = col_err.empty() ? &cs : nullptr;
  REQUIRE((!span_path || (row != nullptr && col != nullptr)));  // the span path checks no shape
  if (row == nullptr || col == nullptr) {
    CHECK_THROWS_AS(run_gpu(x, rows, cols, &rs, &cs, want_amax), std::invalid_argument);
    CHECK_THROWS_WITH(run_gpu(x, rows, cols, &rs, &cs, want_amax), row_err.empty() ? col_err : row_err);
  }
  if (row == nullptr && col == nullptr) return;
  const GpuResult got = run_gpu(x, rows, cols, row, col, want_amax, want_codes, nullptr, span_path);
  bool ref_nonfinite = false;
  if (row != nullptr) {
    INFO("checking the row copy");
    const cpu::QuantizedTensor ref = cpu::quantize(x.data(), rows, cols, *row);
    ref_nonfinite = ref_nonfinite || ref.nonfinite;
    REQUIRE(got.row.has_value());
    check_copy(ref, *got.row, want_amax);
  }
  if (col != nullptr) {
    INFO("checking the column copy");
    const cpu::QuantizedTensor ref = cpu::quantize(x.data(), rows, cols, *col);
    ref_nonfinite = ref_nonfinite || ref.nonfinite;
    REQUIRE(got.col.has_value());
    check_copy(ref, *got.col, want_amax);
  }
  CHECK(got.nonfinite == ref_nonfinite);
}

std::string label_of(int rows, int cols, Dist d, const Preset& p) {
  return std::to_string(rows) + "x" + std::to_string(cols) + " " + dist_name(d) + " preset " + p.name;
}

struct Shape {
  int rows, cols;
};

// Every preset × every variant × every distribution on each shape.
void sweep(const std::vector<Shape>& shapes, const std::vector<Dist>& dists, const std::vector<Variant>& variants) {
  uint64_t seed = 1;
  for (const Shape& sh : shapes)
    for (Dist d : dists) {
      const std::vector<bf16_t> x = make_input(sh.rows, sh.cols, d, seed++);
      for (const Preset& p : kPresets)
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          const Variant& v = variants[vi];
          // Ask for the amax on every other call: the amax pass runs then even for fp32 and e8m0.
          // Codes on two calls in three (over the distributions every variant runs both ways).
          compare(x, sh.rows, sh.cols, make_spec(p, BlockAlong::row, v), make_spec(p, BlockAlong::column, v),
                  vi % 2 == 1, label_of(sh.rows, sh.cols, d, p), (seed + vi) % 3 != 0);
        }
    }
}

}  // namespace

TEST_CASE("gpu quantizer: small and odd shapes match the CPU reference", "[gpu]") {
  // Odd ones: partial tiles in both directions, column counts that are odd (scalar loads and
  // stores), not a multiple of 4 (Philox groups straddle rows) or of 8 (no 16-byte loads), and
  // shapes only one of the copies fits.
  sweep({{16, 16}, {48, 80}, {32, 4112}, {64, 1024}, {256, 528}, {160, 48}, {96, 96},
         {32, 65}, {32, 66}, {48, 36}, {33, 48}, {5, 32}},
        std::vector<Dist>(std::begin(kAllDists), std::end(kAllDists)), all_variants());
}

TEST_CASE("gpu quantizer: thin shapes match the CPU reference", "[gpu]") {
  sweep({{16, 65536}, {65536, 16}}, {Dist::outliers, Dist::nonfinite}, all_variants());
}

TEST_CASE("gpu quantizer: 4096x4096 matches the CPU reference", "[gpu]") {
  sweep({{4096, 4096}}, {Dist::student_t3},
        {{false, Rounding::rn, false}, {true, Rounding::sr, false}, {true, Rounding::rn, true}});
}

TEST_CASE("gpu quantizer: single copies and mixed slots match the CPU reference", "[gpu]") {
  const Variant rn_plain{false, Rounding::rn, false}, sr_rht{true, Rounding::sr, false},
      rn_rht{true, Rounding::rn, false};
  uint64_t seed = 100;
  for (Shape sh : {Shape{64, 1024}, Shape{96, 96}, Shape{32, 4112}, Shape{7, 48}, Shape{33, 1056}})
    for (Dist d : {Dist::gaussian, Dist::nonfinite}) {
      const std::vector<bf16_t> x = make_input(sh.rows, sh.cols, d, seed++);
      for (const Preset& p : kPresets) {
        const std::string label = label_of(sh.rows, sh.cols, d, p);
        INFO(label);
        // One copy per launch.
        for (const Variant& v : {rn_plain, sr_rht}) {
          for (BlockAlong along : {BlockAlong::row, BlockAlong::column}) {
            const QuantSpec s = make_spec(p, along, v);
            if (!cpu::shape_error(sh.rows, sh.cols, s).empty()) continue;
            INFO(describe(s));
            const bool is_row = along == BlockAlong::row;
            const GpuResult got = run_gpu(x, sh.rows, sh.cols, is_row ? &s : nullptr, is_row ? nullptr : &s, true);
            const cpu::QuantizedTensor ref = cpu::quantize(x.data(), sh.rows, sh.cols, s);
            check_copy(ref, is_row ? *got.row : *got.col, true);
            CHECK(got.nonfinite == ref.nonfinite);
          }
        }
        // The usual pairing of a linear layer's input: rows RN without the RHT (fprop), columns SR
        // with it (wgrad); and the reverse.
        compare(x, sh.rows, sh.cols, make_spec(p, BlockAlong::row, rn_plain),
                make_spec(p, BlockAlong::column, sr_rht), true, label);
        compare(x, sh.rows, sh.cols, make_spec(p, BlockAlong::row, sr_rht),
                make_spec(p, BlockAlong::column, rn_plain), false, label);
        // The same pairings and single copies without codes (as training asks): these take the
        // kernel instances specialized per copy (RN / SR, one grid and scale family, no codes).
        compare(x, sh.rows, sh.cols, make_spec(p, BlockAlong::row, rn_plain),
                make_spec(p, BlockAlong::column, sr_rht), true, label, false);
        compare(x, sh.rows, sh.cols, make_spec(p, BlockAlong::row, sr_rht),
                make_spec(p, BlockAlong::column, rn_plain), false, label, false);
        // rn_rht too: the row copy alone, RN, no codes takes the row kernel without shared memory
        // (quantize_rows.cu), with and without the RHT.
        for (const Variant& v : {rn_plain, rn_rht, sr_rht})
          for (BlockAlong along : {BlockAlong::row, BlockAlong::column}) {
            const QuantSpec s = make_spec(p, along, v);
            if (!cpu::shape_error(sh.rows, sh.cols, s).empty()) continue;
            INFO(describe(s) << ", no codes");
            const bool is_row = along == BlockAlong::row;
            const GpuResult got =
                run_gpu(x, sh.rows, sh.cols, is_row ? &s : nullptr, is_row ? nullptr : &s, false, false);
            const cpu::QuantizedTensor ref = cpu::quantize(x.data(), sh.rows, sh.cols, s);
            check_copy(ref, is_row ? *got.row : *got.col, false);
            CHECK(got.nonfinite == ref.nonfinite);
          }
      }
      // Different block sizes in the two copies (two launches) and different presets.
      compare(x, sh.rows, sh.cols, make_spec(kPresets[2], BlockAlong::row, sr_rht),
              make_spec(kPresets[3], BlockAlong::column, sr_rht), true, label_of(sh.rows, sh.cols, d, kPresets[3]));
      compare(x, sh.rows, sh.cols, make_spec(kPresets[3], BlockAlong::row, rn_plain),
              make_spec(kPresets[4], BlockAlong::column, sr_rht), true, label_of(sh.rows, sh.cols, d, kPresets[4]));
    }
}

TEST_CASE("gpu quantizer: both copies, both RN or both SR, no codes (the strip kernel) match the CPU reference",
          "[gpu]") {
  // Both copies RN, or both SR (the gradient's two copies in training), without codes, block 16, one
  // family (fp32 and e4m3x2 scales): quantize_rows.cu's fused_strip_kernel (16 x 64 strips; widths
  // that are not a multiple of 64 leave lanes out in whole 16-column groups; SR words handed between
  // lane pairs). The RHT on either copy, on both or on neither; every distribution (non-finite
  // values, zero, subnormal and huge blocks, RHT overflow); and the column copy alone, RN. RN
  // without the RHT on any copy takes quantize_strips_plain.cu's plain_strip_kernel instead (the
  // word-wise amax and signs, the cheaper block scales and its slow paths for zero, non-finite and
  // out-of-range blocks, the row copy written back through the strip buffer), mxfp4's too (strips
  // of 32 rows: 96 x 96 and 32 x 160 end in a half strip, 4096 x 16 and 160 x 48 take the column
  // copy alone there). mxfp4 with the RHT or SR checks the tiled fallback the same way.
  uint64_t seed = 500;
  for (Shape sh : {Shape{16, 16}, Shape{48, 80}, Shape{32, 4112}, Shape{160, 48}, Shape{96, 96}, Shape{64, 1024},
                   Shape{16, 65536}, Shape{4096, 16}, Shape{33, 48}, Shape{32, 160}})
    for (Dist d : kAllDists) {
      const std::vector<bf16_t> x = make_input(sh.rows, sh.cols, d, seed++);
      for (const Preset& p : kPresets)
        for (Rounding rounding : {Rounding::rn, Rounding::sr})
          for (bool row_rht : {false, true})
            for (bool col_rht : {false, true})
              compare(x, sh.rows, sh.cols, make_spec(p, BlockAlong::row, {row_rht, rounding, false}),
                      make_spec(p, BlockAlong::column, {col_rht, rounding, false}), (seed + row_rht) % 2 == 0,
                      label_of(sh.rows, sh.cols, d, p), false);
      // The column copy alone, RN, without codes (the strips without their row phase).
      for (const Preset& p : kPresets)
        for (bool col_rht : {false, true}) {
          const QuantSpec cs = make_spec(p, BlockAlong::column, {col_rht, Rounding::rn, false});
          if (!cpu::shape_error(sh.rows, sh.cols, cs).empty()) continue;
          INFO(label_of(sh.rows, sh.cols, d, p) << ", " << describe(cs) << ", column copy alone, no codes");
          const GpuResult got = run_gpu(x, sh.rows, sh.cols, nullptr, &cs, false, false);
          check_copy(cpu::quantize(x.data(), sh.rows, sh.cols, cs), *got.col, false);
        }
    }
}

TEST_CASE("gpu quantizer: the non-finite flag is raised only by non-finite blocks", "[gpu]") {
  const int rows = 64, cols = 128;
  std::vector<bf16_t> x = make_input(rows, cols, Dist::gaussian, 7);
  const QuantSpec rs = make_spec(kPresets[2], BlockAlong::row, {true, Rounding::rn, false});
  const QuantSpec cs = make_spec(kPresets[2], BlockAlong::column, {true, Rounding::sr, false});
  CHECK_FALSE(run_gpu(x, rows, cols, &rs, &cs, true).nonfinite);
  x[5 * cols + 77] = 0x7f80;  // one +Inf: one row block, one column block, all else finite
  const GpuResult got = run_gpu(x, rows, cols, &rs, &cs, true);
  CHECK(got.nonfinite);
  const cpu::QuantizedTensor ref_row = cpu::quantize(x.data(), rows, cols, rs);
  const cpu::QuantizedTensor ref_col = cpu::quantize(x.data(), rows, cols, cs);
  check_copy(ref_row, *got.row, true);
  check_copy(ref_col, *got.col, true);
  CHECK(got.row->dequant[5 * cols + 77] == kBf16QuietNaN);
  CHECK(got.col->codes[0 * cols + 77] == kNonFiniteCode);
}

TEST_CASE("gpu quantizer: bad shapes and specs are refused before anything runs", "[gpu]") {
  const std::vector<bf16_t> x = make_input(48, 80, Dist::gaussian, 3);
  const Variant v{false, Rounding::rn, false};
  const QuantSpec mx_row = make_spec(kPresets[3], BlockAlong::row, v);
  const QuantSpec nv_row = make_spec(kPresets[2], BlockAlong::row, v);
  const QuantSpec nv_col = make_spec(kPresets[2], BlockAlong::column, v);

  // A blocked dimension that is not a multiple of the block: the reference's own message.
  REQUIRE(cpu::shape_error(48, 80, mx_row) == "columns (80) are not a multiple of the block size 32");
  CHECK_THROWS_WITH(run_gpu(x, 48, 80, &mx_row, nullptr, false), cpu::shape_error(48, 80, mx_row));
  CHECK_THROWS_AS(run_gpu(x, 48, 80, &mx_row, nullptr, false), std::invalid_argument);
  const std::vector<bf16_t> x40(40 * 16, 0);
  CHECK_THROWS_WITH(run_gpu(x40, 40, 16, nullptr, &nv_col, false), "rows (40) are not a multiple of the block size 16");

  // An unsupported block size and an empty tensor.
  QuantSpec b24 = nv_row;
  b24.block = 24;
  CHECK_THROWS_WITH(run_gpu(x, 48, 80, &b24, nullptr, false), cpu::shape_error(48, 80, b24));
  DeviceArray<bf16_t> dx(16);
  cuda::Workspace ws;
  cuda::CopyOut empty;
  empty.spec = nv_row;
  CHECK_THROWS_WITH(cuda::quantize_fused(dx.get(), 0, 16, &empty, nullptr, nullptr, ws, nullptr),
                    "tensor shape 0x16 is empty");

  // A spec in the wrong slot.
  CHECK_THROWS_AS(run_gpu(x, 48, 80, &nv_col, nullptr, false), std::invalid_argument);
  CHECK_THROWS_AS(run_gpu(x, 48, 80, nullptr, &nv_row, false), std::invalid_argument);
}

TEST_CASE("gpu quantizer: blocks whose RHT overflows fp32 are non-finite, as in the reference", "[gpu]") {
  // Finite bf16 inputs near 2^126..2^127: the reference marks a block non-finite when a value after
  // the RHT is; the kernels must too (row and column copies, every preset and scale mode, 1D and
  // 2D, RN and SR, codes asked for and not).
  for (Shape sh : {Shape{64, 64}, Shape{96, 160}}) {
    const std::vector<bf16_t> x = make_input(sh.rows, sh.cols, Dist::rht_overflow, 4242);
    for (const Preset& p : kPresets)
      for (const Variant& v : all_variants()) {
        const QuantSpec rs = make_spec(p, BlockAlong::row, v), cs = make_spec(p, BlockAlong::column, v);
        if (v.rht) {
          // The input does what it is for: some blocks overflow, and not all of them.
          const cpu::QuantizedTensor ref = cpu::quantize(x.data(), sh.rows, sh.cols, rs);
          INFO(describe(rs));
          CHECK(ref.nonfinite);
          CHECK(std::count(ref.dequant.begin(), ref.dequant.end(), kBf16QuietNaN) < static_cast<long>(ref.dequant.size()));
        }
        for (bool codes : {true, false})
          compare(x, sh.rows, sh.cols, rs, cs, true, label_of(sh.rows, sh.cols, Dist::rht_overflow, p), codes);
        // The row copy alone without codes (RN: the row kernel without shared memory).
        if (cpu::shape_error(sh.rows, sh.cols, rs).empty()) {
          INFO(describe(rs) << ", row copy alone, no codes");
          const GpuResult got = run_gpu(x, sh.rows, sh.cols, &rs, nullptr, false, false);
          const cpu::QuantizedTensor ref = cpu::quantize(x.data(), sh.rows, sh.cols, rs);
          check_copy(ref, *got.row, false);
          CHECK(got.nonfinite == ref.nonfinite);
        }
      }
  }
}

TEST_CASE("gpu quantizer: the tensor amax ignores NaNs and infinities on each amax kernel's fast and exact paths",
          "[gpu]") {
  // The amax pass (quantize.cu) takes each thread's maxima with one fmaxf a value, which drops NaNs
  // but keeps infinities, and takes a thread's (the tile kernel: a CTA's) values again with the
  // finite-only step when its maxima are not finite; the RHT maxima are taken before the 1/4 and
  // scaled once. Each of its three kernels meets, on a tensor large enough for many CTAs: NaNs
  // alone (the fast path must drop them), NaNs and one infinity in one CTA's share, finite values
  // whose butterfly overflows in a few 16-vectors, and subnormal values only (the 1/4 of the
  // maximum rounds as the maximum of the rounded values). The tensor scale and amax must equal the
  // reference's bit for bit.
  const int rows = 1024, cols = 512;
  const size_t n = static_cast<size_t>(rows) * cols;
  auto nans = [&](uint64_t seed) {
    std::vector<bf16_t> x = make_input(rows, cols, Dist::gaussian, seed);
    for (size_t i = 7; i < n; i += 40009) x[i] = (i & 1) ? kBf16QuietNaN : bf16_t{0xffc1};
    return x;
  };
  std::vector<std::pair<const char*, std::vector<bf16_t>>> inputs;
  inputs.emplace_back("NaNs only", nans(31));
  {
    std::vector<bf16_t> x = nans(32);
    x[n / 2 + 3 * cols + 5] = 0x7f80;  // +Inf
    x[n / 2 + 9 * cols + 6] = 0xff80;  // -Inf, in the same CTA's share
    inputs.emplace_back("NaNs and infinities", x);
  }
  {
    std::vector<bf16_t> x = make_input(rows, cols, Dist::gaussian, 33);
    // Two 16-vectors along a row and two along a column whose butterflies overflow fp32.
    for (int j = 0; j < 16; ++j) {
      x[static_cast<size_t>(100) * cols + 32 + j] = float_to_bf16(std::ldexp(1.5f, 126));
      x[static_cast<size_t>(800) * cols + 480 + j] = float_to_bf16(std::ldexp(-1.75f, 126));
      x[static_cast<size_t>(208 + j) * cols + 66] = float_to_bf16(std::ldexp(1.25f, 126));
      x[static_cast<size_t>(512 + j) * cols + 301] = float_to_bf16(std::ldexp(-1.5f, 126));
    }
    inputs.emplace_back("RHT overflow", x);
  }
  inputs.emplace_back("subnormal", make_input(rows, cols, Dist::tiny, 34));

  const Preset& nv = kPresets[2];      // e4m3x2: the amax pass always runs
  const Preset& uni = kPresets[4];     // ufp4-e4m3: the RHT on both copies
  const Variant plain{false, Rounding::rn, false}, rht{true, Rounding::sr, false};
  for (const auto& [name, x] : inputs) {
    INFO(name);
    // amax_rows_kernel: the row copy alone, without and with its RHT.
    compare(x, rows, cols, make_spec(nv, BlockAlong::row, plain), make_spec(nv, BlockAlong::column, plain), true,
            "amax_rows_kernel, no RHT");
    for (const Variant& v : {plain, rht}) {
      const QuantSpec rs = make_spec(nv, BlockAlong::row, v);
      INFO("amax_rows_kernel, row copy alone, " << describe(rs));
      const GpuResult got = run_gpu(x, rows, cols, &rs, nullptr, true, false);
      check_copy(cpu::quantize(x.data(), rows, cols, rs), *got.row, true);
    }
    // amax_cols_kernel: the RHT on the column copy alone (NVIDIA's gradient copies), and the column
    // copy alone with its RHT.
    compare(x, rows, cols, make_spec(nv, BlockAlong::row, plain), make_spec(nv, BlockAlong::column, rht), true,
            "amax_cols_kernel", false);
    {
      const QuantSpec cs = make_spec(nv, BlockAlong::column, rht);
      INFO("amax_cols_kernel, column copy alone");
      const GpuResult got = run_gpu(x, rows, cols, nullptr, &cs, true, false);
      check_copy(cpu::quantize(x.data(), rows, cols, cs), *got.col, true);
    }
    // amax_kernel (the tile kernel): the RHT on both copies.
    compare(x, rows, cols, make_spec(uni, BlockAlong::row, rht), make_spec(uni, BlockAlong::column, rht), true,
            "amax_kernel", false);
  }
}

// docs/recipes.md's options (quantize_recipes.cu): Four Over Six on e2m1 with fp32 and e4m3x2 scales
// (1D blocks and 2D tiles, RHT, SR), double-block scales (RN and SR, with and without the RHT),
// MS-EDEN with its 128-wide RHT, and the 128-wide RHT alone, on every distribution.
TEST_CASE("gpu quantizer: docs/recipes.md's options match the CPU reference", "[gpu]") {
  const Preset& e2m1 = kPresets[0];
  const Preset& nvfp4 = kPresets[2];
  std::vector<std::pair<std::string, std::function<QuantSpec(BlockAlong)>>> kinds;
  for (const Variant& v : all_variants())
    for (const Preset* p : {&e2m1, &nvfp4})
      kinds.push_back({std::string("four_over_six ") + p->name, [p, v](BlockAlong a) {
                         QuantSpec s = make_spec(*p, a, v);
                         s.four_over_six = true;
                         return s;
                       }});
  for (const Variant& v : all_variants()) {
    if (v.tile_2d) continue;
    kinds.push_back({"double-block", [v](BlockAlong a) {
                       QuantSpec s = make_spec(kPresets[2], a, v);
                       s.outer_block = 128;
                       return s;
                     }});
  }
  auto wide = [](QuantSpec s) {
    s.rht = true;
    s.rht_size = 128;
    const Philox4 call = rht_call_signs(s.seed, 7, s.along == BlockAlong::row ? Gemm::dgrad : Gemm::wgrad, 3, 11);
    for (int i = 0; i < 4; ++i) s.rht_wide_signs[i] = call.w[i];
    return s;
  };
  kinds.push_back({"ms-eden", [&](BlockAlong a) {
                     QuantSpec s = wide(make_spec(kPresets[2], a, Variant{true, Rounding::rn, false}));
                     s.ms_eden = true;
                     return s;
                   }});
  for (Rounding r : {Rounding::rn, Rounding::sr})
    kinds.push_back({"128-wide RHT", [&, r](BlockAlong a) { return wide(make_spec(kPresets[2], a, Variant{true, r, false})); }});
  uint64_t seed = 1000;
  // 136x128 and 128x48: 136 and 48 spans of 128 (the row copy, the column copy), not whole CTAs of
  // the group kernels (32 spans each); the other copy of each does not fit and is refused.
  // 128x20 and 128x18, column copies only: a last CTA part past the end for the span and the group
  // kernels, whose column SR shares Philox calls across quads of lanes when cols % 4 == 0 (20) and
  // draws one call per value otherwise (18).
  for (const Shape& sh :
       std::vector<Shape>{{128, 256}, {256, 128}, {384, 512}, {136, 128}, {128, 48}, {128, 20}, {128, 18}})
    for (Dist d : kAllDists) {
      const std::vector<bf16_t> x = make_input(sh.rows, sh.cols, d, seed++);
      for (size_t k = 0; k < kinds.size(); ++k) {
        const std::string label = std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " " + dist_name(d) + " " +
                                  kinds[k].first;
        compare(x, sh.rows, sh.cols, kinds[k].second(BlockAlong::row), kinds[k].second(BlockAlong::column), k % 2 == 1,
                label, (seed + k) % 3 != 0);
      }
    }
}

TEST_CASE("gpu quantizer: the recipe options' kernels give the CPU reference's bits on the §5 presets too", "[gpu]") {
  // quantize_recipe_copies takes only docs/recipes.md's options in training; on the plain presets
  // (every variant, 2D tiles included) it must still be the reference, so that the benchmark's
  // span-path table times kernels that are right, and the span code is checked on every grid and
  // scale mode, not only those the options use.
  uint64_t seed = 2000;
  int compared = 0, tiled = 0;
  for (const Shape& sh : std::vector<Shape>{{128, 256}, {96, 384}})
    for (Dist d : kAllDists) {
      const std::vector<bf16_t> x = make_input(sh.rows, sh.cols, d, seed++);
      for (const Preset& p : kPresets)
        for (const Variant& v : all_variants()) {
          const QuantSpec rs = make_spec(p, BlockAlong::row, v), cs = make_spec(p, BlockAlong::column, v);
          if (!cpu::shape_error(sh.rows, sh.cols, rs).empty() || !cpu::shape_error(sh.rows, sh.cols, cs).empty())
            continue;  // quantize_fused's refusals are tested above; the span path checks nothing
          compare(x, sh.rows, sh.cols, rs, cs, compared % 2 == 1, label_of(sh.rows, sh.cols, d, p) + " (span path)",
                  compared % 3 != 0, true);
          ++compared;
          tiled += v.tile_2d ? 1 : 0;
        }
    }
  // Every preset and variant ran on some shape: the 1D spans and the 2D tiles both.
  CHECK(compared - tiled >= 2 * static_cast<int>(std::size(kAllDists) * std::size(kPresets)) * 4);
  CHECK(tiled > 0);
}

// The cases of the expert-group tests: every preset, SR with and without the RHT and RN with it,
// with codes (the tiled kernel) and without (as training asks: the strip kernels), where both
// copies fit rows x cols; f(row spec, column spec, want_codes) under INFOs naming the case.
template <typename F>
void for_each_group_case(int rows, int cols, F&& f) {
  const Variant variants[] = {{false, Rounding::sr, false}, {true, Rounding::sr, false}, {true, Rounding::rn, false}};
  for (bool want_codes : {true, false})
    for (const Preset& p : kPresets)
      for (const Variant& v : variants) {
        const QuantSpec rs = make_spec(p, BlockAlong::row, v), cs = make_spec(p, BlockAlong::column, v);
        if (!cpu::shape_error(rows, cols, rs).empty() || !cpu::shape_error(rows, cols, cs).empty()) continue;
        INFO("preset " << p.name << (want_codes ? ", codes" : ", no codes"));
        INFO(describe(rs));
        INFO(describe(cs));
        f(rs, cs, want_codes);
      }
}

TEST_CASE("gpu quantizer: an expert group's copies (source_rows) draw as the CPU reference's", "[gpu]") {
  // An MoE expert's group: rows gathered from a larger micro-batch in ascending token order, then
  // zero padding rows numbered R + i (docs/model.md, "The SR key of a group"). The SR copies must
  // take the tokens' draws (cpu::quantize's source_rows) and differ from the ungrouped draws.
  const int R = 1000, rows = 96, cols = 128;
  std::vector<int32_t> src(rows);
  for (int r = 0; r < 80; ++r) src[r] = 3 + 11 * r;        // tokens of the group
  for (int r = 80; r < rows; ++r) src[r] = R + (r - 80);   // its padding
  std::vector<bf16_t> x = make_input(rows, cols, Dist::gaussian, 77);
  std::fill(x.begin() + 80 * cols, x.end(), bf16_t(0));
  for_each_group_case(rows, cols, [&](const QuantSpec& rs, const QuantSpec& cs, bool want_codes) {
    const GpuResult got = run_gpu(x, rows, cols, &rs, &cs, true, want_codes, &src);
    const cpu::QuantizedTensor ref_row = cpu::quantize(x.data(), rows, cols, rs, false, src.data());
    const cpu::QuantizedTensor ref_col = cpu::quantize(x.data(), rows, cols, cs, false, src.data());
    REQUIRE(got.row.has_value());
    REQUIRE(got.col.has_value());
    check_copy(ref_row, *got.row, true);
    check_copy(ref_col, *got.col, true);
    if (rs.rounding == Rounding::sr) {  // the keyed draws are really in use
      const cpu::QuantizedTensor plain = cpu::quantize(x.data(), rows, cols, rs);
      CHECK(plain.dequant != ref_row.dequant);
    }
  });
}

TEST_CASE("gpu quantizer: several expert groups in one call (groups) give each group's own call's bits", "[gpu]") {
  // An MoE block's dY: three experts' padded groups stacked (the middle one empty), each its own
  // linear's copy: its SR draws keyed by its linear's stream and its tokens. One quantize_fused
  // call with groups must give every group's rows the CPU reference's bits for that group alone.
  const int rows = 96, cols = 128;
  // Groups padded to multiples of 32 rows: whole column blocks for every preset (mxfp4's are 32).
  const HostGroups groups{{0, 64, 64, 96}, {7, 300, 1234}};
  std::vector<int32_t> src(rows);
  for (int r = 0; r < 56; ++r) src[r] = 2 + 5 * r;          // group 0: 56 tokens, 8 padding rows
  for (int r = 56; r < 64; ++r) src[r] = 1000 + (r - 56);
  for (int r = 64; r < 93; ++r) src[r] = 1 + 3 * (r - 64);  // group 2: 29 tokens, 3 padding rows
  for (int r = 93; r < 96; ++r) src[r] = 1000 + (r - 93);
  std::vector<bf16_t> x = make_input(rows, cols, Dist::gaussian, 91);
  std::fill(x.begin() + 56 * cols, x.begin() + 64 * cols, bf16_t(0));
  std::fill(x.begin() + 93 * cols, x.end(), bf16_t(0));
  // The reference: each group quantized alone with its own linear's stream, the results stacked.
  auto stacked = [&](const QuantSpec& spec) {
    cpu::QuantizedTensor all;
    all.rows = rows;
    all.cols = cols;
    all.spec = spec;
    for (size_t g = 0; g < groups.linear_ids.size(); ++g) {
      const int r0 = static_cast<int>(groups.offsets[g]), n = static_cast<int>(groups.offsets[g + 1]) - r0;
      if (n == 0) continue;
      QuantSpec sg = spec;
      sg.stream = philox_stream_of_linear(spec.stream, groups.linear_ids[g]);
      const cpu::QuantizedTensor q =
          cpu::quantize(x.data() + static_cast<size_t>(r0) * cols, n, cols, sg, false, src.data() + r0);
      all.dequant.insert(all.dequant.end(), q.dequant.begin(), q.dequant.end());
      all.codes.insert(all.codes.end(), q.codes.begin(), q.codes.end());
      all.scales.insert(all.scales.end(), q.scales.begin(), q.scales.end());
      all.tensor_scale = q.tensor_scale;
      all.nonfinite = all.nonfinite || q.nonfinite;
    }
    return all;
  };
  int compared = 0, refused = 0;
  for_each_group_case(rows, cols, [&](const QuantSpec& rs, const QuantSpec& cs, bool want_codes) {
    if (!cuda::groups_quantize_in_one_call(rs) || !cuda::groups_quantize_in_one_call(cs)) {
      // e4m3x2's tensor scale spans the groups: refused, never quantized across them.
      CHECK_THROWS_AS(run_gpu(x, rows, cols, &rs, &cs, false, want_codes, &src, false, &groups), std::invalid_argument);
      ++refused;
      return;
    }
    const GpuResult got = run_gpu(x, rows, cols, &rs, &cs, false, want_codes, &src, false, &groups);
    REQUIRE(got.row.has_value());
    REQUIRE(got.col.has_value());
    check_copy(stacked(rs), *got.row, false);  // codes compared where they were asked for
    check_copy(stacked(cs), *got.col, false);
    ++compared;
  });
  CHECK(compared >= 12);  // the presets without a tensor scale, 3 variants, with and without codes
  CHECK(refused > 0);     // and the e4m3x2 ones refused
}
