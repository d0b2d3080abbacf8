// fit_test_helpers.h — what the fit tests share: the first study's grid (five sizes × three token
// counts) under one known chinchilla law, as the synthetic data sets of the recovery, comparison and
// guardrail tests draw it, a fit run on one thread and on two (the results must not depend on
// the thread count), and the check of an `fp4lab fit` refusal. Header-only, like tests/test_support.h.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "fit/fitter.h"
#include "fit/laws.h"
#include "fit/synthetic_data.h"
#include "tests/test_support.h"

namespace fp4::test {

// The known chinchilla law the fit tests draw losses from: E = 1.2, A = 100, B = 200, α = 0.35,
// β = 0.3 (no recipes' ρ).
inline fit::LawParameters first_study_law() {
  fit::LawParameters law;
  law.E = 1.2;
  law.A = 100;
  law.B = 200;
  law.alpha = 0.35;
  law.beta = 0.3;
  return law;
}

// The first study's shape: its d2–d6 non-embedding sizes × 25/50/100M tokens, the baseline bf16 at
// ρ = 1, losses from first_study_law() with σ = `noise` and `seeds`
// runs per point. Add recipes to `rho`; change `d` for longer runs.
inline fit::SyntheticGrid first_study_grid(uint64_t seed, double noise, int seeds = 1) {
  fit::SyntheticGrid g;
  g.truth = first_study_law();
  g.rho = {{"bf16", {1.0, 1.0}}};
  g.n = {4.0e5, 1.3e6, 3.1e6, 6.1e6, 1.06e7};
  g.d = {2.5e7, 5e7, 1e8};
  g.seeds = seeds;
  g.noise = noise;
  g.seed = seed;
  return g;
}

// A coarse start grid (72 starts): it keeps many fits quick where the search is not what a test
// checks.
inline fit::StartGrid coarse_start_grid() {
  fit::StartGrid g;
  g.a = {0, 5, 10};
  g.b = {0, 5, 10};
  g.e = {-0.5, 0.5};
  g.alpha = {0.25, 0.75};
  g.beta = {0.25, 0.75};
  return g;
}

// The plan's fits run on one thread and on two, each expected to give exactly one fit.
inline std::pair<fit::StoredFit, fit::StoredFit> fit_on_one_and_two_threads(const fit::FitData& data,
                                                                            fit::FitRequest request,
                                                                            const fit::FitPlan& plan) {
  request.threads = 1;
  std::vector<fit::StoredFit> one = fit::run_fits(data, request, plan);
  request.threads = 2;
  std::vector<fit::StoredFit> two = fit::run_fits(data, request, plan);
  if (one.size() != 1 || two.size() != 1) throw std::logic_error("fit_on_one_and_two_threads: expected one fit each");
  return {std::move(one[0]), std::move(two[0])};
}

// `fp4lab fit` refused: exit 2 and one line on stderr that contains `needle`.
inline void check_one_line_error(const CliRun& r, const std::string& needle) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace fp4::test
