// optimizer.cpp — see optimizer.h.
#include "engine/run/optimizer.h"

#include <cmath>
#include <stdexcept>

namespace fp4::run {

double power(double x, int64_t n) {
  double result = 1.0;
  while (n > 0) {
    if (n & 1) result *= x;
    x *= x;
    n >>= 1;
  }
  return result;
}

void AdamW::step(float* params, const float* grads, const std::vector<ParamRange>& ranges,
                 const AdamWHyper& h, int64_t t, float grad_scale) {
  if (t < 1) throw std::logic_error("AdamW::step: the step count starts at 1");
  const float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - h.beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  const float c1 = static_cast<float>(1.0 - power(h.beta1, t));
  const float c2 = static_cast<float>(1.0 - power(h.beta2, t));
  const float lr = static_cast<float>(h.lr);
  const float lr_wd = static_cast<float>(h.lr * h.weight_decay);
  const float eps = static_cast<float>(h.eps);
  float* m = m_.data();
  float* v = v_.data();
  size_t covered = 0;
  for (const ParamRange& r : ranges) {
    if (r.offset + r.size > m_.size()) throw std::logic_error("AdamW::step: a range runs past the buffer");
    covered += r.size;
    const bool decay = r.decay && h.weight_decay != 0.0;
    const size_t end = r.offset + r.size;
    // Every element is independent, so threads cannot change any result. Small tensors (norm
    // gains) are not worth waking the threads for.
#pragma omp parallel for schedule(static) if (r.size >= 32768)
    for (size_t i = r.offset; i < end; ++i) {
      const float g = grads[i] * grad_scale;
      const float m_decayed = b1 * m[i];
      const float m_new = g * one_minus_b1;
      m[i] = m_decayed + m_new;
      const float v_decayed = b2 * v[i];
      const float g2 = g * g;
      const float v_new = g2 * one_minus_b2;
      v[i] = v_decayed + v_new;
      float p = params[i];
      if (decay) {
        const float shrink = lr_wd * p;
        p = p - shrink;
      }
      const float m_hat = m[i] / c1;
      const float v_hat = v[i] / c2;
      const float denom = std::sqrt(v_hat) + eps;
      const float ratio = m_hat / denom;
      const float update = lr * ratio;
      params[i] = p - update;
    }
  }
  if (covered != m_.size()) throw std::logic_error("AdamW::step: the ranges do not cover the buffer");
}

double global_grad_norm(const float* grads, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double g = grads[i];
    sum += g * g;
  }
  return std::sqrt(sum);
}

float clip_scale(double norm, double clip) {
  if (clip <= 0.0 || !(norm > clip)) return 1.0f;
  return static_cast<float>(clip / norm);
}

}  // namespace fp4::run
