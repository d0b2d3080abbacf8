// quant_metrics.cpp — see quant_metrics.h.
#include "kernels/cpu/quant_metrics.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace fp4::cpu {

int signed_code_bin(uint8_t code) {
  if (code == kNonFiniteCode) return -1;
  const int magnitude = code & 7;
  // −0 and +0 are one value, so both land in the middle bin.
  if (magnitude == 0) return 7;
  return (code & 8) ? 7 - magnitude : 7 + magnitude;
}

double effective_code_fraction(const CodeHistogram& histogram) {
  int64_t total = 0;
  for (int64_t c : histogram) total += c;
  if (total == 0) return std::numeric_limits<double>::quiet_NaN();
  double entropy = 0.0;
  for (int64_t c : histogram) {
    if (c == 0) continue;  // p log p → 0
    const double p = static_cast<double>(c) / static_cast<double>(total);
    entropy -= p * std::log(p);
  }
  return std::exp(entropy) / kSignedCodeCount;
}

void QuantMetricsAccumulator::add_values(double a, double a_hat) {
  const double err = a_hat - a;
  sum_aa_ += a * a;
  sum_ha_ += a_hat * a;
  sum_err2_ += err * err;
  sum_abs_a_ += std::fabs(a);
  sum_abs_h_ += std::fabs(a_hat);
  ++count_;
}

void QuantMetricsAccumulator::add(double a, double a_hat, uint8_t code) {
  const int bin = signed_code_bin(code);
  if (bin < 0 || !std::isfinite(a) || !std::isfinite(a_hat)) {
    ++nonfinite_;
    return;
  }
  add_values(a, a_hat);
  ++histogram_[bin];
  ++coded_;
}

void QuantMetricsAccumulator::add_uncoded(double a, double a_hat) {
  if (!std::isfinite(a) || !std::isfinite(a_hat)) {
    ++nonfinite_;
    return;
  }
  add_values(a, a_hat);
}

void QuantMetricsAccumulator::add(const float* a, const float* a_hat, const uint8_t* codes,
                                  int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (codes)
      add(a[i], a_hat[i], codes[i]);
    else
      add_uncoded(a[i], a_hat[i]);
  }
}

void QuantMetricsAccumulator::add(const QuantizedTensor& q) {
  const int64_t n = static_cast<int64_t>(q.rows) * q.cols;
  if (static_cast<int64_t>(q.transformed.size()) != n)
    throw std::invalid_argument(
        "quant_metrics needs the values that were rounded: quantize with keep_transformed = true");
  // bf16 (8 significant bits) times an fp32 scale (24) is exact in fp64 (53), so Â is the true
  // dequantized value, not a rounded stand-in for it.
  const double tensor_scale = q.tensor_scale;
  for (int64_t i = 0; i < n; ++i)
    add(q.transformed[i], static_cast<double>(bf16_to_float(q.dequant[i])) * tensor_scale,
        q.codes[i]);
}

void QuantMetricsAccumulator::merge(const QuantMetricsAccumulator& other) {
  sum_aa_ += other.sum_aa_;
  sum_ha_ += other.sum_ha_;
  sum_err2_ += other.sum_err2_;
  sum_abs_a_ += other.sum_abs_a_;
  sum_abs_h_ += other.sum_abs_h_;
  count_ += other.count_;
  coded_ += other.coded_;
  nonfinite_ += other.nonfinite_;
  for (int k = 0; k < kSignedCodeCount; ++k) histogram_[k] += other.histogram_[k];
}

QuantMetrics QuantMetricsAccumulator::result() const {
  QuantMetrics m;
  m.count = count_;
  m.nonfinite = nonfinite_;
  // Plain IEEE division on purpose: with A all zero there is no signal to compare against, and
  // the NaNs (or +Inf where Â is not zero) say so instead of a made-up number.
  m.alpha = sum_ha_ / sum_aa_;
  m.nmse = sum_err2_ / sum_aa_;
  m.shrink = (sum_abs_h_ - sum_abs_a_) / sum_abs_a_;
  m.sqnr_db = -10.0 * std::log10(m.nmse);
  m.b_eff = coded_ > 0 ? effective_code_fraction(histogram_)
                       : std::numeric_limits<double>::quiet_NaN();
  return m;
}

QuantMetrics quant_metrics(const float* a, const float* a_hat, const uint8_t* codes, int64_t n) {
  QuantMetricsAccumulator acc;
  acc.add(a, a_hat, codes, n);
  return acc.result();
}

QuantMetrics quant_metrics(const QuantizedTensor& q) {
  QuantMetricsAccumulator acc;
  acc.add(q);
  return acc.result();
}

}  // namespace fp4::cpu
