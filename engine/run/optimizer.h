// optimizer.h — AdamW on fp32 master weights, and clipping by the global gradient norm.
//
// One update applies kernels/adamw.h's adamw_update to every parameter (the order of operations
// and the rounding are stated there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4::run {

// A contiguous stretch of the flat parameter buffer and whether weight decay applies to it.
struct ParamRange {
  size_t offset = 0;
  size_t size = 0;
  bool decay = true;
};

struct AdamWHyper {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  explicit AdamW(size_t n_params) : m_(n_params, 0.0f), v_(n_params, 0.0f) {}

  // One update. `t` is the 1-based step count (bias correction). `grad_scale` multiplies every
  // gradient first (the clip factor; 1 leaves them as they are). `ranges` must cover the buffer.
  void step(float* params, const float* grads, const std::vector<ParamRange>& ranges,
            const AdamWHyper& h, int64_t t, float grad_scale);

  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }

 private:
  std::vector<float> m_, v_;
};

// sqrt(Σ g²) with the squares summed in fp64 in index order: deterministic whatever the threads.
double global_grad_norm(const float* grads, size_t n);

// The factor that brings the norm down to `clip`: clip / norm when norm > clip > 0, else 1.
float clip_scale(double norm, double clip);

}  // namespace fp4::run
