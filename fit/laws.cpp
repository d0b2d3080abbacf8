// laws.cpp — see laws.h.
#include "fit/laws.h"

#include <cmath>

#include "base/user_error.h"

namespace fp4::fit {

const char* law_name(Law law) { return law == Law::chinchilla ? "chinchilla" : "precision"; }

Law parse_law(const std::string& name) {
  if (name == "chinchilla") return Law::chinchilla;
  if (name == "precision") return Law::precision;
  throw UserError("unknown law \"" + name + "\": use \"chinchilla\" (per recipe) or \"precision\" (joint over recipes)");
}

double law_loss(const LawParameters& p, double rho_n, double rho_d, double n, double d) {
  const double bracket = p.A / std::pow(rho_n * n, p.alpha) + p.B / std::pow(rho_d * d, p.beta);
  return p.E + (p.gamma == 1 ? bracket : std::pow(bracket, p.gamma));
}

double allocation_exponent_a(const LawParameters& p) { return p.beta / (p.alpha + p.beta); }
double allocation_exponent_b(const LawParameters& p) { return p.alpha / (p.alpha + p.beta); }

}  // namespace fp4::fit
