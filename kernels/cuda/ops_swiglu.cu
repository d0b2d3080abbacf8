// ops_swiglu.cu — see ops.cuh: SwiGLU forward and backward, one thread per (row, feature), per
// (row, four features) where shape and alignment allow 16-byte fp32 accesses, or per (row, eight
// features) where every operand and the output are bf16.
//
// The expressions are the reference's, operation for operation; the only difference from the CPU
// is the exponential (CUDA's expf, within 2 ulp, against glibc's), so results agree to a few ulp
// (tests/gpu/ops_test.cpp states the bound).
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <initializer_list>
#include <string>
#include <type_traits>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

// One element's SwiGLU, the reference's expressions.
__device__ __forceinline__ float swiglu(float gate, float up) {
  const float sig = 1.0f / (1.0f + expf(-gate));
  return (gate * sig) * up;
}

// dgate and dup of one element (dai: da's value after its pending store).
__device__ __forceinline__ void swiglu_grad(float g, float up, float dai, float& dgate, float& dup) {
  const float sig = 1.0f / (1.0f + expf(-g));
  const float silu = g * sig;
  dgate = dai * up * (sig * (1.0f + g * (1.0f - sig)));
  dup = dai * silu;
}

// Threads walk (row r, unit k) over a detail::row_grid: a unit is feature j = k (kVec false) or
// the four features j = 4k .. 4k+3 (kVec: f % 4 == 0 and every pointer aligned for 4-element
// accesses, so each gate, up and output group is one load or store). Unsigned loop counters:
// r + stride and k + stride stay below 2³² for any int shape. U and DA: float, or bf16_t for a
// buffer kept in bf16 (detail::load1/load4 read either as fp32). With round_u (u's store, fused;
// fp32 u only), u is rounded in place as it is read: the thread of (r, j) alone touches u's gate
// and up elements of (r, j).
template <bool kVec, class U>
__global__ void swiglu_forward_kernel(U* u, bool round_u, int rows, int f, float* a, StoreOut store) {
  const unsigned units = kVec ? f / 4 : f;
  for (unsigned r = blockIdx.y * blockDim.y + threadIdx.y; r < static_cast<unsigned>(rows);
       r += gridDim.y * blockDim.y) {
    U* gate_row = u + static_cast<size_t>(r) * 2 * f;
    U* up_row = gate_row + f;
    const size_t a_row = static_cast<size_t>(r) * f;
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < units; k += gridDim.x * blockDim.x) {
      if constexpr (kVec) {
        const unsigned j = 4 * k;
        float4 gate = detail::load4(gate_row, j);
        float4 up = detail::load4(up_row, j);
        if constexpr (std::is_same_v<U, float>) {
          if (round_u) {
            gate = make_float4(::fp4::round_to_bf16(gate.x), ::fp4::round_to_bf16(gate.y),
                               ::fp4::round_to_bf16(gate.z), ::fp4::round_to_bf16(gate.w));
            up = make_float4(::fp4::round_to_bf16(up.x), ::fp4::round_to_bf16(up.y), ::fp4::round_to_bf16(up.z),
                             ::fp4::round_to_bf16(up.w));
            *reinterpret_cast<float4*>(gate_row + j) = gate;
            *reinterpret_cast<float4*>(up_row + j) = up;
          }
        }
        detail::write_out4(a, a_row + j,
                           make_float4(swiglu(gate.x, up.x), swiglu(gate.y, up.y), swiglu(gate.z, up.z),
                                       swiglu(gate.w, up.w)),
                           store);
      } else {
        const unsigned j = k;
        float gate = detail::load1(gate_row, j), up = detail::load1(up_row, j);
        if constexpr (std::is_same_v<U, float>) {
          if (round_u) {
            gate = ::fp4::round_to_bf16(gate);
            up = ::fp4::round_to_bf16(up);
            gate_row[j] = gate;
            up_row[j] = up;
          }
        }
        detail::write_out(a, a_row + j, swiglu(gate, up), store);
      }
    }
  }
}

