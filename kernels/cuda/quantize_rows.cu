// quantize_rows.cu — the row copy alone, round to nearest, without codes (what training's forward
// pass asks for), without shared memory: launch_row_rn (quantize_kernels.cuh) takes those calls
// before the fused kernel would.
//
// Why a separate kernel: the row copy's blocks are B consecutive elements of one row, and with
// cols % B == 0 block i of the tensor (row-major) is elements [i*B, (i+1)*B) and scale i of the
// [rows, cols/B] grid. So each thread owns whole blocks and needs nothing from its neighbours (no
// tile, no barrier): it issues the 16-byte loads of all its blocks up front, then for each block
// runs the RHT in registers, takes the amax, scales, rounds (quantize_values, the fused kernel's own
// per-block code, hence bit-identical to it and to the reference), and stores the dequantized
// values with 16-byte stores. Thread `lane` of a warp takes blocks base + u*32 + lane, u < kUnroll,
// so each u's 32 scales are 128 contiguous bytes, one coalesced store.
// 2D tiles (whose amax spans B rows) and everything else keep the fused kernel.
#include <stdexcept>

#include "kernels/cuda/quantize_kernels.cuh"

namespace fp4::cuda::detail {

namespace {

template <int B>
__host__ __device__ constexpr int rows_unroll() { return B == 16 ? 2 : 1; }

template <int B, Grid G, ScaleMode M>
__global__ void __launch_bounds__(kThreads) row_rn_kernel(const FusedArgs a, int64_t nblocks) {
  constexpr int U = rows_unroll<B>();
  constexpr int kChunks = B / 8;  // 16-byte chunks per block
  const CopyArgs& c = a.row;
  const QuantSpec& s = c.spec;
  if (blockIdx.x == 0 && threadIdx.x == 0 && a.unit_tensor_scale[0] != nullptr) *a.unit_tensor_scale[0] = 1.0f;

  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t base = warp * (32 * U) + lane;

  uint4 raw[U][kChunks];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = base + u * 32;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      raw[u][j] = make_uint4(0u, 0u, 0u, 0u);
      if (i < nblocks) raw[u][j] = __ldg(reinterpret_cast<const uint4*>(a.src.x + i * B) + j);
    }
  }
  const TensorScale ts = load_tensor_scale(c);
  bool nonfinite = false;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = base + u * 32;
    const bool valid = i < nblocks;
    float v[B];
#pragma unroll
    for (int j = 0; j < kChunks; ++j) unpack8(raw[u][j], v + 8 * j);
    if (s.rht) {
#pragma unroll
      for (int j = 0; j < B; j += kRhtSize) rht16(v + j, s.rht_signs);
    }
    const uint32_t m = absmax_bits<B>(v);  // amax and finiteness (absmax_bits)
    const bool finite = m < kF32InfBits;
    const BlockScale bs = make_block_scale(s.scale, finite ? bits_float(m) : 0.0f, s.gmax, ts);
    uint32_t code[B];
    quantize_values<B, G, Rounding::rn, M, false>(v, code, bs, finite, c.max_index, [](int) { return 0.0f; });
    if (valid) {
      if (c.dequant != nullptr) {
        uint4* dst = reinterpret_cast<uint4*>(c.dequant + i * B);
#pragma unroll
        for (int j = 0; j < kChunks; ++j) {
          uint32_t o[4];
#pragma unroll
          for (int q = 0; q < 4; ++q)
            o[q] = finite ? hw_pack_bf16x2(v[8 * j + 2 * q], v[8 * j + 2 * q + 1]) : kNaNPair;
          dst[j] = make_uint4(o[0], o[1], o[2], o[3]);
        }
      }
      if (c.scales != nullptr) c.scales[i] = finite ? bs.stored : bits_float(kF32QuietNaN);
      nonfinite = nonfinite || !finite;
    }
  }
  if (__any_sync(0xffffffffu, nonfinite) && lane == 0 && a.nonfinite_flag != nullptr) atomicOr(a.nonfinite_flag, 1u);
}

template <int B, Grid G, ScaleMode M>
void launch_rows(const FusedArgs& a, cudaStream_t stream) {
  const int64_t nblocks = static_cast<int64_t>(a.src.rows) * a.src.cols / B;
  constexpr int64_t per_cta = static_cast<int64_t>(kThreads) * rows_unroll<B>();
  const int64_t grid = std::max<int64_t>(1, (nblocks + per_cta - 1) / per_cta);
  if (grid > 0x7fffffff) throw std::invalid_argument("quantize_fused: tensor too large for one launch");
  row_rn_kernel<B, G, M><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a, nblocks);
  FP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool launch_row_rn(const FusedArgs& a, int b, cudaStream_t stream) {
  const CopyArgs& c = a.row;
  if (!c.present || a.col.present || c.codes != nullptr || c.spec.rounding != Rounding::rn || c.spec.tile_2d)
    return false;
  if (a.src.cols % b != 0) return false;  // shape_error refuses it anyway
  const QuantSpec& s = c.spec;
  if (b == 16) {
    if (s.scale == ScaleMode::fp32) {
      if (s.grid == Grid::e2m1) launch_rows<16, Grid::e2m1, ScaleMode::fp32>(a, stream);
      else launch_rows<16, Grid::e1m2, ScaleMode::fp32>(a, stream);
      return true;
    }
    if (s.scale == ScaleMode::e4m3x2) {
      if (s.grid == Grid::e2m1) launch_rows<16, Grid::e2m1, ScaleMode::e4m3x2>(a, stream);
      else launch_rows<16, Grid::e1m2, ScaleMode::e4m3x2>(a, stream);
      return true;
    }
  } else if (b == 32 && s.scale == ScaleMode::e8m0 && s.grid == Grid::e2m1) {
    launch_rows<32, Grid::e2m1, ScaleMode::e8m0>(a, stream);
    return true;
  }
  return false;
}

}  // namespace fp4::cuda::detail
