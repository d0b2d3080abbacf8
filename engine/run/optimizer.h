// optimizer.h — AdamW on fp32 master weights, and clipping by the global gradient norm.
//
// One update of step t (t = 1 for the first), in fp32, one rounding per operation, in this order
// (PyTorch's AdamW, decoupled weight decay as in Loshchilov & Hutter):
//   g  = grad · clip_scale
//   m  = β1 · m + (1 − β1) · g
//   v  = β2 · v + (1 − β2) · g · g
//   p  = p − (lr · λ) · p                       only where the range decays (not norm gains)
//   p  = p − lr · (m / c1) / (sqrt(v / c2) + ε)
// with c1 = 1 − β1^t, c2 = 1 − β2^t computed in double by repeated squaring and rounded once, and
// (1 − β1), (1 − β2), lr · λ likewise computed in double and rounded once. The compiler may not
// contract these into fused multiply-adds (the build passes -ffp-contract=off), so the same inputs
// give the same bits on every machine.
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

// x^n for n >= 0 by repeated squaring in double: exact in its operation order on any machine.
double power(double x, int64_t n);

// sqrt(Σ g²) with the squares summed in fp64 in index order: deterministic whatever the threads.
double global_grad_norm(const float* grads, size_t n);

// The factor that brings the norm down to `clip`: clip / norm when norm > clip > 0, else 1.
float clip_scale(double norm, double clip);

}  // namespace fp4::run
