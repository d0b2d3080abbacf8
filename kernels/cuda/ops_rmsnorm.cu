// ops_rmsnorm.cu — see ops.cuh: RMSNorm forward and backward.
//
// A row belongs to a group of eight consecutive threads (four rows per warp). Thread l of the group
// sums the elements e ≡ l (mod 8) in increasing order and the group combines the eight sums
// pairwise: exactly ops.h's dot(), so mean(x²) — and with IEEE division and square root, rstd, y
// and dx — come out bit-identical to the CPU reference. Element-wise work follows the same mapping
// (thread l writes the elements e ≡ l mod 8), which also keeps a warp's loads in 32-byte runs.
//
// dgain sums over rows: partial sums over fixed chunks of kRmsnormRowChunk rows (one thread per
// (chunk, column), rows in order), then one thread per column adds the chunk sums in chunk order
// and adds the total into dgain. The order depends only on the shape; with rows <= the chunk it is
// the CPU's order.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <string>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;          // 32 rows per block
constexpr int kRowsPerBlock = kThreads / 8;
constexpr int kColumnThreads = 128;

__global__ void rmsnorm_forward_kernel(const float* x, const float* gain, int rows, int d, float eps,
                                       float* y, float* rstd, StoreOut store) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 8;
  const int lane = threadIdx.x % 8;
  const bool active = row < rows;  // inactive groups still take part in the shuffles
  const float* xr = x + static_cast<size_t>(active ? row : 0) * d;
  float partial = 0.0f;
  if (active)
    for (int e = lane; e < d; e += 8) partial += xr[e] * xr[e];
  const float sum_sq = detail::group8_combine(partial);
  if (!active) return;
  const float mean_sq = sum_sq / static_cast<float>(d);
  const float s = 1.0f / sqrtf(mean_sq + eps);
  if (lane == 0) rstd[row] = s;
  const size_t base = static_cast<size_t>(row) * d;
  for (int e = lane; e < d; e += 8) detail::write_out(y, base + e, (xr[e] * s) * gain[e], store);
}

__global__ void rmsnorm_dx_kernel(const float* x, const float* gain, const float* rstd, const float* dy,
                                  int rows, int d, float* dx, StoreOut store, bool round_dy) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 8;
  const int lane = threadIdx.x % 8;
  const bool active = row < rows;
  const size_t base = static_cast<size_t>(active ? row : 0) * d;
  const float s = active ? rstd[row] : 0.0f;
  float partial = 0.0f;
  if (active) {
    for (int e = lane; e < d; e += 8) {
      const float g = detail::stored(dy[base + e], round_dy) * gain[e];
      const float xhat = x[base + e] * s;
      partial += g * xhat;
    }
  }
  const float dot = detail::group8_combine(partial);
  if (!active) return;
  const float c = dot / static_cast<float>(d);
  for (int e = lane; e < d; e += 8) {
    const float g = detail::stored(dy[base + e], round_dy) * gain[e];
    const float xhat = x[base + e] * s;
    detail::write_out(dx, base + e, s * (g - xhat * c), store);
  }
}

// partial[chunk][j] = Σ_{rows of chunk, in order} dy ⊙ (x · rstd), starting from 0.
__global__ void rmsnorm_dgain_partial_kernel(const float* x, const float* rstd, const float* dy, int rows,
                                             int d, float* partial, bool round_dy) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const int r0 = blockIdx.y * kRmsnormRowChunk;
  const int r1 = r0 + kRmsnormRowChunk < rows ? r0 + kRmsnormRowChunk : rows;
  float sum = 0.0f;
  for (int r = r0; r < r1; ++r) {
    const size_t i = static_cast<size_t>(r) * d + j;
    sum += detail::stored(dy[i], round_dy) * (x[i] * rstd[r]);
  }
  partial[static_cast<size_t>(blockIdx.y) * d + j] = sum;
}

__global__ void rmsnorm_dgain_total_kernel(const float* partial, int chunks, int d, float* dgain) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float sum = 0.0f;
  for (int c = 0; c < chunks; ++c) sum += partial[static_cast<size_t>(c) * d + j];
  dgain[j] += sum;
}

void check_shape(const char* op, int rows, int d) {
  detail::require(rows >= 1 && d >= 1, op,
                  "needs rows >= 1 and d >= 1, got rows = " + std::to_string(rows) + ", d = " + std::to_string(d));
}

}  // namespace

void rmsnorm_forward(const float* x, const float* gain, int rows, int d, float eps, float* y, float* rstd,
                     cudaStream_t stream, StoreOut y_store) {
  check_shape("rmsnorm_forward", rows, d);
  rmsnorm_forward_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads, 0, stream>>>(
      x, gain, rows, d, eps, y, rstd, y_store);
  detail::check_launch();
}

void rmsnorm_backward(const float* x, const float* gain, const float* rstd, const float* dy, int rows, int d,
                      float* dx, float* dgain, Workspace& workspace, cudaStream_t stream, StoreOut dx_store,
                      bool round_dy) {
  check_shape("rmsnorm_backward", rows, d);
  const int chunks = (rows + kRmsnormRowChunk - 1) / kRmsnormRowChunk;
  detail::require(chunks <= 65535, "rmsnorm_backward", "rows = " + std::to_string(rows) + " is too large");
  auto* partial = static_cast<float*>(workspace.get(static_cast<size_t>(chunks) * d * sizeof(float)));
  rmsnorm_dx_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads, 0, stream>>>(
      x, gain, rstd, dy, rows, d, dx, dx_store, round_dy);
  detail::check_launch();
  const unsigned col_blocks = static_cast<unsigned>((d + kColumnThreads - 1) / kColumnThreads);
  rmsnorm_dgain_partial_kernel<<<dim3(col_blocks, static_cast<unsigned>(chunks)), kColumnThreads, 0, stream>>>(
      x, rstd, dy, rows, d, partial, round_dy);
  detail::check_launch();
  rmsnorm_dgain_total_kernel<<<col_blocks, kColumnThreads, 0, stream>>>(partial, chunks, d, dgain);
  detail::check_launch();
}

}  // namespace fp4::cuda
