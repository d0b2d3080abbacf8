// ops_rmsnorm.cu — see ops.cuh: RMSNorm forward and backward.
//
// A row's sum (mean(x²) forward, Σ g·x̂ for dx) belongs to a group of eight consecutive threads
// (four rows per warp). Thread l of the group sums the elements e ≡ l (mod 8) in increasing order
// and the group combines the eight sums pairwise: exactly ops.h's dot(), so mean(x²) — and with
// IEEE division and square root, rstd, y and dx — come out bit-identical to the CPU reference.
//
// Staged kernels (the usual path): a block first copies its rows into shared memory with
// asynchronous 16-byte copies (cp.async; the whole tile is in flight at once, which is what keeps
// HBM busy — eight threads per row reading 4-byte words with a dependent sum could not), then the
// row groups run their sums out of shared memory, then each warp writes whole rows with 16-byte
// stores. Each value still gets the same operations in the same order; only where it is read from
// changes. A tile row is `stride` floats apart, stride ≡ 8 (mod 32): the four rows a warp sums read
// banks 0-7, 8-15, 16-23 and 24-31, with no conflicts. When d % 4 != 0 or a pointer is not 16-byte
// aligned, the same kernels copy and store 4 bytes at a time. A tile fits in kTileBytes, so rows
// wider than about 12k (forward) or 6k (dx) floats take the direct kernels below instead (the same
// arithmetic, reading global memory).
//
// dgain sums over rows: partial sums over fixed chunks of kRmsnormRowChunk rows (one thread per
// (chunk, column), rows in order), then per column the chunk sums in chunk order, added into dgain.
// The order depends only on the shape; with rows <= the chunk it is the CPU's order.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <cuda_pipeline.h>

#include <string>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kGroups = kThreads / 8;  // row groups (of eight threads) per block
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerBlock = kGroups;  // the direct kernels: one row per group
constexpr int kColumnThreads = 128;
constexpr int kTileBytes = 48 * 1024;  // dynamic shared memory a block may take without opting in
// At most 8 rows per tile: small blocks, many per SM (8 of 256 threads), so a d = 768 forward
// over 8192 rows is one wave of 1024 blocks rather than 547 blocks of 15 rows with a tail.
constexpr int kMaxTileRows = 8;
static_assert(kMaxTileRows <= kGroups, "a tile row per row group");

// ---- Staged kernels ----------------------------------------------------------------------------

// How a block stages its rows: `rows` tile rows (1..kMaxTileRows) of `stride` floats for each of
// `buffers` inputs, then `scalars` floats per row (rstd, the dx coefficient). rows == 0: d is too
// wide for kTileBytes.
struct Tile {
  int stride = 0, rows = 0;
  size_t bytes = 0;
};
Tile plan_tile(int d, int buffers, int scalars) {
  Tile t;
  const long long stride = (static_cast<long long>(d) + 31) / 32 * 32 + 8;
  const long long row_bytes = (buffers * stride + scalars) * static_cast<long long>(sizeof(float));
  const long long rows = kTileBytes / row_bytes;
  if (rows < 1) return t;
  t.stride = static_cast<int>(stride);
  t.rows = static_cast<int>(rows < kMaxTileRows ? rows : kMaxTileRows);
  t.bytes = static_cast<size_t>(t.rows * row_bytes);
  return t;
}

// Starts copying rows [0, n) of src (rows of d elements of T, float or bf16_t, contiguous) into
// the tile, one warp per row: 16-byte copies with kVec (d a multiple of 16 bytes' worth of T, src
// 16-byte aligned, so every row start is), else one element at a time (cp.async for 4-byte
// elements, a plain load and store for bf16, which cp.async cannot copy alone; the caller's
// barrier after the wait covers both). The caller commits and waits.
template <bool kVec, class T>
__device__ __forceinline__ void stage_rows(T* tile, int stride, const T* src, int d, int n) {
  constexpr int kPer = 16 / sizeof(T);  // elements per 16-byte copy
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < n; r += kWarps) {
    const T* s = src + static_cast<size_t>(r) * d;
    T* t = tile + r * stride;
    if constexpr (kVec) {
      for (int e = kPer * lane; e < d; e += 32 * kPer) __pipeline_memcpy_async(t + e, s + e, 16);
    } else if constexpr (sizeof(T) == 4) {
      for (int e = lane; e < d; e += 32) __pipeline_memcpy_async(t + e, s + e, 4);
    } else {
      for (int e = lane; e < d; e += 32) t[e] = s[e];
    }
  }
  __pipeline_commit();
}

