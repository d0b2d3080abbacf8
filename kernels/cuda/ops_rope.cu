// ops_rope.cu — see ops.cuh: rotary position embedding, forward and backward, in place.
//
// One thread per (row, head, pair): each pair's rotation is independent. The arithmetic is the
// reference's, operation for operation ((x0·c − x1·s'), (x0·s' + x1·c) with s' = ±sin), so the
// results are bit-identical; the table is the reference's table (same double-precision formula on
// the host, rounded once).
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/ops_common.cuh"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(float* x, int rows, int seq_len, int n_heads, int head_dim, int row_stride,
                            const float* cos_table, const float* sin_table, float sign) {
  const int half = head_dim / 2;
  const size_t n = static_cast<size_t>(rows) * n_heads * half;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const size_t rh = idx / half;
    const int h = static_cast<int>(rh % n_heads);
    const int r = static_cast<int>(rh / n_heads);
    const int pos = r % seq_len;
    const float c = cos_table[static_cast<size_t>(pos) * half + i];
    const float sn = sign * sin_table[static_cast<size_t>(pos) * half + i];
    float* v = x + static_cast<size_t>(r) * row_stride + static_cast<size_t>(h) * head_dim + 2 * i;
    const float x0 = v[0], x1 = v[1];
    v[0] = x0 * c - x1 * sn;
    v[1] = x0 * sn + x1 * c;
  }
}

// The packed qkv buffer in one pass. Each value is first rounded (store.round: the store before
// RoPE), the pairs of q and k are rotated with rope_kernel's expressions, then every value is
// rounded again (the store after) and written, with its bf16 copy when store.bf16 is set.
//
// Threads walk (row r, unit k) over a detail::row_grid, so the row, position and column come
// without a 64-bit division per element. A unit is one pair (columns 2k, 2k+1), or with kVec two
// pairs (columns 4k .. 4k+3, one float4; head_dim % 4 == 0, so both pairs lie in one head, q, k
// or v alike, and their table entries i, i+1 are one aligned float2).
__device__ __forceinline__ void rotate(float& x0, float& x1, float c, float s, float sign) {
  const float sn = sign * s;
  const float y0 = x0 * c - x1 * sn;
  const float y1 = x0 * sn + x1 * c;
  x0 = y0;
  x1 = y1;
}

// In place for fp32 (dst == src). T = bf16_t: src holds bf16 (stored values), and each result is
// rounded and written to dst as bf16 (store is then {round, no copy}: dst is the bf16 copy); dst
// may be src.
template <bool kVec, class T>
__global__ void rope_qkv_kernel(const T* src, T* x, int rows, int seq_len, int d, int head_dim,
                                const float* cos_table, const float* sin_table, float sign, StoreOut store) {
  const unsigned half = head_dim / 2;
  // Units per row and those of q and k (columns < 2·d); d is even, and a multiple of 4 with kVec.
  const unsigned units = kVec ? 3u * (d / 4) : 3u * (d / 2);
  const unsigned qk_units = kVec ? d / 2 : d;
  for (unsigned r = blockIdx.y * blockDim.y + threadIdx.y; r < static_cast<unsigned>(rows);
       r += gridDim.y * blockDim.y) {
    const size_t row_at = static_cast<size_t>(r) * 3 * d;
    const T* row = src + row_at;
    const float* cos_pos = cos_table + static_cast<size_t>(r % seq_len) * half;
    const float* sin_pos = sin_table + static_cast<size_t>(r % seq_len) * half;
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < units; k += gridDim.x * blockDim.x) {
      if constexpr (kVec) {
        const size_t col = 4 * static_cast<size_t>(k);
        float4 v = detail::load4(row, col);
        v.x = detail::stored(v.x, store.round);
        v.y = detail::stored(v.y, store.round);
        v.z = detail::stored(v.z, store.round);
        v.w = detail::stored(v.w, store.round);
        if (k < qk_units) {  // q or k: rotate pairs i and i + 1 of its head
          const unsigned i = (2 * k) % half;  // (col mod head_dim) / 2
          const float2 c = *reinterpret_cast<const float2*>(cos_pos + i);
          const float2 sn = *reinterpret_cast<const float2*>(sin_pos + i);
          rotate(v.x, v.y, c.x, sn.x, sign);
          rotate(v.z, v.w, c.y, sn.y, sign);
        }
        if constexpr (std::is_same_v<T, bf16_t>) {
          *reinterpret_cast<uint2*>(x + row_at + col) = detail::pack_bf16x4(v.x, v.y, v.z, v.w);
        } else {
          detail::write_out4(x, row_at + col, v, store);
        }
      } else {
        const size_t col = 2 * static_cast<size_t>(k);
        float x0 = detail::stored(detail::load1(row, col), store.round);
        float x1 = detail::stored(detail::load1(row, col + 1), store.round);
        if (k < qk_units) {  // q or k: rotate pair i of its head
          const unsigned i = k % half;  // (col mod head_dim) / 2
          rotate(x0, x1, cos_pos[i], sin_pos[i], sign);
        }
        if constexpr (std::is_same_v<T, bf16_t>) {
          x[row_at + col] = ::fp4::float_to_bf16(x0);
          x[row_at + col + 1] = ::fp4::float_to_bf16(x1);
        } else {
          detail::write_out(x, row_at + col, x0, store);
          detail::write_out(x, row_at + col + 1, x1, store);
        }
      }
    }
  }
}

