// law_solver.cpp — see law_solver.h.
#include "fit/law_solver.h"

#include <ceres/ceres.h>
#include <ceres/version.h>
#include <glog/logging.h>

#include <cmath>
#include <mutex>
#include <stdexcept>

namespace fp4::fit {

namespace {

// ρ's bounds (law_solver.h) in log space.
constexpr double kLogRhoMax = 0.0;
static_assert(kRhoMax == 1.0, "kLogRhoMax is log(kRhoMax)");
const double kLogRhoMin = std::log(kRhoMin);

// log(e^x + e^y) with the weights e^x / (e^x + e^y) and e^y / (...), from one exp and one log1p.
struct Lse2 {
  double value, wx, wy;
};
Lse2 lse2(double x, double y) {
  if (x >= y) {
    const double z = std::exp(y - x);
    return {x + std::log1p(z), 1 / (1 + z), z / (1 + z)};
  }
  const double z = std::exp(x - y);
  return {y + std::log1p(z), z / (1 + z), 1 / (1 + z)};
}

// The residual log L̂ − log L of one point and, when asked, its derivatives, for the parameter
// values given separately (Ceres passes blocks; log_predicted_loss passes x).
struct Evaluation {
  double residual;
  double d_shared[5];  // a, b, e, α, β
  double d_gamma;
  double d_rho[2];     // ℓN, ℓD
};
Evaluation evaluate(const double* shared, double gamma, double ln_rho_n, double ln_rho_d, const SolverPoint& p) {
  const double a = shared[0], b = shared[1], e = shared[2], alpha = shared[3], beta = shared[4];
  const double xn = p.log_n + ln_rho_n, xd = p.log_d + ln_rho_d;
  const double t1 = a - alpha * xn, t2 = b - beta * xd;  // log(A/(ρN N)^α), log(B/(ρD D)^β)
  Evaluation ev;
  double g1, g2;  // ∂ log L̂ / ∂t1, ∂t2
  if (gamma == 1) {
    // log L̂ = LSE(t1, t2, e): two exps and one log (the largest term's exp is 1).
    const double m = std::max(std::max(t1, t2), e);
    const double z1 = std::exp(t1 - m), z2 = std::exp(t2 - m), z3 = std::exp(e - m);
    const double sum = z1 + z2 + z3;
    ev.residual = m + std::log(sum) - p.log_loss;
    g1 = z1 / sum;
    g2 = z2 / sum;
    ev.d_shared[2] = z3 / sum;
    ev.d_gamma = 0;
  } else {
    const Lse2 inner = lse2(t1, t2);                   // log(A/(ρN N)^α + B/(ρD D)^β)
    const Lse2 outer = lse2(gamma * inner.value, e);   // log(E + bracket^γ)
    ev.residual = outer.value - p.log_loss;
    g1 = outer.wx * gamma * inner.wx;
    g2 = outer.wx * gamma * inner.wy;
    ev.d_shared[2] = outer.wy;
    ev.d_gamma = outer.wx * inner.value;
  }
  ev.d_shared[0] = g1;
  ev.d_shared[1] = g2;
  ev.d_shared[3] = -g1 * xn;
  ev.d_shared[4] = -g2 * xd;
  ev.d_rho[0] = -g1 * alpha;
  ev.d_rho[1] = -g2 * beta;
  return ev;
}

// Parameter blocks: shared (5), then gamma (1) when fitted, then the point's recipe's ρ (2) when it
// has one.
class LogLossResidual final : public ceres::CostFunction {
 public:
  LogLossResidual(const SolverPoint& p, bool gamma, bool rho) : p_(p), gamma_(gamma), rho_(rho) {
    set_num_residuals(1);
    mutable_parameter_block_sizes()->push_back(5);
    if (gamma_) mutable_parameter_block_sizes()->push_back(1);
    if (rho_) mutable_parameter_block_sizes()->push_back(2);
  }
  bool Evaluate(double const* const* blocks, double* residuals, double** jacobians) const override {
    const double gamma = gamma_ ? blocks[1][0] : 1.0;
    const double* rho = rho_ ? blocks[gamma_ ? 2 : 1] : nullptr;
    const Evaluation ev = evaluate(blocks[0], gamma, rho ? rho[0] : 0.0, rho ? rho[1] : 0.0, p_);
    residuals[0] = ev.residual;
    if (!std::isfinite(ev.residual)) return false;  // Ceres rejects the step
    if (jacobians == nullptr) return true;
    if (jacobians[0] != nullptr)
      for (int k = 0; k < 5; ++k) jacobians[0][k] = ev.d_shared[k];
    if (gamma_ && jacobians[1] != nullptr) jacobians[1][0] = ev.d_gamma;
    if (rho_) {
      double* j = jacobians[gamma_ ? 2 : 1];
      if (j != nullptr) {
        j[0] = ev.d_rho[0];
        j[1] = ev.d_rho[1];
      }
    }
    return true;
  }

