// quantize_recipes.cu — quantize_fused's path for the copies whose spec uses docs/recipes.md's
// options (Four Over Six, TetraJet-v2's double-block scales, Quartet II's MS-EDEN, the 128-wide
// RHT). An MoE expert's group (quantize_fused's source_rows) draws its SR uniforms by the source
// tensor's rows here as in the fused kernels (quantize_kernels.cuh, draw_row).
// Every block runs the same numerics.h calls on the same values in the same order as
// kernels/cpu/quantize.cpp, so the outputs are bit-identical by construction
// (tests/gpu/quantize_test.cpp checks it). Three shapes of kernel:
//   * 1D blocks of 16 or 32 (Four Over Six, keyed or plain): the span kernels, one thread per span
//     of one block along the blocking axis, the RHT recomputed from x in each pass;
//   * 128-spans (the 128-wide RHT, double-block scales, MS-EDEN; blocks of 16): the group kernels,
//     8 lanes per span, the same two passes;
//   * 2D tiles (and 32-blocks under the 128-wide RHT): the element-and-block kernels, written as
//     the reference's three passes:
//     1. the values to round, v = bf16 -> fp32 and the slot's RHT, into the workspace, and the
//        tensor amax over finite |v| (an atomic maximum on the bits of non-negative floats);
//     2. one thread makes the tensor scale (§3's, Four Over Six's 256-aimed one, or 1);
//     3. one thread per tile.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/quantize/quantize_element.cuh"  // BlockQuantizer
#include "kernels/cuda/quantize/quantize_recipes.cuh"
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

// The SR uniforms of N values whose draw indices are consecutive from index0, a multiple of 4 (a
// block along a row: it starts at a multiple of 16 in its row, and cols is a multiple of 16): the
// words of N / 4 whole Philox calls, each call made once (uniform_for makes one per value and keeps
// the value's word of it). The same words, so the same uniforms.
template <int N>
__device__ void consecutive_uniforms(const QuantSpec& s, uint64_t index0, float (&u)[N]) {
  static_assert(N % 4 == 0, "whole Philox calls");
#pragma unroll
  for (int a = 0; a < N / 4; ++a) {
    const Philox4 w = philox_for_elements(s.seed, s.stream, s.step, index0 + 4 * static_cast<uint64_t>(a));
#pragma unroll
    for (int q = 0; q < 4; ++q) u[4 * a + q] = uniform_from_word(w.w[q]);
  }
}

// The SR uniforms of N values down a column, when four lanes of the warp (a quad: member q at
// lane quad_lane(q)) hold the same N rows of columns 4m .. 4m + 3, this lane being member q
// (cols a multiple of 4): the four values of a row across the quad are the four words of one
// Philox call. Member q makes the calls of rows q, q + 4, ... (row_index(k): the draw index of
// row k's value in column 4m), and the words go round the quad: in round r member q reads from
// member (q + r) & 3 the word q of that member's call, which it publishes as its word
// (q' − r) & 3. N / 4 calls a lane instead of N, the same words. Every lane of the warp must call
// this (the shuffles), whatever its span's validity.
template <int N, typename QuadLane, typename RowIndex>
__device__ void quad_column_uniforms(const QuantSpec& s, int q, QuadLane&& quad_lane, RowIndex&& row_index,
                                     float (&u)[N]) {
  static_assert(N % 4 == 0, "whole Philox calls");
  // q is a run-time value: the words and the destinations are chosen by selects over constant
  // indices, so that w and u stay in registers (an index by q would put them in local memory).
#pragma unroll
  for (int a = 0; a < N / 4; ++a) {
    const Philox4 w = philox_for_elements(s.seed, s.stream, s.step, row_index(4 * a + q));
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int from = (q + r) & 3, publish = (q - r) & 3;
      uint32_t mine = w.w[0];
#pragma unroll
      for (int m = 1; m < 4; ++m) mine = publish == m ? w.w[m] : mine;
      const float got = uniform_from_word(__shfl_sync(0xffffffffu, mine, quad_lane(from)));
#pragma unroll
      for (int m = 0; m < 4; ++m) u[4 * a + m] = from == m ? got : u[4 * a + m];
    }
  }
}

__device__ void store_nonfinite(const RecipeOut& o, int64_t i) {
  o.dequant[i] = kBf16QuietNaN;
  if (o.codes != nullptr) o.codes[i] = kNonFiniteCode;
}

// Pass 3: thread u takes block (or tile) u of the scale grid, row-major.
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

// ---------------------------------------------------------------------------------------------
// The span path: 1D blocks of 16 or 32 without a 128-wide option. Thread t takes span t, the L
// consecutive values of one block along the blocking axis, holds them in registers from one read
// of x, and recomputes the RHT in each of its two passes (amax, then quantize) instead of keeping
// the rotated tensor in global memory: a block is a whole number of 16-wide RHT vectors, so it has
// everything its decision reads.
// Along a row a thread reads and writes its span with 16-byte accesses (quantize_fused checks that
// x and the outputs are 16-byte aligned; a span starts at a multiple of 16 values); along a column, thread t
// takes column t % cols, so a warp's accesses to one row are contiguous. Each block runs the same
// numerics.h calls on the same values in the same order as the reference (and the kernels above).
// ---------------------------------------------------------------------------------------------

