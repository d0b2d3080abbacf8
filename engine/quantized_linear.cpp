// quantized_linear.cpp — see quantized_linear.h.
#include "engine/quantized_linear.h"

#include <stdexcept>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace fp4::engine {

namespace {

std::vector<float> to_float(const std::vector<bf16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

std::vector<float> to_float(const bf16_t* v, size_t n) {
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

}  // namespace

bool site_is_quantized(const LinearSite& site) {
  return site.recipe != nullptr && site.recipe->quantized && !site.keep_bf16;
}

QuantSpec site_slot_spec(const LinearSite& site, Slot slot) {
  const SlotRecipe& s = site.recipe->slots[static_cast<int>(slot)];
  QuantSpec q = slot_quant_spec(s, slot);
  const Operand op = slot_operand(slot);
  q.seed = site.seed;
  q.step = site.step;
  q.stream = philox_stream(site.linear_id, slot_gemm(slot), op, op == Operand::w ? 0 : site.micro_step);
  if (s.rht_signs == RhtSigns::per_call) {
    // Both operands of this GEMM call draw the same words: the call's micro-step, also for W.
    const Philox4 call = rht_call_signs(site.seed, site.linear_id, slot_gemm(slot), site.micro_step, site.step);
    q.rht_signs = static_cast<uint16_t>(call.w[0] & 0xffffu);
    if (s.rht_size == kRhtWideSize)
      for (int i = 0; i < 4; ++i) q.rht_wide_signs[i] = call.w[i];
  } else {
    q.rht_signs = rht_sign_mask(s.rht_signs, site.seed, site.linear_id, site.step);
  }
  return q;
}

cpu::QuantizedTensor quantize_slot(const LinearSite& site, Slot slot, const bf16_t* t, int rows,
                                   int cols, bool keep_transformed) {
  const int32_t* source_rows = slot_operand(slot) == Operand::w ? nullptr : site.source_rows;
  return cpu::quantize(t, rows, cols, site_slot_spec(site, slot), keep_transformed, source_rows);
}

bool linear_forward(const LinearSite& site, const bf16_t* x, const bf16_t* w, int t, int k, int n,
                    float* y) {
  if (!site_is_quantized(site)) {
    const std::vector<float> xf = to_float(x, static_cast<size_t>(t) * k);
    const std::vector<float> wf = to_float(w, static_cast<size_t>(n) * k);
    cpu::gemm(false, true, t, n, k, 1.0f, xf.data(), wf.data(), 0.0f, y);
    return true;
  }
  const cpu::QuantizedTensor qx = quantize_slot(site, Slot::fprop_x, x, t, k);
  const cpu::QuantizedTensor qw = quantize_slot(site, Slot::fprop_w, w, n, k);
  const std::vector<float> xf = to_float(qx.dequant), wf = to_float(qw.dequant);
  cpu::gemm(false, true, t, n, k, qx.tensor_scale * qw.tensor_scale, xf.data(), wf.data(), 0.0f, y);
  return !qx.nonfinite && !qw.nonfinite;
}

bool linear_backward(const LinearSite& site, const bf16_t* x, const bf16_t* w, const bf16_t* dy,
                     int t, int k, int n, float* dx, float* dw_accum) {
  if (!site_is_quantized(site)) {
    const std::vector<float> dyf = to_float(dy, static_cast<size_t>(t) * n);
    if (dx) {
      const std::vector<float> wf = to_float(w, static_cast<size_t>(n) * k);
      cpu::gemm(false, false, t, k, n, 1.0f, dyf.data(), wf.data(), 0.0f, dx);
    }
    if (dw_accum) {
      const std::vector<float> xf = to_float(x, static_cast<size_t>(t) * k);
      cpu::gemm(true, false, n, k, t, 1.0f, dyf.data(), xf.data(), 1.0f, dw_accum);
    }
    return true;
  }
  bool finite = true;
  if (dx) {
    const cpu::QuantizedTensor qdy = quantize_slot(site, Slot::dgrad_dy, dy, t, n);
    const cpu::QuantizedTensor qw = quantize_slot(site, Slot::dgrad_w, w, n, k);
    const std::vector<float> dyf = to_float(qdy.dequant), wf = to_float(qw.dequant);
    cpu::gemm(false, false, t, k, n, qdy.tensor_scale * qw.tensor_scale, dyf.data(), wf.data(), 0.0f, dx);
    finite = finite && !qdy.nonfinite && !qw.nonfinite;
  }
  if (dw_accum) {
    const cpu::QuantizedTensor qdy = quantize_slot(site, Slot::wgrad_dy, dy, t, n);
    const cpu::QuantizedTensor qx = quantize_slot(site, Slot::wgrad_x, x, t, k);
    const std::vector<float> dyf = to_float(qdy.dequant), xf = to_float(qx.dequant);
    cpu::gemm(true, false, n, k, t, qdy.tensor_scale * qx.tensor_scale, dyf.data(), xf.data(), 1.0f, dw_accum);
    finite = finite && !qdy.nonfinite && !qx.nonfinite;
  }
  return finite;
}

std::string linear_shape_error(const Recipe& recipe, int t, int k, int n) {
  if (!recipe.quantized) return {};
  for (int i = 0; i < kSlotCount; ++i) {
    const Slot slot = static_cast<Slot>(i);
    const QuantSpec spec = slot_quant_spec(recipe.slots[i], slot);
    int rows = 0, cols = 0;
    const char *row_name = "", *col_name = "";
    switch (slot_operand(slot)) {
      case Operand::x: rows = t; cols = k; row_name = "tokens per micro-batch (T)"; col_name = "input features (K)"; break;
      case Operand::w: rows = n; cols = k; row_name = "output features (N)"; col_name = "input features (K)"; break;
      case Operand::dy: rows = t; cols = n; row_name = "tokens per micro-batch (T)"; col_name = "output features (N)"; break;
    }
    const bool need_cols = spec.tile_2d || spec.along == BlockAlong::row;
    const bool need_rows = spec.tile_2d || spec.along == BlockAlong::column;
    const std::string tail = " is not a multiple of the block size " + std::to_string(spec.block) +
                             " (slot " + slot_name(slot) + ")";
    if (need_cols && cols % spec.block != 0) return std::string(col_name) + " = " + std::to_string(cols) + tail;
    if (need_rows && rows % spec.block != 0) return std::string(row_name) + " = " + std::to_string(rows) + tail;
    // The 128-wide RHT and double-block scales group 128 values along the blocking axis.
    if ((spec.rht && spec.rht_size == kRhtWideSize) || spec.outer_block != 0) {
      const std::string tail128 = " is not a multiple of 128 (slot " + std::string(slot_name(slot)) +
                                  ": its 128-wide RHT or double-block scales)";
      if (spec.along == BlockAlong::row && cols % 128 != 0) return std::string(col_name) + " = " + std::to_string(cols) + tail128;
      if (spec.along == BlockAlong::column && rows % 128 != 0) return std::string(row_name) + " = " + std::to_string(rows) + tail128;
    }
  }
  return {};
}

}  // namespace fp4::engine
