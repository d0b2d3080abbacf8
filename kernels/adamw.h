// adamw.h — one AdamW update of one parameter, for the CPU engine (engine/run/optimizer.cpp) and
// the CUDA kernel (kernels/cuda/ops_optimizer.cu): one definition, so the two give the same bits by
// construction rather than by two copies kept in step.
//
// Step t (t = 1 for the first), in fp32, one rounding per operation, in this order (PyTorch's
// AdamW, decoupled weight decay as in Loshchilov & Hutter; docs/train.md step 4):
//   g  = grad · grad_scale
//   m  = β1 · m + (1 − β1) · g
//   v  = β2 · v + (1 − β2) · g · g
//   p  = p − (lr · λ) · p                       only where the range decays (not norm gains)
//   p  = p − lr · (m / c1) / (sqrt(v / c2) + ε)
// with c1 = 1 − β1^t, c2 = 1 − β2^t computed in double (β^t by repeated squaring) and rounded once,
// and (1 − β1), (1 − β2), lr · λ likewise computed in double and rounded once. Nothing may be
// contracted into fused multiply-adds: the C++ build passes -ffp-contract=off, the CUDA build
// --fmad=false.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/numerics.h"  // FP4_HD

namespace fp4 {

struct AdamWConstants {
  float beta1 = 0, beta2 = 0, one_minus_beta1 = 0, one_minus_beta2 = 0;
  float c1 = 0, c2 = 0, lr = 0, lr_wd = 0, eps = 0;
  bool weight_decay = false;  // λ != 0
};

// x^n for n >= 0 by repeated squaring in double: exact in its operation order on any machine.
inline double power_by_squaring(double x, int64_t n) {
  double result = 1.0;
  while (n > 0) {
    if (n & 1) result *= x;
    x *= x;
    n >>= 1;
  }
  return result;
}

// The constants of step t >= 1 (the caller checks t).
inline AdamWConstants make_adamw_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                                           int64_t t) {
  AdamWConstants c;
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.c1 = static_cast<float>(1.0 - power_by_squaring(beta1, t));
  c.c2 = static_cast<float>(1.0 - power_by_squaring(beta2, t));
  c.lr = static_cast<float>(lr);
  c.lr_wd = static_cast<float>(lr * weight_decay);
  c.eps = static_cast<float>(eps);
  c.weight_decay = weight_decay != 0.0;
  return c;
}

// One parameter's update: m and v in place, the new parameter returned. `decay`: the parameter's
// range decays (weight decay applies only when c.weight_decay too).
FP4_HD float adamw_update(float p, float grad, float grad_scale, float& m, float& v, const AdamWConstants& c,
                          bool decay) {
  const float g = grad * grad_scale;
  const float m_decayed = c.beta1 * m;
  const float m_new = g * c.one_minus_beta1;
  m = m_decayed + m_new;
  const float v_decayed = c.beta2 * v;
  const float g2 = g * g;
  const float v_new = g2 * c.one_minus_beta2;
  v = v_decayed + v_new;
  if (decay && c.weight_decay) {
    const float shrink = c.lr_wd * p;
    p = p - shrink;
  }
  const float m_hat = m / c.c1;
  const float v_hat = v / c.c2;
  const float denom = sqrtf(v_hat) + c.eps;
  const float ratio = m_hat / denom;
  const float update = c.lr * ratio;
  return p - update;
}

}  // namespace fp4