template <bool kVec, class U, class DA>
__global__ void swiglu_backward_kernel(const U* u, const DA* da, int rows, int f, float* du, StoreOut store,
                                       bool round_da) {
  const unsigned units = kVec ? f / 4 : f;
  for (unsigned r = blockIdx.y * blockDim.y + threadIdx.y; r < static_cast<unsigned>(rows);
       r += gridDim.y * blockDim.y) {
    const size_t gate_at = static_cast<size_t>(r) * 2 * f, up_at = gate_at + f, da_at = static_cast<size_t>(r) * f;
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < units; k += gridDim.x * blockDim.x) {
      if constexpr (kVec) {
        const unsigned j = 4 * k;
        const float4 g = detail::load4(u, gate_at + j);
        const float4 up = detail::load4(u, up_at + j);
        const float4 dai = detail::load4(da, da_at + j);
        float4 dgate, dup;
        swiglu_grad(g.x, up.x, detail::stored(dai.x, round_da), dgate.x, dup.x);
        swiglu_grad(g.y, up.y, detail::stored(dai.y, round_da), dgate.y, dup.y);
        swiglu_grad(g.z, up.z, detail::stored(dai.z, round_da), dgate.z, dup.z);
        swiglu_grad(g.w, up.w, detail::stored(dai.w, round_da), dgate.w, dup.w);
        detail::write_out4(du, gate_at + j, dgate, store);
        detail::write_out4(du, up_at + j, dup, store);
      } else {
        const unsigned j = k;
        float dgate, dup;
        swiglu_grad(detail::load1(u, gate_at + j), detail::load1(u, up_at + j),
                    detail::stored(detail::load1(da, da_at + j), round_da), dgate, dup);
        detail::write_out(du, gate_at + j, dgate, store);
        detail::write_out(du, up_at + j, dup, store);
      }
    }
  }
}

// Both kernels above for bf16 operands with only a bf16 output (the bf16 engine's calls), eight
// features per unit: one 16-byte access per gate, up, da and output group, each element with the
// same expressions. Needs f % 8 == 0 and every pointer 16-byte aligned (bf16x8_ok).
__global__ void swiglu_forward_bf16x8_kernel(const bf16_t* u, int rows, int f, StoreOut store) {
  const unsigned units = f / 8;
  for (unsigned r = blockIdx.y * blockDim.y + threadIdx.y; r < static_cast<unsigned>(rows);
       r += gridDim.y * blockDim.y) {
    const size_t gate_at = static_cast<size_t>(r) * 2 * f, up_at = gate_at + f, a_at = static_cast<size_t>(r) * f;
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < units; k += gridDim.x * blockDim.x) {
      const unsigned j = 8 * k;
      float4 g0, g1, u0, u1;
      detail::load8(u, gate_at + j, g0, g1);
      detail::load8(u, up_at + j, u0, u1);
      detail::write_bf16x8(store.bf16, a_at + j,
                           make_float4(swiglu(g0.x, u0.x), swiglu(g0.y, u0.y), swiglu(g0.z, u0.z), swiglu(g0.w, u0.w)),
                           make_float4(swiglu(g1.x, u1.x), swiglu(g1.y, u1.y), swiglu(g1.z, u1.z), swiglu(g1.w, u1.w)));
    }
  }
}

__global__ void swiglu_backward_bf16x8_kernel(const bf16_t* u, const bf16_t* da, int rows, int f, StoreOut store) {
  const unsigned units = f / 8;
  for (unsigned r = blockIdx.y * blockDim.y + threadIdx.y; r < static_cast<unsigned>(rows);
       r += gridDim.y * blockDim.y) {
    const size_t gate_at = static_cast<size_t>(r) * 2 * f, up_at = gate_at + f, da_at = static_cast<size_t>(r) * f;
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < units; k += gridDim.x * blockDim.x) {
      const unsigned j = 8 * k;
      float4 g[2], up[2], d[2], dgate[2], dup[2];
      detail::load8(u, gate_at + j, g[0], g[1]);
      detail::load8(u, up_at + j, up[0], up[1]);
      detail::load8(da, da_at + j, d[0], d[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        swiglu_grad(g[h].x, up[h].x, d[h].x, dgate[h].x, dup[h].x);
        swiglu_grad(g[h].y, up[h].y, d[h].y, dgate[h].y, dup[h].y);
        swiglu_grad(g[h].z, up[h].z, d[h].z, dgate[h].z, dup[h].z);
        swiglu_grad(g[h].w, up[h].w, d[h].w, dgate[h].w, dup[h].w);
      }
      detail::write_bf16x8(store.bf16, gate_at + j, dgate[0], dgate[1]);
      detail::write_bf16x8(store.bf16, up_at + j, dup[0], dup[1]);
    }
  }
}

