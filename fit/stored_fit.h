// stored_fit.h — a scaling-law fit as `fp4lab fit` stores it in a study's `fits` table, and the
// functions that read it back and evaluate it. This is the fitter's public face: the report
// generator reads fits only through it. docs/fit.md "The stored fit" documents every JSON column
// (params_json, intervals_json, quality_json, options_json, predictions_json) field by field.
//
// One StoredFit is one row of `fits`: law "chinchilla" with scope = a recipe label (one fit per
// recipe), or law "precision" with scope "joint" (one fit over every recipe of the data set).
//
// Intervals are percentile 95% intervals of the bootstrap replicates (statistics.h); the replicates'
// parameters are stored too, so a band can be drawn at any (N, D), not just the stored targets.
// Every replicate of one `fp4lab fit` call resampled the same runs for every law and scope
// (replicate k draws the same grid points everywhere), so two fits with the same data_hash can be
// paired replicate by replicate: that is how a gap between two chinchilla fits gets its interval.
//
// Compatibility: fields are only ever added. A reader of this version ignores JSON keys it does not
// know and reads a missing key as its default below (NaN for numbers, empty for lists).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fit/laws.h"
#include "fit/statistics.h"

namespace fp4::store {
class Store;
struct FitRecord;
}  // namespace fp4::store