struct SpanGeometry {
  int rows, cols;
  __host__ __device__ int64_t count(int L, bool along_row) const {
    return along_row ? static_cast<int64_t>(rows) * (cols / L) : static_cast<int64_t>(rows / L) * cols;
  }
};

// Element k of span t in x's row-major layout.
template <int L, bool kAlongRow>
struct Span {
  int64_t first;  // element 0
  int cols;
  __device__ Span(int64_t t, int cols_) : cols(cols_) {
    if (kAlongRow) first = t * L;  // rows are whole spans: span t starts at element t * L
    else first = (t / cols_) * L * static_cast<int64_t>(cols_) + t % cols_;
  }
  __device__ int64_t at(int k) const { return kAlongRow ? first + k : first + static_cast<int64_t>(k) * cols; }
};

// N bf16 values (a multiple of 8, 16-byte aligned) into fp32 with 16-byte loads.
template <int N>
__device__ __forceinline__ void load_packed(const bf16_t* src, float (&v)[N]) {
  static_assert(N % 8 == 0, "load_packed reads whole 16-byte words");
  const uint4* words16 = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int q = 0; q < N / 8; ++q) unpack8(words16[q], v + 8 * q);
}

// A non-finite block's outputs, as the reference's: the flag raised (when `raise`), a NaN scale,
// NaN values and the non-finite code.
template <int N>
__device__ void nonfinite_block(const RecipeOut& o, bool raise, float* scale_out, bf16_t (&out)[N],
                                uint8_t (&code)[N]) {
  if (raise && o.nonfinite_flag != nullptr) atomicOr(o.nonfinite_flag, 1u);
  if (scale_out != nullptr) *scale_out = bits_float(kQuietNaNBits);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = kBf16QuietNaN, code[k] = kNonFiniteCode;
}

// How quantize_block quantizes a finite block's elements, given the block's scale: both give
// quantize_element(v, bs, grid, max_index, rounding, u), element for element.
//   FixedElements<G, R, M>: for one (grid, rounding, scale mode) family, the fused kernels' per-block
//     quantizer (quantize_element.cuh's BlockQuantizer: no index search, a reciprocal per block
//     instead of a division per value; tests/gpu/element_test.cu holds it to quantize_element), and
//     quantize_element itself where that quantizer is not exact (a zero block, an fp32 scale outside
//     its division's range, a multiplier that is not finite). A double-block scale multiplies by
//     its reciprocal like e4m3x2's, so those blocks take the e4m3x2 family; unlike e4m3x2's, that
//     reciprocal is not capped at FLT_MAX, and a subnormal scale (a block of tiny values) makes it
//     +Inf, where 0 · Inf is NaN and the reference's NaN-to-zero rule decides the element.
//   DynElements: quantize_element with the spec's grid and rounding, for a family no kernel
//     instance is made for (with_elements).
template <Grid G, Rounding R, ScaleMode M>
struct FixedElements {
  BlockQuantizer<G, R, M> q;
  bool fast;
  __device__ FixedElements(const QuantSpec&, const BlockScale& bs, int max_index)
      : q(bs, max_index), fast(!bs.zero_block && q.fast() && bs.mul <= FLT_MAX) {}
  __device__ QuantizedElement operator()(float v, float u) const { return fast ? q(v, u) : q.reference(v, u); }

  // The element's signed dequantized value in fp32, before its bf16 rounding: code_value(e.code) ·
  // bs.stored for e = (*this)(v, u) (quantize_element's deq with the sign; (−m) · s = −(m · s)
  // exactly), what Four Over Six's error reads; e.out is its bf16 rounding. Only where
  // values_exact(u): the fast path's result, which needs a fast block (and, for SR with fp32
  // scales, u24 >= 1, as operator() checks).
  // Round to nearest only: under SR the fast Four Over Six path's kernels took about 45 registers
  // more (ptxas), which costs more occupancy than the path saves.
  static constexpr bool kHasValues = R == Rounding::rn;
  __device__ bool values_exact(float u) const {
    return fast && !(BlockQuantizer<G, R, M>::kNeedsNonzeroUniform && u * 16777216.0f < 1.0f);
  }
  __device__ float value(float v, float u) const {
    uint32_t unused = 0;
    return q.template quantize<false>(v, u * 16777216.0f, unused);
  }
};

struct DynElements {
  BlockScale bs;
  Grid grid;
  Rounding rounding;
  int max_index;
  __device__ DynElements(const QuantSpec& spec, const BlockScale& b, int max_idx)
      : bs(b), grid(spec.grid), rounding(spec.rounding), max_index(max_idx) {}
  __device__ QuantizedElement operator()(float v, float u) const {
    return quantize_element(v, bs, grid, max_index, rounding, u);
  }
  static constexpr bool kHasValues = false;  // four_over_six_by_values is for FixedElements only
};

