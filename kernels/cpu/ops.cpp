// ops.cpp — see ops.h. Each op is its formula written out; the only performance devices are
// OpenMP over independent rows or (sequence, head) pairs and the lane-wise dot() of ops.h.
#include "kernels/cpu/ops.h"

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "kernels/cpu/gemm.h"

namespace fp4::cpu {

namespace {

inline size_t at(int row, int cols) { return static_cast<size_t>(row) * static_cast<size_t>(cols); }

}  // namespace

template <typename T>
void matmul(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, const T* b,
            T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    cpu::gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  } else {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        T s = 0;
        for (int p = 0; p < k; ++p) {
          const T av = trans_a ? a[at(p, m) + i] : a[at(i, k) + p];
          const T bv = trans_b ? b[at(j, k) + p] : b[at(p, n) + j];
          s += av * bv;
        }
        c[at(i, n) + j] = alpha * s + (beta == T(0) ? T(0) : beta * c[at(i, n) + j]);
      }
    }
  }
}

// ---- Embedding ---------------------------------------------------------------------------------

template <typename T>
void embedding_forward(const T* table, const int32_t* tokens, int rows, int d, T* out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const T* src = table + at(tokens[r], d);
    T* dst = out + at(r, d);
    for (int j = 0; j < d; ++j) dst[j] = src[j];
  }
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, int rows, int d, T* dtable) {
  // Serial on purpose: two rows with the same token add into the same table row, and the order
  // of those additions must not depend on threads.
  for (int r = 0; r < rows; ++r) axpy(T(1), dout + at(r, d), dtable + at(tokens[r], d), d);
}

// ---- RMSNorm -----------------------------------------------------------------------------------

template <typename T>
void rmsnorm_forward(const T* x, const T* gain, int rows, int d, T eps, T* y, T* rstd) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + at(r, d);
    T* yr = y + at(r, d);
    const T mean_sq = dot(xr, xr, d) / static_cast<T>(d);
    const T s = T(1) / std::sqrt(mean_sq + eps);
    rstd[r] = s;
    for (int j = 0; j < d; ++j) yr[j] = (xr[j] * s) * gain[j];
  }
}

template <typename T>
void rmsnorm_backward(const T* x, const T* gain, const T* rstd, const T* dy, int rows, int d, T* dx,
                      T* dgain) {
#pragma omp parallel
  {
    std::vector<T> g(d), xhat(d);
#pragma omp for schedule(static)
    for (int r = 0; r < rows; ++r) {
      const T* xr = x + at(r, d);
      const T* dyr = dy + at(r, d);
      T* dxr = dx + at(r, d);
      const T s = rstd[r];
      for (int j = 0; j < d; ++j) {
        g[j] = dyr[j] * gain[j];
        xhat[j] = xr[j] * s;
      }
      const T c = dot(g.data(), xhat.data(), d) / static_cast<T>(d);
      for (int j = 0; j < d; ++j) dxr[j] = s * (g[j] - xhat[j] * c);
    }
  }
  // The gain's gradient sums over rows: serially, in row order, into a fresh sum that is then
  // added to the accumulator once.
  std::vector<T> sum(d, T(0));
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + at(r, d);
    const T* dyr = dy + at(r, d);
    const T s = rstd[r];
    for (int j = 0; j < d; ++j) sum[j] += dyr[j] * (xr[j] * s);
  }
  for (int j = 0; j < d; ++j) dgain[j] += sum[j];
}

// ---- RoPE --------------------------------------------------------------------------------------

template <typename T>
RopeTable<T> rope_table(int seq_len, int head_dim, double base) {
  RopeTable<T> t;
  t.seq_len = seq_len;
  t.half = head_dim / 2;
  t.cos.resize(at(seq_len, t.half));
  t.sin.resize(at(seq_len, t.half));
  for (int i = 0; i < t.half; ++i) {
    const double inv_freq = std::pow(base, -2.0 * i / head_dim);
    for (int pos = 0; pos < seq_len; ++pos) {
      const double angle = pos * inv_freq;
      t.cos[at(pos, t.half) + i] = static_cast<T>(std::cos(angle));
      t.sin[at(pos, t.half) + i] = static_cast<T>(std::sin(angle));
    }
  }
  return t;
}

