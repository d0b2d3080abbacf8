// synthetic_data.cpp — see synthetic_data.h.
#include "fit/synthetic_data.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "fit/resample.h"

namespace fp4::fit {

namespace {

// A standard normal deviate by Box-Muller from two uniforms in (0, 1).
double normal(SplitMix64& rng) {
  const double u1 = (static_cast<double>(rng.next() >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (static_cast<double>(rng.next() >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

}  // namespace

FitData synthetic_data(const SyntheticGrid& grid) {
  FitData data;
  data.n_kind = "given";
  data.source = "points";
  data.origin = "synthetic";
  SplitMix64 rng = replicate_stream(grid.seed, 0xFFFFFFFFull);
  for (const auto& [recipe, rho] : grid.rho) {
    if (recipe == "bf16") data.baselines = {"bf16"};
    for (size_t i = 0; i < grid.n.size(); ++i)
      for (size_t j = 0; j < grid.d.size(); ++j)
        for (int s = 0; s < grid.seeds; ++s) {
          const double clean = law_loss(grid.truth, rho.first, rho.second, grid.n[i], grid.d[j]);
          const std::string name = fmt::format("{}-n{}-d{}-s{}", recipe, i, j, s);
          data.points.push_back({"", name, recipe, fmt::format("n{}|d{}|s{}", i, j, s), grid.n[i], grid.d[j],
                                 clean * (1 + grid.noise * normal(rng))});
        }
    data.recipes.push_back(recipe);
  }
  return data;
}

}  // namespace fp4::fit