// gain[e .. e+3]: one 16-byte load when gain is aligned (a parameter inside the flat buffer need
// not be), else four.
__device__ __forceinline__ float4 load_gain4(const float* gain, int e, bool gain_vec) {
  if (gain_vec) return *reinterpret_cast<const float4*>(gain + e);
  return make_float4(gain[e], gain[e + 1], gain[e + 2], gain[e + 3]);
}

// Block b normalizes rows [b·tile_rows, ...). kVec: d a multiple of 16 bytes' worth of X, x
// 16-byte aligned and vec4_ok(y, store). X: float, or bf16_t for an x kept in bf16 (its tile rows
// then hold bf16, read as fp32; the room is laid out for fp32 either way).
template <bool kVec, class X>
__global__ void rmsnorm_forward_staged_kernel(const X* x, const float* gain, int rows, int d, int stride,
                                              int tile_rows, float eps, float* y, float* rstd, StoreOut store,
                                              bool gain_vec) {
  extern __shared__ float4 smem[];
  X* tile = reinterpret_cast<X*>(smem);
  float* tile_rstd = reinterpret_cast<float*>(smem) + tile_rows * stride;
  const int row0 = blockIdx.x * tile_rows;
  const int n = rows - row0 < tile_rows ? rows - row0 : tile_rows;
  stage_rows<kVec>(tile, stride, x + static_cast<size_t>(row0) * d, d, n);
  __pipeline_wait_prior(0);
  __syncthreads();

  {  // rstd: group r sums row r (tile_rows <= kGroups); inactive groups still take part in the shuffles.
     // The unrolled loop issues eight shared-memory reads ahead of the additions (still in order).
    const int r = threadIdx.x / 8, lane = threadIdx.x % 8;
    const bool active = r < n;
    const X* xr = tile + (active ? r : 0) * stride;
    float partial = 0.0f;
    if (active) {
#pragma unroll 8
      for (int e = lane; e < d; e += 8) {
        const float v = detail::load1(xr, e);
        partial += v * v;
      }
    }
    const float sum_sq = detail::group8_combine(partial);
    if (active && lane == 0) {
      const float mean_sq = sum_sq / static_cast<float>(d);
      const float s = 1.0f / sqrtf(mean_sq + eps);
      rstd[row0 + r] = s;
      tile_rstd[r] = s;
    }
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < n; r += kWarps) {
    const X* xr = tile + r * stride;
    const float s = tile_rstd[r];
    const size_t base = static_cast<size_t>(row0 + r) * d;
    if constexpr (kVec) {
      for (int e = 4 * lane; e < d; e += 128) {
        const float4 v = detail::load4(xr, e);
        const float4 g = load_gain4(gain, e, gain_vec);
        detail::write_out4(y, base + e, make_float4((v.x * s) * g.x, (v.y * s) * g.y, (v.z * s) * g.z, (v.w * s) * g.w),
                           store);
      }
    } else {
      for (int e = lane; e < d; e += 32) detail::write_out(y, base + e, (detail::load1(xr, e) * s) * gain[e], store);
    }
  }
}