namespace fp4::fit {

// A number as fp4lab's JSON outputs write it (the stored fits' columns, `fp4lab fit --format json`):
// one that could not be estimated (NaN, or not finite) is null, which JSON can hold.
nlohmann::json number_or_null(double v);

// A point where the fit is extrapolated: N parameters (as options.n counts them), D tokens.
struct Target {
  double n = 0, d = 0;
  bool operator==(const Target&) const = default;
};

// What was asked (options_json).
struct FitOptions {
  std::string n_kind = "nonembedding";   // which N was fitted: "nonembedding", "total", or "given"
                                         // (--points: the CSV's own n)
  double huber_delta = 1e-3;
  int64_t bootstrap = 1000;              // replicates asked for (0: no intervals)
  uint64_t seed = 0;                     // the bootstrap's seed
  bool gamma = false;                    // precision: Quartet's outer exponent fitted
  std::vector<Target> targets;           // where predictions were made
  std::vector<std::string> recipes;      // the recipes of the data set, sorted
  std::string baseline;                  // the BF16 recipe among them ("" when none)
  std::string source;                    // "store" or "points"
  std::string grid;                      // the study ([sweep] name) whose grid chose the runs;
                                         // "" when every run of the store (--store) or a CSV was read
  std::string data_hash;                 // SHA-256 of the data set and the options every law of
                                         // this call shared: equal data_hash = pairable replicates
};

// One named parameter with its interval: E, A, B, alpha, beta, a, b (every law), gamma (precision),
// rho_N and rho_D (precision, one per recipe: `recipe` names it; "" for the shared parameters).
struct ParameterEstimate {
  std::string name, recipe;
  double value = kNaN;
  Interval ci;
};

// One bootstrap replicate's parameters. `replicate` is its index among the replicates asked for
// (0-based); replicates whose fit failed are absent, so indices may skip.
struct BootstrapSample {
  int64_t replicate = 0;
  LawParameters params;
};

// One fitted point: a run (or a --points row) with its observed and fitted final loss.
struct Residual {
  std::string run_id, run_name, recipe;  // run_id/run_name: "" for --points rows (run_name is "row <k>")
  double n = 0, d = 0;
  double observed = 0, fitted = 0;
  double log_residual = 0;               // log(observed) - log(fitted): > 0 when the run is above the law
};

// A run the fit did not use, and why ("state diverged", "final eval/loss is NaN", "no eval/loss").
struct ExcludedRun {
  std::string run_id, run_name, recipe, state, reason;
};

// The optimizer's report for the best start (point estimate).
struct OptimizerSummary {
  std::string library;                   // "Ceres Solver 2.1.0"
  std::string method;                    // e.g. "trust region (Levenberg-Marquardt), Huber loss"
  int64_t starts_tried = 0;              // starts run
  int64_t starts_succeeded = 0;          // starts whose solve ended usable (finite objective)
  int64_t best_start = -1;               // index of the start that won (docs/fit.md orders them)
  int64_t iterations = 0;                // of the best start
  std::string termination;               // Ceres' termination type of the best start: "CONVERGENCE", ...
  std::string message;                   // Ceres' message for it
  double initial_cost = kNaN, final_cost = kNaN;
};

// The held-out check: the law refitted without the largest N, predicting the runs at that N.
struct HeldOutPoint {
  std::string run_id, run_name;
  double n = 0, d = 0, observed = 0, predicted = 0;
  double rel_error = 0;                  // predicted / observed - 1
};
struct HeldOutRecipe {
  std::string recipe;
  std::vector<HeldOutPoint> points;
  double mean_abs_rel_error = kNaN, max_abs_rel_error = kNaN;
};
struct HeldOutCheck {
  bool done = false;
  std::string reason;                    // why it was not done ("" when done)
  double held_out_n = kNaN;              // the N left out
  std::vector<HeldOutRecipe> recipes;
};

// A prediction at one target for one recipe: the loss, and the BF16-relative gap L_r/L_bf16 - 1
// (NaN value for the baseline itself, or when the fit has no baseline to compare with).
struct TargetPrediction {
  Target target;
  std::string recipe;
  Estimate loss, gap;
};

// The observed gap at one matched grid point (the bf16_gap view), over its seeds.
struct ObservedGap {
  double n = 0, d = 0;
  int64_t seeds = 0;
  double mean = kNaN, sd = kNaN, min = kNaN, max = kNaN;  // sd: NaN for one seed
  Interval ci;                           // 95% Student-t interval of the mean over seeds (NaN for one seed)
};
// The gap the law gives at one grid point, with its bootstrap interval.
struct FittedGap {
  double n = 0, d = 0;
  Estimate gap;
};
// SCIENCE.md claim 6 as a number: the least-squares slope of the observed gap (each matched run)
// against log10(C), C = 6·N·D: the change of the gap per tenfold compute.
struct GapSlope {
  Estimate per_decade;
  int64_t points = 0;                    // matched runs in the regression
};
struct RecipeGap {
  std::string recipe, baseline;
  std::vector<ObservedGap> observed;     // by N, then D
  // The gap of the same matched runs on the paper's metric, their train-tail losses (fit::train_tail,
  // fit/contrasts.h), at the same grid points (seeds 0 and NaN where no run has one: --points).
  // Empty in a fit stored before fp4lab computed it.
  std::vector<ObservedGap> observed_train_tail;
  std::vector<FittedGap> fitted;         // the same grid points
  GapSlope slope;
  // The same least-squares slope on the train-tail gaps of the matched runs that have one, its
  // interval from the same bootstrap replicates. Points 0 (NaN) in a fit stored before fp4lab
  // computed it, and with --points.
  GapSlope slope_train_tail;
};

// Two quantized recipes against each other (SCIENCE.md claim 3: "does A train closer to BF16 than
// B"), from one precision fit: the difference d = gap_A - gap_B = (L_A - L_B) / L_bf16 of runs that
// share N, D, seed and batches (the store's match key), so d is paired. Negative: A closer to BF16.
// One comparison per pair of quantized recipes, A the later name in sorted order.
struct ObservedDifference {              // the mean of d over matched points (a grid point and seed each)
  double n = kNaN;                       // the model size of a per-size summary; NaN over every size
  int64_t points = 0;                    // matched points: groups with runs of A, B and the baseline
  int64_t wins = 0;                      // points where A is closer to BF16 than B (d < 0)
  double mean = kNaN, sd = kNaN;         // sd: sample standard deviation over points (NaN for one)
  Interval ci;                           // 95% Student-t interval of the mean, points as the unit (NaN for one)
};
struct RecipeComparison {
  std::string recipe, against, baseline; // d = gap_recipe - gap_against, both against baseline
  ObservedDifference observed;           // over every matched point
  std::vector<ObservedDifference> observed_by_n;  // per model size (over its D values and seeds), by N
  std::vector<ObservedGap> observed_points;       // per grid point (N, D), over its seeds; mean etc. are of d
  std::vector<FittedGap> fitted;         // the law's d at the same grid points, bootstrap interval
  std::vector<FittedGap> targets;        // the law's d at the fit's targets, bootstrap interval
  GapSlope slope;                        // least-squares slope of d against log10(6·N·D), bootstrap interval
};

// A guardrail flag (fit/guardrails.h, docs/statistics.md "Guardrails"), stored in quality_json.
struct Guardrail {
  std::string check;                     // "bound", "exponent", "e_interval", "replicates", "held_out",
                                         // "short_runs", "tokens_per_param", "extrapolation"
  std::string message;                   // one line
  bool unidentified = false;             // the law is not identified here: no target gap is shown
  std::string parameter, recipe;         // "bound": the parameter (of the recipe) whose interval is withheld
};
// Bootstrap replicates that failed, by reason.
struct ReplicateFailure {
  std::string reason;
  int64_t count = 0;
};

struct StoredFit {
  int64_t id = 0;                        // the row id in `fits`
  std::string law;                       // "chinchilla" | "precision"
  std::string scope;                     // a recipe label (chinchilla), or "joint" (precision)
  std::string input_hash;                // SHA-256 of the exact points, law, scope and options
  FitOptions options;

