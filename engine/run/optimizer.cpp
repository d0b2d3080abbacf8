// optimizer.cpp — see optimizer.h.
#include "engine/run/optimizer.h"

#include <cmath>
#include <stdexcept>

#include "kernels/adamw.h"

namespace fp4::run {

void AdamW::step(float* params, const float* grads, const std::vector<ParamRange>& ranges,
                 const AdamWHyper& h, int64_t t, float grad_scale) {
  if (t < 1) throw std::logic_error("AdamW::step: the step count starts at 1");
  const AdamWConstants c = make_adamw_constants(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, t);
  float* m = m_.data();
  float* v = v_.data();
  size_t covered = 0;
  for (const ParamRange& r : ranges) {
    if (r.offset + r.size > m_.size()) throw std::logic_error("AdamW::step: a range runs past the buffer");
    covered += r.size;
    const size_t end = r.offset + r.size;
    // Every element is independent, so threads cannot change any result. Small tensors (norm
    // gains) are not worth waking the threads for.
#pragma omp parallel for schedule(static) if (r.size >= 32768)
    for (size_t i = r.offset; i < end; ++i)
      params[i] = adamw_update(params[i], grads[i], grad_scale, m[i], v[i], c, r.decay);
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