namespace {

// sign = +1 rotates by +angle (forward), −1 by −angle (the transpose, for the backward).
template <typename T>
void rope_apply(T* x, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                const RopeTable<T>& table, T sign) {
  const int half = head_dim / 2;
  const int rows = batch * seq_len;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const int pos = r % seq_len;
    const T* c = table.cos.data() + at(pos, half);
    const T* s = table.sin.data() + at(pos, half);
    for (int h = 0; h < n_heads; ++h) {
      T* v = x + at(r, row_stride) + at(h, head_dim);
      for (int i = 0; i < half; ++i) {
        const T x0 = v[2 * i], x1 = v[2 * i + 1];
        const T sn = sign * s[i];
        v[2 * i] = x0 * c[i] - x1 * sn;
        v[2 * i + 1] = x0 * sn + x1 * c[i];
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* x, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                  const RopeTable<T>& table) {
  rope_apply(x, batch, seq_len, n_heads, head_dim, row_stride, table, T(1));
}

template <typename T>
void rope_backward(T* dx, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                   const RopeTable<T>& table) {
  rope_apply(dx, batch, seq_len, n_heads, head_dim, row_stride, table, T(-1));
}

// ---- Causal attention --------------------------------------------------------------------------

template <typename T>
void attention_forward(const T* qkv, int batch, int seq_len, int n_heads, int head_dim, T* out,
                       T* lse) {
  const int d = n_heads * head_dim, stride = 3 * d;
  const T scale = T(1) / std::sqrt(static_cast<T>(head_dim));
#pragma omp parallel
  {
    std::vector<T> p(seq_len);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < n_heads; ++h) {
        const T* q = qkv + at(b * seq_len, stride) + at(h, head_dim);
        const T* k = q + d;
        const T* v = q + 2 * d;
        T* o = out + at(b * seq_len, d) + at(h, head_dim);
        T* l = lse + at(b * n_heads + h, seq_len);
        for (int t = 0; t < seq_len; ++t) {
          const T* qt = q + at(t, stride);
          T m = -INFINITY;
          for (int j = 0; j <= t; ++j) {
            p[j] = dot(qt, k + at(j, stride), head_dim) * scale;
            if (p[j] > m) m = p[j];
          }
          T sum = 0;
          for (int j = 0; j <= t; ++j) {
            p[j] = std::exp(p[j] - m);
            sum += p[j];
          }
          const T inv = T(1) / sum;
          T* ot = o + at(t, d);
          for (int i = 0; i < head_dim; ++i) ot[i] = 0;
          for (int j = 0; j <= t; ++j) axpy(p[j] * inv, v + at(j, stride), ot, head_dim);
          l[t] = m + std::log(sum);
        }
      }
    }
  }
}

template <typename T>
void attention_backward(const T* qkv, const T* lse, const T* dout, int batch, int seq_len,
                        int n_heads, int head_dim, T* dqkv) {
  const int d = n_heads * head_dim, stride = 3 * d;
  const T scale = T(1) / std::sqrt(static_cast<T>(head_dim));
#pragma omp parallel
  {
    std::vector<T> p(seq_len), dp(seq_len);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < n_heads; ++h) {
        const T* q = qkv + at(b * seq_len, stride) + at(h, head_dim);
        const T* k = q + d;
        const T* v = q + 2 * d;
        const T* dout_bh = dout + at(b * seq_len, d) + at(h, head_dim);
        const T* l = lse + at(b * n_heads + h, seq_len);
        T* dq = dqkv + at(b * seq_len, stride) + at(h, head_dim);
        T* dk = dq + d;
        T* dv = dq + 2 * d;
        for (int t = 0; t < seq_len; ++t) {
          for (int i = 0; i < head_dim; ++i) {
            dq[at(t, stride) + i] = 0;
            dk[at(t, stride) + i] = 0;
            dv[at(t, stride) + i] = 0;
          }
        }
        // Queries in order; each one adds into the keys and values it saw, so every dk_j and
        // dv_j sums over t = j, j+1, ... in that order.
        for (int t = 0; t < seq_len; ++t) {
          const T* qt = q + at(t, stride);
          const T* dot_t = dout_bh + at(t, d);
          T pdp = 0;  // Σ_j p_j dP_j
          for (int j = 0; j <= t; ++j) {
            p[j] = std::exp(dot(qt, k + at(j, stride), head_dim) * scale - l[t]);
            dp[j] = dot(dot_t, v + at(j, stride), head_dim);
            pdp += p[j] * dp[j];
          }
          T* dqt = dq + at(t, stride);
          for (int j = 0; j <= t; ++j) {
            const T ds = p[j] * (dp[j] - pdp) * scale;
            axpy(ds, k + at(j, stride), dqt, head_dim);
            axpy(ds, qt, dk + at(j, stride), head_dim);
            axpy(p[j], dot_t, dv + at(j, stride), head_dim);
          }
        }
      }
    }
  }
}

