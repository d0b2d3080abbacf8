// quant_presets.h — NUMERICS.md §5's 4-bit presets as the quantizer's settings (bf16 has no
// quantizer), one table for the quantizer tests (CPU and [gpu]) and the quantizer's benchmark
// (bench/quantize_bench.cu).
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

// A spec with the preset's grid, maximum, scale format and block; the axis, rounding, RHT and SR
// key are the caller's.
inline QuantSpec preset_spec(const QuantPreset& p) {
  QuantSpec s;
  s.grid = p.grid;
  s.gmax = p.gmax;
  s.scale = p.scale;
  s.block = p.block;
  return s;
}

}  // namespace fp4::test
