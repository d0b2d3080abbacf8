// quant_metrics.h — the error statistics of one quantized operand slot (NUMERICS.md §8).
//
// Given A, the values a slot rounded (fp32, after its RHT), Â, the true dequantized values
// (dequant · tensor_scale), and the 4-bit codes, this computes
//   alpha   = <Â, A> / <A, A>                 coherent gain; below 1 is shrinkage
//   shrink  = (Σ|Â| − Σ|A|) / Σ|A|            relative change of the total magnitude
//   nmse    = ‖Â − A‖² / ‖A‖²,  sqnr_db = −10·log10(nmse)
//   b_eff   = exp(H) / 15                     H: entropy (nats) of the 15 signed codes, ±0 merged
// Every sum is fp64 and is taken in element order, so the same inputs give the same bits on any
// machine and any thread count. The quantizer probe (quant/quantizer_probe) and the CPU training
// backend's shrinkage probe measure through this file; the CUDA backend's probe measures with
// kernels/cuda/quant_metrics.cuh, whose sums slot_metric_sums() below states on the CPU and whose
// results go through metrics_from_sums(), so both backends' numbers come from one set of formulas.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace fp4::cpu {

// The 15 signed codes −7..+7 of a 4-bit format once ±0 are merged.
constexpr int kSignedCodeCount = 15;
using CodeHistogram = std::array<int64_t, kSignedCodeCount>;

// The histogram bin of a code (sign << 3 | magnitude index): 7 + signed index, so −7 → 0,
// ±0 → 7, +7 → 14. Returns −1 for kNonFiniteCode. Host and device (the CUDA metrics kernel).
FP4_HD int signed_code_bin(uint8_t code) {
  if (code == kNonFiniteCode) return -1;
  const int magnitude = code & 7;
  // −0 and +0 are one value, so both land in the middle bin.
  if (magnitude == 0) return 7;
  return (code & 8) ? 7 - magnitude : 7 + magnitude;
}

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

// The sums every metric is made from (all over the measured elements: finite A and Â, a code
// that is not kNonFiniteCode).
struct QuantMetricsSums {
  double sum_aa = 0.0;       // <A, A>
  double sum_ha = 0.0;       // <Â, A>
  double sum_err2 = 0.0;     // ‖Â − A‖²
  double sum_abs_a = 0.0;    // Σ|A|
  double sum_abs_h = 0.0;    // Σ|Â|
  int64_t count = 0;         // elements measured
  int64_t coded = 0;         // of those, elements with a code (the histogram's total)
  int64_t nonfinite = 0;     // elements left out
  CodeHistogram histogram{};
};

// The metrics of a set of sums. Degenerate inputs give IEEE results: A all zero makes alpha,
// shrink and nmse NaN; a perfect copy makes sqnr_db +Inf; no coded element makes b_eff NaN.
QuantMetrics metrics_from_sums(const QuantMetricsSums& sums);

// Running sums, so a tensor can be measured in pieces, or several tensors (the micro-batches of
// a step, the layers of a model) pooled into one measurement.
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

  QuantMetrics result() const { return metrics_from_sums(sums_); }
  const QuantMetricsSums& sums() const { return sums_; }
  const CodeHistogram& histogram() const { return sums_.histogram; }

 private:
  void add_values(double a, double a_hat);

  QuantMetricsSums sums_;
};

// One-call forms of the accumulator.
QuantMetrics quant_metrics(const float* a, const float* a_hat, const uint8_t* codes, int64_t n);
QuantMetrics quant_metrics(const QuantizedTensor& q);

// The sums of one quantized copy measured from what a GEMM operand slot keeps: the bf16 source x
// [rows, cols] the copy was quantized from, its spec (only rht, rht_signs and along matter here),
// the dequantized values and codes in x's layout, and the tensor scale (S_dec, or 1). A is
// recomputed from x exactly as the quantizer computes it (bf16 → fp32, then rht16 on every
// 16-vector along spec.along where spec.rht), Â = dequant · tensor_scale in fp64, and the elements
// are added in row-major order, so the result is bit for bit the sums of
// quant_metrics(quantize(x, rows, cols, spec, true)). This is the reference the CUDA metrics
// kernel (kernels/cuda/quant_metrics.cuh) is held to; it needs no copy of the transformed values.
// Throws std::invalid_argument when the blocked axis (cols along rows, rows along columns) is not
// a multiple of 16, which no slot's shape can be (blocks are 16 or 32 wide).
QuantMetricsSums slot_metric_sums(const bf16_t* x, int rows, int cols, const QuantSpec& spec,
                                  const bf16_t* dequant, const uint8_t* codes, float tensor_scale);

}  // namespace fp4::cpu
