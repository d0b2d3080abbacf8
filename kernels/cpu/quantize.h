// quantize.h — the reference quantizer: a bf16 tensor [rows, cols] into one operand slot.
//
// This is the plain, readable statement of NUMERICS.md §2–4 and §6 over a whole tensor; the CUDA
// kernels are held to it bit for bit. Every per-value decision is taken by kernels/numerics.h, so
// this file only decides which values form a block, in which order, and where results go.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/numerics.h"

namespace fp4::cpu {

// One quantized copy of a tensor.
//
// Layouts: `dequant`, `codes` and `transformed` are in the source tensor's row-major layout
// [rows, cols], whatever the blocking direction. `scales` holds one value per block, row-major over
// the block grid: [rows, cols/B] for BlockAlong::row, [rows/B, cols] for BlockAlong::column, and
// [rows/B, cols/B] for 16x16 (BxB) tiles.
struct QuantizedTensor {
  int rows = 0, cols = 0;
  QuantSpec spec;
  std::vector<bf16_t> dequant;     // the GEMM operand; true value = dequant * tensor_scale
  std::vector<uint8_t> codes;      // sign << 3 | magnitude index; kNonFiniteCode in non-finite blocks
  std::vector<float> scales;       // stored block scales (fp32 s, E4M3 value, or 2^e); NaN if non-finite
  std::vector<float> transformed;  // the values that were rounded (after the RHT), if asked for
  // Double-block scales (spec.outer_block = 128) only: the fp32 scale of every 128 values along the
  // blocking axis, row-major over their grid ([rows, cols/128] or [rows/128, cols]).
  std::vector<float> outer_scales;
  float amax = 0.0f;               // max |value| after the RHT over finite values (e4m3x2's amax_t)
  float tensor_scale = 1.0f;       // S_dec for e4m3x2, 1 otherwise
  bool nonfinite = false;          // some block held a NaN or an infinity
};

// Number of blocks along each axis of the scale grid for a given shape and spec.
struct ScaleGrid {
  int rows = 0, cols = 0;
};
ScaleGrid scale_grid(int rows, int cols, const QuantSpec& spec);

// Empty when the spec's options fit together (docs/recipes.md: Four Over Six on the full e2m1 grid
// with fp32 or e4m3x2 scales; double-block and MS-EDEN on e4m3x2 1x16 blocks; MS-EDEN with its
// 128-wide RHT); otherwise one line naming the conflict.
std::string spec_error(const QuantSpec& spec);

// What the length of the blocking axis must be a multiple of: the block size, or 128 where the
// 128-wide RHT or double-block scales group 128 values (shape_error says so when it is not).
int axis_multiple(const QuantSpec& spec);

// Whether each block's copy depends on that block's values alone: round to nearest (SR draws are
// keyed by the tensor's site and rows), no tensor-wide scale (e4m3x2 and MS-EDEN scale by the
// tensor's amax). Then groups of rows stacked in one tensor (each padded to whole multiples of
// axis_multiple along a column-blocked axis) quantize in one call to the bits of each group's own
// call: the CUDA MoE blocks quantize all expert groups at once where this holds.
bool blocks_quantize_alone(const QuantSpec& spec);

// Empty when the shape and spec fit together; otherwise one line saying which dimension is not a
// multiple of what (the caller adds where the shape came from).
std::string shape_error(int rows, int cols, const QuantSpec& spec);

// Quantizes x (bf16 bits, [rows, cols] row-major). Throws std::invalid_argument with the message of
// shape_error() when the shape does not fit the spec.
//
// source_rows: null, or one entry per row of x saying which row of the source tensor it is, for
// a copy whose rows were gathered from a larger tensor (an MoE expert's group of tokens:
// docs/model.md). The SR draw of element (r, c) is then that of element index
// source_rows[r]·cols + c (NUMERICS.md §6: "the element index is the row-major index in the source
// tensor"), so the random numbers do not depend on which rows were gathered together. Blocks, the
// RHT and the amax still run over x's own rows.
QuantizedTensor quantize(const bf16_t* x, int rows, int cols, const QuantSpec& spec,
                         bool keep_transformed = false, const int32_t* source_rows = nullptr);

}  // namespace fp4::cpu
