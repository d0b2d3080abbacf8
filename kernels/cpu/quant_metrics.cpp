// quant_metrics.cpp — see quant_metrics.h.
#include "kernels/cpu/quant_metrics.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp4::cpu {

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

QuantMetrics metrics_from_sums(const QuantMetricsSums& s) {
  QuantMetrics m;
  m.count = s.count;
  m.nonfinite = s.nonfinite;
  // Plain IEEE division on purpose: with A all zero there is no signal to compare against, and
  // the NaNs (or +Inf where Â is not zero) say so instead of a made-up number.
  m.alpha = s.sum_ha / s.sum_aa;
  m.nmse = s.sum_err2 / s.sum_aa;
  m.shrink = (s.sum_abs_h - s.sum_abs_a) / s.sum_abs_a;
  m.sqnr_db = -10.0 * std::log10(m.nmse);
  m.b_eff = s.coded > 0 ? effective_code_fraction(s.histogram) : std::numeric_limits<double>::quiet_NaN();
  return m;
}

void QuantMetricsAccumulator::add_values(double a, double a_hat) {
  const double err = a_hat - a;
  sums_.sum_aa += a * a;
  sums_.sum_ha += a_hat * a;
  sums_.sum_err2 += err * err;
  sums_.sum_abs_a += std::fabs(a);
  sums_.sum_abs_h += std::fabs(a_hat);
  ++sums_.count;
}

void QuantMetricsAccumulator::add(double a, double a_hat, uint8_t code) {
  const int bin = signed_code_bin(code);
  if (bin < 0 || !std::isfinite(a) || !std::isfinite(a_hat)) {
    ++sums_.nonfinite;
    return;
  }
  add_values(a, a_hat);
  ++sums_.histogram[bin];
  ++sums_.coded;
}

void QuantMetricsAccumulator::add_uncoded(double a, double a_hat) {
  if (!std::isfinite(a) || !std::isfinite(a_hat)) {
    ++sums_.nonfinite;
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
  const QuantMetricsSums& o = other.sums_;
  sums_.sum_aa += o.sum_aa;
  sums_.sum_ha += o.sum_ha;
  sums_.sum_err2 += o.sum_err2;
  sums_.sum_abs_a += o.sum_abs_a;
  sums_.sum_abs_h += o.sum_abs_h;
  sums_.count += o.count;
  sums_.coded += o.coded;
  sums_.nonfinite += o.nonfinite;
  for (int k = 0; k < kSignedCodeCount; ++k) sums_.histogram[k] += o.histogram[k];
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

QuantMetricsSums slot_metric_sums(const bf16_t* x, int rows, int cols, const QuantSpec& spec,
                                  const bf16_t* dequant, const uint8_t* codes, float tensor_scale) {
  if (rows < 0 || cols < 0) throw std::invalid_argument("slot_metric_sums: a negative shape");
  const bool along_rows = spec.along == BlockAlong::row;
  if ((along_rows ? cols : rows) % kRhtSize != 0)
    throw std::invalid_argument("slot_metric_sums: 16-vectors do not tile the blocked " +
                                std::string(along_rows ? "columns" : "rows") + " (" +
                                std::to_string(along_rows ? cols : rows) + ")");
  const int64_t n = static_cast<int64_t>(rows) * cols;
  // A as the quantizer's first pass makes it (kernels/cpu/quantize.cpp): the same conversion and
  // the same rht16 calls on the same vectors, so the same fp32 values.
  std::vector<float> a(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a[i] = bf16_to_float(x[i]);
  if (spec.rht && spec.rht_size == kRhtWideSize) {
    // docs/recipes.md's 128-wide RHT, as quantize.cpp's first pass takes it.
    const int axis = along_rows ? cols : rows;
    if (axis % kRhtWideSize != 0)
      throw std::invalid_argument("slot_metric_sums: 128-vectors do not tile the blocked " +
                                  std::string(along_rows ? "columns" : "rows"));
    std::vector<float> vec(kRhtWideSize);
    const int n_vec = along_rows ? rows * (cols / kRhtWideSize) : (rows / kRhtWideSize) * cols;
    for (int j = 0; j < n_vec; ++j) {
      const int64_t r0 = along_rows ? j / (cols / kRhtWideSize) : static_cast<int64_t>(j / cols) * kRhtWideSize;
      const int64_t c0 = along_rows ? static_cast<int64_t>(j % (cols / kRhtWideSize)) * kRhtWideSize : j % cols;
      auto at = [&](int k) { return along_rows ? r0 * cols + c0 + k : (r0 + k) * cols + c0; };
      for (int k = 0; k < kRhtWideSize; ++k) vec[k] = a[at(k)];
      rht128(vec.data(), spec.rht_wide_signs);
      for (int k = 0; k < kRhtWideSize; ++k) a[at(k)] = vec[k];
    }
  } else if (spec.rht) {
    float vec[kRhtSize];
    if (along_rows) {
      for (int64_t i = 0; i < n; i += kRhtSize) rht16(&a[i], spec.rht_signs);
    } else {
      for (int r0 = 0; r0 < rows; r0 += kRhtSize)
        for (int c = 0; c < cols; ++c) {
          for (int k = 0; k < kRhtSize; ++k) vec[k] = a[static_cast<int64_t>(r0 + k) * cols + c];
          rht16(vec, spec.rht_signs);
          for (int k = 0; k < kRhtSize; ++k) a[static_cast<int64_t>(r0 + k) * cols + c] = vec[k];
        }
    }
  }
  // Â and the order of the sums as add(const QuantizedTensor&).
  QuantMetricsAccumulator acc;
  const double ts = tensor_scale;
  for (int64_t i = 0; i < n; ++i)
    acc.add(a[i], static_cast<double>(bf16_to_float(dequant[i])) * ts, codes[i]);
  return acc.sums();
}

}  // namespace fp4::cpu
