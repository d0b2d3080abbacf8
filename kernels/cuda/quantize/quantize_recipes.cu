// quantize_recipes.cu — quantize_fused's path for the copies whose spec uses docs/recipes.md's
// options (Four Over Six, TetraJet-v2's double-block scales, Quartet II's MS-EDEN, the 128-wide
// RHT). Plain kernels, written to be obviously the CPU reference's steps rather than fast: each
// thread takes one RHT vector, then one block (or one 128-value group) and calls the same
// numerics.h functions on the same values in the same order as kernels/cpu/quantize.cpp, so the
// outputs are bit-identical by construction (tests/gpu/quantize_test.cpp checks it):
//   1. the values to round, v = bf16 -> fp32 and the slot's RHT, into the workspace, and the tensor
//      amax over finite |v| (an atomic maximum on the bits of non-negative floats: order-free);
//   2. one thread makes the tensor scale (§3's, Four Over Six's 256-aimed one, MS-EDEN's, or 1);
//   3. blocks (plain and Four Over Six) or 128-groups (double-block, MS-EDEN).
// The fused kernels (quantize_kernels.cuh) are not touched: the §5 recipes never come here, except
// the SR copies of an MoE expert's group (quantize_fused's source_rows), whose draws are keyed by
// the source tensor's rows: these kernels take any spec, and only the draw's index changes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/quantize/quantize.cuh"
#include "kernels/numerics.h"