// dx for rows [b·tile_rows, ...): x and dy staged. kVec: d % 4 == 0 (d % 8 == 0 for a bf16 dy), x
// and dy 16-byte aligned, add aligned for load4 and vec4_ok(dx, store). DY: float, or bf16_t for a
// dy kept in bf16 (its tile rows then hold bf16, read as fp32). A: the added residual gradient
// (null: none), float or bf16_t (a residual gradient kept in bf16: dx is then null and the store's
// bf16 copy is the same buffer, each element read by the thread that writes it).
template <bool kVec, class X, class DY, class A>
__global__ void rmsnorm_dx_staged_kernel(const X* x, const float* gain, const float* rstd, const DY* dy,
                                         int rows, int d, int stride, int tile_rows, const A* add, float* dx,
                                         StoreOut store, bool round_dy, bool gain_vec) {
  extern __shared__ float4 smem[];
  float* room = reinterpret_cast<float*>(smem);  // tile_rows·stride floats for each of x and dy
  X* tile_x = reinterpret_cast<X*>(room);
  DY* tile_dy = reinterpret_cast<DY*>(room + tile_rows * stride);
  float* tile_s = room + 2 * tile_rows * stride;
  float* tile_c = tile_s + tile_rows;
  const int row0 = blockIdx.x * tile_rows;
  const int n = rows - row0 < tile_rows ? rows - row0 : tile_rows;
  stage_rows<kVec>(tile_x, stride, x + static_cast<size_t>(row0) * d, d, n);
  stage_rows<kVec>(tile_dy, stride, dy + static_cast<size_t>(row0) * d, d, n);
  __pipeline_wait_prior(0);
  __syncthreads();

  {  // c = mean(g ⊙ x̂): group r sums row r
    const int r = threadIdx.x / 8, lane = threadIdx.x % 8;
    const bool active = r < n;
    const X* xr = tile_x + (active ? r : 0) * stride;
    const DY* dyr = tile_dy + (active ? r : 0) * stride;
    const float s = active ? rstd[row0 + r] : 0.0f;
    float partial = 0.0f;
    if (active) {
#pragma unroll 8
      for (int e = lane; e < d; e += 8) {
        const float g = detail::stored(detail::load1(dyr, e), round_dy) * gain[e];
        const float xhat = detail::load1(xr, e) * s;
        partial += g * xhat;
      }
    }
    const float dot = detail::group8_combine(partial);
    if (active && lane == 0) {
      tile_s[r] = s;
      tile_c[r] = dot / static_cast<float>(d);
    }
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < n; r += kWarps) {
    const X* xr = tile_x + r * stride;
    const DY* dyr = tile_dy + r * stride;
    const float s = tile_s[r], c = tile_c[r];
    const size_t base = static_cast<size_t>(row0 + r) * d;
    if constexpr (kVec) {
      for (int e = 4 * lane; e < d; e += 128) {
        const float4 xv = detail::load4(xr, e);
        const float4 dyv = detail::load4(dyr, e);
        const float4 gv = load_gain4(gain, e, gain_vec);
        const float g0 = detail::stored(dyv.x, round_dy) * gv.x, xhat0 = xv.x * s;
        const float g1 = detail::stored(dyv.y, round_dy) * gv.y, xhat1 = xv.y * s;
        const float g2 = detail::stored(dyv.z, round_dy) * gv.z, xhat2 = xv.z * s;
        const float g3 = detail::stored(dyv.w, round_dy) * gv.w, xhat3 = xv.w * s;
        float4 v = make_float4(s * (g0 - xhat0 * c), s * (g1 - xhat1 * c), s * (g2 - xhat2 * c), s * (g3 - xhat3 * c));
        if (add != nullptr) {
          const float4 a = detail::load4(add, base + e);
          v = make_float4(a.x + v.x, a.y + v.y, a.z + v.z, a.w + v.w);
        }
        detail::write_out4(dx, base + e, v, store);
      }
    } else {
      for (int e = lane; e < d; e += 32) {
        const float g = detail::stored(detail::load1(dyr, e), round_dy) * gain[e];
        const float xhat = detail::load1(xr, e) * s;
        const float v = s * (g - xhat * c);
        detail::write_out(dx, base + e, add != nullptr ? detail::load1(add, base + e) + v : v, store);
      }
    }
  }
}

// ---- Direct kernels (rows too wide for a tile) ---------------------------------------------------

template <class X>
__global__ void rmsnorm_forward_kernel(const X* x, const float* gain, int rows, int d, float eps, float* y,
                                       float* rstd, StoreOut store) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 8;
  const int lane = threadIdx.x % 8;
  const bool active = row < rows;  // inactive groups still take part in the shuffles
  const X* xr = x + static_cast<size_t>(active ? row : 0) * d;
  float partial = 0.0f;
  if (active)
    for (int e = lane; e < d; e += 8) {
      const float v = detail::load1(xr, e);
      partial += v * v;
    }
  const float sum_sq = detail::group8_combine(partial);
  if (!active) return;
  const float mean_sq = sum_sq / static_cast<float>(d);
  const float s = 1.0f / sqrtf(mean_sq + eps);
  if (lane == 0) rstd[row] = s;
  const size_t base = static_cast<size_t>(row) * d;
  for (int e = lane; e < d; e += 8) detail::write_out(y, base + e, (detail::load1(xr, e) * s) * gain[e], store);
}