// ---- SwiGLU ------------------------------------------------------------------------------------

template <typename T>
void swiglu_forward(const T* u, int rows, int f, T* a) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const T* gate = u + at(r, 2 * f);
    const T* up = gate + f;
    T* ar = a + at(r, f);
    for (int j = 0; j < f; ++j) {
      const T sig = T(1) / (T(1) + std::exp(-gate[j]));
      ar[j] = (gate[j] * sig) * up[j];
    }
  }
}

template <typename T>
void swiglu_backward(const T* u, const T* da, int rows, int f, T* du) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const T* gate = u + at(r, 2 * f);
    const T* up = gate + f;
    const T* dar = da + at(r, f);
    T* dgate = du + at(r, 2 * f);
    T* dup = dgate + f;
    for (int j = 0; j < f; ++j) {
      const T g = gate[j];
      const T sig = T(1) / (T(1) + std::exp(-g));
      const T silu = g * sig;
      dgate[j] = dar[j] * up[j] * (sig * (T(1) + g * (T(1) - sig)));
      dup[j] = dar[j] * silu;
    }
  }
}

// ---- Cross-entropy -----------------------------------------------------------------------------

template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int rows, int vocab, T* loss, T* dlogits,
                   T scale) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const T* z = logits + at(r, vocab);
    T m = z[0];
    for (int j = 1; j < vocab; ++j) m = z[j] > m ? z[j] : m;
    T sum = 0;
    for (int j = 0; j < vocab; ++j) sum += std::exp(z[j] - m);
    const T lse = m + std::log(sum);
    loss[r] = lse - z[targets[r]];
    if (dlogits) {
      T* dz = dlogits + at(r, vocab);  // may alias z: each element is read before it is written
      for (int j = 0; j < vocab; ++j) dz[j] = scale * std::exp(z[j] - lse);
      dz[targets[r]] -= scale;
    }
  }
}

// ---- Instantiations ----------------------------------------------------------------------------

#define FP4_MODEL_OPS(T)                                                                            \
  template void matmul<T>(bool, bool, int, int, int, T, const T*, const T*, T, T*);               \
  template void embedding_forward<T>(const T*, const int32_t*, int, int, T*);                     \
  template void embedding_backward<T>(const int32_t*, const T*, int, int, T*);                    \
  template void rmsnorm_forward<T>(const T*, const T*, int, int, T, T*, T*);                      \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int, int, T*, T*);    \
  template RopeTable<T> rope_table<T>(int, int, double);                                          \
  template void rope_forward<T>(T*, int, int, int, int, int, const RopeTable<T>&);                \
  template void rope_backward<T>(T*, int, int, int, int, int, const RopeTable<T>&);               \
  template void attention_forward<T>(const T*, int, int, int, int, T*, T*);                       \
  template void attention_backward<T>(const T*, const T*, const T*, int, int, int, int, T*);      \
  template void swiglu_forward<T>(const T*, int, int, T*);                                        \
  template void swiglu_backward<T>(const T*, const T*, int, int, T*);                             \
  template void cross_entropy<T>(const T*, const int32_t*, int, int, T*, T*, T);

FP4_MODEL_OPS(float)
FP4_MODEL_OPS(double)

#undef FP4_MODEL_OPS

}  // namespace fp4::cpu