namespace fp4::cuda::detail {

namespace {

constexpr int kRecipeThreads = 128;
constexpr uint32_t kQuietNaNBits = 0x7fc00000u;
constexpr int kMaxBlockValues = 32 * 32;  // a 32x32 tile: the most values one block holds

int ceil_div(int64_t a, int b) { return static_cast<int>((a + b - 1) / b); }

// Pass 1: thread t takes RHT vector t (16 or 128 values along the blocking axis), or element t
// when the copy has no RHT.
__global__ void recipe_transform_kernel(const bf16_t* x, int rows, int cols, const QuantSpec spec, float* v,
                                        unsigned* amax_bits) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float local = 0.0f;
  if (!spec.rht) {
    if (t < static_cast<int64_t>(rows) * cols) {
      const float f = bf16_to_float(x[t]);
      v[t] = f;
      const float a = abs_f(f);
      if (is_finite(a) && a > local) local = a;
    }
  } else {
    const int w = spec.rht_size;
    const bool along_row = spec.along == BlockAlong::row;
    const int64_t n_vec = along_row ? static_cast<int64_t>(rows) * (cols / w) : static_cast<int64_t>(rows / w) * cols;
    if (t < n_vec) {
      const int64_t r0 = along_row ? t / (cols / w) : (t / cols) * w;
      const int64_t c0 = along_row ? (t % (cols / w)) * w : t % cols;
      auto at = [&](int k) { return along_row ? r0 * cols + c0 + k : (r0 + k) * cols + c0; };
      float vec[kRhtWideSize];
      for (int k = 0; k < w; ++k) vec[k] = bf16_to_float(x[at(k)]);
      if (w == kRhtWideSize) rht128(vec, spec.rht_wide_signs);
      else rht16(vec, spec.rht_signs);
      for (int k = 0; k < w; ++k) {
        v[at(k)] = vec[k];
        const float a = abs_f(vec[k]);
        if (is_finite(a) && a > local) local = a;
      }
    }
  }
  if (local > 0.0f) atomicMax(amax_bits, float_bits(local));
}

// Pass 2: the tensor scale, as the reference makes it.
__global__ void recipe_scale_kernel(const QuantSpec spec, const unsigned* amax_bits, TensorScale* ts, float* amax_out,
                                    float* tensor_scale_out) {
  const float amax = bits_float(*amax_bits);
  TensorScale t{1.0f, 1.0f};
  if (spec.ms_eden) {
    t.dec = ms_eden_tensor_scale(amax);
  } else if (spec.scale == ScaleMode::e4m3x2 && spec.outer_block == 0) {
    t = make_tensor_scale(amax, spec.gmax, spec.four_over_six ? kFourOverSixScaleMax : 448.0f);
  }
  *ts = t;
  if (amax_out != nullptr) *amax_out = amax;
  if (tensor_scale_out != nullptr) *tensor_scale_out = t.dec;
}

struct RecipeOut {
  bf16_t* dequant;
  uint8_t* codes;  // may be null
  float* scales;   // may be null
  unsigned* nonfinite_flag;  // may be null
  const int32_t* source_rows;  // may be null: quantize_fused's source_rows (SR draws only)
};

// The SR draw's element index of element i of x: i itself, or with source_rows (an MoE expert's
// group, quantize.cuh) the index of the same (row, column) in the source tensor, as the
// reference's source_index.
__device__ uint64_t draw_index(int64_t i, int cols, const int32_t* source_rows) {
  if (source_rows == nullptr) return static_cast<uint64_t>(i);
  return static_cast<uint64_t>(source_rows[i / cols]) * static_cast<uint64_t>(cols) + static_cast<uint64_t>(i % cols);
}

__device__ float uniform_for(const QuantSpec& s, int64_t i, int cols, const int32_t* source_rows) {
  return s.rounding == Rounding::sr
             ? uniform_from_word(philox_word_for_element(s.seed, s.stream, s.step, draw_index(i, cols, source_rows)))
             : 0.0f;
}

__device__ void store_nonfinite(const RecipeOut& o, int64_t i) {
  o.dequant[i] = kBf16QuietNaN;
  if (o.codes != nullptr) o.codes[i] = kNonFiniteCode;
}

// Pass 3, blocks: thread u takes block (or tile) u of the scale grid, row-major.
__global__ void recipe_block_kernel(const bf16_t* x, const float* v, int rows, int cols, const QuantSpec spec,
                                    const TensorScale* ts_ptr, RecipeOut o) {
  const int b = spec.block;
  const int grid_rows = spec.tile_2d || spec.along == BlockAlong::column ? rows / b : rows;
  const int grid_cols = spec.tile_2d || spec.along == BlockAlong::row ? cols / b : cols;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (unit >= static_cast<int64_t>(grid_rows) * grid_cols) return;
  const int br = static_cast<int>(unit / grid_cols), bc = static_cast<int>(unit % grid_cols);
  int r0, c0, nr, nc;
  if (spec.tile_2d) r0 = br * b, c0 = bc * b, nr = b, nc = b;
  else if (spec.along == BlockAlong::row) r0 = br, c0 = bc * b, nr = 1, nc = b;
  else r0 = br * b, c0 = bc, nr = b, nc = 1;
  const TensorScale ts = *ts_ptr;
  const int max_index = spec_max_index(spec);
  bool finite = true;
  float amax_b = 0.0f;
  for (int r = r0; r < r0 + nr; ++r)
    for (int c = c0; c < c0 + nc; ++c) {
      const int64_t i = static_cast<int64_t>(r) * cols + c;
      if (!is_finite(bf16_to_float(x[i])) || !is_finite(v[i])) finite = false;
      const float a = abs_f(v[i]);
      if (a > amax_b) amax_b = a;
    }
  if (!finite) {
    if (o.nonfinite_flag != nullptr) atomicOr(o.nonfinite_flag, 1u);
    if (o.scales != nullptr) o.scales[unit] = bits_float(kQuietNaNBits);
    for (int r = r0; r < r0 + nr; ++r)
      for (int c = c0; c < c0 + nc; ++c) store_nonfinite(o, static_cast<int64_t>(r) * cols + c);
    return;
  }
  BlockScale s = make_block_scale(spec.scale, amax_b, spec.gmax, ts);
  if (spec.four_over_six) {
    float vals[kMaxBlockValues], us[kMaxBlockValues];
    int n = 0;
    for (int r = r0; r < r0 + nr; ++r)
      for (int c = c0; c < c0 + nc; ++c) {
        const int64_t i = static_cast<int64_t>(r) * cols + c;
        vals[n] = v[i];
        us[n++] = uniform_for(spec, i, cols, o.source_rows);
      }
    const BlockScale s4 = make_block_scale(spec.scale, amax_b, kFourOverSixLowMax, ts);
    if (four_over_six_picks_four(vals, us, n, s, s4, ts.dec, spec.grid, max_index, spec.rounding)) s = s4;
  }
  if (o.scales != nullptr) o.scales[unit] = s.stored;
  for (int r = r0; r < r0 + nr; ++r)
    for (int c = c0; c < c0 + nc; ++c) {
      const int64_t i = static_cast<int64_t>(r) * cols + c;
      const QuantizedElement e = quantize_element(v[i], s, spec.grid, max_index, spec.rounding, uniform_for(spec, i, cols, o.source_rows));
      o.dequant[i] = e.out;
      if (o.codes != nullptr) o.codes[i] = e.code;
    }
}

// Pass 3, 128-groups (double-block scales, MS-EDEN): thread j takes group j, row-major over the
// group grid ([rows, cols/128] along rows, [rows/128, cols] along columns).
__global__ void recipe_group_kernel(const bf16_t* x, const float* v, int rows, int cols, const QuantSpec spec,
                                    const TensorScale* ts_ptr, RecipeOut o) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= static_cast<int64_t>(rows) * cols / kOuterBlock) return;
  const bool along_row = spec.along == BlockAlong::row;
  auto index = [&](int k) -> int64_t {
    if (along_row) {
      const int per_row = cols / kOuterBlock;
      return (j / per_row) * cols + (j % per_row) * kOuterBlock + k;
    }
    return ((j / cols) * kOuterBlock + k) * cols + j % cols;
  };
  auto scale_index = [&](int b) -> int64_t {  // block b of the group in the scale grid
    const int64_t i0 = index(16 * b);
    const int64_t r = i0 / cols, c = i0 % cols;
    return along_row ? r * (cols / 16) + c / 16 : (r / 16) * cols + c;
  };
  constexpr int kBlocks = kOuterBlock / 16;
  if (spec.ms_eden) {
    bool finite = true;
    for (int k = 0; k < kMsEdenGroup; ++k)
      if (!is_finite(bf16_to_float(x[index(k)])) || !is_finite(v[index(k)])) finite = false;
    if (!finite) {
      if (o.nonfinite_flag != nullptr) atomicOr(o.nonfinite_flag, 1u);
      for (int b = 0; b < kBlocks; ++b)
        if (o.scales != nullptr) o.scales[scale_index(b)] = bits_float(kQuietNaNBits);
      for (int k = 0; k < kMsEdenGroup; ++k) store_nonfinite(o, index(k));
      return;
    }
    float vals[kMsEdenGroup], us[kBlocks], scales[kBlocks];
    uint8_t mag[kMsEdenGroup];
    for (int k = 0; k < kMsEdenGroup; ++k) vals[k] = v[index(k)];
    for (int b = 0; b < kBlocks; ++b)
      us[b] = uniform_from_word(
          philox_word_for_element(spec.seed, spec.stream, spec.step, draw_index(index(16 * b), cols, o.source_rows)));
    ms_eden_group(vals, ts_ptr->dec, us, scales, mag);
    for (int b = 0; b < kBlocks; ++b) {
      if (o.scales != nullptr) o.scales[scale_index(b)] = scales[b];
      for (int k = 16 * b; k < 16 * b + 16; ++k) {
        const bool neg = sign_bit(vals[k]);
        const float deq = e2m1_magnitude(mag[k]) * scales[b];
        o.dequant[index(k)] = float_to_bf16(neg ? -deq : deq);
        if (o.codes != nullptr) o.codes[index(k)] = static_cast<uint8_t>((neg ? 8 : 0) | mag[k]);
      }
    }
    return;
  }
  // Double-block scales: the group's outer scale over its finite values, then each block of 16.
  float amax_o = 0.0f;
  for (int k = 0; k < kOuterBlock; ++k) {
    const float a = abs_f(v[index(k)]);
    if (is_finite(a) && a > amax_o) amax_o = a;
  }
  const float outer = double_block_outer_scale(amax_o);
  const int max_index = spec_max_index(spec);
  for (int b = 0; b < kBlocks; ++b) {
    bool finite = true;
    float amax_b = 0.0f;
    for (int k = 16 * b; k < 16 * b + 16; ++k) {
      const int64_t i = index(k);
      if (!is_finite(bf16_to_float(x[i])) || !is_finite(v[i])) finite = false;
      const float a = abs_f(v[i]);
      if (a > amax_b) amax_b = a;
    }
    if (!finite) {
      if (o.nonfinite_flag != nullptr) atomicOr(o.nonfinite_flag, 1u);
      if (o.scales != nullptr) o.scales[scale_index(b)] = bits_float(kQuietNaNBits);
      for (int k = 16 * b; k < 16 * b + 16; ++k) store_nonfinite(o, index(k));
      continue;
    }
    float inner = 0.0f;
    const BlockScale s = make_double_block_scale(amax_b, outer, &inner);
    if (o.scales != nullptr) o.scales[scale_index(b)] = inner;
    for (int k = 16 * b; k < 16 * b + 16; ++k) {
      const int64_t i = index(k);
      const QuantizedElement e = quantize_element(v[i], s, spec.grid, max_index, spec.rounding, uniform_for(spec, i, cols, o.source_rows));
      o.dequant[i] = e.out;
      if (o.codes != nullptr) o.codes[i] = e.code;
    }
  }
}

