// law_solver.h — one law fitted to weighted points with Ceres, from one start (docs/fit.md "The
// objective", "The starts").
//
// Hoffmann et al.'s Approach 3 in log space: the law's log-loss is written as a log-sum-exp,
//   log L̂ = LSE(a − α·(log N + ℓN), b − β·(log D + ℓD), e)                      (γ = 1)
//   log L̂ = LSE(γ·LSE(a − α·(log N + ℓN), b − β·(log D + ℓD)), e)             (Quartet's γ)
// with A = e^a, B = e^b, E = e^e, ρN = e^ℓN, ρD = e^ℓD (ℓ ≤ 0, so ρ ∈ (0, 1]; ℓ is fixed at 0 for
// the baseline and absent for chinchilla), and the objective is Σ_i w_i·Huber_δ(log L̂_i − log L_i).
// Ceres minimizes ½Σρ(r²) with HuberLoss(δ): ρ(s) = s for s ≤ δ², 2δ√s − δ² above, so ½ρ(r²) is
// exactly Huber_δ(r) — the sum, not the mean (averaging stops the optimizer early). A point's
// weight w (its multiplicity in a bootstrap resample) is a ScaledLoss.
//
// One LawSolver owns one ceres::Problem over one point set; solve() may be called many times from
// different starts (the problem is built once). A solver is not thread-safe: use one per thread.
// Every solve is deterministic: same points, start and settings give the same bits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fit/laws.h"

namespace ceres {
class Problem;
}

namespace fp4::fit {

// The bounds of the bounded parameters (every other parameter is free): ρ ≤ 1 is the law, ρ ≥ 1e-6
// only keeps a hopeless recipe's ρ finite; γ's range is wide enough for any published value and
// finite so that a bad start cannot run away. A parameter that ends on one is flagged
// (fit/guardrails.h).
inline constexpr double kRhoMin = 1e-6, kRhoMax = 1.0;
inline constexpr double kGammaMin = 0.01, kGammaMax = 100.0;

// Which parameters a fit has, and where they sit in the parameter vector x:
//   x[0..4] = a, b, e, α, β;   x[5] = γ when fitted;   then ℓN, ℓD per quantized recipe.
struct LawLayout {
  bool gamma = false;
  std::vector<std::string> quantized;  // recipes with their own ρ, in x order (sorted)
  std::string baseline;                // the recipe whose ρ is 1 ("" for chinchilla)

  size_t size() const { return 5 + (gamma ? 1 : 0) + 2 * quantized.size(); }
  size_t rho_offset(size_t recipe_index) const { return 5 + (gamma ? 1 : 0) + 2 * recipe_index; }
  // x as law parameters (precision layouts fill rho for every recipe, the baseline at 1).
  LawParameters parameters(const std::vector<double>& x) const;
  std::vector<double> vector(const LawParameters& p) const;
};

// One fitted point in solver form.
struct SolverPoint {
  double log_n = 0, log_d = 0, log_loss = 0;
  int rho_index = -1;                  // index into LawLayout::quantized; -1: ρ = 1
  double weight = 1;                   // multiplicity (bootstrap); 0 points are left out
};

// How hard one solve tries. The grid stage runs every start briefly; the polish stage runs the best
// few to convergence.
struct SolveSettings {
  int max_iterations = 20;
  double function_tolerance = 1e-6;
  double gradient_tolerance = 1e-10;
  double parameter_tolerance = 1e-8;
};
SolveSettings grid_stage_settings();  // ≤ 20 iterations, Ceres' default tolerances
SolveSettings polish_settings();      // ≤ 2000 iterations, tolerances near machine precision
SolveSettings replicate_settings();   // bootstrap replicates, warm-started: ≤ 500, tolerances 1e-8

struct SolveOutcome {
  std::vector<double> x;               // where it ended
  double objective = 0;                // Σ w·Huber_δ at x (NaN/inf: unusable)
  bool usable = false;                 // finite objective and parameters
  int iterations = 0;
  std::string termination, message;    // Ceres' termination type and message
  double initial_cost = 0, final_cost = 0;
};

class LawSolver {
 public:
  LawSolver(const LawLayout& layout, const std::vector<SolverPoint>& points, double huber_delta);
  ~LawSolver();
  LawSolver(const LawSolver&) = delete;
  LawSolver& operator=(const LawSolver&) = delete;

  SolveOutcome solve(const std::vector<double>& start, const SolveSettings& settings);
  // Σ w·Huber_δ(log L̂ − log L) at x, evaluated directly (not by Ceres).
  double objective(const std::vector<double>& x) const;

 private:
  LawLayout layout_;
  std::vector<SolverPoint> points_;
  double delta_;
  std::vector<double> shared_, gamma_, rho_;  // Ceres' parameter blocks
  std::unique_ptr<ceres::Problem> problem_;
};

// log L̂ at one point for the parameter vector x (the same arithmetic the cost function uses).
double log_predicted_loss(const LawLayout& layout, const std::vector<double>& x, const SolverPoint& p);
double huber(double delta, double r);

// "Ceres Solver 2.1.0"
std::string ceres_library_name();

}  // namespace fp4::fit
