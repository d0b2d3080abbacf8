// quant_metrics.cuh — the shrinkage probe's measurement of one quantized copy on the GPU
// (NUMERICS.md §8): the fp64 sums that alpha, nmse, sqnr_db, shrink and b_eff are made from.
//
// It reads what a GEMM operand slot has anyway: the bf16 source the copy was quantized from, the
// dequantized copy, its codes and its tensor scale. A is recomputed from the source as the
// quantizer computes it (bf16 → fp32, then numerics.h's rht16 on every 16-vector along the
// blocking axis where the slot has the RHT: the same fp32 values), Â = dequant · tensor_scale in
// fp64 (exact), and every element is added as kernels/cpu/quant_metrics.h adds it. The CPU
// reference of exactly this computation is cpu::slot_metric_sums.
//
// Determinism: each thread takes fixed 16-vectors (a grid-stride loop whose grid is fixed by the
// shape alone, never by the device), each CTA combines its threads in a fixed tree, and one CTA
// combines the CTAs' partial sums in a fixed tree; counts and the code histogram are integers. So
// one call gives the same bits every time on any GPU. Against the CPU reference, which adds in
// element order, only the order of the fp64 additions differs: the sums agree to a few units in
// the last place of each sum's magnitude (docs/probe.md states the bound the tests hold).
//
// Plain C++ on the host side, like quantize.cuh: callable from .cpp files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/quant_metrics.h"  // QuantMetricsSums (the host form), signed_code_bin
#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK, Workspace
#include "kernels/numerics.h"

namespace fp4::cuda {

// cpu::QuantMetricsSums as the device writes it (plain fields, no std::array).
struct DeviceMetricSums {
  double sum_aa, sum_ha, sum_err2, sum_abs_a, sum_abs_h;
  long long count, coded, nonfinite;
  long long histogram[cpu::kSignedCodeCount];
};

// The host form of device sums (copied down by the caller).
cpu::QuantMetricsSums host_sums(const DeviceMetricSums& s);

// *out (device) = the sums of one copy: x, dequant [rows, cols] bf16 and codes [rows, cols] (the
// quantizer's CopyOut::codes) in device memory, 16-byte aligned; tensor_scale a device float
// (CopyOut::tensor_scale: S_dec, or 1). Of spec only along, rht and rht_signs are read: the axis
// along spec.along must be a multiple of 16. Asynchronous on `stream`; `workspace` holds the
// per-CTA partial sums (about 200 KB), so calls sharing it must be ordered on one stream.
// Throws std::invalid_argument (one line) before launching anything for a bad shape or pointer.
void slot_metric_sums(const bf16_t* x, int rows, int cols, const QuantSpec& spec, const bf16_t* dequant,
                      const uint8_t* codes, const float* tensor_scale, DeviceMetricSums* out, Workspace& workspace,
                      cudaStream_t stream);

}  // namespace fp4::cuda
