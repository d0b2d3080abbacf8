// ops_embedding.cu — see ops.cuh: the token embedding's gather and its deterministic scatter-add.
//
// The backward must add, into each table element, the gradients of the rows holding that token in
// row order — the CPU's exact sequence of additions — without atomics. So the rows are first put
// in (token, row) order: each row's rank is the number of rows with a smaller token, or the same
// token and a smaller row index (keys are unique, so the ranks are a permutation; computed by plain
// counting, O(rows²) compares from shared memory, no atomics, no sort library). Then one thread
// per (first row of a token's run, column) walks the run in row order with the sum in a register.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <cmath>
#include <string>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRankTile = 1024;  // tokens staged in shared memory per step of the rank count
constexpr int kAccumThreads = 128;

__global__ void embedding_forward_kernel(const float* table, int vocab, const int32_t* tokens, int rows,
                                         int d, float* out, StoreOut store) {
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(d);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / static_cast<size_t>(d), j = i % static_cast<size_t>(d);
    const int32_t tok = tokens[r];
    detail::write_out(out, i, (tok >= 0 && tok < vocab) ? table[static_cast<size_t>(tok) * d + j] : NAN, store);
  }
}

// Out-of-range tokens get the key `vocab`: they sort last and the accumulation skips them.
__device__ __forceinline__ int32_t token_key(int32_t tok, int vocab) {
  return (tok >= 0 && tok < vocab) ? tok : vocab;
}

// perm[rank(r)] = r and sorted[rank(r)] = key(r), rank by (key, row).
__global__ void embedding_rank_kernel(const int32_t* tokens, int rows, int vocab, int32_t* perm,
                                      int32_t* sorted) {
  __shared__ int32_t tile[kRankTile];
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  const int32_t key = r < rows ? token_key(tokens[r], vocab) : 0;
  int rank = 0;
  for (int base = 0; base < rows; base += kRankTile) {
    const int count = rows - base < kRankTile ? rows - base : kRankTile;
    __syncthreads();  // the previous tile is no longer being read
    for (int i = threadIdx.x; i < count; i += blockDim.x) tile[i] = token_key(tokens[base + i], vocab);
    __syncthreads();
    if (r < rows) {
      for (int i = 0; i < count; ++i) {
        const int32_t other = tile[i];
        rank += (other < key || (other == key && base + i < r)) ? 1 : 0;
      }
    }
  }
  if (r < rows) {
    perm[rank] = r;
    sorted[rank] = key;
  }
}

// Block (i, column chunk): if sorted position i starts a token's run, its threads add the run's
// rows, in row order, into that token's table row.
__global__ void embedding_accumulate_kernel(const int32_t* perm, const int32_t* sorted, const float* dout,
                                            int rows, int d, int vocab, float* dtable) {
  const int i = blockIdx.x;
  const int32_t key = sorted[i];
  if (key == vocab || (i > 0 && sorted[i - 1] == key)) return;
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float* dst = dtable + static_cast<size_t>(key) * d + j;
  float acc = *dst;
  for (int p = i; p < rows && sorted[p] == key; ++p) acc += dout[static_cast<size_t>(perm[p]) * d + j];
  *dst = acc;
}

void check_shape(const char* op, int rows, int d, int vocab) {
  detail::require(rows >= 1 && d >= 1 && vocab >= 1, op,
                  "needs rows, d and vocab >= 1, got rows = " + std::to_string(rows) + ", d = " +
                      std::to_string(d) + ", vocab = " + std::to_string(vocab));
}

}  // namespace

void embedding_forward(const float* table, int vocab, const int32_t* tokens, int rows, int d, float* out,
                       cudaStream_t stream, StoreOut out_store) {
  check_shape("embedding_forward", rows, d, vocab);
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(d);
  embedding_forward_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      table, vocab, tokens, rows, d, out, out_store);
  detail::check_launch();
}

void embedding_backward(const int32_t* tokens, const float* dout, int rows, int d, int vocab, float* dtable,
                        Workspace& workspace, cudaStream_t stream) {
  check_shape("embedding_backward", rows, d, vocab);
  auto* perm = static_cast<int32_t*>(workspace.get(2 * static_cast<size_t>(rows) * sizeof(int32_t)));
  int32_t* sorted = perm + rows;
  embedding_rank_kernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(tokens, rows, vocab,
                                                                                   perm, sorted);
  detail::check_launch();
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((d + kAccumThreads - 1) / kAccumThreads));
  detail::require(grid.y <= 65535u, "embedding_backward", "d = " + std::to_string(d) + " is too large");
  embedding_accumulate_kernel<<<grid, kAccumThreads, 0, stream>>>(perm, sorted, dout, rows, d, vocab, dtable);
  detail::check_launch();
}

}  // namespace fp4::cuda