// Four Over Six's choice and outputs for one block whose candidates both take the fast path on
// every element (values_exact): each candidate's signed fp32 values, the squared errors summed as
// four_over_six_picks_four_by sums them (candidate_squared_error's steps: the value times the tensor
// scale's dec, minus v, squared, added in element order, one rounding each), the chosen candidate's
// values rounded to bf16 (quantize_element's out), and its codes only when the caller stores codes
// (its elements quantized again). The same bits as the general path, without each candidate's
// code, the lookup from the code back to its magnitude and the other candidate's bf16 rounding.
// Returns false, touching nothing, when some element would leave the fast path.
template <class Elements, int N>
__device__ bool four_over_six_by_values(const float (&v)[N], const float (&u)[N], float dec, const Elements& element6,
                                        const Elements& element4, bool codes, bool& four, bf16_t (&out)[N],
                                        uint8_t (&code)[N]) {
  bool exact = true;
#pragma unroll
  for (int k = 0; k < N; ++k) exact = exact && element6.values_exact(u[k]) && element4.values_exact(u[k]);
  if (!exact) return false;
  float err6 = 0.0f, err4 = 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float d6 = __fsub_rn(__fmul_rn(element6.value(v[k], u[k]), dec), v[k]);
    const float d4 = __fsub_rn(__fmul_rn(element4.value(v[k], u[k]), dec), v[k]);
    err6 = __fadd_rn(err6, __fmul_rn(d6, d6));
    err4 = __fadd_rn(err4, __fmul_rn(d4, d4));
  }
  four = err4 < err6;
  // The chosen candidate's values again (holding both candidates' 2N values across the sums would
  // cost registers, and occupancy, more than the N recomputed values).
  if (four) {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = hw_float_to_bf16(element4.value(v[k], u[k]));
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = hw_float_to_bf16(element6.value(v[k], u[k]));
  }
#pragma unroll
  for (int k = 0; k < N; ++k) code[k] = 0;
  if (codes) {
#pragma unroll
    for (int k = 0; k < N; ++k) code[k] = four ? element4(v[k], u[k]).code : element6(v[k], u[k]).code;
  }
  return true;
}

// One 1D block of N values, as the reference quantizes a block: its finiteness (bad: bit k set
// where element k's source is not finite) and amax, its scale (§3's, or TetraJet-v2's double-block
// scale under the span's outer scale `outer`), Four Over Six's choice between two scales, then its
// values with the uniforms u (SR; zeros under RN). A non-finite block raises the flag when
// `raise`, and gets a NaN scale, NaN values and the non-finite code.
// Elements: FixedElements or DynElements, for the spec's family.
template <class Elements, int N>
__device__ void quantize_block(const float (&v)[N], uint32_t bad, const QuantSpec& spec, const TensorScale& ts,
                               float outer, const float (&u)[N], const RecipeOut& o, bool raise, float* scale_out,
                               bf16_t (&out)[N], uint8_t (&code)[N]) {
  bool finite = bad == 0;
  float amax_b = 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (!is_finite(v[k])) finite = false;
    const float a = abs_f(v[k]);
    if (a > amax_b) amax_b = a;
  }
  if (!finite) {
    nonfinite_block(o, raise, scale_out, out, code);
    return;
  }
  const int max_index = spec_max_index(spec);
  BlockScale bs;
  float stored;
  if (spec.outer_block != 0) {
    bs = make_double_block_scale(amax_b, outer, &stored);
  } else {
    bs = make_block_scale(spec.scale, amax_b, spec.gmax, ts);
    stored = bs.stored;
  }
  QuantizedElement e6[N], e4[N];
  bool four = false;
  const Elements element6(spec, bs, max_index);
  if (spec.four_over_six) {
    const BlockScale s4 = make_block_scale(spec.scale, amax_b, kFourOverSixLowMax, ts);
    const Elements element4(spec, s4, max_index);
    if constexpr (Elements::kHasValues) {
      if (four_over_six_by_values(v, u, ts.dec, element6, element4, o.codes != nullptr, four, out, code)) {
        if (scale_out != nullptr) *scale_out = four ? s4.stored : stored;
        return;
      }
    }
    // Both candidates' elements come from the comparison: the chosen candidate's are the outputs.
    four = four_over_six_picks_four_by(v, u, N, bs, s4, ts.dec, spec.grid, spec.rounding, element6, element4, e6, e4);
    if (four) stored = s4.stored;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) e6[k] = element6(v[k], u[k]);
  }
  if (scale_out != nullptr) *scale_out = stored;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const QuantizedElement e = four ? e4[k] : e6[k];
    out[k] = e.out;
    code[k] = e.code;
  }
}

// Loads span s of x into v (fp32) and marks the elements whose source is not finite in bad (bit k
// of word k / 32); then the slot's RHT over each of the span's vectors.
template <int L, bool kAlongRow>
__device__ void load_span(const bf16_t* x, const Span<L, kAlongRow>& s, const QuantSpec& spec, float (&v)[L],
                          uint32_t (&bad)[(L + 31) / 32]) {
#pragma unroll
  for (int w = 0; w < (L + 31) / 32; ++w) bad[w] = 0;
  if constexpr (kAlongRow) {
    load_packed(x + s.first, v);
  } else {
#pragma unroll
    for (int k = 0; k < L; ++k) v[k] = bf16_to_float(x[s.at(k)]);
  }
#pragma unroll
  for (int k = 0; k < L; ++k)
    if (!is_finite(v[k])) bad[k / 32] |= 1u << (k % 32);
  if (!spec.rht) return;
#pragma unroll
  for (int q = 0; q < L / kRhtSize; ++q) rht16(v + kRhtSize * q, spec.rht_signs);
}

