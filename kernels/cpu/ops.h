// ops.h — the transformer's non-linear-layer operations, each with its hand-written backward: the
// CPU reference of kernels/cuda/ops.cuh.
//
// Every op is a template on the scalar type and is instantiated for float (the model) and double
// (the gradient checks, which compare against central differences in double precision). Math is
// done in the scalar type; rounding activations to bf16 for storage is the caller's business
// (engine/model/transformer.cpp), so these functions are the plain mathematical definitions.
//
// Layouts are row-major. "rows" are tokens: B sequences of T tokens give B·T rows, sequence b's
// token t at row b·T + t. Backward functions overwrite their input gradients (dx) and accumulate
// (+=) into parameter gradients (dgain, dtable), the way gradients accumulate over micro-steps.
//
// Determinism: every sum runs in a fixed order that depends on neither the thread count nor the
// alignment of the data. OpenMP only splits independent rows or (sequence, head) pairs.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4::cpu {

// Σ a[i]·b[i] in a fixed order: eight running sums (lane i mod 8), combined pairwise at the end.
// Eight independent lanes let the compiler vectorize without reassociating anything, so the
// result is the same with or without SIMD and for any pointer alignment.
template <typename T>
inline T dot(const T* a, const T* b, int n) {
  T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  const T s01 = acc[0] + acc[1], s23 = acc[2] + acc[3], s45 = acc[4] + acc[5], s67 = acc[6] + acc[7];
  const T s0123 = s01 + s23, s4567 = s45 + s67;
  return s0123 + s4567;
}

// y[i] += alpha · x[i]
template <typename T>
inline void axpy(T alpha, const T* x, T* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// C[m,n] = alpha · op(A) · op(B) + beta · C, row-major, the convention of kernels/cpu/gemm.h
// (trans_a: A stored [k, m]; trans_b: B stored [n, k]). float goes to cpu::gemm; double is a plain
// triple loop (only the gradient checks use it, on tiny shapes).
template <typename T>
void matmul(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, const T* b,
            T beta, T* c);

// ---- Embedding: out[r] = table[tokens[r]] ---------------------------------------------------
template <typename T>
void embedding_forward(const T* table, const int32_t* tokens, int rows, int d, T* out);
// dtable[tokens[r]] += dout[r], rows in order (a token seen twice sums in row order).
template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, int rows, int d, T* dtable);

// ---- RMSNorm: rstd = 1 / sqrt(mean(x²) + eps), y = (x · rstd) · gain -----------------------
template <typename T>
void rmsnorm_forward(const T* x, const T* gain, int rows, int d, T eps, T* y, T* rstd);
// With x̂ = x·rstd and g = dy ⊙ gain: dx = rstd · (g − x̂ · mean(g ⊙ x̂)); dgain += Σ_rows dy ⊙ x̂.
template <typename T>
void rmsnorm_backward(const T* x, const T* gain, const T* rstd, const T* dy, int rows, int d, T* dx,
                      T* dgain);

// ---- RoPE ------------------------------------------------------------------------------------
// Pairing: features (2i, 2i+1) of each head form pair i (the interleaved convention of the
// RoFormer paper and Meta's reference LLaMA), i = 0 .. head_dim/2 − 1. Pair i at position t is
// rotated by the angle t · base^(−2i/head_dim):
//   (x0, x1) → (x0·cos − x1·sin, x0·sin + x1·cos).
// The position t is the token's index within its sequence. Angles, cosines and sines are computed
// in double and rounded once to the scalar type.
template <typename T>
struct RopeTable {
  int seq_len = 0, half = 0;
  std::vector<T> cos, sin;  // [seq_len, half]
};
template <typename T>
RopeTable<T> rope_table(int seq_len, int head_dim, double base);

// Rotates, in place, the heads of x: rows b·T + t, each row holding n_heads·head_dim features at
// x + row·row_stride (so q and k can be rotated inside the packed qkv buffer).
template <typename T>
void rope_forward(T* x, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                  const RopeTable<T>& table);
// The transpose of the rotation (the rotation by −angle), applied in place to the gradient.
template <typename T>
void rope_backward(T* dx, int batch, int seq_len, int n_heads, int head_dim, int row_stride,
                   const RopeTable<T>& table);

// ---- Causal multi-head attention -------------------------------------------------------------
// qkv [B·T, 3·d]: each row is q | k | v, head h at columns h·head_dim of each part (q and k already
// rotated). For query t of head h: s_j = q_t·k_j / sqrt(head_dim) for j ≤ t, p = softmax(s),
// out_t = Σ_j p_j v_j. out is [B·T, d] with head h at columns h·head_dim. lse [B, H, T] keeps each
// query's log-sum-exp so the backward recomputes p instead of storing it (as FlashAttention does).
template <typename T>
void attention_forward(const T* qkv, int batch, int seq_len, int n_heads, int head_dim, T* out,
                       T* lse);
// dqkv [B·T, 3·d] is overwritten. With p recomputed from lse and dP_j = dout_t·v_j:
// dS_j = p_j (dP_j − Σ_i p_i dP_i); dq_t = Σ_j dS_j k_j / sqrt(hd); dk_j += dS_j q_t / sqrt(hd);
// dv_j += p_j dout_t.
template <typename T>
void attention_backward(const T* qkv, const T* lse, const T* dout, int batch, int seq_len,
                        int n_heads, int head_dim, T* dqkv);

// ---- SwiGLU: u [rows, 2·f] = gate | up (the fused "MLP in" output); a = silu(gate) · up --------
// silu(g) = g · σ(g), σ(g) = 1 / (1 + exp(−g)).
template <typename T>
void swiglu_forward(const T* u, int rows, int f, T* a);
// dgate = da · up · σ(g) · (1 + g · (1 − σ(g))), dup = da · silu(g). du is overwritten.
template <typename T>
void swiglu_backward(const T* u, const T* da, int rows, int f, T* du);

// ---- Cross-entropy with softmax ------------------------------------------------------------
// loss[r] = logsumexp(logits[r]) − logits[r][targets[r]] (nats). When dlogits is not null it gets
// scale · (softmax(logits[r]) − onehot(targets[r])); it may be the logits buffer itself.
template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int rows, int vocab, T* loss, T* dlogits,
                   T scale);

}  // namespace fp4::cpu