// The bf16 buffer in place, eight values (16 bytes) per thread: what rope_qkv_kernel<true, bf16_t>
// computes, with half its accesses and without rewriting v. Rounding a bf16 value to bf16 is the
// identity except on a signaling NaN, which float_to_bf16 quiets (| 0x40): a unit of v is written
// back only when it holds one, so every bit of the result is the general kernel's. Needs
// head_dim % 8 == 0 (a unit's four pairs lie in one head, and i, a multiple of 4, starts an aligned
// float4 of the table, whose rows then hold a multiple of 4 entries) and a 16-byte-aligned x.
__global__ void rope_qkv_bf16_in_place_kernel(bf16_t* x, int rows, int seq_len, int d, int head_dim,
                                              const float* cos_table, const float* sin_table, float sign) {
  const unsigned half = head_dim / 2;
  const unsigned units = 3u * (d / 8), qk_units = d / 4;
  for (unsigned r = blockIdx.y * blockDim.y + threadIdx.y; r < static_cast<unsigned>(rows);
       r += gridDim.y * blockDim.y) {
    uint4* row = reinterpret_cast<uint4*>(x + static_cast<size_t>(r) * 3 * d);
    const float* cos_pos = cos_table + static_cast<size_t>(r % seq_len) * half;
    const float* sin_pos = sin_table + static_cast<size_t>(r % seq_len) * half;
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < units; k += gridDim.x * blockDim.x) {
      uint4 w = row[k];
      if (k < qk_units) {  // q or k: rotate pairs i .. i + 3 of its head
        const unsigned i = (4 * k) % half;  // (8k mod head_dim) / 2
        const float4 c = *reinterpret_cast<const float4*>(cos_pos + i);
        const float4 sn = *reinterpret_cast<const float4*>(sin_pos + i);
        float4 a = detail::unpack_bf16x4(make_uint2(w.x, w.y));
        float4 b = detail::unpack_bf16x4(make_uint2(w.z, w.w));
        a = make_float4(detail::stored(a.x, true), detail::stored(a.y, true), detail::stored(a.z, true),
                        detail::stored(a.w, true));
        b = make_float4(detail::stored(b.x, true), detail::stored(b.y, true), detail::stored(b.z, true),
                        detail::stored(b.w, true));
        rotate(a.x, a.y, c.x, sn.x, sign);
        rotate(a.z, a.w, c.y, sn.y, sign);
        rotate(b.x, b.y, c.z, sn.z, sign);
        rotate(b.z, b.w, c.w, sn.w, sign);
        const uint2 lo = detail::pack_bf16x4(a.x, a.y, a.z, a.w), hi = detail::pack_bf16x4(b.x, b.y, b.z, b.w);
        row[k] = make_uint4(lo.x, lo.y, hi.x, hi.y);
      } else {  // v: only a signaling NaN changes (twice quieted is once quieted)
        const auto quiet = [](uint32_t two) {
          for (int s = 0; s < 32; s += 16) {
            const uint32_t h = (two >> s) & 0xffffu;
            if ((h & 0x7fffu) > 0x7f80u) two |= 0x40u << s;
          }
          return two;
        };
        const uint4 q = make_uint4(quiet(w.x), quiet(w.y), quiet(w.z), quiet(w.w));
        if (q.x != w.x || q.y != w.y || q.z != w.z || q.w != w.w) row[k] = q;
      }
    }
  }
}