void quantize_one(const bf16_t* x, int rows, int cols, const CopyOut& c, unsigned* nonfinite_flag,
                  const int32_t* source_rows, Workspace& workspace, cudaStream_t stream) {
  const QuantSpec& s = c.spec;
  const int64_t n = static_cast<int64_t>(rows) * cols;
  const size_t v_bytes = (static_cast<size_t>(n) * sizeof(float) + 255) / 256 * 256;
  auto* ws = static_cast<unsigned char*>(workspace.get(v_bytes + 256));
  auto* v = reinterpret_cast<float*>(ws);
  auto* amax_bits = reinterpret_cast<unsigned*>(ws + v_bytes);
  auto* ts = reinterpret_cast<TensorScale*>(ws + v_bytes + 16);
  FP4_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream));
  const int64_t n_threads =
      !s.rht ? n : (s.along == BlockAlong::row ? static_cast<int64_t>(rows) * (cols / s.rht_size)
                                               : static_cast<int64_t>(rows / s.rht_size) * cols);
  recipe_transform_kernel<<<std::max(1, ceil_div(n_threads, kRecipeThreads)), kRecipeThreads, 0, stream>>>(
      x, rows, cols, s, v, amax_bits);
  FP4_CUDA_CHECK(cudaGetLastError());
  recipe_scale_kernel<<<1, 1, 0, stream>>>(s, amax_bits, ts, c.amax, c.tensor_scale);
  FP4_CUDA_CHECK(cudaGetLastError());
  const RecipeOut o{c.dequant, c.codes, c.scales, nonfinite_flag, source_rows};
  if (s.ms_eden || s.outer_block != 0) {
    recipe_group_kernel<<<std::max(1, ceil_div(n / kOuterBlock, kRecipeThreads)), kRecipeThreads, 0, stream>>>(
        x, v, rows, cols, s, ts, o);
  } else {
    const int grid_rows = s.tile_2d || s.along == BlockAlong::column ? rows / s.block : rows;
    const int grid_cols = s.tile_2d || s.along == BlockAlong::row ? cols / s.block : cols;
    recipe_block_kernel<<<std::max(1, ceil_div(static_cast<int64_t>(grid_rows) * grid_cols, kRecipeThreads)),
                          kRecipeThreads, 0, stream>>>(x, v, rows, cols, s, ts, o);
  }
  FP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool uses_recipe_options(const QuantSpec& s) {
  return s.four_over_six || s.outer_block != 0 || s.ms_eden || (s.rht && s.rht_size != kRhtSize);
}

void quantize_recipe_copies(const bf16_t* x, int rows, int cols, const CopyOut* row_copy, const CopyOut* col_copy,
                            unsigned* nonfinite_flag, const int32_t* source_rows, Workspace& workspace,
                            cudaStream_t stream) {
  if (row_copy != nullptr) quantize_one(x, rows, cols, *row_copy, nonfinite_flag, source_rows, workspace, stream);
  if (col_copy != nullptr) quantize_one(x, rows, cols, *col_copy, nonfinite_flag, source_rows, workspace, stream);
}

}  // namespace fp4::cuda::detail
