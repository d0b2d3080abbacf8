// router.h — an MoE block's router after its logits: scores, top-k choice, gates, the auxiliary
// losses, and the backward of all of them (docs/model.md, "Mixture of experts"). The CPU reference;
// templates on the scalar type like ops.h (float: the model; double: the gradient checks).
//
// Per token t (a row) with logits z [E] (fp32, from the fp32 router weights):
//   scores   s = softmax(z) (sigmoid = false) or s_j = σ(z_j) (sigmoid = true)
//   choice   the top_k experts with the largest logits, a tie going to the lower expert index;
//            stored in ascending expert index (the order every per-token sum over experts runs in)
//   gates    g_c = s_{e_c}, divided by Σ_c s_{e_c} when renormalize
//   lse      log Σ_j exp z_j (the z-loss's)
// Per micro-batch of R tokens:
//   balance  E · Σ_i f_i · P_i, f_i = (assignments to i) / (R · top_k), P_i = mean_t s'_{t,i} with
//            s' = s for softmax and s / Σ_j s_j for sigmoid (Switch Transformer eq. 4; DeepSeek-V3)
//   z        (1/R) Σ_t lse_t²                                              (ST-MoE eq. 5)
// Both are returned without their coefficients; sums over tokens run in row order in double.
//
// Determinism: every sum has a fixed order; OpenMP splits only independent tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4::cpu {

// The forward of the router for R rows: scores [R, E], chosen [R, k] (ascending expert index),
// gates [R, k], lse [R].
template <typename T>
void router_forward(const T* logits, int rows, int n_experts, int top_k, bool sigmoid, bool renormalize,
                    T* scores, int32_t* chosen, T* gates, T* lse);

struct RouterLosses {
  double balance = 0.0;             // E · Σ_i f_i · P_i (1 at perfect balance)
  double z = 0.0;                   // mean over tokens of lse²
  std::vector<int64_t> counts;      // assignments per expert (Σ = R · top_k)
};

template <typename T>
RouterLosses router_losses(const T* scores, const int32_t* chosen, const T* lse, int rows, int n_experts, int top_k,
                           bool sigmoid);

// dlogits [R, E] (overwritten) = ∂/∂z of Σ_{t,c} dgates[t,c]·g_{t,c} + balance_scale · balance
// + z_scale · z, given the forward's outputs. dgates [R, k] is ∂loss/∂gate of each choice (in the
// order of `chosen`). counts are the forward's (router_losses): f carries no gradient.
template <typename T>
void router_backward(const T* logits, const T* scores, const int32_t* chosen, const T* lse, const T* dgates,
                     const std::vector<int64_t>& counts, int rows, int n_experts, int top_k, bool sigmoid,
                     bool renormalize, T balance_scale, T z_scale, T* dlogits);

}  // namespace fp4::cpu
