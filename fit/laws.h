// laws.h — the scaling laws of SCIENCE.md "Laws" as plain functions of their parameters: what a
// fit estimates, what a stored fit is evaluated with, and what the synthetic tests generate from.
//
//   chinchilla   L(N, D)   = E + A/N^α + B/D^β                       (one recipe)
//   precision    L_r(N, D) = E + (A/(N·ρN_r)^α + B/(D·ρD_r)^β)^γ     (joint; ρ = 1 for BF16, γ = 1
//                                                                     unless Quartet's form is asked)
//
// chinchilla is precision with ρN = ρD = γ = 1, so one evaluation serves both.
#pragma once

#include <map>
#include <string>

namespace fp4::fit {

enum class Law { chinchilla, precision };
const char* law_name(Law law);               // "chinchilla", "precision"
Law parse_law(const std::string& name);      // throws fp4::UserError naming the accepted laws

// One set of a law's parameters: a point estimate or one bootstrap replicate.
struct LawParameters {
  double E = 0, A = 0, B = 0, alpha = 0, beta = 0;
  double gamma = 1;                          // Quartet's outer exponent; 1 is the plain form
  // precision only: every recipe of the fit, the BF16 baseline included (at 1). Empty for chinchilla.
  std::map<std::string, double> rho_n, rho_d;

  bool operator==(const LawParameters&) const = default;
};

// E + (A/(ρN·N)^α + B/(ρD·D)^β)^γ.
double law_loss(const LawParameters& p, double rho_n, double rho_d, double n, double d);

// The compute-optimal allocation exponents N_opt ∝ C^a, D_opt ∝ C^b: a = β/(α+β), b = α/(α+β).
// (The outer exponent γ does not move the optimum: it is monotone in the bracket.)
double allocation_exponent_a(const LawParameters& p);
double allocation_exponent_b(const LawParameters& p);

}  // namespace fp4::fit
