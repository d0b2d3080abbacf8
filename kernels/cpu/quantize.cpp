// quantize.cpp — see quantize.h. Three passes over the tensor, each as simple as it can be:
//   1. the values to round: bf16 -> fp32, then the RHT on every 16-vector along the blocking axis;
//   2. the tensor amax (needed by e4m3x2's two-level scale) over the finite transformed values;
//   3. per block (or tile): non-finite check on the source, amax, scale, then every element.
#include "kernels/cpu/quantize.h"

#include <stdexcept>

namespace fp4::cpu {

namespace {

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

}  // namespace

ScaleGrid scale_grid(int rows, int cols, const QuantSpec& spec) {
  const int b = spec.block;
  if (spec.tile_2d) return {rows / b, cols / b};
  if (spec.along == BlockAlong::row) return {rows, cols / b};
  return {rows / b, cols};
}

std::string shape_error(int rows, int cols, const QuantSpec& spec) {
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
  return {};
}

QuantizedTensor quantize(const bf16_t* x, int rows, int cols, const QuantSpec& spec,
                         bool keep_transformed, const int32_t* source_rows) {
  if (std::string err = shape_error(rows, cols, spec); !err.empty()) throw std::invalid_argument(err);
  const int64_t n = static_cast<int64_t>(rows) * cols;

  // Pass 1: the values to round.
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = bf16_to_float(x[i]);
  if (spec.rht) {
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
  TensorScale ts{1.0f, 1.0f};
  if (spec.scale == ScaleMode::e4m3x2) {
    ts = make_tensor_scale(amax, spec.gmax);
    q.tensor_scale = ts.dec;
  }
  const ScaleGrid grid = scale_grid(rows, cols, spec);
  q.scales.assign(static_cast<size_t>(grid.rows) * grid.cols, 0.0f);
  const int max_index = spec_max_index(spec);

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
      const BlockScale s = make_block_scale(spec.scale, amax_b, spec.gmax, ts);
      scale_out = s.stored;
      for (int r = b.r0; r < b.r0 + b.nr; ++r)
        for (int c = b.c0; c < b.c0 + b.nc; ++c) {
          const int64_t i = static_cast<int64_t>(r) * cols + c;
          float u = 0.0f;
          if (spec.rounding == Rounding::sr) {
            const uint64_t source = source_rows == nullptr
                                        ? static_cast<uint64_t>(i)
                                        : static_cast<uint64_t>(source_rows[r]) * static_cast<uint64_t>(cols) + c;
            u = uniform_from_word(philox_word_for_element(spec.seed, spec.stream, spec.step, source));
          }
          const QuantizedElement e = quantize_element(v[i], s, spec.grid, max_index, spec.rounding, u);
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
