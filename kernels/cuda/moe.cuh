// moe.cuh — the CUDA counterparts of an MoE block's non-GEMM steps (docs/model.md, "The MoE
// block's passes"): the router after its logits (kernels/cpu/router.h is the reference, with the
// formulas), the dispatch plan (the groups of tokens per expert, in ascending token index), the
// gather of a group's rows, the gated combine of the experts' outputs, the gates' gradients, the
// experts' dY and the sum of their dX. engine/cuda_model/cuda_model_moe.cpp strings these together
// with one GEMM per expert group (grouped GEMMs are still to come).
//
// Layouts: logits, scores [R, E]; chosen, gates, slot [R, k] (chosen in ascending expert index, as
// the reference); the groups of all experts (routed 0..E-1, then shared) concatenated, expert j's
// padded group at rows offsets[j] .. offsets[j+1] of every grouped buffer; tokens [total]: the
// micro-batch row of each group row (R + i for padding row i of a group); choice [total]: t·k + c
// for a routed expert's row, -1 for a shared expert's or a padding row.
//
// Determinism: no atomics; every sum in an order fixed by the shape. Bit-identical to the CPU
// reference: the dispatch plan, the gather, the combine, dgates (ops.h's 8-lane dot), dy and the
// dX sum (same operations in the same order, no FMA contraction: the build passes --fmad=false).
// Within a few ulp (CUDA's expf/logf against glibc's): the scores, gates, lse and dlogits; the
// choice agrees except where two logits are within those ulp of a tie.
//
// Plain C++ on the host side: callable from .cpp files. Every pointer is device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/numerics.h"  // bf16_t

namespace fp4::cuda {

// kernels/cpu/router.h's router_forward, one thread per token.
void moe_router_forward(const float* logits, int rows, int n_experts, int top_k, bool sigmoid, bool renormalize,
                        float* scores, int32_t* chosen, float* gates, float* lse, cudaStream_t stream);

// The dispatch plan for J = n_experts + n_shared experts. Returns, on the host (the GEMM shapes
// need it; the call synchronizes `stream`), each expert's token count and the offsets of the padded
// groups (J + 1 values: offsets[J] is the total of padded rows, every group padded to a multiple of
// `pad`; an expert with no token has an empty group). On the device it fills slot [R, k] (each
// assignment's row in its expert's group), tokens [total] and choice [total] (see above); `tokens`
// and `choice` must hold offsets[J] values: size them with moe_dispatch_capacity.
struct MoeDispatch {
  std::vector<int64_t> counts;   // [J]: group rows before padding (R for a shared expert)
  std::vector<int64_t> offsets;  // [J + 1]
};
int64_t moe_dispatch_capacity(int rows, int n_experts, int n_shared, int top_k, int pad);
// `scratch`: 2·J + 1 int64 of device memory; afterwards it holds the counts [J] and then the
// offsets [J + 1] (what moe_combine and moe_sum_dx take as `offsets`: scratch + J).
MoeDispatch moe_dispatch(const int32_t* chosen, int rows, int n_experts, int n_shared, int top_k, int pad,
                         int32_t* slot, int32_t* tokens, int32_t* choice, int64_t* scratch, cudaStream_t stream);

// x_groups[g, :] = x[tokens[g], :] for a token row, 0 for a padding row (g < total).
void moe_gather(const float* x, const int32_t* tokens, int64_t total, int rows, int d, float* x_groups,
                cudaStream_t stream);
void moe_gather(const bf16_t* x, const int32_t* tokens, int64_t total, int rows, int d, bf16_t* x_groups,
                cudaStream_t stream);

// Each of the next four has an fp32 form and the model's bf16 form, whose bf16 operands (the grouped
// y, dx, and dout) are read widened exactly and whose bf16 results (out, dy, dh) are the fp32 sums
// rounded by float_to_bf16: the bits of the fp32 form on the widened values followed by
// cuda::float_to_bf16 (tests/gpu/moe_test.cpp), without the conversion passes.

// out[t, :] = Σ over t's experts in ascending index of gate · y (routed; the first term assigned),
// then + y of each shared expert; y [total, d] grouped. `offsets` on the device (J + 1).
void moe_combine(const float* y, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                 const float* gates, int rows, int n_experts, int n_shared, int top_k, int d, float* out,
                 cudaStream_t stream);
void moe_combine(const bf16_t* y, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                 const float* gates, int rows, int n_experts, int n_shared, int top_k, int d, bf16_t* out,
                 cudaStream_t stream);

// dgates[t, c] = dout[t, :] · y[row of (t, c), :], ops.h's dot order.
void moe_dgates(const float* dout, const float* y, const int32_t* chosen, const int32_t* slot,
                const int64_t* offsets, int rows, int top_k, int d, float* dgates, cudaStream_t stream);
void moe_dgates(const bf16_t* dout, const bf16_t* y, const int32_t* chosen, const int32_t* slot,
                const int64_t* offsets, int rows, int top_k, int d, float* dgates, cudaStream_t stream);

// dy[g, :] = gate · dout[tokens[g], :] (gate 1 for a shared expert's row), 0 for a padding row.
void moe_expert_dy(const float* dout, const int32_t* tokens, const int32_t* choice, const float* gates,
                   int64_t total, int rows, int d, float* dy, cudaStream_t stream);
void moe_expert_dy(const bf16_t* dout, const int32_t* tokens, const int32_t* choice, const float* gates,
                   int64_t total, int rows, int d, bf16_t* dy, cudaStream_t stream);

// dh[t, :] = Σ over t's experts in ascending index of dx (routed, the first assigned; then
// shared) + router_dh[t, :]; dx [total, d] grouped (its padding rows are never read).
void moe_sum_dx(const float* dx, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                const float* router_dh, int rows, int n_experts, int n_shared, int top_k, int d, float* dh,
                cudaStream_t stream);
void moe_sum_dx(const bf16_t* dx, const int32_t* chosen, const int32_t* slot, const int64_t* offsets,
                const float* router_dh, int rows, int n_experts, int n_shared, int top_k, int d, bf16_t* dh,
                cudaStream_t stream);

// kernels/cpu/router.h's router_backward, one thread per token; counts [E] on the device (int64).
void moe_router_backward(const float* logits, const float* scores, const int32_t* chosen, const float* lse,
                         const float* dgates, const int64_t* counts, int rows, int n_experts, int top_k, bool sigmoid,
                         bool renormalize, float balance_scale, float z_scale, float* dlogits, cudaStream_t stream);

}  // namespace fp4::cuda
