// flash_attention_wgmma.cuh — the launchers of the Hopper (wgmma) family of the fused attention
// (kernels/cuda/sm90a/ops_flash_attention_wgmma.cu, built for sm_90a only), called by
// ops_flash_attention.cu after it has checked the shapes and pointers; internal to kernels/cuda.
// Same arguments, outputs and bits as the mma.sync kernels (flash_attention.cuh; the test
// tests/gpu/flash_attention_test.cpp compares the two families bit for bit).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/ops.cuh"  // StoreOut
#include "kernels/numerics.h"    // bf16_t

namespace fp4::cuda::flash {

struct Geometry;

void wgmma_forward(const bf16_t* qkv, int batch, const Geometry& geo, float* out, float* lse, const StoreOut& store,
                   cudaStream_t stream);

// dsum and lse2: the workspace of flash_attention_backward (B·H·T floats each).
template <class O, class G>
void wgmma_backward(const bf16_t* qkv, const O* out, const float* lse, const bf16_t* dout, int batch,
                    const Geometry& geo, G* dqkv, float* dsum, float* lse2, cudaStream_t stream);

}  // namespace fp4::cuda::flash
