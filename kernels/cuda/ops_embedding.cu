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

// The same permutation by counting, for a vocabulary small against the rows (the byte tokenizer's
// 256 against a micro-batch's 16384 rows: the rank count's rows² compares took 15% of a d2 step).
// Block v counts the rows with key v (count_kernel), one block turns the counts into each key's
// first sorted position (start_kernel), and block v then walks the rows in order, placing each row
// with key v at start[v] + the number of earlier rows with key v (place_kernel): rank by (key,
// row) exactly as above, so the same perm and sorted. No atomics: block-wide counts and prefix
// sums from warp ballots.
constexpr int kCountThreads = 1024;

__global__ void embedding_count_kernel(const int32_t* tokens, int rows, int vocab, int32_t* counts) {
  const int32_t v = static_cast<int32_t>(blockIdx.x);
  int count = 0;
  for (int base = 0; base < rows; base += kCountThreads) {
    const int r = base + static_cast<int>(threadIdx.x);
    count += __syncthreads_count(r < rows && token_key(tokens[r], vocab) == v);
  }
  if (threadIdx.x == 0) counts[v] = count;
}

__global__ void embedding_start_kernel(const int32_t* counts, int keys, int32_t* starts) {  // one thread
  int32_t at = 0;
  for (int v = 0; v < keys; ++v) {
    starts[v] = at;
    at += counts[v];
  }
}

__global__ void embedding_place_kernel(const int32_t* tokens, int rows, int vocab, const int32_t* starts,
                                       int32_t* perm, int32_t* sorted) {
  __shared__ int warp_counts[kCountThreads / 32];
  const int32_t v = static_cast<int32_t>(blockIdx.x);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  int32_t at = starts[v];
  for (int base = 0; base < rows; base += kCountThreads) {
    const int r = base + static_cast<int>(threadIdx.x);
    const bool mine = r < rows && token_key(tokens[r], vocab) == v;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1u));  // earlier rows of this warp with key v
    int total = 0;
    for (int w = 0; w < kCountThreads / 32; ++w) {
      if (w < warp) before += warp_counts[w];
      total += warp_counts[w];
    }
    if (mine) {
      perm[at + before] = r;
      sorted[at + before] = v;
    }
    at += total;
    __syncthreads();  // warp_counts is rewritten by the next chunk
  }
}

// Block (i, column chunk): if sorted position i starts a token's run, its threads add the run's
// rows, in row order, into that token's table row.
// D: float, or bf16_t for a gradient held in bf16 (read exactly as fp32).
template <class D>
__global__ void embedding_accumulate_kernel(const int32_t* perm, const int32_t* sorted, const D* dout,
                                            int rows, int d, int vocab, float* dtable) {
  const int i = blockIdx.x;
  const int32_t key = sorted[i];
  if (key == vocab || (i > 0 && sorted[i - 1] == key)) return;
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float* dst = dtable + static_cast<size_t>(key) * d + j;
  float acc = *dst;
  for (int p = i; p < rows && sorted[p] == key; ++p) acc += detail::load1(dout, static_cast<size_t>(perm[p]) * d + j);
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
  detail::require(out != nullptr || out_store.bf16 != nullptr, "embedding_forward",
                  "no output: out and its bf16 copy are null");
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(d);
  embedding_forward_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      table, vocab, tokens, rows, d, out, out_store);
  detail::check_launch();
}

namespace {

template <class D>
void backward(const int32_t* tokens, const D* dout, int rows, int d, int vocab, float* dtable, Workspace& workspace,
              cudaStream_t stream) {
  check_shape("embedding_backward", rows, d, vocab);
  // Counting costs (vocab + 1)·rows reads, the rank count rows² compares: the cheaper one.
  const int keys = vocab + 1;  // the out-of-range key `vocab` too
  const bool counting = static_cast<int64_t>(keys) * 4 <= rows;
  const size_t words = 2 * static_cast<size_t>(rows) + (counting ? 2 * static_cast<size_t>(keys) : 0);
  auto* perm = static_cast<int32_t*>(workspace.get(words * sizeof(int32_t)));
  int32_t* sorted = perm + rows;
  if (counting) {
    int32_t* counts = sorted + rows;
    int32_t* starts = counts + keys;
    embedding_count_kernel<<<keys, kCountThreads, 0, stream>>>(tokens, rows, vocab, counts);
    detail::check_launch();
    embedding_start_kernel<<<1, 1, 0, stream>>>(counts, keys, starts);
    detail::check_launch();
    embedding_place_kernel<<<keys, kCountThreads, 0, stream>>>(tokens, rows, vocab, starts, perm, sorted);
    detail::check_launch();
  } else {
    embedding_rank_kernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(tokens, rows, vocab,
                                                                                     perm, sorted);
    detail::check_launch();
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((d + kAccumThreads - 1) / kAccumThreads));
  detail::require(grid.y <= 65535u, "embedding_backward", "d = " + std::to_string(d) + " is too large");
  embedding_accumulate_kernel<<<grid, kAccumThreads, 0, stream>>>(perm, sorted, dout, rows, d, vocab, dtable);
  detail::check_launch();
}

}  // namespace

void embedding_backward(const int32_t* tokens, const float* dout, int rows, int d, int vocab, float* dtable,
                        Workspace& workspace, cudaStream_t stream) {
  backward(tokens, dout, rows, d, vocab, dtable, workspace, stream);
}

void embedding_backward(const int32_t* tokens, const bf16_t* dout, int rows, int d, int vocab, float* dtable,
                        Workspace& workspace, cudaStream_t stream) {
  backward(tokens, dout, rows, d, vocab, dtable, workspace, stream);
}

}  // namespace fp4::cuda