template <class T>
void rope_qkv(const char* op, const T* src, T* x, int batch, int seq_len, int n_heads, int head_dim,
              const RopeTable& table, float sign, StoreOut store, cudaStream_t stream) {
  detail::require(batch >= 1 && seq_len >= 1 && n_heads >= 1 && head_dim >= 2 && head_dim % 2 == 0, op,
                  "needs batch, seq_len, n_heads >= 1 and an even head_dim >= 2, got batch = " +
                      std::to_string(batch) + ", seq_len = " + std::to_string(seq_len) + ", n_heads = " +
                      std::to_string(n_heads) + ", head_dim = " + std::to_string(head_dim));
  detail::require(table.seq_len() == seq_len && table.head_dim() == head_dim, op,
                  "the table is for seq_len = " + std::to_string(table.seq_len()) + ", head_dim = " +
                      std::to_string(table.head_dim()) + ", not seq_len = " + std::to_string(seq_len) +
                      ", head_dim = " + std::to_string(head_dim));
  const int rows = batch * seq_len, d = n_heads * head_dim;
  // The tables come from cudaMalloc (aligned); with head_dim % 4 == 0 a row of the table holds an
  // even number of entries and i is even, so the float2 reads are aligned.
  const bool vec = std::is_same_v<T, bf16_t> ? detail::vec_aligned(x) && detail::vec_aligned(src)
                                             : detail::vec4_ok(reinterpret_cast<float*>(x), store);
  if constexpr (std::is_same_v<T, bf16_t>) {
    // Both engine calls run in place (the bf16 path's store is always {round, no copy}).
    if (src == x && head_dim % 8 == 0 && detail::aligned(x, 16) && store.round && store.bf16 == nullptr) {
      const detail::RowGrid g = detail::row_grid(rows, 3LL * d / 8, kThreads);
      rope_qkv_bf16_in_place_kernel<<<g.grid, g.block, 0, stream>>>(x, rows, seq_len, d, head_dim, table.cos(),
                                                                    table.sin(), sign);
      detail::check_launch();
      return;
    }
  }
  if (head_dim % 4 == 0 && vec) {
    const detail::RowGrid g = detail::row_grid(rows, 3LL * d / 4, kThreads);
    rope_qkv_kernel<true><<<g.grid, g.block, 0, stream>>>(src, x, rows, seq_len, d, head_dim, table.cos(),
                                                          table.sin(), sign, store);
  } else {
    const detail::RowGrid g = detail::row_grid(rows, 3LL * d / 2, kThreads);
    rope_qkv_kernel<false><<<g.grid, g.block, 0, stream>>>(src, x, rows, seq_len, d, head_dim, table.cos(),
                                                           table.sin(), sign, store);
  }
  detail::check_launch();
}

