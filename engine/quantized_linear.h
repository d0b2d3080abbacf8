// quantized_linear.h — one linear layer's three training GEMMs under a recipe (NUMERICS.md §1).
//
//   fprop  Y  = X · Wᵀ     X [T,K] blocked along K,  W [N,K] blocked along K
//   dgrad  dX = dY · W     dY [T,N] blocked along N, W [N,K] blocked along N
//   wgrad  dW = dYᵀ · X    dY [T,N] blocked along T, X [T,K] blocked along T
//
// Each slot is quantized from the bf16 tensor (never from another quantized copy) by the CPU
// reference quantizer, and the product runs in fp32 on the dequantized operands, scaled by the
// two tensor scales (e4m3x2) as the GEMM's alpha. The backward pass is straight-through: each
// quantizer counts as the identity for the gradient, and the quantized copies are exactly the
// operands of the table above. A bf16 recipe, or a block listed in bf16_layers, multiplies the
// bf16 operands directly.
#pragma once

#include <array>
#include <cstdint>

#include "engine/recipe.h"
#include "kernels/cpu/quant_metrics.h"
#include "kernels/cpu/quantize.h"

namespace fp4::engine {

// Where a linear layer sits, for its random numbers: SR streams and RHT sign vectors.
struct LinearSite {
  const Recipe* recipe = nullptr;
  bool keep_bf16 = false;     // this block is in the recipe's bf16_layers
  uint32_t linear_id = 0;     // linear_site(block, position) (base/linear_sites.h)
  uint64_t seed = 0;          // the run seed
  uint32_t step = 0;          // optimizer step
  uint32_t micro_step = 0;    // micro-step within the step (gradient accumulation)
  // Null for a dense linear. For an MoE expert, whose X and dY rows are its group of the
  // micro-batch's tokens: the token (row of the micro-batch) each row is, so that the SR draws of
  // the X and dY slots are the token's, whatever group it sits in (cpu::quantize's source_rows).
  const int32_t* source_rows = nullptr;
};

bool site_is_quantized(const LinearSite& site);

// One quantized slot of one block linear as the shrinkage probe measured it (NUMERICS.md §8), on
// either backend.
struct ProbedSlot {
  uint32_t linear_id = 0;     // the site
  Slot slot = Slot::fprop_x;
  cpu::QuantMetrics metrics;
};

// The QuantSpec of one slot at one site, seed, stream, step and RHT signs filled in. Weight slots
// draw with micro-step 0: the weight is the same tensor for every micro-step of a step.
QuantSpec site_slot_spec(const LinearSite& site, Slot slot);

// Quantizes one slot's operand (bf16 [rows, cols]) for this site.
cpu::QuantizedTensor quantize_slot(const LinearSite& site, Slot slot, const bf16_t* t, int rows,
                                   int cols, bool keep_transformed = false);

// Y[T,N] (fp32) = X[T,K] · W[N,K]ᵀ. Returns false when a quantizer met a non-finite value.
bool linear_forward(const LinearSite& site, const bf16_t* x, const bf16_t* w, int t, int k, int n,
                    float* y);

// dX[T,K] (fp32, overwritten) and dW[N,K] (fp32, accumulated: +=). Either may be null to skip it.
// Returns false when a quantizer met a non-finite value.
bool linear_backward(const LinearSite& site, const bf16_t* x, const bf16_t* w, const bf16_t* dy,
                     int t, int k, int n, float* dx, float* dw_accum);

// Empty when T, K and N fit the recipe's blocks (and 2D weight tiles); otherwise one line naming
// the dimension, e.g. "d_ff (N = 200) is not a multiple of the block size 16 (slot dgrad_dy)".
std::string linear_shape_error(const Recipe& recipe, int t, int k, int n);

}  // namespace fp4::engine