template <class X, class DY, class A>
__global__ void rmsnorm_dx_kernel(const X* x, const float* gain, const float* rstd, const DY* dy,
                                  int rows, int d, const A* add, float* dx, StoreOut store, bool round_dy) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 8;
  const int lane = threadIdx.x % 8;
  const bool active = row < rows;
  const size_t base = static_cast<size_t>(active ? row : 0) * d;
  const float s = active ? rstd[row] : 0.0f;
  float partial = 0.0f;
  if (active) {
    for (int e = lane; e < d; e += 8) {
      const float g = detail::stored(detail::load1(dy, base + e), round_dy) * gain[e];
      const float xhat = detail::load1(x, base + e) * s;
      partial += g * xhat;
    }
  }
  const float dot = detail::group8_combine(partial);
  if (!active) return;
  const float c = dot / static_cast<float>(d);
  for (int e = lane; e < d; e += 8) {
    const float g = detail::stored(detail::load1(dy, base + e), round_dy) * gain[e];
    const float xhat = detail::load1(x, base + e) * s;
    const float v = s * (g - xhat * c);
    detail::write_out(dx, base + e, add != nullptr ? detail::load1(add, base + e) + v : v, store);
  }
}

// ---- dgain ---------------------------------------------------------------------------------------

// partial[chunk][j] = Σ_{rows of chunk, in order} dy ⊙ (x · rstd), starting from 0. The unrolled
// loop lets a thread have many rows' loads in flight (the additions still run in row order).
template <class X, class DY>
__global__ void rmsnorm_dgain_partial_kernel(const X* x, const float* rstd, const DY* dy, int rows,
                                             int d, float* partial, bool round_dy) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const int r0 = blockIdx.y * kRmsnormRowChunk;
  const int r1 = r0 + kRmsnormRowChunk < rows ? r0 + kRmsnormRowChunk : rows;
  float sum = 0.0f;
#pragma unroll 16
  for (int r = r0; r < r1; ++r) {
    const size_t i = static_cast<size_t>(r) * d + j;
    sum += detail::stored(detail::load1(dy, i), round_dy) * (detail::load1(x, i) * rstd[r]);
  }
  partial[static_cast<size_t>(blockIdx.y) * d + j] = sum;
}

// dgain[j] += Σ_chunks partial[c][j], chunks in order from 0. A block owns kTotalColumns columns:
// all its threads load a piece of kTotalPiece chunks into shared memory (coalesced, all loads in
// flight), then one thread per column adds them in chunk order; the running sum carries over from
// piece to piece, so the additions are exactly the sequential ones.
constexpr int kTotalColumns = 32, kTotalLoaders = 8, kTotalPiece = 128;
__global__ void rmsnorm_dgain_total_kernel(const float* partial, int chunks, int d, float* dgain) {
  __shared__ float piece[kTotalPiece][kTotalColumns];
  const int j = blockIdx.x * kTotalColumns + threadIdx.x;
  const bool active = j < d;
  float sum = 0.0f;
  for (int c0 = 0; c0 < chunks; c0 += kTotalPiece) {
    const int n = chunks - c0 < kTotalPiece ? chunks - c0 : kTotalPiece;
    // All of a thread's loads into registers first, then the shared-memory stores: interleaved,
    // each store would wait for its load before the next load could issue.
    constexpr int kPerLoader = kTotalPiece / kTotalLoaders;
    float v[kPerLoader];
#pragma unroll
    for (int k = 0; k < kPerLoader; ++k) {
      const int c = threadIdx.y + k * kTotalLoaders;
      v[k] = active && c < n ? partial[static_cast<size_t>(c0 + c) * d + j] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kPerLoader; ++k) piece[threadIdx.y + k * kTotalLoaders][threadIdx.x] = v[k];
    __syncthreads();
    if (active && threadIdx.y == 0) {
#pragma unroll 8
      for (int c = 0; c < n; ++c) sum += piece[c][threadIdx.x];  // reads issued ahead, additions in order
    }
    __syncthreads();
  }
  if (active && threadIdx.y == 0) dgain[j] += sum;
}

