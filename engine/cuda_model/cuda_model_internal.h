// cuda_model_internal.h — the helpers CudaModel's source files share (private to engine/cuda_model/;
// defined in cuda_model.cpp).
#pragma once

#include <vector>

#include "engine/cuda_model/cuda_model.h"
#include "engine/quantized_linear.h"

namespace fp4::cuda_model::detail {

// One copy of a slot: its spec, where its dequantized values and tensor scale go.
cuda::CopyOut copy_out(const QuantSpec& spec, bf16_t* dequant, float* tensor_scale);

// Quantizes `src` into one or two copies: a row-blocked and a column-blocked copy share one fused
// pass; two copies blocked the same way take a pass each. source_rows and groups: quantize_fused's
// (an expert group's tokens, device memory; all of an MoE block's groups at once), or null.
void quantize_copies(const bf16_t* src, int rows, int cols, const cuda::CopyOut* a, const cuda::CopyOut* b,
                     unsigned* flag, cuda::Workspace& ws, cudaStream_t stream, const int32_t* source_rows = nullptr,
                     const cuda::GroupStreams* groups = nullptr);

// The specs of a linear's backward slots at a site: dgrad's dY and W, wgrad's dY and X.
struct BackwardSpecs {
  QuantSpec dy_d, w_d, dy_w, x_w;
};
BackwardSpecs backward_specs(const engine::LinearSite& s);

// How many K chunks a block linear's weight gradient dW [m, n] over k rows is cut into.
int wgrad_chunks(int m, int n, int k);
// How many K chunks an fp32 product that sums over the micro-batch's rows into a small output
// (the LM head's and the router's weight gradients) is cut into: up to 32 chunks of at least 256
// rows, a count fixed by the row count alone, so the order of the fp32 sums is too.
int row_sum_chunks(int rows);

// A pass's non-finite flag: its quantizers' `flag`, or'ed with the flags of the weight copies it
// used (`used[i]`: copy i).
unsigned pass_flag(unsigned flag, const unsigned* weight_flags, const std::vector<unsigned char>& used);

}  // namespace fp4::cuda_model::detail