template <int L, bool kAlongRow>
__global__ void __launch_bounds__(kRecipeThreads) span_amax_kernel(const bf16_t* x, const SpanGeometry g,
                                                                   const QuantSpec spec, unsigned* amax_bits) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float local = 0.0f;
  if (t < g.count(L, kAlongRow)) {
    const Span<L, kAlongRow> s(t, g.cols);
    float v[L];
    uint32_t bad[(L + 31) / 32];
    load_span<L, kAlongRow>(x, s, spec, v, bad);
#pragma unroll
    for (int k = 0; k < L; ++k) {
      const float a = abs_f(v[k]);
      if (is_finite(a) && a > local) local = a;
    }
  }
  // Non-negative floats order as their bits: the maximum is exact and independent of the order.
  const unsigned m = __reduce_max_sync(0xffffffffu, float_bits(local));
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(amax_bits, m);
}

// Where block j (of `block` values, from element j * block of the span) puts its scale.
template <int L, bool kAlongRow>
__device__ int64_t span_scale_index(const Span<L, kAlongRow>& s, int j, int block) {
  const int64_t i0 = s.at(j * block);
  const int64_t r = i0 / s.cols, c = i0 % s.cols;
  return kAlongRow ? r * (s.cols / block) + c / block : (r / block) * s.cols + c;
}

// Stores n values of 1 or 2 bytes (codes, bf16) to dst with 16-byte stores, little-endian as the
// array lies in memory: value k of a 16-byte word in its bytes k·size onward.
template <typename T, int N>
__device__ __forceinline__ void store_packed(uint4* dst, const T (&values)[N]) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "store_packed takes 1- or 2-byte values");
  constexpr int kPerWord = 4 / sizeof(T), kPerStore = 16 / sizeof(T);
  static_assert(N % kPerStore == 0, "store_packed stores whole 16-byte words");
#pragma unroll
  for (int q = 0; q < N / kPerStore; ++q) {
    uint32_t w[4];
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      w[h] = 0;
#pragma unroll
      for (int e = 0; e < kPerWord; ++e)
        w[h] |= static_cast<uint32_t>(values[kPerStore * q + kPerWord * h + e]) << (8 * sizeof(T) * e);
    }
    dst[q] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <int L, bool kAlongRow, class Elements>
