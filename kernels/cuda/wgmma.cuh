// wgmma.cuh — Hopper warpgroup tensor-core products (PTX wgmma.mma_async, sm_90a only) on bf16
// tiles of 64-element rows kept in shared memory in the 128-byte swizzled layout, for the fused
// attention. Device code only; every function here must be compiled for sm_90a (the callers guard
// with FP4_WGMMA_AVAILABLE).
//
// Shared tiles. A tile is R rows × 64 bf16 (128 bytes a row, no padding), its base 1024-byte
// aligned. The 16-byte chunk j (features 8j..8j+7) of row r lives at r·128 + ((j ⊕ (r mod 8))·16):
// the hardware's 128-byte swizzle, so that the 8 rows a tensor-core read or an ldmatrix touches at
// one chunk fall in 8 distinct bank groups without padding. Rows are the operand's M or N index;
// the 64 features are the reduction (K) when the tile is "K-major" (Q, K, V, dO for S = Q·Kᵀ and
// dP = dO·Vᵀ) and the result's N when it is "MN-major" (V for P·V, K for dS·K, dO and Q for the
// dK/dV products, whose reduction runs over the tile's rows).
//
// Descriptors (PTX ISA, "matrix descriptor" of wgmma): bits 0–13 the start address / 16, 16–29 the
// leading byte offset / 16, 32–45 the stride byte offset / 16, 62–63 the swizzle mode (1 = 128 B).
//   K-major: a core matrix is 8 rows × 16 bytes; consecutive groups of 8 rows are 1024 bytes apart
//   (stride offset); one instruction's K = 16 is 32 bytes inside the 128-byte swizzle span, so the
//   leading offset is unused; k-step kk starts 32·kk bytes further (the swizzle applies to the
//   final address, which is why the tile must be 1024-byte aligned).
//   MN-major: the swizzle atom is 8 rows (K) × 64 elements (N); the instruction's K = 16 covers two
//   atoms 1024 bytes apart (stride offset); N = 64 is one atom wide, so the leading offset (the
//   distance to the next 64 N) is unused; k-step kk starts 2048·kk bytes further.
//
// Fragments (identical to mma.sync.m16n8k16's, per warp: warp w of the warpgroup owns rows
// 16w..16w+15): with g = lane / 4, c = lane % 4, an m64n64 fp32 accumulator d[8][4] holds, for
// n = 0..7, d[n][0], d[n][1] = (row g, cols 8n + 2c, +1) and d[n][2], d[n][3] = (row g + 8, same);
// a register A operand (16 rows × 16 of K) holds a0 = (row g, k 2c, 2c+1), a1 = (row g+8, same),
// a2 = (row g, k 2c+8, +9), a3 = (row g+8, k 2c+8, +9), the lower column in the lower half. Two
// neighbouring accumulator column tiles, packed to bf16, are therefore an A operand.
//
// Asynchrony. wgmma runs in the background of the issuing warpgroup: operands and accumulators
// must not be touched between the issue and wgmma_wait. The calls below are volatile asm, so the
// compiler keeps them in program order among themselves, and wgmma_wait re-declares every
// accumulator register as written (fence_operands), so no read of an accumulator moves above it.
// Shared memory written by ordinary stores or cp.async must be made visible to the tensor core's
// asynchronous proxy (fence_async_shared) by the writing threads before the barrier that precedes
// the product.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP4_WGMMA_AVAILABLE 1
#else
#define FP4_WGMMA_AVAILABLE 0
#endif

namespace fp4::cuda::wgmma {

constexpr int kRowBytes = 128;    // 64 bf16
constexpr int kAtomBytes = 1024;  // 8 swizzled rows

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a swizzled tile.
__host__ __device__ constexpr uint32_t swizzled_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ uint64_t descriptor(uint32_t smem_byte_addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
  return d;
}

// Operand descriptors of k-step kk (16 of K) of a swizzled tile starting at shared address `tile`
// (row 0 of the operand's 64 rows, or of the 16·kk-th row block for MN-major).
__device__ __forceinline__ uint64_t kmajor(uint32_t tile, int kk) { return descriptor(tile + 32 * kk, 16, kAtomBytes); }
__device__ __forceinline__ uint64_t mnmajor(uint32_t tile, int kk) {
  return descriptor(tile + 2 * kAtomBytes * kk, 8 * kAtomBytes, kAtomBytes);
}

#if FP4_WGMMA_AVAILABLE

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void fence_operands(float (&d)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
}

// Waits until at most `Pending` committed groups of this warpgroup are still running.
template <int Pending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}

// d (64×64 fp32) = A·B (+ d when accumulate), A = 64 rows × 16 K from a K-major descriptor, B the
// same (its rows the 64 result columns).
__device__ __forceinline__ void mma_ss(float (&d)[8][4], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate))
      : "memory");
}

// d (64×64 fp32) += A·B, A = 64 rows × 16 K in registers (this warp's 16 rows, the fragment layout
// above), B = 16 K × 64 N from an MN-major descriptor.
__device__ __forceinline__ void mma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
      : "memory");
}

#endif  // FP4_WGMMA_AVAILABLE

}  // namespace fp4::cuda::wgmma
