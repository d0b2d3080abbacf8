// flash_attention.cuh — fused causal multi-head attention on tensor cores (bf16 operands, fp32
// accumulation), forward and backward, for head_dim 64 (issue 4). Deterministic: no atomics, every
// sum runs in an order fixed by the shape, so two calls give identical bits.
//
// Layout and semantics are ops.h's attention (and ops.cuh's fp32 kernel's): qkv [B·T, 3·d] with
// each row q | k | v, head h at columns h·64 of each part, d = n_heads·64; out [B·T, d]; lse
// [B, H, T] (natural log); s_tj = q_t·k_j / 8 for j ≤ t, p = softmax(s), out_t = Σ_j p_tj v_j.
//
// Precision (what differs from an exact evaluation; the test derives its tolerance from this):
//   * inputs qkv and dout are bf16 (the engine's qkv already holds bf16 values; dout is rounded by
//     the caller, e.g. with ops.cuh's float_to_bf16);
//   * scores, the online softmax (running max and sum), lse and every product's accumulation are
//     fp32; each exponential is the hardware's 2^x (ex2.approx, about 2 ulp, as CUDA's expf) of one
//     fp32 fma, e^(s/8 − x) = 2^(s·(log2 e)/8 − x·log2 e), so the softmax runs in log2 units and lse
//     is converted back to a natural log once per row;
//   * the probabilities P (forward and backward) and dS = P ∘ (dP − D) (backward) are rounded to
//     bf16 to enter the P·V, Pᵀ·dO, dSᵀ·Q and dS·K tensor-core products, as FlashAttention does:
//     each term of those sums carries one relative rounding error of at most 2⁻⁸ (bf16 keeps 8
//     significant bits);
//   * out is written in fp32 (not bf16): the engine's attention buffer is fp32 and decides itself
//     whether to round it (Storage::bf16), the backward's D_t = dout_t·out_t then uses the unrounded
//     value, and the extra bytes are negligible next to the T² work;
//   * dqkv is written in fp32: it feeds the qkv projection's backward, which converts to bf16 for
//     its GEMM anyway; one rounding fewer, and the same buffer the fp32 kernel fills.
//
// Shapes: head_dim must be 64 and seq_len a positive multiple of 64 (std::invalid_argument
// otherwise, before anything is launched); qkv and dout 16-byte aligned (cudaMalloc's are); out
// and dqkv 8-byte aligned, lse 4-byte aligned.
//
// Two families of kernels implement this, with the same bits: the mma.sync kernels
// (ops_flash_attention.cu; any sm_80+ device) and the wgmma kernels (sm90a/; Hopper, built when
// the build targets sm_90), which feed the tensor cores straight from shared memory. Calls use the
// wgmma kernels on a device of compute capability 9.0 when the build holds them, the mma.sync
// kernels otherwise; set_flash_kernels forces one (tests and benchmarks compare them).
//
// Plain C++ on the host side, like quantize.cuh: callable from .cpp files.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK, Workspace
#include "kernels/numerics.h"            // bf16_t

namespace fp4::cuda {

constexpr int kFlashHeadDim = 64;  // the only head_dim supported
constexpr int kFlashBlock = 64;    // seq_len must be a multiple of this

enum class FlashKernels { automatic, mma_sync, wgmma };
// Process-wide choice for the calls below (default automatic). Asking for wgmma where
// flash_wgmma_available() is false throws std::invalid_argument.
void set_flash_kernels(FlashKernels kernels);
// The family a call on the current device uses now: mma_sync or wgmma, never automatic.
FlashKernels flash_kernels_in_use();
// True when this build holds the wgmma kernels and the current device can run them (sm_90).
bool flash_wgmma_available();

// out [B·T, d] fp32 and lse [B, H, T] fp32 are overwritten. Asynchronous on `stream`.
void flash_attention_forward(const bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim,
                             float* out, float* lse, cudaStream_t stream);

// dqkv [B·T, 3·d] fp32 is overwritten (dq | dk | dv, qkv's layout). `out` and `lse` are the
// forward's; dout [B·T, d] is the gradient of out, in bf16. P is recomputed from lse. `workspace`
// holds D_t = dout_t·out_t and lse_t·log2 e (2·B·H·T floats), passed from the dQ kernel to the
// dK/dV kernel; calls sharing it must be ordered on one stream.
void flash_attention_backward(const bf16_t* qkv, const float* out, const float* lse, const bf16_t* dout,
                              int batch, int seq_len, int n_heads, int head_dim, float* dqkv,
                              Workspace& workspace, cudaStream_t stream);
// The same with the forward's output in bf16 (its stored copy, ops.cuh's
// flash_attention_forward_stored): bit-identical to the fp32 call on the stored fp32 values.
void flash_attention_backward(const bf16_t* qkv, const bf16_t* out, const float* lse, const bf16_t* dout,
                              int batch, int seq_len, int n_heads, int head_dim, float* dqkv,
                              Workspace& workspace, cudaStream_t stream);
// And with dqkv written in bf16, each value rounded to nearest even as it is written: the fp32
// call's dqkv followed by its store (round_to_bf16), bit for bit, in half the bytes.
void flash_attention_backward(const bf16_t* qkv, const bf16_t* out, const float* lse, const bf16_t* dout,
                              int batch, int seq_len, int n_heads, int head_dim, bf16_t* dqkv,
                              Workspace& workspace, cudaStream_t stream);

}  // namespace fp4::cuda