__global__ void __launch_bounds__(kRecipeThreads) span_quantize_kernel(const bf16_t* x, const SpanGeometry g,
                                                                       const QuantSpec spec,
                                                                       const TensorScale* ts_ptr, RecipeOut o) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t count = g.count(L, kAlongRow);
  // A column copy's SR shares Philox calls across a quad of lanes (quad_column_uniforms), so every
  // lane of a warp stays to the shuffles; a lane past the end takes the values of span t % 4 (a
  // quad of spans like its own: count is a multiple of 4) and stores nothing. With cols a multiple
  // of 4 a quad's spans are all valid or all past the end.
  const bool quad_sr = !kAlongRow && spec.rounding == Rounding::sr && g.cols % 4 == 0;
  const bool valid = t < count;
  if (!valid && (!quad_sr || count == 0)) return;
  const Span<L, kAlongRow> s(valid ? t : (t & 3), g.cols);
  float v[L];
  uint32_t bad[(L + 31) / 32];
  load_span<L, kAlongRow>(x, s, spec, v, bad);
  float u[L] = {};
  if (spec.rounding == Rounding::sr) {
    if constexpr (kAlongRow) {
      consecutive_uniforms<L>(spec, draw_index(s.first, g.cols, o.source_rows), u);
    } else if (quad_sr) {
      const int q = static_cast<int>(threadIdx.x & 3);  // t % 4 = the column % 4 (blockDim.x is a multiple of 4)
      quad_column_uniforms<L>(
          spec, q, [](int m) { return static_cast<int>(threadIdx.x & 31 & ~3) + m; },
          [&](int k) { return draw_index(s.at(k) - q, g.cols, o.source_rows); }, u);
    } else {
#pragma unroll
      for (int k = 0; k < L; ++k) u[k] = uniform_for(spec, s.at(k), g.cols, o.source_rows);
    }
  }
  if (!valid) return;
  bf16_t out[L];
  uint8_t code[L];
  const TensorScale ts = *ts_ptr;
  // The span is one block (span_length).
  float* scale_out = o.scales != nullptr ? &o.scales[span_scale_index(s, 0, L)] : nullptr;
  quantize_block<Elements>(v, bad[0], spec, ts, 0.0f, u, o, true, scale_out, out, code);

  if constexpr (kAlongRow) {
    store_packed(reinterpret_cast<uint4*>(o.dequant + s.first), out);
    if (o.codes != nullptr) store_packed(reinterpret_cast<uint4*>(o.codes + s.first), code);
  } else {
#pragma unroll
    for (int k = 0; k < L; ++k) {
      o.dequant[s.at(k)] = out[k];
      if (o.codes != nullptr) o.codes[s.at(k)] = code[k];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The group path: 128-spans (the 128-wide RHT, TetraJet-v2's double-block scales, MS-EDEN). A
// 128-span is too long for one thread's registers, so 8 lanes of a warp share it, lane j holding
// its 16-value block j (a warp holds 4 spans, a CTA 32). What crosses blocks goes through the
// group's lanes by shuffles, with every floating-point operation of the reference in the
// reference's order: the 128-wide RHT's stages h = 16, 32, 64 pair lane j with lane j ^ (h / 16)
// (each butterfly is the reference's a + b or a − b of the same two values); the double-block and
// the tensor maxima are maxima (exact in any order); MS-EDEN's two sums run through the 8 lanes in
// block order, each lane adding its 16 terms to the running sums it receives. Along a row a span is
// 128 contiguous values, which lane j reads and writes as 2 + 2 16-byte accesses; along a column the
// CTA stages its 32 spans through shared memory, so that global reads and writes run along rows.
// ---------------------------------------------------------------------------------------------

constexpr int kGroupLanes = kMsEdenGroup / 16;              // 8: lanes per 128-span
constexpr int kGroupThreads = 256;                          // a CTA
constexpr int kGroupSpans = kGroupThreads / kGroupLanes;    // 32 spans per CTA
constexpr int kStagePitch = kMsEdenGroup + 2;  // bf16 per staged span: an odd word pitch, no bank conflicts
static_assert(kGroupLanes == 8 && kGroupThreads == 256, "the group path's shape");

// The column path's staging: thread i of the CTA moves span i % kGroupSpans (of the CTA's
// kGroupSpans), elements i / kGroupSpans + kStageRows · r, between global memory and the stage.
constexpr int kStageRows = kGroupThreads / kGroupSpans;  // 8 rows of the spans a pass of the CTA
static_assert(kGroupThreads % kGroupSpans == 0 && kMsEdenGroup % kStageRows == 0, "the staging's shape");
struct StagedColumn {
  int s, k0;
  bool valid;
  int64_t first;  // element 0 of the span in x's layout
  __device__ explicit StagedColumn(const SpanGeometry& g) {
    s = static_cast<int>(threadIdx.x) % kGroupSpans;
    k0 = static_cast<int>(threadIdx.x) / kGroupSpans;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kGroupSpans + s;
    valid = t < g.count(kMsEdenGroup, false);
    first = valid ? Span<kMsEdenGroup, false>(t, g.cols).first : 0;
  }
};

// Where this thread sits: span t (its CTA's span s) and block j of it.
struct GroupLane {
  int s, j;
  int64_t t;
  bool valid;  // span t exists; an invalid group runs the shuffles on zeros and stores nothing
  __device__ GroupLane(int64_t count) {
    s = static_cast<int>(threadIdx.x) / kGroupLanes;
    j = static_cast<int>(threadIdx.x) % kGroupLanes;
    t = static_cast<int64_t>(blockIdx.x) * kGroupSpans + s;
    valid = t < count;
  }
};

// The warp lane of this span's block 0: its group is that lane and the 7 after it.
__device__ __forceinline__ int group_first_lane() { return static_cast<int>(threadIdx.x) & 31 & ~(kGroupLanes - 1); }

template <typename T>
__device__ __forceinline__ T group_max(T v) {
#pragma unroll
  for (int o = 1; o < kGroupLanes; o <<= 1) {
    const T p = __shfl_xor_sync(0xffffffffu, v, o);
    v = p > v ? p : v;
  }
  return v;
}

__device__ __forceinline__ bool group_all(bool b) {
  // The 8 lanes of a group are 8 aligned bits of the warp's ballot.
  const unsigned ballot = __ballot_sync(0xffffffffu, b);
  return ((ballot >> group_first_lane()) & 0xffu) == 0xffu;
}

// Loads block j of span t into v (fp32), marks the elements whose source is not finite in bad (bit
// k), then the slot's RHT: 16-wide over the block, or 128-wide over the span with the group. stage:
// the CTA's shared buffer (kGroupSpans × kStagePitch bf16), used along a column.
template <bool kAlongRow>
__device__ void load_group(const bf16_t* x, const SpanGeometry& g, const GroupLane& gl, const QuantSpec& spec,
                           bf16_t* stage, float (&v)[16], uint32_t& bad) {
  if constexpr (kAlongRow) {
    if (gl.valid) {
      load_packed(x + gl.t * kMsEdenGroup + 16 * gl.j, v);
    } else {
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = 0.0f;
    }
  } else {
    // Element k of the CTA's span s at stage[s * kStagePitch + k]; the threads of a warp read one
    // row of 32 consecutive spans (columns) at a time. Thread i stages span i % kGroupSpans, rows
    // i / kGroupSpans + kStageRows · r: its span's place is worked out once, and its 16 loads are
    // independent (unrolled), so they are in flight together.
    const StagedColumn c(g);
#pragma unroll
    for (int r = 0; r < kMsEdenGroup / kStageRows; ++r) {
      const int k = c.k0 + kStageRows * r;
      stage[c.s * kStagePitch + k] = c.valid ? x[c.first + k * static_cast<int64_t>(g.cols)] : bf16_t{0};
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = bf16_to_float(stage[gl.s * kStagePitch + 16 * gl.j + k]);
    __syncthreads();  // the buffer is written again by the stores
  }
  bad = 0;
#pragma unroll
  for (int k = 0; k < 16; ++k)
    if (!is_finite(v[k])) bad |= 1u << k;
  if (!spec.rht) return;
  if (spec.rht_size != kRhtWideSize) {
    rht16(v, spec.rht_signs);
    return;
  }
  // rht128 (numerics.h) over the group. Lane j's element k is the span's element 16j + k, so its
  // signs are bits 16j.. of the 128-bit vector and its stages h = 1..8 are fwht16_signed's own;
  // stages h = 16, 32, 64 pair it with lane j ^ (h / 16); then the norm.
  fwht16_signed(v, static_cast<uint16_t>(spec.rht_wide_signs[gl.j / 2] >> (16 * (gl.j % 2))));
#pragma unroll
  for (int hl = 1; hl < kGroupLanes; hl <<= 1) {
    const bool upper = (gl.j & hl) != 0;  // this lane holds the v[i + h] of each pair
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float p = __shfl_xor_sync(0xffffffffu, v[k], hl);
      v[k] = upper ? p - v[k] : v[k] + p;
    }
  }
#pragma unroll
  for (int k = 0; k < 16; ++k) v[k] = v[k] * kRhtWideNorm;
}

template <bool kAlongRow>
__global__ void __launch_bounds__(kGroupThreads) group_amax_kernel(const bf16_t* x, const SpanGeometry g,
                                                                   const QuantSpec spec, unsigned* amax_bits) {
  __shared__ bf16_t stage[kAlongRow ? 1 : kGroupSpans * kStagePitch];
  const GroupLane gl(g.count(kMsEdenGroup, kAlongRow));
  float v[16];
  uint32_t bad;
  load_group<kAlongRow>(x, g, gl, spec, stage, v, bad);
  float local = 0.0f;
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const float a = abs_f(v[k]);
    if (gl.valid && is_finite(a) && a > local) local = a;
  }
  // Non-negative floats order as their bits: the maximum is exact and independent of the order.
  const unsigned m = __reduce_max_sync(0xffffffffu, float_bits(local));
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(amax_bits, m);
}

// MS-EDEN over the group's span, as the reference's quantize_ms_eden and ms_eden_group: a span with
// a non-finite source or rotated value is non-finite whole; else each block's scale, its values'
// magnitudes and the two sums in block order, the correction, and each block's scale rounded
// stochastically by the draw of the block's first element.
template <bool kAlongRow>
__device__ void ms_eden_block(const Span<kMsEdenGroup, kAlongRow>& s, const GroupLane& gl, const float (&v)[16],
                              uint32_t bad, const QuantSpec& spec, float s_dec, int cols, const RecipeOut& o,
                              bf16_t (&out)[16], uint8_t (&code)[16]) {
  bool finite = bad == 0;
#pragma unroll
  for (int k = 0; k < 16; ++k) finite = finite && is_finite(v[k]);
  finite = group_all(finite);
  // A non-finite span still runs the sums' shuffles below (every lane of the warp must): its
  // numbers are discarded at the end.
  uint8_t mag[16];
  float tt[16], tq[16];
  const float block_scale = ms_eden_block_terms(v, s_dec, mag, tt, tq);
  // The sums in the reference's order: block 0's 16 terms, then block 1's, ...; lane b adds its
  // terms to the sums of blocks 0..b-1, and every lane receives the sums after block b.
  float num = 0.0f, den = 0.0f;
#pragma unroll
  for (int b = 0; b < kGroupLanes; ++b) {
    if (gl.j == b) {
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        num = num + tt[k];
        den = den + tq[k];
      }
    }
    num = __shfl_sync(0xffffffffu, num, group_first_lane() + b);
    den = __shfl_sync(0xffffffffu, den, group_first_lane() + b);
  }
  const float correction = den == 0.0f ? 1.0f : num / den;
  const float corrected = block_scale * correction;
  const float u = uniform_from_word(
      philox_word_for_element(spec.seed, spec.stream, spec.step, draw_index(s.at(16 * gl.j), cols, o.source_rows)));
  const float scale = e4m3_stochastic(corrected, u);
  float* scale_out = o.scales != nullptr && gl.valid ? &o.scales[span_scale_index(s, gl.j, 16)] : nullptr;
  if (!finite) {
    nonfinite_block(o, gl.valid, scale_out, out, code);
    return;
  }
  if (scale_out != nullptr) *scale_out = scale;
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const QuantizedElement e = ms_eden_element(v[k], mag[k], scale);
    out[k] = e.out;
    code[k] = e.code;
  }
}

