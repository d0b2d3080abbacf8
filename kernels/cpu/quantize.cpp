// quantize.cpp — see quantize.h. Three passes over the tensor, each as simple as it can be:
//   1. the values to round: bf16 -> fp32, then the RHT on every 16-vector along the blocking axis;
//   2. the tensor amax (needed by e4m3x2's two-level scale) over the finite transformed values;
//   3. per block (or tile): non-finite check on the source, amax, scale, then every element.
#include "kernels/cpu/quantize.h"

#include <stdexcept>

namespace fp4::cpu {

namespace {

// The most values one block holds: a 32x32 tile (Four Over Six gathers a block's values).
constexpr int kMaxBlockValues = 32 * 32;

// A block (or tile) as a rectangle of the source tensor.
struct BlockRect {
  int r0, c0, nr, nc;
};

BlockRect block_rect(const QuantSpec& spec, int block_row, int block_col) {
  const int b = spec.block;
  if (spec.tile_2d) return {block_row * b, block_col * b, b, b};
  if (spec.along == BlockAlong::row) return {block_row, block_col * b, 1, b};
  return {block_row * b, block_col, b, 1};
}

// The row-major index in the source tensor of element (r, c) of x (quantize.h's source_rows).
uint64_t source_index(const int32_t* source_rows, int r, int c, int cols) {
  const uint64_t row = source_rows == nullptr ? static_cast<uint64_t>(r) : static_cast<uint64_t>(source_rows[r]);
  return row * static_cast<uint64_t>(cols) + static_cast<uint64_t>(c);
}

// Where value k (0..127) of 128-group j lies in the source tensor: groups run along the blocking
// axis, row-major over their grid ([rows, cols/128] along a row, [rows/128, cols] along a column).
int64_t group_index(int rows, int cols, BlockAlong along, int j, int k) {
  (void)rows;
  if (along == BlockAlong::row) {
    const int per_row = cols / kOuterBlock;
    return static_cast<int64_t>(j / per_row) * cols + (j % per_row) * kOuterBlock + k;
  }
  return static_cast<int64_t>((j / cols) * kOuterBlock + k) * cols + j % cols;
}

int group_count(int rows, int cols) { return rows * cols / kOuterBlock; }

// The double-block outer scales: amax over each 128-group's finite values, then TetraJet-v2's fp32
// scale (numerics.h).
std::vector<float> outer_scales(const std::vector<float>& v, int rows, int cols, BlockAlong along) {
  std::vector<float> out(group_count(rows, cols));
  for (int j = 0; j < group_count(rows, cols); ++j) {
    float amax = 0.0f;
    for (int k = 0; k < kOuterBlock; ++k) {
      const float a = abs_f(v[group_index(rows, cols, along, j, k)]);
      if (is_finite(a) && a > amax) amax = a;
    }
    out[j] = double_block_outer_scale(amax);
  }
  return out;
}

// MS-EDEN (numerics.h's ms_eden_group, docs/recipes.md "Quartet II") over 128-groups of the
// rotated values v; each block's scale is rounded stochastically with the Philox word of the
// block's first element (the slot's stream and step; NUMERICS.md §6).
void quantize_ms_eden(const bf16_t* x, const std::vector<float>& v, const int32_t* source_rows, QuantizedTensor& q) {
  const QuantSpec& spec = q.spec;
  const int rows = q.rows, cols = q.cols;
  const float s_dec = ms_eden_tensor_scale(q.amax);
  q.tensor_scale = s_dec;
  const ScaleGrid grid = scale_grid(rows, cols, spec);
  q.scales.assign(static_cast<size_t>(grid.rows) * grid.cols, 0.0f);
  constexpr int kBlocks = kMsEdenGroup / 16;
  bool any_nonfinite = false;
#pragma omp parallel for schedule(static) reduction(|| : any_nonfinite)
  for (int j = 0; j < group_count(rows, cols); ++j) {
    int64_t idx[kMsEdenGroup];
    for (int k = 0; k < kMsEdenGroup; ++k) idx[k] = group_index(rows, cols, spec.along, j, k);
    // The scale of block b of the group, in the scale grid.
    auto scale_at = [&](int b) -> float& {
      const int64_t i0 = idx[16 * b];
      const int r = static_cast<int>(i0 / cols), c = static_cast<int>(i0 % cols);
      return spec.along == BlockAlong::row ? q.scales[static_cast<size_t>(r) * grid.cols + c / 16]
                                           : q.scales[static_cast<size_t>(r / 16) * grid.cols + c];
    };
    bool finite = true;
    for (int k = 0; k < kMsEdenGroup; ++k)
      if (!is_finite(bf16_to_float(x[idx[k]])) || !is_finite(v[idx[k]])) finite = false;
    if (!finite) {  // the RHT spread it over the whole group
      any_nonfinite = true;
      for (int b = 0; b < kBlocks; ++b) scale_at(b) = bits_float(0x7fc00000u);
      for (int k = 0; k < kMsEdenGroup; ++k) {
        q.dequant[idx[k]] = kBf16QuietNaN;
        q.codes[idx[k]] = kNonFiniteCode;
      }
      continue;
    }
    float vals[kMsEdenGroup], us[kBlocks], scales[kBlocks];
    uint8_t mag[kMsEdenGroup];
    for (int k = 0; k < kMsEdenGroup; ++k) vals[k] = v[idx[k]];
    for (int b = 0; b < kBlocks; ++b)
      us[b] = uniform_from_word(philox_word_for_element(
          spec.seed, spec.stream, spec.step,
          source_index(source_rows, static_cast<int>(idx[16 * b] / cols), static_cast<int>(idx[16 * b] % cols), cols)));
    ms_eden_group(vals, s_dec, us, scales, mag);
    for (int b = 0; b < kBlocks; ++b) {
      scale_at(b) = scales[b];
      for (int k = 16 * b; k < 16 * b + 16; ++k) {
        const QuantizedElement e = ms_eden_element(vals[k], mag[k], scales[b]);
        q.dequant[idx[k]] = e.out;
        q.codes[idx[k]] = e.code;
      }
    }
  }
  q.nonfinite = any_nonfinite;
}

}  // namespace

ScaleGrid scale_grid(int rows, int cols, const QuantSpec& spec) {
  const int b = spec.block;
  if (spec.tile_2d) return {rows / b, cols / b};
  if (spec.along == BlockAlong::row) return {rows, cols / b};
  return {rows / b, cols};
}

std::string spec_error(const QuantSpec& spec) {
  const bool full_e2m1 = spec.grid == Grid::e2m1 && spec.gmax == 6.0f;
  if (spec.rht_size != kRhtSize && spec.rht_size != kRhtWideSize)
    return "RHT size " + std::to_string(spec.rht_size) + " is not supported (use 16 or 128)";
  if (spec.four_over_six && (!full_e2m1 || spec.scale == ScaleMode::e8m0))
    return "four_over_six needs the full e2m1 grid (clip 6) and fp32 or e4m3x2 scales";
  if (spec.outer_block != 0 && (spec.outer_block != kOuterBlock || !full_e2m1 || spec.scale != ScaleMode::e4m3x2 ||
                                spec.block != 16 || spec.tile_2d || spec.four_over_six || spec.ms_eden))
    return "outer_block must be 128, with the full e2m1 grid, e4m3x2 scales on 1x16 blocks and neither "
           "2D tiles, four_over_six nor ms_eden";
  if (spec.ms_eden && (!full_e2m1 || spec.scale != ScaleMode::e4m3x2 || spec.block != 16 || spec.tile_2d ||
                       spec.four_over_six || spec.rounding != Rounding::rn || !spec.rht ||
                       spec.rht_size != kRhtWideSize))
    return "ms_eden needs the full e2m1 grid, e4m3x2 scales on 1x16 blocks, round-to-nearest codes "
           "(its randomness is in the scales) and the 128-wide RHT, without 2D tiles or four_over_six";
  if (spec.rht && spec.rht_size == kRhtWideSize && spec.tile_2d)
    return "the 128-wide RHT does not combine with 2D weight tiles";
  return {};
}

bool blocks_quantize_alone(const QuantSpec& spec) {
  return spec.rounding == Rounding::rn && spec.scale != ScaleMode::e4m3x2 && !spec.ms_eden;
}

int axis_multiple(const QuantSpec& spec) {
  return (spec.rht && spec.rht_size == kRhtWideSize) || spec.outer_block != 0 ? 128 : spec.block;
}

std::string shape_error(int rows, int cols, const QuantSpec& spec) {
  if (std::string e = spec_error(spec); !e.empty()) return e;
  if (spec.block != 16 && spec.block != 32)
    return "block size " + std::to_string(spec.block) + " is not supported (use 16 or 32)";
  if (rows <= 0 || cols <= 0)
    return "tensor shape " + std::to_string(rows) + "x" + std::to_string(cols) + " is empty";
  const bool need_cols = spec.tile_2d || spec.along == BlockAlong::row;
  const bool need_rows = spec.tile_2d || spec.along == BlockAlong::column;
  if (need_cols && cols % spec.block != 0)
    return "columns (" + std::to_string(cols) + ") are not a multiple of the block size " +
           std::to_string(spec.block);
  if (need_rows && rows % spec.block != 0)
    return "rows (" + std::to_string(rows) + ") are not a multiple of the block size " +
           std::to_string(spec.block);
  // The 128-wide RHT and the double-block scales group 128 values along the blocking axis.
  const int group = axis_multiple(spec) == 128 ? 128 : 0;
  if (group != 0 && spec.along == BlockAlong::row && cols % group != 0)
    return "columns (" + std::to_string(cols) + ") are not a multiple of " + std::to_string(group) +
           " (the 128-wide RHT or double-block scales)";
  if (group != 0 && spec.along == BlockAlong::column && rows % group != 0)
    return "rows (" + std::to_string(rows) + ") are not a multiple of " + std::to_string(group) +
           " (the 128-wide RHT or double-block scales)";
  return {};
}

QuantizedTensor quantize(const bf16_t* x, int rows, int cols, const QuantSpec& spec,
                         bool keep_transformed, const int32_t* source_rows) {
  if (std::string err = shape_error(rows, cols, spec); !err.empty()) throw std::invalid_argument(err);
  const int64_t n = static_cast<int64_t>(rows) * cols;

  // Pass 1: the values to round.
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = bf16_to_float(x[i]);
  if (spec.rht && spec.rht_size == kRhtWideSize) {
    std::vector<float> vec(kRhtWideSize);
    const bool along_row = spec.along == BlockAlong::row;
    const int n_vec = along_row ? rows * (cols / kRhtWideSize) : (rows / kRhtWideSize) * cols;
    for (int j = 0; j < n_vec; ++j) {
      // Vector j: row r, columns c0.. (along a row) or column c, rows r0.. (along a column).
      const int r0 = along_row ? j / (cols / kRhtWideSize) : (j / cols) * kRhtWideSize;
      const int c0 = along_row ? (j % (cols / kRhtWideSize)) * kRhtWideSize : j % cols;
      auto at = [&](int k) -> float& {
        return along_row ? v[static_cast<int64_t>(r0) * cols + c0 + k] : v[static_cast<int64_t>(r0 + k) * cols + c0];
      };
      for (int k = 0; k < kRhtWideSize; ++k) vec[k] = at(k);
      rht128(vec.data(), spec.rht_wide_signs);
      for (int k = 0; k < kRhtWideSize; ++k) at(k) = vec[k];
    }
  } else if (spec.rht) {
    float vec[kRhtSize];
    if (spec.along == BlockAlong::row) {
      for (int r = 0; r < rows; ++r)
        for (int c0 = 0; c0 < cols; c0 += kRhtSize) {
          float* p = &v[static_cast<int64_t>(r) * cols + c0];
          rht16(p, spec.rht_signs);
        }
    } else {
      for (int r0 = 0; r0 < rows; r0 += kRhtSize)
        for (int c = 0; c < cols; ++c) {
          for (int k = 0; k < kRhtSize; ++k) vec[k] = v[static_cast<int64_t>(r0 + k) * cols + c];
          rht16(vec, spec.rht_signs);
          for (int k = 0; k < kRhtSize; ++k) v[static_cast<int64_t>(r0 + k) * cols + c] = vec[k];
        }
    }
  }

  // Pass 2: tensor amax over finite values (NaN and Inf never win a max).
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float a = abs_f(v[i]);
    if (is_finite(a) && a > amax) amax = a;
  }