void rope_apply(const char* op, float* x, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                const RopeTable& table, float sign, cudaStream_t stream) {
  detail::require(batch >= 1 && seq_len >= 1 && n_heads >= 1 && head_dim >= 2 && head_dim % 2 == 0, op,
                  "needs batch, seq_len, n_heads >= 1 and an even head_dim >= 2, got batch = " +
                      std::to_string(batch) + ", seq_len = " + std::to_string(seq_len) + ", n_heads = " +
                      std::to_string(n_heads) + ", head_dim = " + std::to_string(head_dim));
  detail::require(row_stride >= n_heads * head_dim, op,
                  "row_stride = " + std::to_string(row_stride) + " is shorter than n_heads·head_dim = " +
                      std::to_string(n_heads * head_dim));
  detail::require(table.seq_len() == seq_len && table.head_dim() == head_dim, op,
                  "the table is for seq_len = " + std::to_string(table.seq_len()) + ", head_dim = " +
                      std::to_string(table.head_dim()) + ", not seq_len = " + std::to_string(seq_len) +
                      ", head_dim = " + std::to_string(head_dim));
  const int rows = batch * seq_len;
  const size_t n = static_cast<size_t>(rows) * n_heads * (head_dim / 2);
  rope_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      x, rows, seq_len, n_heads, head_dim, row_stride, table.cos(), table.sin(), sign);
  detail::check_launch();
}

}  // namespace

RopeTable::RopeTable(int seq_len, int head_dim, double base) : seq_len_(seq_len), head_dim_(head_dim) {
  detail::require(seq_len >= 1 && head_dim >= 2 && head_dim % 2 == 0 && base > 0.0, "RopeTable",
                  "needs seq_len >= 1, an even head_dim >= 2 and base > 0, got seq_len = " +
                      std::to_string(seq_len) + ", head_dim = " + std::to_string(head_dim));
  const int half = head_dim / 2;
  const size_t n = static_cast<size_t>(seq_len) * half;
  std::vector<float> c(n), s(n);
  // The reference's loop (kernels/cpu/ops.cpp, rope_table), expression for expression, so the
  // same libm gives the same bits.
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(base, -2.0 * i / head_dim);
    for (int pos = 0; pos < seq_len; ++pos) {
      const double angle = pos * inv_freq;
      c[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::cos(angle));
      s[static_cast<size_t>(pos) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  cos_ = DeviceArray<float>(c);
  sin_ = DeviceArray<float>(s);
}

void rope_forward(float* x, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                  const RopeTable& table, cudaStream_t stream) {
  rope_apply("rope_forward", x, batch, seq_len, n_heads, head_dim, row_stride, table, 1.0f, stream);
}

void rope_backward(float* dx, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                   const RopeTable& table, cudaStream_t stream) {
  rope_apply("rope_backward", dx, batch, seq_len, n_heads, head_dim, row_stride, table, -1.0f, stream);
}

void rope_forward_qkv(float* qkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                      cudaStream_t stream, StoreOut store) {
  rope_qkv("rope_forward_qkv", static_cast<const float*>(qkv), qkv, batch, seq_len, n_heads, head_dim, table, 1.0f,
           store, stream);
}

void rope_backward_qkv(float* dqkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                       cudaStream_t stream, StoreOut store) {
  rope_qkv("rope_backward_qkv", static_cast<const float*>(dqkv), dqkv, batch, seq_len, n_heads, head_dim, table,
           -1.0f, store, stream);
}

void rope_forward_qkv(bf16_t* qkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                      cudaStream_t stream) {
  StoreOut store;
  store.round = true;  // the store after RoPE; the one before is the identity on bf16 values
  rope_qkv("rope_forward_qkv", static_cast<const bf16_t*>(qkv), qkv, batch, seq_len, n_heads, head_dim, table, 1.0f,
           store, stream);
}

void rope_backward_qkv(const bf16_t* dqkv, int batch, int seq_len, int n_heads, int head_dim, const RopeTable& table,
                       bf16_t* out, cudaStream_t stream) {
  StoreOut store;
  store.round = true;
  rope_qkv("rope_backward_qkv", dqkv, out, batch, seq_len, n_heads, head_dim, table, -1.0f, store, stream);
}

}  // namespace fp4::cuda
