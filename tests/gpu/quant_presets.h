// quant_presets.h — NUMERICS.md §5's 4-bit presets as the fused quantizer's settings (bf16 has no
// quantizer), for the [gpu] quantizer test and its benchmark (bench/quantize_bench.cu).
#pragma once

#include "kernels/numerics.h"

namespace fp4::test {

struct QuantPreset {
  const char* name;
  Grid grid;
  float gmax;
  ScaleMode scale;
  int block;
};

inline constexpr QuantPreset kSection5Presets[] = {
    {"e2m1", Grid::e2m1, 6.0f, ScaleMode::fp32, 16},   {"ufp4", Grid::e1m2, 7.0f, ScaleMode::fp32, 16},
    {"nvfp4", Grid::e2m1, 6.0f, ScaleMode::e4m3x2, 16}, {"mxfp4", Grid::e2m1, 6.0f, ScaleMode::e8m0, 32},
    {"ufp4-e4m3", Grid::e1m2, 7.0f, ScaleMode::e4m3x2, 16},
};

}  // namespace fp4::test