void check_shape(const char* op, int rows, int d) {
  detail::require(rows >= 1 && d >= 1, op,
                  "needs rows >= 1 and d >= 1, got rows = " + std::to_string(rows) + ", d = " + std::to_string(d));
}

unsigned tile_blocks(int rows, const Tile& t) { return static_cast<unsigned>((rows + t.rows - 1) / t.rows); }

}  // namespace

namespace {

// A 16-byte staging copy holds a whole number of T and a row of d of them is whole copies.
template <class T>
bool vec_rows(int d) {
  return d % static_cast<int>(16 / sizeof(T)) == 0;
}

template <class X>
void forward(const X* x, const float* gain, int rows, int d, float eps, float* y, float* rstd, cudaStream_t stream,
             StoreOut y_store) {
  check_shape("rmsnorm_forward", rows, d);
  detail::require(y != nullptr || y_store.bf16 != nullptr, "rmsnorm_forward",
                  "no output: y and its bf16 copy are null");
  const Tile t = plan_tile(d, 1, 1);
  if (t.rows == 0) {
    rmsnorm_forward_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads, 0, stream>>>(x, gain, rows, d, eps,
                                                                                                y, rstd, y_store);
  } else if (vec_rows<X>(d) && detail::aligned(x, 16) && detail::vec4_ok(y, y_store)) {
    rmsnorm_forward_staged_kernel<true><<<tile_blocks(rows, t), kThreads, t.bytes, stream>>>(
        x, gain, rows, d, t.stride, t.rows, eps, y, rstd, y_store, detail::aligned(gain, 16));
  } else {
    rmsnorm_forward_staged_kernel<false><<<tile_blocks(rows, t), kThreads, t.bytes, stream>>>(
        x, gain, rows, d, t.stride, t.rows, eps, y, rstd, y_store, false);
  }
  detail::check_launch();
}

template <class X, class DY, class A>
void backward(const char* op, const X* x, const float* gain, const float* rstd, const DY* dy, int rows, int d,
              const A* add, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream, StoreOut dx_store,
              bool round_dy) {
  check_shape(op, rows, d);
  detail::require(dx != nullptr || dx_store.bf16 != nullptr, op, "no output: dx and its bf16 copy are null");
  const int chunks = (rows + kRmsnormRowChunk - 1) / kRmsnormRowChunk;
  detail::require(chunks <= 65535, op, "rows = " + std::to_string(rows) + " is too large");
  auto* partial = static_cast<float*>(workspace.get(static_cast<size_t>(chunks) * d * sizeof(float)));
  const Tile t = plan_tile(d, 2, 2);
  if (t.rows == 0) {
    rmsnorm_dx_kernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads, 0, stream>>>(
        x, gain, rstd, dy, rows, d, add, dx, dx_store, round_dy);
  } else if (vec_rows<X>(d) && vec_rows<DY>(d) && detail::aligned(x, 16) && detail::aligned(dy, 16) &&
             detail::vec_aligned(add) && detail::vec4_ok(dx, dx_store)) {
    rmsnorm_dx_staged_kernel<true><<<tile_blocks(rows, t), kThreads, t.bytes, stream>>>(
        x, gain, rstd, dy, rows, d, t.stride, t.rows, add, dx, dx_store, round_dy, detail::aligned(gain, 16));
  } else {
    rmsnorm_dx_staged_kernel<false><<<tile_blocks(rows, t), kThreads, t.bytes, stream>>>(
        x, gain, rstd, dy, rows, d, t.stride, t.rows, add, dx, dx_store, round_dy, false);
  }
  detail::check_launch();
  const unsigned col_blocks = static_cast<unsigned>((d + kColumnThreads - 1) / kColumnThreads);
  rmsnorm_dgain_partial_kernel<<<dim3(col_blocks, static_cast<unsigned>(chunks)), kColumnThreads, 0, stream>>>(
      x, rstd, dy, rows, d, partial, round_dy);
  detail::check_launch();
  const unsigned total_blocks = static_cast<unsigned>((d + kTotalColumns - 1) / kTotalColumns);
  rmsnorm_dgain_total_kernel<<<total_blocks, dim3(kTotalColumns, kTotalLoaders), 0, stream>>>(partial, chunks, d,
                                                                                              dgain);
  detail::check_launch();
}

}  // namespace

