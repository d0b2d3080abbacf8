// synthetic_data.h — data sets drawn from a known law, for the recovery tests and the benchmark:
// the losses of a law on a grid, times (1 + σ·z) with z standard normal from a seeded stream.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fit/fit_data.h"
#include "fit/laws.h"

namespace fp4::fit {

struct SyntheticGrid {
  LawParameters truth;                                    // E, A, B, α, β, γ
  std::map<std::string, std::pair<double, double>> rho;   // recipe → (ρN, ρD); "bf16" is the baseline
  std::vector<double> n, d;                               // the grid's axes
  int seeds = 1;                                          // runs per (recipe, n, d)
  double noise = 0.003;                                   // σ of the multiplicative noise
  uint64_t seed = 0;                                      // the noise's stream
};

// Every (recipe, n, d, seed) point; the runs of one (n, d, seed) share a group, as matched runs do.
FitData synthetic_data(const SyntheticGrid& grid);

}  // namespace fp4::fit
