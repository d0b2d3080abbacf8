// ops_elementwise.cu — see ops.cuh: the bf16 conversions and the residual add. Each element is
// one independent operation, so any thread mapping gives the same bits.
//
// Each kernel has a vector path (ops_common.cuh): a thread takes four consecutive elements with
// 16-byte fp32 and 8-byte bf16 accesses, which is what it takes to reach the memory bandwidth.
// It runs when every pointer is aligned for it; the n % 4 elements past the last group of four are
// done one at a time by the first threads. Misaligned pointers take the scalar loop (the same
// kernel with one element per group).
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

// Runs op(i) for i in [0, n) when kVec is false; with kVec, op4(4·g) for the groups of four and
// op(i) for the tail. A grid-stride loop without division.
template <bool kVec, class Op, class Op4>
__device__ __forceinline__ void for_each(size_t n, Op op, Op4 op4) {
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec) {
    const size_t groups = n / 4;
    for (size_t g = tid; g < groups; g += step) op4(4 * g);
    if (tid < n - 4 * groups) op(4 * groups + tid);
  } else {
    for (size_t i = tid; i < n; i += step) op(i);
  }
}

// The grid for n elements: one thread per group of four on the vector path.
unsigned blocks_for(size_t n, bool vec) { return detail::elementwise_blocks(vec ? (n + 3) / 4 : n, kThreads); }

using detail::unpack_bf16x4;

template <bool kVec>
__global__ void float_to_bf16_kernel(const float* x, bf16_t* y, size_t n) {
  for_each<kVec>(
      n, [&](size_t i) { y[i] = ::fp4::float_to_bf16(x[i]); },
      [&](size_t i) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        *reinterpret_cast<uint2*>(y + i) = detail::pack_bf16x4(v.x, v.y, v.z, v.w);
      });
}

template <bool kVec>
__global__ void bf16_to_float_kernel(const bf16_t* x, float* y, size_t n) {
  for_each<kVec>(
      n, [&](size_t i) { y[i] = ::fp4::bf16_to_float(x[i]); },
      [&](size_t i) {
        *reinterpret_cast<float4*>(y + i) = unpack_bf16x4(*reinterpret_cast<const uint2*>(x + i));
      });
}

template <bool kVec>
__global__ void round_to_bf16_kernel(float* x, size_t n) {
  for_each<kVec>(
      n, [&](size_t i) { x[i] = ::fp4::round_to_bf16(x[i]); },
      [&](size_t i) {
        float4 v = *reinterpret_cast<const float4*>(x + i);
        v.x = ::fp4::round_to_bf16(v.x);
        v.y = ::fp4::round_to_bf16(v.y);
        v.z = ::fp4::round_to_bf16(v.z);
        v.w = ::fp4::round_to_bf16(v.w);
        *reinterpret_cast<float4*>(x + i) = v;
      });
}

template <bool kVec>
__global__ void round_copy_kernel(float* x, bf16_t* copy, size_t n) {
  for_each<kVec>(
      n,
      [&](size_t i) {
        const bf16_t h = ::fp4::float_to_bf16(x[i]);
        x[i] = ::fp4::bf16_to_float(h);  // round_to_bf16(x[i])
        copy[i] = h;                     // float_to_bf16 of the rounded value: the same bits
      },
      [&](size_t i) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        const uint2 h = detail::pack_bf16x4(v.x, v.y, v.z, v.w);
        *reinterpret_cast<float4*>(x + i) = unpack_bf16x4(h);
        *reinterpret_cast<uint2*>(copy + i) = h;
      });
}

// A, B: float, or bf16_t for an operand kept in bf16 (then round_b is false for b: its values are
// bf16 already).
template <bool kVec, class A, class B>
__global__ void residual_add_kernel(const A* a, const B* b, float* out, size_t n, StoreOut store,
                                    bool round_b) {
  for_each<kVec>(
      n,
      [&](size_t i) {
        detail::write_out(out, i, detail::load1(a, i) + detail::stored(detail::load1(b, i), round_b), store);
      },
      [&](size_t i) {
        const float4 va = detail::load4(a, i);
        const float4 vb = detail::load4(b, i);
        detail::write_out4(out, i,
                           make_float4(va.x + detail::stored(vb.x, round_b), va.y + detail::stored(vb.y, round_b),
                                       va.z + detail::stored(vb.z, round_b), va.w + detail::stored(vb.w, round_b)),
                           store);
      });
}

}  // namespace

void float_to_bf16(const float* x, bf16_t* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (detail::aligned(x, 16) && detail::aligned(y, 8)) {
    float_to_bf16_kernel<true><<<blocks_for(n, true), kThreads, 0, stream>>>(x, y, n);
  } else {
    float_to_bf16_kernel<false><<<blocks_for(n, false), kThreads, 0, stream>>>(x, y, n);
  }
  detail::check_launch();
}

void bf16_to_float(const bf16_t* x, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (detail::aligned(x, 8) && detail::aligned(y, 16)) {
    bf16_to_float_kernel<true><<<blocks_for(n, true), kThreads, 0, stream>>>(x, y, n);
  } else {
    bf16_to_float_kernel<false><<<blocks_for(n, false), kThreads, 0, stream>>>(x, y, n);
  }
  detail::check_launch();
}

void round_to_bf16(float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (detail::aligned(x, 16)) {
    round_to_bf16_kernel<true><<<blocks_for(n, true), kThreads, 0, stream>>>(x, n);
  } else {
    round_to_bf16_kernel<false><<<blocks_for(n, false), kThreads, 0, stream>>>(x, n);
  }
  detail::check_launch();
}

void round_to_bf16(float* x, size_t n, bf16_t* copy, cudaStream_t stream) {
  if (n == 0) return;
  if (detail::aligned(x, 16) && detail::aligned(copy, 8)) {
    round_copy_kernel<true><<<blocks_for(n, true), kThreads, 0, stream>>>(x, copy, n);
  } else {
    round_copy_kernel<false><<<blocks_for(n, false), kThreads, 0, stream>>>(x, copy, n);
  }
  detail::check_launch();
}

namespace {

template <class A, class B>
void launch_residual_add(const A* a, const B* b, float* out, size_t n, cudaStream_t stream, StoreOut out_store,
                         bool round_b) {
  if (n == 0) return;
  detail::require(out != nullptr || out_store.bf16 != nullptr, "residual_add",
                  "no output: out and its bf16 copy are null");
  // out may be a or b: each element is read before it is written, by the same thread.
  if (detail::vec_aligned(a) && detail::vec_aligned(b) && detail::vec4_ok(out, out_store)) {
    residual_add_kernel<true><<<blocks_for(n, true), kThreads, 0, stream>>>(a, b, out, n, out_store, round_b);
  } else {
    residual_add_kernel<false><<<blocks_for(n, false), kThreads, 0, stream>>>(a, b, out, n, out_store, round_b);
  }
  detail::check_launch();
}

}  // namespace

void residual_add(const float* a, const float* b, float* out, size_t n, cudaStream_t stream, StoreOut out_store,
                  bool round_b) {
  launch_residual_add(a, b, out, n, stream, out_store, round_b);
}

void residual_add(const float* a, const bf16_t* b, float* out, size_t n, cudaStream_t stream, StoreOut out_store) {
  launch_residual_add(a, b, out, n, stream, out_store, false);
}

void residual_add(const bf16_t* a, const bf16_t* b, float* out, size_t n, cudaStream_t stream, StoreOut out_store) {
  launch_residual_add(a, b, out, n, stream, out_store, false);
}

}  // namespace fp4::cuda
