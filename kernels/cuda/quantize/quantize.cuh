// quantize.cuh — fused CUDA quantizers: one read of a bf16 tensor yields every 4-bit copy a linear
// layer needs (the copy blocked along rows and the copy blocked along columns, each with or without
// the RHT, 1D blocks or 2D tiles), plus the tensor amax that two-level (e4m3x2) scales need.
//
// Outputs are bit-identical to the CPU reference, fp4::cpu::quantize (kernels/cpu/quantize.h), and
// use its layouts: dequantized values and codes in the source tensor's row-major layout, scales
// row-major over the block grid ([rows, cols/B] along rows, [rows/B, cols] along columns,
// [rows/B, cols/B] for 2D tiles). Every per-value decision is taken by kernels/numerics.h.
//
// This header is plain C++ on the host side (no CLI11/TOML/SQLite here, nothing nvcc-specific), so
// .cpp files can call the API.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK, Workspace
#include "kernels/numerics.h"

namespace fp4::cuda {

// One quantized copy to produce. All pointers are device memory, 16-byte aligned (cudaMalloc gives
// 256); any of them may be null when that output is not wanted.
struct CopyOut {
  QuantSpec spec;                 // spec.along says which slot of quantize_fused it goes in
  bf16_t* dequant = nullptr;      // [rows, cols]: the GEMM operand (true value = dequant * S_dec)
  uint8_t* codes = nullptr;       // [rows, cols]: sign << 3 | magnitude index, kNonFiniteCode
  float* scales = nullptr;        // the scale grid, row-major; NaN for non-finite blocks
  float* tensor_scale = nullptr;  // one float: S_dec for e4m3x2, 1 otherwise
  float* amax = nullptr;          // one float: max |value| after the RHT over finite values
};

// Quantizes x (bf16 bits, [rows, cols] row-major, device memory) into up to two copies in one pass
// over x (two passes when a copy uses e4m3x2 or asks for its amax: the amax pass comes first; one
// more when the two copies have different block sizes, which need different tile heights).
//   row_copy: spec.along == BlockAlong::row (blocks run along a row), or null;
//   col_copy: spec.along == BlockAlong::column, or null.
// nonfinite_flag (device, may be null) is set to 1 when some block holds a NaN or an infinity; it is
// never cleared here, so one flag can collect a whole step. Asynchronous on `stream`.
// Throws std::invalid_argument (with fp4::cpu::shape_error's message when the shape does not fit a
// spec) before launching anything, and std::runtime_error on a CUDA error.
// source_rows (device, may be null): for a copy whose rows were gathered from a larger tensor (an
// MoE expert's group of tokens), the source row of each row of x, as fp4::cpu::quantize's
// source_rows: the SR draw of element (r, c) is that of index source_rows[r]·cols + c, so the
// random numbers do not depend on the grouping. Blocks, the RHT and the amax run over x's rows.
// groups (may be null): x's rows are several groups' copies at once (an MoE block's expert groups,
// each its own linear's), see GroupStreams; only for copies without docs/recipes.md's options.
struct GroupStreams;
void quantize_fused(const bf16_t* x, int rows, int cols, const CopyOut* row_copy,
                    const CopyOut* col_copy, unsigned* nonfinite_flag, Workspace& workspace,
                    cudaStream_t stream, const int32_t* source_rows = nullptr,
                    const GroupStreams* groups = nullptr);

// Rows of x that belong to different linears' copies: group g holds rows offsets[g] ..
// offsets[g + 1] − 1 and draws its SR uniforms with the Philox stream of its own linear,
// philox_stream_of_linear(the spec's stream, linear_ids[g]): the spec's GEMM, operand and
// micro-step, the group's linear (numerics.h). Then one
// call gives each group's rows the bits of the group's own call, where the copy's blocks never
// straddle two groups (groups padded to whole blocks along a column-blocked axis) and nothing in
// the copy spans the tensor (no e4m3x2 tensor scale). offsets and linear_ids are device arrays of
// count + 1 and count values; offsets[0] = 0 and offsets[count] = rows.
struct GroupStreams {
  const int64_t* offsets = nullptr;
  const uint32_t* linear_ids = nullptr;
  int count = 0;
};

// Whether quantize_fused takes a copy of this spec with groups: the §5 quantizers without a tensor
// scale (no e4m3x2, none of docs/recipes.md's options).
bool groups_quantize_in_one_call(const QuantSpec& spec);

}  // namespace fp4::cuda
