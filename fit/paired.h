// paired.h — the tests of a paired comparison over seeds (docs/statistics.md): the mean of the
// per-seed differences with its Student-t interval and t-test, the exact sign-flip (paired
// permutation) p-value, and Holm's step-down adjustment across a family of tests. Pure functions of
// their inputs: no store, no I/O, deterministic (the one random part, the Monte-Carlo sign flip
// above kSignFlipExactUpTo differences, draws from a fixed seed).
//
// These are the same definitions as results/second-study/stats.py, the second study's
// pre-registered analysis, so that `fp4lab fit` and that script give the same numbers on the same
// data (tests/test_fit_paired.cpp holds them together): the t quantile by bisection on the tail of
// the regularized incomplete beta function, the sign flip over all 2^n sign vectors with ties
// counted as extreme, Holm with the running maximum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fit/statistics.h"

namespace fp4::fit {

// I_x(a, b), the regularized incomplete beta function (Numerical Recipes §6.4: the continued
// fraction by the modified Lentz method, on the side of x where it converges fast).
double incomplete_beta(double a, double b, double x);

// P(|T| >= |t|) for Student's t with df degrees of freedom: I_{df/(df+t²)}(df/2, 1/2).
double student_t_two_sided_p(double t, double df);

// The p-quantile (0.5 < p < 1) of Student's t with df degrees of freedom, by bisection on the
// two-sided tail to below 1e-12 relative (exact where student_t975's table rounds to 4 digits).
double student_t_quantile(double p, double df);

// The paired t analysis of differences d (n >= 2; fewer is a std::invalid_argument): mean, sample
// sd (n - 1), standard error sd/√n, the Student-t interval at `level` and the two-sided t-test p
// against 0 (0 when every d is the same non-zero value, 1 when every d is 0).
struct PairedT {
  int64_t n = 0;
  double mean = kNaN, sd = kNaN, se = kNaN;
  Interval ci;
  double p = kNaN;
};
PairedT paired_t(const std::vector<double>& d, double level = 0.95);

// Up to this many differences the sign-flip test enumerates every sign vector (2^20 ≈ 1e6 sums of
// 20 terms: milliseconds); above, it samples kSignFlipDraws vectors from a fixed seed.
inline constexpr int kSignFlipExactUpTo = 20;
inline constexpr int64_t kSignFlipDraws = 200000;

// The two-sided sign-flip p-value of H0 "the differences are symmetric about 0", statistic |Σ d|.
// Exact (n <= kSignFlipExactUpTo): the share of the 2^n sign vectors whose |Σ ±d| reaches the
// observed one (within 1e-12 relative, so a tie counts as extreme); the observed vector and its
// negation are among them, so p >= 2/2^n (six seeds: p >= 1/32, whatever the data). Above: Monte
// Carlo, (1 + hits)/(1 + draws) over kSignFlipDraws vectors drawn from std::mt19937_64(seed), itself
// a valid p-value (Phipson & Smyth 2010); its draws are not Python's, so it agrees with stats.py to
// the Monte-Carlo error (about 1e-3 at p = 0.05), not digit for digit. n = 0 gives p = 1.
struct SignFlip {
  double p = kNaN;
  int n = 0;                           // differences
  bool exact = true;
  std::string method() const;          // "exact over 2^6 sign vectors" or "Monte Carlo, 200000 draws"
};
SignFlip sign_flip_p(const std::vector<double>& d, uint64_t seed = 0);

// Holm's step-down adjusted p-values (family-wise error control at any level; Holm 1979), in the
// order given: sort ascending, the k-th smallest (k from 0) becomes min(1, (m - k)·p), and each is
// raised to the running maximum so the order is kept. NaN entries are a std::invalid_argument.
std::vector<double> holm_adjust(const std::vector<double>& p);

}  // namespace fp4::fit