template <bool kAlongRow, class Elements>
__global__ void __launch_bounds__(kGroupThreads) group_quantize_kernel(const bf16_t* x, const SpanGeometry g,
                                                                       const QuantSpec spec,
                                                                       const TensorScale* ts_ptr, RecipeOut o) {
  __shared__ bf16_t stage[kAlongRow ? 1 : kGroupSpans * kStagePitch];
  const GroupLane gl(g.count(kMsEdenGroup, kAlongRow));
  const Span<kMsEdenGroup, kAlongRow> s(gl.valid ? gl.t : 0, g.cols);
  float v[16];
  uint32_t bad;
  load_group<kAlongRow>(x, g, gl, spec, stage, v, bad);
  const TensorScale ts = *ts_ptr;
  bf16_t out[16];
  uint8_t code[16];
  if (spec.ms_eden) {
    ms_eden_block(s, gl, v, bad, spec, ts.dec, g.cols, o, out, code);
  } else {
    // Double-block scales: the span is the 128-group; its outer scale over its finite values.
    float outer = 0.0f;
    if (spec.outer_block != 0) {
      float amax_o = 0.0f;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const float a = abs_f(v[k]);
        if (is_finite(a) && a > amax_o) amax_o = a;
      }
      outer = double_block_outer_scale(group_max(amax_o));
    }
    // The SR uniforms of this lane's block: along a row 16 consecutive draws; along a column the
    // warp's 4 spans are 4 consecutive columns (a CTA's spans start at a multiple of 32), so lane j
    // of the 4 groups (lanes j, j + 8, j + 16, j + 24) form a quad (cols a multiple of 4; then a
    // quad's spans are all valid or all not, and the shuffles run on every lane either way).
    float u[16] = {};
    if (spec.rounding == Rounding::sr) {
      if constexpr (kAlongRow) {
        consecutive_uniforms<16>(spec, draw_index(s.at(16 * gl.j), g.cols, o.source_rows), u);
      } else if (g.cols % 4 == 0) {
        const int q = static_cast<int>((threadIdx.x & 31) / kGroupLanes);  // the span's column % 4
        quad_column_uniforms<16>(
            spec, q, [&](int m) { return m * kGroupLanes + gl.j; },
            [&](int k) { return draw_index(s.at(16 * gl.j + k) - q, g.cols, o.source_rows); }, u);
      } else {
#pragma unroll
        for (int k = 0; k < 16; ++k) u[k] = gl.valid ? uniform_for(spec, s.at(16 * gl.j + k), g.cols, o.source_rows) : 0.0f;
      }
    }
    float* scale_out = o.scales != nullptr && gl.valid ? &o.scales[span_scale_index(s, gl.j, 16)] : nullptr;
    quantize_block<Elements>(v, bad, spec, ts, outer, u, o, gl.valid, scale_out, out, code);
  }

  if constexpr (kAlongRow) {
    if (!gl.valid) return;
    const int64_t first = gl.t * kMsEdenGroup + 16 * gl.j;
    store_packed(reinterpret_cast<uint4*>(o.dequant + first), out);
    if (o.codes != nullptr) store_packed(reinterpret_cast<uint4*>(o.codes + first), code);
  } else {
    __shared__ uint8_t stage_codes[kGroupSpans * kStagePitch];
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      stage[gl.s * kStagePitch + 16 * gl.j + k] = out[k];
      stage_codes[gl.s * kStagePitch + 16 * gl.j + k] = code[k];
    }
    __syncthreads();
    const StagedColumn c(g);
    if (!c.valid) return;
