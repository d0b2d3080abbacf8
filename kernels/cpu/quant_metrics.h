// quant_metrics.h — the error statistics of one quantized operand slot (NUMERICS.md §8).
//
// Given A, the values a slot rounded (fp32, after its RHT), Â, the true dequantized values
// (dequant · tensor_scale), and the 4-bit codes, this computes
//   alpha   = <Â, A> / <A, A>                 coherent gain; below 1 is shrinkage
//   shrink  = (Σ|Â| − Σ|A|) / Σ|A|            relative change of the total magnitude
//   nmse    = ‖Â − A‖² / ‖A‖²,  sqnr_db = −10·log10(nmse)
//   b_eff   = exp(H) / 15                     H: entropy (nats) of the 15 signed codes, ±0 merged
// Every sum is fp64 and is taken in element order, so the same inputs give the same bits on any
// machine and any thread count. The quantization probe (engine/quant_probe) and the training
// engine's shrinkage probe both measure through this file.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace fp4::cpu {

// The 15 signed codes −7..+7 of a 4-bit format once ±0 are merged.
constexpr int kSignedCodeCount = 15;
using CodeHistogram = std::array<int64_t, kSignedCodeCount>;

// The histogram bin of a code (sign << 3 | magnitude index): 7 + signed index, so −7 → 0,
// ±0 → 7, +7 → 14. Returns −1 for kNonFiniteCode.
int signed_code_bin(uint8_t code);

// b_eff of a histogram: exp(entropy) / 15. A uniform histogram gives 1, a single code 1/15.
// An empty histogram gives NaN.
double effective_code_fraction(const CodeHistogram& histogram);

struct QuantMetrics {
  double alpha = 0.0;
  double shrink = 0.0;
  double nmse = 0.0;
  double sqnr_db = 0.0;
  double b_eff = 0.0;      // NaN when no codes were given
  int64_t count = 0;       // elements measured
  int64_t nonfinite = 0;   // elements left out: a non-finite A or Â, or kNonFiniteCode
};

// Running sums, so a tensor can be measured in pieces, or several tensors (the micro-batches of
// a step, the layers of a model) pooled into one measurement. Degenerate inputs give IEEE results:
// A all zero makes alpha, shrink and nmse NaN; a perfect copy makes sqnr_db +Inf.
class QuantMetricsAccumulator {
 public:
  // One element. `code` is a 4-bit code, or kNonFiniteCode to skip the element.
  void add(double a, double a_hat, uint8_t code);
  // As add(), for an element whose code is unknown (b_eff then covers only coded elements).
  void add_uncoded(double a, double a_hat);
  // n elements; codes may be null (then b_eff is NaN unless other coded elements were added).
  void add(const float* a, const float* a_hat, const uint8_t* codes, int64_t n);
  // A whole quantized tensor: A = q.transformed, Â = dequant · tensor_scale (exact in fp64).
  // Throws std::invalid_argument when q.transformed is empty (quantize without keep_transformed).
  void add(const QuantizedTensor& q);
  // Pools another accumulator's elements into this one (sums add; order of pooling matters only
  // in the last bits of the fp64 sums).
  void merge(const QuantMetricsAccumulator& other);

  QuantMetrics result() const;
  const CodeHistogram& histogram() const { return histogram_; }

 private:
  void add_values(double a, double a_hat);

  double sum_aa_ = 0.0;       // <A, A>
  double sum_ha_ = 0.0;       // <Â, A>
  double sum_err2_ = 0.0;     // ‖Â − A‖²
  double sum_abs_a_ = 0.0;    // Σ|A|
  double sum_abs_h_ = 0.0;    // Σ|Â|
  int64_t count_ = 0;
  int64_t coded_ = 0;
  int64_t nonfinite_ = 0;
  CodeHistogram histogram_{};
};

// One-call forms of the accumulator.
QuantMetrics quant_metrics(const float* a, const float* a_hat, const uint8_t* codes, int64_t n);
QuantMetrics quant_metrics(const QuantizedTensor& q);

}  // namespace fp4::cpu