 private:
  SolverPoint p_;
  bool gamma_, rho_;
};

// Ceres logs through glog: a rejected step ("Linear solver failure") is a WARNING on stderr, one
// per occurrence, in the middle of fp4lab's own output. What matters of a solve is in its summary,
// which the fit keeps; so only errors reach stderr.
void quiet_ceres_logging() {
  static std::once_flag once;
  std::call_once(once, [] { FLAGS_minloglevel = google::GLOG_ERROR; });
}

bool all_finite(const std::vector<double>& x) {
  for (double v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

LawParameters LawLayout::parameters(const std::vector<double>& x) const {
  if (x.size() != size()) throw std::logic_error("LawLayout::parameters: wrong vector size");
  LawParameters p;
  p.A = std::exp(x[0]);
  p.B = std::exp(x[1]);
  p.E = std::exp(x[2]);
  p.alpha = x[3];
  p.beta = x[4];
  p.gamma = gamma ? x[5] : 1.0;
  if (!baseline.empty()) {
    p.rho_n[baseline] = 1.0;
    p.rho_d[baseline] = 1.0;
  }
  for (size_t i = 0; i < quantized.size(); ++i) {
    p.rho_n[quantized[i]] = std::exp(x[rho_offset(i)]);
    p.rho_d[quantized[i]] = std::exp(x[rho_offset(i) + 1]);
  }
  return p;
}

std::vector<double> LawLayout::vector(const LawParameters& p) const {
  std::vector<double> x(size());
  x[0] = std::log(p.A);
  x[1] = std::log(p.B);
  x[2] = std::log(p.E);
  x[3] = p.alpha;
  x[4] = p.beta;
  if (gamma) x[5] = p.gamma;
  for (size_t i = 0; i < quantized.size(); ++i) {
    x[rho_offset(i)] = std::log(p.rho_n.at(quantized[i]));
    x[rho_offset(i) + 1] = std::log(p.rho_d.at(quantized[i]));
  }
  return x;
}

SolveSettings grid_stage_settings() { return {}; }
SolveSettings polish_settings() { return {2000, 1e-12, 1e-14, 1e-12}; }
SolveSettings replicate_settings() { return {500, 1e-8, 1e-10, 1e-8}; }

double huber(double delta, double r) {
  const double a = std::fabs(r);
  return a <= delta ? 0.5 * r * r : delta * (a - 0.5 * delta);
}

double log_predicted_loss(const LawLayout& layout, const std::vector<double>& x, const SolverPoint& p) {
  const double gamma = layout.gamma ? x[5] : 1.0;
  double ln_n = 0, ln_d = 0;
  if (p.rho_index >= 0) {
    ln_n = x[layout.rho_offset(static_cast<size_t>(p.rho_index))];
    ln_d = x[layout.rho_offset(static_cast<size_t>(p.rho_index)) + 1];
  }
  return evaluate(x.data(), gamma, ln_n, ln_d, p).residual + p.log_loss;
}

std::string ceres_library_name() { return std::string("Ceres Solver ") + CERES_VERSION_STRING; }

LawSolver::LawSolver(const LawLayout& layout, const std::vector<SolverPoint>& points, double huber_delta)
    : layout_(layout), points_(points), delta_(huber_delta), shared_(5), gamma_(1, 1.0),
      rho_(2 * layout.quantized.size(), 0.0) {
  quiet_ceres_logging();
  ceres::Problem::Options options;
  options.cost_function_ownership = ceres::TAKE_OWNERSHIP;
  options.loss_function_ownership = ceres::TAKE_OWNERSHIP;
  problem_ = std::make_unique<ceres::Problem>(options);
  std::vector<bool> rho_used(layout.quantized.size(), false);
  for (const SolverPoint& p : points_) {
    if (!(p.weight > 0)) continue;
    const bool has_rho = p.rho_index >= 0;
    std::vector<double*> blocks = {shared_.data()};
    if (layout_.gamma) blocks.push_back(gamma_.data());
    if (has_rho) {
      blocks.push_back(rho_.data() + 2 * p.rho_index);
      rho_used[static_cast<size_t>(p.rho_index)] = true;
    }
    ceres::LossFunction* loss = new ceres::HuberLoss(delta_);
    if (p.weight != 1) loss = new ceres::ScaledLoss(loss, p.weight, ceres::TAKE_OWNERSHIP);
    problem_->AddResidualBlock(new LogLossResidual(p, layout_.gamma, has_rho), loss, blocks);
  }
  if (layout_.gamma) {
    problem_->SetParameterLowerBound(gamma_.data(), 0, kGammaMin);
    problem_->SetParameterUpperBound(gamma_.data(), 0, kGammaMax);
  }
  for (size_t i = 0; i < rho_used.size(); ++i) {
    if (!rho_used[i]) continue;
    for (int k = 0; k < 2; ++k) {
      problem_->SetParameterLowerBound(rho_.data() + 2 * i, k, kLogRhoMin);
      problem_->SetParameterUpperBound(rho_.data() + 2 * i, k, kLogRhoMax);
    }
  }
}

LawSolver::~LawSolver() = default;

double LawSolver::objective(const std::vector<double>& x) const {
  double sum = 0;
  for (const SolverPoint& p : points_)
    if (p.weight > 0) sum += p.weight * huber(delta_, log_predicted_loss(layout_, x, p) - p.log_loss);
  return sum;
}

SolveOutcome LawSolver::solve(const std::vector<double>& start, const SolveSettings& settings) {
  if (start.size() != layout_.size()) throw std::logic_error("LawSolver::solve: wrong start size");
  std::copy(start.begin(), start.begin() + 5, shared_.begin());
  if (layout_.gamma) gamma_[0] = std::clamp(start[5], kGammaMin, kGammaMax);
  for (size_t i = 0; i < rho_.size(); ++i)
    rho_[i] = std::clamp(start[layout_.rho_offset(0) + i], kLogRhoMin, kLogRhoMax);

  ceres::Solver::Options options;
  options.minimizer_type = ceres::TRUST_REGION;
  options.trust_region_strategy_type = ceres::LEVENBERG_MARQUARDT;
  options.linear_solver_type = ceres::DENSE_QR;
  options.num_threads = 1;  // parallelism is over starts and replicates, never inside a solve
  options.logging_type = ceres::SILENT;
  options.minimizer_progress_to_stdout = false;
  options.max_num_iterations = settings.max_iterations;
  options.function_tolerance = settings.function_tolerance;
  options.gradient_tolerance = settings.gradient_tolerance;
  options.parameter_tolerance = settings.parameter_tolerance;
  ceres::Solver::Summary summary;
  ceres::Solve(options, problem_.get(), &summary);

  SolveOutcome out;
  out.x.assign(layout_.size(), 0.0);
  std::copy(shared_.begin(), shared_.end(), out.x.begin());
  if (layout_.gamma) out.x[5] = gamma_[0];
  std::copy(rho_.begin(), rho_.end(), out.x.begin() + static_cast<long>(layout_.rho_offset(0)));
  out.objective = objective(out.x);
  out.usable = std::isfinite(out.objective) && all_finite(out.x) && summary.termination_type != ceres::FAILURE;
  out.iterations = static_cast<int>(summary.iterations.size());
  out.termination = ceres::TerminationTypeToString(summary.termination_type);
  out.message = summary.message;
  out.initial_cost = summary.initial_cost;
  out.final_cost = summary.final_cost;
  return out;
}

}  // namespace fp4::fit