  QuantizedTensor q;
  q.rows = rows;
  q.cols = cols;
  q.spec = spec;
  q.amax = amax;
  q.dequant.assign(n, 0);
  q.codes.assign(n, 0);
  if (spec.ms_eden) {
    quantize_ms_eden(x, v, source_rows, q);
    if (keep_transformed) q.transformed = std::move(v);
    return q;
  }
  TensorScale ts{1.0f, 1.0f};
  if (spec.scale == ScaleMode::e4m3x2 && spec.outer_block == 0) {
    ts = make_tensor_scale(amax, spec.gmax, spec.four_over_six ? kFourOverSixScaleMax : 448.0f);
    q.tensor_scale = ts.dec;
  }
  const ScaleGrid grid = scale_grid(rows, cols, spec);
  q.scales.assign(static_cast<size_t>(grid.rows) * grid.cols, 0.0f);
  const int max_index = spec_max_index(spec);
  if (spec.outer_block != 0) q.outer_scales = outer_scales(v, rows, cols, spec.along);
  const int outer_per_row = cols / kOuterBlock;  // outer groups per row (row blocking)
  const int blocks_per_outer = kOuterBlock / spec.block;

  // Pass 3: blocks. Each block is independent, so rows of the block grid run in parallel.
  bool any_nonfinite = false;
#pragma omp parallel for schedule(static) reduction(|| : any_nonfinite)
  for (int br = 0; br < grid.rows; ++br) {
    for (int bc = 0; bc < grid.cols; ++bc) {
      const BlockRect b = block_rect(spec, br, bc);
      bool finite = true;
      float amax_b = 0.0f;
      for (int r = b.r0; r < b.r0 + b.nr; ++r)
        for (int c = b.c0; c < b.c0 + b.nc; ++c) {
          const int64_t i = static_cast<int64_t>(r) * cols + c;
          // Non-finite source, or a finite source whose RHT overflowed fp32 (§3's v is after the RHT).
          if (!is_finite(bf16_to_float(x[i])) || !is_finite(v[i])) finite = false;
          float a = abs_f(v[i]);
          if (a > amax_b) amax_b = a;
        }
      float& scale_out = q.scales[static_cast<size_t>(br) * grid.cols + bc];
      if (!finite) {
        any_nonfinite = true;
        scale_out = bits_float(0x7fc00000u);
        for (int r = b.r0; r < b.r0 + b.nr; ++r)
          for (int c = b.c0; c < b.c0 + b.nc; ++c) {
            const int64_t i = static_cast<int64_t>(r) * cols + c;
            q.dequant[i] = kBf16QuietNaN;
            q.codes[i] = kNonFiniteCode;
          }
        continue;
      }
      // Element (r, c)'s SR uniform: its index in the source tensor (source_rows: quantize.h).
      auto uniform_at = [&](int r, int c) {
        if (spec.rounding != Rounding::sr) return 0.0f;
        return uniform_from_word(philox_word_for_element(spec.seed, spec.stream, spec.step,
                                                         source_index(source_rows, r, c, cols)));
      };
      BlockScale s;
      if (spec.outer_block != 0) {
        const size_t outer = spec.along == BlockAlong::row
                                 ? static_cast<size_t>(br) * outer_per_row + bc / blocks_per_outer
                                 : static_cast<size_t>(br / blocks_per_outer) * cols + bc;
        s = make_double_block_scale(amax_b, q.outer_scales[outer], &scale_out);
      } else {
        s = make_block_scale(spec.scale, amax_b, spec.gmax, ts);
        scale_out = s.stored;
      }
      if (spec.four_over_six) {
        // Both candidates over the block in row-major order (numerics.h: the amax mapped to 4 wins
        // only when its sum of squared errors is strictly smaller).
        float vals[kMaxBlockValues], us[kMaxBlockValues];
        int n_vals = 0;
        for (int r = b.r0; r < b.r0 + b.nr; ++r)
          for (int c = b.c0; c < b.c0 + b.nc; ++c) {
            const int64_t i = static_cast<int64_t>(r) * cols + c;
            vals[n_vals] = v[i];
            us[n_vals++] = uniform_at(r, c);
          }
        const BlockScale s4 = make_block_scale(spec.scale, amax_b, kFourOverSixLowMax, ts);
        if (four_over_six_picks_four(vals, us, n_vals, s, s4, ts.dec, spec.grid, max_index, spec.rounding)) {
          s = s4;
          scale_out = s4.stored;
        }
      }
      for (int r = b.r0; r < b.r0 + b.nr; ++r)
        for (int c = b.c0; c < b.c0 + b.nc; ++c) {
          const int64_t i = static_cast<int64_t>(r) * cols + c;
          const QuantizedElement e = quantize_element(v[i], s, spec.grid, max_index, spec.rounding, uniform_at(r, c));
          q.dequant[i] = e.out;
          q.codes[i] = e.code;
        }
    }
  }
  q.nonfinite = any_nonfinite;
  if (keep_transformed) q.transformed = std::move(v);
  return q;
}

}  // namespace fp4::cpu
