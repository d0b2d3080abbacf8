// quantize_recipes.cuh — the entry points of quantize_recipes.cu inside the quantizer (not part of
// its public API, quantize.cuh): quantize_fused sends docs/recipes.md's options here, and the
// quantizer's [gpu] tests and benchmark call the span path directly on the §5 presets too, to check
// it against the CPU reference and to time it beside the fused kernels on the same specs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/quantize/quantize.cuh"

namespace fp4::cuda::detail {

// Whether a spec uses one of docs/recipes.md's options (Four Over Six, double-block scales,
// MS-EDEN, a 128-wide RHT): such copies take quantize_recipe_copies.
bool uses_recipe_options(const QuantSpec& s);

// The row copy, then the column copy (either may be null), each by the span kernels (1D blocks) or
// the element-and-block kernels (2D tiles): any QuantSpec quantize_fused takes, with its checks
// already made. source_rows: quantize_fused's (may be null).
void quantize_recipe_copies(const bf16_t* x, int rows, int cols, const CopyOut* row_copy, const CopyOut* col_copy,
                            unsigned* nonfinite_flag, const int32_t* source_rows, Workspace& workspace,
                            cudaStream_t stream);

}  // namespace fp4::cuda::detail