// The public overloads: one per type combination the engine uses (ops.cuh), all the same two
// templates.

void rmsnorm_forward(const float* x, const float* gain, int rows, int d, float eps, float* y, float* rstd,
                     cudaStream_t stream, StoreOut y_store) {
  forward(x, gain, rows, d, eps, y, rstd, stream, y_store);
}

void rmsnorm_forward(const bf16_t* x, const float* gain, int rows, int d, float eps, float* y, float* rstd,
                     cudaStream_t stream, StoreOut y_store) {
  forward(x, gain, rows, d, eps, y, rstd, stream, y_store);
}

void rmsnorm_backward(const float* x, const float* gain, const float* rstd, const float* dy, int rows, int d,
                      float* dx, float* dgain, Workspace& workspace, cudaStream_t stream, StoreOut dx_store,
                      bool round_dy) {
  backward("rmsnorm_backward", x, gain, rstd, dy, rows, d, static_cast<const float*>(nullptr), dx, dgain, workspace,
           stream, dx_store, round_dy);
}

void rmsnorm_backward(const bf16_t* x, const float* gain, const float* rstd, const float* dy, int rows, int d,
                      float* dx, float* dgain, Workspace& workspace, cudaStream_t stream, StoreOut dx_store,
                      bool round_dy) {
  backward("rmsnorm_backward", x, gain, rstd, dy, rows, d, static_cast<const float*>(nullptr), dx, dgain, workspace,
           stream, dx_store, round_dy);
}

namespace {

template <class X, class DY, class A>
void backward_add(const X* x, const float* gain, const float* rstd, const DY* dy, int rows, int d, const A* dx_add,
                  float* dx, float* dgain, Workspace& workspace, cudaStream_t stream, StoreOut dx_store, bool round_dy) {
  detail::require(dx_add != nullptr, "rmsnorm_backward_add", "a null dx_add");
  backward("rmsnorm_backward_add", x, gain, rstd, dy, rows, d, dx_add, dx, dgain, workspace, stream, dx_store,
           round_dy);
}

}  // namespace

void rmsnorm_backward_add(const float* x, const float* gain, const float* rstd, const float* dy, int rows, int d,
                          const float* dx_add, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream,
                          StoreOut dx_store, bool round_dy) {
  backward_add(x, gain, rstd, dy, rows, d, dx_add, dx, dgain, workspace, stream, dx_store, round_dy);
}

void rmsnorm_backward_add(const float* x, const float* gain, const float* rstd, const bf16_t* dy, int rows, int d,
                          const float* dx_add, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream,
                          StoreOut dx_store) {
  backward_add(x, gain, rstd, dy, rows, d, dx_add, dx, dgain, workspace, stream, dx_store, false);
}

void rmsnorm_backward_add(const bf16_t* x, const float* gain, const float* rstd, const bf16_t* dy, int rows, int d,
                          const float* dx_add, float* dx, float* dgain, Workspace& workspace, cudaStream_t stream,
                          StoreOut dx_store) {
  backward_add(x, gain, rstd, dy, rows, d, dx_add, dx, dgain, workspace, stream, dx_store, false);
}

void rmsnorm_backward_add(const bf16_t* x, const float* gain, const float* rstd, const bf16_t* dy, int rows, int d,
                          bf16_t* residual, float* dgain, Workspace& workspace, cudaStream_t stream) {
  StoreOut store;
  store.round = true;
  store.bf16 = residual;  // each element read (as dx_add) before the same thread writes it
  backward_add(x, gain, rstd, dy, rows, d, static_cast<const bf16_t*>(residual), static_cast<float*>(nullptr), dgain,
               workspace, stream, store, false);
}

}  // namespace fp4::cuda
