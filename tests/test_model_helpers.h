// test_model_helpers.h — shared by tests/test_model_*.cpp: seeded test data and the central
// finite-difference gradient check.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace fp4test_model {

// A small seeded generator for test data (splitmix64): the same numbers on every platform.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {
    const double u1 = (static_cast<double>(next() >> 11) + 1.0) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * uniform());
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
};

inline std::vector<double> uniform_vector(Rng& rng, size_t n, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(n);
  for (double& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Central differences in double: for each index i of x, (f(x + h·e_i) − f(x − h·e_i)) / 2h
// against analytic[i]. Passes when |fd − analytic| ≤ atol + rtol·|analytic|. Returns the largest
// |fd − analytic| seen (for the test's log).
inline double check_gradient(const std::string& what, std::vector<double>& x,
                             const std::vector<double>& analytic,
                             const std::function<double()>& f, double h, double atol, double rtol,
                             const std::vector<size_t>& indices = {}) {
  std::vector<size_t> idx = indices;
  if (idx.empty())
    for (size_t i = 0; i < x.size(); ++i) idx.push_back(i);
  double worst = 0.0;
  for (size_t i : idx) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f();
    x[i] = keep - h;
    const double down = f();
    x[i] = keep;
    const double fd = (up - down) / (2.0 * h);
    const double err = std::abs(fd - analytic[i]);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::abs(analytic[i]))) {
      INFO(what << "[" << i << "]: finite difference " << fd << ", analytic " << analytic[i]
                << ", |diff| " << err);
      CHECK(err <= atol + rtol * std::abs(analytic[i]));
    }
  }
  return worst;
}

}  // namespace fp4test_model