// Whether the bf16x8 kernels may run: bf16 operands (all `ptrs`), no fp32 output, f % 8 == 0 and
// 16-byte alignment everywhere.
bool bf16x8_ok(std::initializer_list<const bf16_t*> ptrs, int f, const float* out, const StoreOut& store) {
  if (out != nullptr || store.bf16 == nullptr || f % 8 != 0 || !detail::aligned(store.bf16, 16)) return false;
  for (const bf16_t* p : ptrs)
    if (!detail::aligned(p, 16)) return false;
  return true;
}

void check_shape(const char* op, int rows, int f) {
  detail::require(rows >= 1 && f >= 1, op,
                  "needs rows >= 1 and f >= 1, got rows = " + std::to_string(rows) + ", f = " + std::to_string(f));
}

void check_output(const char* op, const float* out, const StoreOut& store) {
  detail::require(out != nullptr || store.bf16 != nullptr, op, "no output: the fp32 output and its bf16 copy are null");
}

template <class U>
void launch_forward(U* u, bool round_u, int rows, int f, float* a, StoreOut store, cudaStream_t stream) {
  if (f % 4 == 0 && detail::vec_aligned(u) && detail::vec4_ok(a, store)) {
    const detail::RowGrid g = detail::row_grid(rows, f / 4, kThreads);
    swiglu_forward_kernel<true><<<g.grid, g.block, 0, stream>>>(u, round_u, rows, f, a, store);
  } else {
    const detail::RowGrid g = detail::row_grid(rows, f, kThreads);
    swiglu_forward_kernel<false><<<g.grid, g.block, 0, stream>>>(u, round_u, rows, f, a, store);
  }
  detail::check_launch();
}

template <class U, class DA>
void launch_backward(const U* u, const DA* da, int rows, int f, float* du, StoreOut store, bool round_da,
                     cudaStream_t stream) {
  if (f % 4 == 0 && detail::vec_aligned(u) && detail::vec_aligned(da) && detail::vec4_ok(du, store)) {
    const detail::RowGrid g = detail::row_grid(rows, f / 4, kThreads);
    swiglu_backward_kernel<true><<<g.grid, g.block, 0, stream>>>(u, da, rows, f, du, store, round_da);
  } else {
    const detail::RowGrid g = detail::row_grid(rows, f, kThreads);
    swiglu_backward_kernel<false><<<g.grid, g.block, 0, stream>>>(u, da, rows, f, du, store, round_da);
  }
  detail::check_launch();
}

}  // namespace

void swiglu_forward(const float* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store) {
  check_shape("swiglu_forward", rows, f);
  check_output("swiglu_forward", a, a_store);
  // round_u false: the kernel never writes u.
  launch_forward(const_cast<float*>(u), false, rows, f, a, a_store, stream);
}

void swiglu_forward_round_u(float* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store) {
  check_shape("swiglu_forward_round_u", rows, f);
  check_output("swiglu_forward_round_u", a, a_store);
  launch_forward(u, true, rows, f, a, a_store, stream);
}

void swiglu_forward(const bf16_t* u, int rows, int f, float* a, cudaStream_t stream, StoreOut a_store) {
  check_shape("swiglu_forward", rows, f);
  check_output("swiglu_forward", a, a_store);
  if (bf16x8_ok({u}, f, a, a_store)) {
    const detail::RowGrid g = detail::row_grid(rows, f / 8, kThreads);
    swiglu_forward_bf16x8_kernel<<<g.grid, g.block, 0, stream>>>(u, rows, f, a_store);
    detail::check_launch();
    return;
  }
  launch_forward(u, false, rows, f, a, a_store, stream);
}

void swiglu_backward(const float* u, const float* da, int rows, int f, float* du, cudaStream_t stream,
                     StoreOut du_store, bool round_da) {
  check_shape("swiglu_backward", rows, f);
  check_output("swiglu_backward", du, du_store);
  launch_backward(u, da, rows, f, du, du_store, round_da, stream);
}

void swiglu_backward(const bf16_t* u, const bf16_t* da, int rows, int f, float* du, cudaStream_t stream,
                     StoreOut du_store) {
  check_shape("swiglu_backward", rows, f);
  check_output("swiglu_backward", du, du_store);
  if (bf16x8_ok({u, da}, f, du, du_store)) {
    const detail::RowGrid g = detail::row_grid(rows, f / 8, kThreads);
    swiglu_backward_bf16x8_kernel<<<g.grid, g.block, 0, stream>>>(u, da, rows, f, du_store);
    detail::check_launch();
    return;
  }
  launch_backward(u, da, rows, f, du, du_store, false, stream);
}

}  // namespace fp4::cuda