#pragma unroll
    for (int r = 0; r < kMsEdenGroup / kStageRows; ++r) {
      const int k = c.k0 + kStageRows * r;
      const int64_t i = c.first + k * static_cast<int64_t>(g.cols);
      o.dequant[i] = stage[c.s * kStagePitch + k];
      if (o.codes != nullptr) o.codes[i] = stage_codes[c.s * kStagePitch + k];
    }
  }
}

// The span length of a copy: 16 or 32 (the span kernels), 128 (the group kernels), or 0 for the
// element-and-block kernels (2D tiles, and blocks of 32 under the 128-wide options: a group's
// lanes hold blocks of 16).
int span_length(const QuantSpec& s) {
  if (s.tile_2d) return 0;
  if (s.ms_eden || s.outer_block != 0 || (s.rht && s.rht_size == kRhtWideSize)) return s.block == 16 ? 128 : 0;
  return s.block;  // 16 or 32; a 16-wide RHT's vectors fit in it
}

// Calls f.template operator()<Elements>() with the FixedElements of the spec's family where kernel
// instances are made for it, else DynElements. Instances are made for the families that
// docs/recipes.md's options use (blocks of 16 on e2m1 with fp32 or e4m3x2 scales, either rounding:
// Four Over Six, TetraJet-v2, Quartet II, the 128-wide RHT); every instance is a copy of the kernel
// in the binary, so the §5 presets, which take the span path only in tests and the benchmark,
// keep DynElements.
template <Grid G, ScaleMode M, class F>
void with_rounding(const QuantSpec& s, F&& f) {
  if (s.rounding == Rounding::sr) f.template operator()<FixedElements<G, Rounding::sr, M>>();
  else f.template operator()<FixedElements<G, Rounding::rn, M>>();
}

