// router.cpp — see router.h.
#include "kernels/cpu/router.h"

#include <cmath>

namespace fp4::cpu {

template <typename T>
void router_forward(const T* logits, int rows, int n_experts, int top_k, bool sigmoid, bool renormalize,
                    T* scores, int32_t* chosen, T* gates, T* lse) {
  const int E = n_experts, K = top_k;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < rows; ++t) {
    const T* z = logits + static_cast<size_t>(t) * E;
    T* s = scores + static_cast<size_t>(t) * E;
    int32_t* ch = chosen + static_cast<size_t>(t) * K;
    T* g = gates + static_cast<size_t>(t) * K;
    T m = z[0];
    for (int j = 1; j < E; ++j) m = z[j] > m ? z[j] : m;
    T sum = 0;
    for (int j = 0; j < E; ++j) sum += std::exp(z[j] - m);
    lse[t] = m + std::log(sum);
    for (int j = 0; j < E; ++j) s[j] = sigmoid ? T(1) / (T(1) + std::exp(-z[j])) : std::exp(z[j] - m) / sum;

    // Top-k by logit; a strict > keeps the lower index on a tie (and a NaN never displaces a pick,
    // so every choice is a valid expert: the NaN reaches the loss through the gates).
    std::vector<bool> taken(E, false);
    for (int c = 0; c < K; ++c) {
      int best = -1;
      for (int j = 0; j < E; ++j)
        if (!taken[j] && (best < 0 || z[j] > z[best])) best = j;
      taken[best] = true;
    }
    int c = 0;
    for (int j = 0; j < E; ++j)
      if (taken[j]) ch[c++] = j;  // ascending expert index
    T total = 0;
    for (c = 0; c < K; ++c) total += s[ch[c]];
    for (c = 0; c < K; ++c) g[c] = renormalize ? s[ch[c]] / total : s[ch[c]];
  }
}

template <typename T>
RouterLosses router_losses(const T* scores, const int32_t* chosen, const T* lse, int rows, int n_experts, int top_k,
                           bool sigmoid) {
  const int E = n_experts;
  RouterLosses out;
  out.counts.assign(E, 0);
  std::vector<double> p_sum(E, 0.0);
  double z_sum = 0.0;
  for (int t = 0; t < rows; ++t) {
    const T* s = scores + static_cast<size_t>(t) * E;
    double norm = 1.0;
    if (sigmoid) {
      T total = 0;
      for (int j = 0; j < E; ++j) total += s[j];
      norm = static_cast<double>(total);
    }
    if (sigmoid) {
      for (int j = 0; j < E; ++j) p_sum[j] += static_cast<double>(s[j]) / norm;
    } else {  // norm is 1: the division is exact and left out (the CUDA engine calls this every MoE pass)
      for (int j = 0; j < E; ++j) p_sum[j] += static_cast<double>(s[j]);
    }
    for (int c = 0; c < top_k; ++c) ++out.counts[chosen[static_cast<size_t>(t) * top_k + c]];
    z_sum += static_cast<double>(lse[t]) * static_cast<double>(lse[t]);
  }
  const double assignments = static_cast<double>(rows) * top_k;
  double b = 0.0;
  for (int j = 0; j < E; ++j) b += (static_cast<double>(out.counts[j]) / assignments) * (p_sum[j] / rows);
  out.balance = E * b;
  out.z = z_sum / rows;
  return out;
}

template <typename T>
void router_backward(const T* logits, const T* scores, const int32_t* chosen, const T* lse, const T* dgates,
                     const std::vector<int64_t>& counts, int rows, int n_experts, int top_k, bool sigmoid,
                     bool renormalize, T balance_scale, T z_scale, T* dlogits) {
  const int E = n_experts, K = top_k;
  // ∂(E · Σ f_i P_i)/∂s'_{t,i} = E · f_i / R, the same for every token.
  std::vector<T> dbalance(E);
  for (int j = 0; j < E; ++j)
    dbalance[j] = balance_scale * static_cast<T>(static_cast<double>(E) * static_cast<double>(counts[j]) /
                                                 (static_cast<double>(rows) * K * rows));
  const T z_coef = z_scale * T(2) / static_cast<T>(rows);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < rows; ++t) {
    const T* z = logits + static_cast<size_t>(t) * E;
    const T* s = scores + static_cast<size_t>(t) * E;
    const int32_t* ch = chosen + static_cast<size_t>(t) * K;
    const T* dg = dgates + static_cast<size_t>(t) * K;
    T* dz = dlogits + static_cast<size_t>(t) * E;
    std::vector<T> ds(E, T(0));
    // Gates → scores.
    if (renormalize) {
      T total = 0;
      for (int c = 0; c < K; ++c) total += s[ch[c]];
      T dot = 0;
      for (int c = 0; c < K; ++c) dot += dg[c] * (s[ch[c]] / total);
      for (int c = 0; c < K; ++c) ds[ch[c]] = (dg[c] - dot) / total;
    } else {
      for (int c = 0; c < K; ++c) ds[ch[c]] = dg[c];
    }
    // The balancing loss → scores (through s' = s / Σ s for sigmoid).
    if (!sigmoid) {
      for (int j = 0; j < E; ++j) ds[j] += dbalance[j];
    } else {
      T total = 0;
      for (int j = 0; j < E; ++j) total += s[j];
      T dot = 0;
      for (int j = 0; j < E; ++j) dot += dbalance[j] * (s[j] / total);
      for (int j = 0; j < E; ++j) ds[j] += (dbalance[j] - dot) / total;
    }
    // Scores → logits.
    if (!sigmoid) {
      T dot = 0;
      for (int j = 0; j < E; ++j) dot += s[j] * ds[j];
      for (int j = 0; j < E; ++j) dz[j] = s[j] * (ds[j] - dot);
    } else {
      for (int j = 0; j < E; ++j) dz[j] = ds[j] * s[j] * (T(1) - s[j]);
    }
    // The z-loss: ∂(lse²)/∂z_j = 2 · lse · softmax(z)_j.
    if (z_scale != T(0))
      for (int j = 0; j < E; ++j) dz[j] += z_coef * lse[t] * std::exp(z[j] - lse[t]);
  }
}

#define FP4_ROUTER_INSTANTIATE(T)                                                                              \
  template void router_forward<T>(const T*, int, int, int, bool, bool, T*, int32_t*, T*, T*);                  \
  template RouterLosses router_losses<T>(const T*, const int32_t*, const T*, int, int, int, bool);             \
  template void router_backward<T>(const T*, const T*, const int32_t*, const T*, const T*,                     \
                                   const std::vector<int64_t>&, int, int, int, bool, bool, T, T, T*);
FP4_ROUTER_INSTANTIATE(float)
FP4_ROUTER_INSTANTIATE(double)
#undef FP4_ROUTER_INSTANTIATE

}  // namespace fp4::cpu