  LawParameters point;                   // the point estimate
  std::vector<ParameterEstimate> parameters;  // E, A, B, alpha, beta, a, b[, gamma][, rho_N, rho_D per recipe]
  int64_t replicates_asked = 0;          // == options.bootstrap
  std::vector<BootstrapSample> samples;  // the replicates that succeeded, by replicate index
  std::vector<ReplicateFailure> replicate_failures;  // the others, by reason (empty in fits stored before
                                                     // fp4lab counted them)

  double objective = kNaN;               // sum over points of Huber_δ(log L̂ - log L) at the point estimate
  int64_t n_points = 0;
  OptimizerSummary optimizer;
  std::vector<Residual> residuals;       // every fitted point, in input order
  HeldOutCheck held_out;
  std::vector<ExcludedRun> excluded;
  bool guardrails_checked = false;       // false: stored before fp4lab had guardrails (--refit adds them)
  std::vector<Guardrail> guardrails;     // fit/guardrails.h

  std::vector<TargetPrediction> predictions;  // target-major, recipe-minor
  std::vector<RecipeGap> gaps;           // per quantized recipe (empty without a baseline)
  // Precision only: every pair of quantized recipes (empty with fewer than two, and in fits stored
  // by an fp4lab before comparisons existed).
  std::vector<RecipeComparison> comparisons;

  std::string fp4lab_version;
  double created = 0;                    // Unix seconds

  // The parameter `name` (for rho_N/rho_D: of `recipe`), or nullopt.
  std::optional<ParameterEstimate> parameter(const std::string& name, const std::string& recipe = "") const;
  // The recipes this fit can predict: {scope} for chinchilla, every recipe for precision.
  std::vector<std::string> recipes() const;
};

// Reading fits from a store (read-only use is fine). Rows whose JSON cannot be read throw
// std::runtime_error naming the row id and the field.
//   read_fits:     the latest fit (highest id) of each (law, scope), ordered by law, then scope.
//   read_all_fits: every row, by id.
std::vector<StoredFit> read_fits(const store::Store& store);
std::vector<StoredFit> read_all_fits(const store::Store& store);
// The latest fit with exactly this law, scope and input hash (what `fp4lab fit` reuses), or nullopt.
std::optional<StoredFit> find_fit(const store::Store& store, const std::string& law, const std::string& scope,
                                  const std::string& input_hash);

// Conversions between a StoredFit and its row (the JSON columns of docs/fit.md).
store::FitRecord to_record(const StoredFit& fit);
StoredFit from_record(const store::FitRecord& record);
// Writes a new row (the id and created of `fit` are ignored: the store assigns the id, and
// `created` is written as given unless it is 0, then now). Returns the new id.
int64_t insert_fit(store::Store& store, const StoredFit& fit);

// The law's loss at (n, d) for `recipe`: the point estimate, or one replicate's parameters.
// For chinchilla, `recipe` must be the fit's scope or ""; for precision, one of its recipes.
// A recipe the fit does not know is a std::invalid_argument.
double predicted_loss(const StoredFit& fit, const std::string& recipe, double n, double d);
double predicted_loss(const StoredFit& fit, const LawParameters& params, const std::string& recipe, double n,
                      double d);
// The point estimate with its percentile 95% interval over the stored replicates (NaN ends
// without replicates).
Estimate predicted_loss_interval(const StoredFit& fit, const std::string& recipe, double n, double d);

// The BF16-relative gap L_r(n, d) / L_baseline(n, d) - 1 with its interval.
//   One precision fit: both losses from it, replicate by replicate.
//   A chinchilla fit of the recipe and one of the baseline: paired by replicate index; the two must
//   come from one call (same options.data_hash), else std::invalid_argument.
Estimate predicted_gap_interval(const StoredFit& precision_fit, const std::string& recipe, double n, double d);
Estimate predicted_gap_interval(const StoredFit& recipe_fit, const StoredFit& baseline_fit, double n, double d);

// The difference of two recipes' gaps gap_a - gap_b = (L_a - L_b) / L_baseline at (n, d) inside one
// precision fit: the point estimate's difference, and the percentile 95% interval of the difference
// taken replicate by replicate (not a difference of the two gaps' intervals). The value equals
// predicted_gap_interval(fit, a, n, d).value - predicted_gap_interval(fit, b, n, d).value exactly.
Estimate predicted_gap_difference_interval(const StoredFit& precision_fit, const std::string& a, const std::string& b,
                                           double n, double d);

}  // namespace fp4::fit