template <int B, class F>
void with_elements(const QuantSpec& s, F&& f) {
  if constexpr (B == 16) {
    if (s.grid == Grid::e2m1 && s.scale == ScaleMode::fp32) return with_rounding<Grid::e2m1, ScaleMode::fp32>(s, f);
    if (s.grid == Grid::e2m1 && s.scale == ScaleMode::e4m3x2) return with_rounding<Grid::e2m1, ScaleMode::e4m3x2>(s, f);
  }
  f.template operator()<DynElements>();
}

template <int L, bool kAlongRow>
void launch_span(const bf16_t* x, int rows, int cols, const CopyOut& c, bool want_amax, unsigned* amax_bits,
                 TensorScale* ts, const RecipeOut& o, cudaStream_t stream) {
  const SpanGeometry g{rows, cols};
  const int blocks = std::max(1, ceil_div(g.count(L, kAlongRow), kRecipeThreads));
  if (want_amax) {
    span_amax_kernel<L, kAlongRow><<<blocks, kRecipeThreads, 0, stream>>>(x, g, c.spec, amax_bits);
    FP4_CUDA_CHECK(cudaGetLastError());
  }
  recipe_scale_kernel<<<1, 1, 0, stream>>>(c.spec, amax_bits, ts, c.amax, c.tensor_scale);
  FP4_CUDA_CHECK(cudaGetLastError());
  with_elements<L>(c.spec, [&]<class Elements>() {
    span_quantize_kernel<L, kAlongRow, Elements><<<blocks, kRecipeThreads, 0, stream>>>(x, g, c.spec, ts, o);
  });
  FP4_CUDA_CHECK(cudaGetLastError());
}

template <bool kAlongRow>
void launch_group(const bf16_t* x, int rows, int cols, const CopyOut& c, bool want_amax, unsigned* amax_bits,
                  TensorScale* ts, const RecipeOut& o, cudaStream_t stream) {
  const SpanGeometry g{rows, cols};
  const int blocks = std::max(1, ceil_div(g.count(kMsEdenGroup, kAlongRow), kGroupSpans));
  if (want_amax) {
    group_amax_kernel<kAlongRow><<<blocks, kGroupThreads, 0, stream>>>(x, g, c.spec, amax_bits);
    FP4_CUDA_CHECK(cudaGetLastError());
  }
  recipe_scale_kernel<<<1, 1, 0, stream>>>(c.spec, amax_bits, ts, c.amax, c.tensor_scale);
  FP4_CUDA_CHECK(cudaGetLastError());
  with_elements<16>(c.spec, [&]<class Elements>() {  // a group lane's block: 16 values
    group_quantize_kernel<kAlongRow, Elements><<<blocks, kGroupThreads, 0, stream>>>(x, g, c.spec, ts, o);
  });
  FP4_CUDA_CHECK(cudaGetLastError());
}

template <int L>
void launch_span_of(const bf16_t* x, int rows, int cols, const CopyOut& c, bool want_amax, unsigned* amax_bits,
                    TensorScale* ts, const RecipeOut& o, cudaStream_t stream) {
  if (c.spec.along == BlockAlong::row) launch_span<L, true>(x, rows, cols, c, want_amax, amax_bits, ts, o, stream);
  else launch_span<L, false>(x, rows, cols, c, want_amax, amax_bits, ts, o, stream);
}

void quantize_one(const bf16_t* x, int rows, int cols, const CopyOut& c, unsigned* nonfinite_flag,
                  const int32_t* source_rows, Workspace& workspace, cudaStream_t stream) {
  const QuantSpec& s = c.spec;
  const RecipeOut o{c.dequant, c.codes, c.scales, nonfinite_flag, source_rows};
  const int span = span_length(s);
  if (span != 0) {
    auto* ws = static_cast<unsigned char*>(workspace.get(256));
    auto* amax_bits = reinterpret_cast<unsigned*>(ws);
    auto* ts = reinterpret_cast<TensorScale*>(ws + 16);
    FP4_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream));
    // The tensor amax is read by MS-EDEN's and e4m3x2's tensor scales, and by a caller that asks.
    const bool want_amax =
        s.ms_eden || (s.scale == ScaleMode::e4m3x2 && s.outer_block == 0) || c.amax != nullptr;
    if (span == 16) launch_span_of<16>(x, rows, cols, c, want_amax, amax_bits, ts, o, stream);
    else if (span == 32) launch_span_of<32>(x, rows, cols, c, want_amax, amax_bits, ts, o, stream);
    else if (c.spec.along == BlockAlong::row) launch_group<true>(x, rows, cols, c, want_amax, amax_bits, ts, o, stream);
    else launch_group<false>(x, rows, cols, c, want_amax, amax_bits, ts, o, stream);
    return;
  }
  // The rest: the rotated values through the workspace, then one thread per block or tile.
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
  const int grid_rows = s.tile_2d || s.along == BlockAlong::column ? rows / s.block : rows;
  const int grid_cols = s.tile_2d || s.along == BlockAlong::row ? cols / s.block : cols;
  recipe_block_kernel<<<std::max(1, ceil_div(static_cast<int64_t>(grid_rows) * grid_cols, kRecipeThreads)),
                        kRecipeThreads, 0, stream>>>(x, v, rows, cols, s, ts, o);
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
