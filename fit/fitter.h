// fitter.h — `fp4lab fit`'s work: from a data set (fit_data.h) and the options, every fit the
// options ask for — chinchilla per recipe, precision jointly — each with its bootstrap replicates,
// intervals, residuals, held-out check, predictions at the targets and BF16-relative gaps, ready to
// be stored (stored_fit.h). docs/fit.md describes the method; this is its code.
//
// Determinism: the result depends only on the data, the options and the seed, never on the thread
// count: every start and replicate is its own task with its own solver and random stream
// (resample.h), and results are reduced in task order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "fit/fit_data.h"
#include "fit/laws.h"
#include "fit/stored_fit.h"

namespace fp4::fit {

// The grid of starts for (a, b, e, α, β) (SCIENCE.md: a, b ∈ {0, 5, …, 25}, e ∈ {−1, −0.5, …, 1},
// α, β ∈ {0, 0.5, …, 2}: 4,500 starts). Start index order: a varies slowest, then b, e, α, β.
struct StartGrid {
  std::vector<double> a, b, e, alpha, beta;
  static StartGrid hoffmann();
  size_t size() const { return a.size() * b.size() * e.size() * alpha.size() * beta.size(); }
  std::vector<double> start(size_t index) const;  // {a, b, e, α, β}
};

// Which fits a call makes (docs/fit.md "Which fits"): every law asked (or by default chinchilla, and
// precision when the data has a baseline and another recipe), over every recipe that law can fit.
// A recipe a law cannot fit (too few distinct N or D, too few points) is skipped with the reason,
// unless the recipes were named (recipes_named): then it is a fp4::UserError. A law named in `laws`
// that can fit nothing at all is a fp4::UserError; so is a call that can fit nothing.
struct FitRequest {
  std::vector<Law> laws;               // empty: the default laws above
  bool recipes_named = false;          // the data set's recipes were chosen by name (--recipe)
  double huber_delta = 1e-3;
  int64_t bootstrap = 1000;
  uint64_t seed = 0;
  bool gamma = false;                  // precision: fit Quartet's outer exponent
  std::vector<Target> targets = {{1.5e9, 1e11}};  // the paper's dense 1.5B model at 100B tokens
  // The search (docs/fit.md "The starts"). Tests may coarsen it; fp4lab fit uses these.
  StartGrid grid = StartGrid::hoffmann();
  int polish_best = 8;                 // grid ends polished to convergence
  std::vector<double> rho_starts = {1.0, 0.7, 0.4};
  bool held_out = true;
  int threads = 0;                     // 0: one per core
};

// Where a long fit is: `stage` ("chinchilla ufp4: starts", "bootstrap", ...), done of total.
struct FitProgress {
  std::string stage;
  size_t done = 0, total = 0;
};
using ProgressFn = std::function<void(const FitProgress&)>;

// The default laws (none named) can fit nothing in the data (one N, one D): a UserError of its own,
// because `fp4lab fit` still has the paired contrasts over seeds to compute for such a store.
class NothingToFit : public UserError {
 public:
  using UserError::UserError;
};

// What a call will produce, known before fitting: the laws, each fit's scope and input hash.
struct PlannedFit {
  Law law;
  std::string scope;
  std::string input_hash;
};
// A fit the call does not make, and why: a recipe's chinchilla fit (scope = the recipe), a recipe
// left out of the joint precision fit (scope = the recipe), or the precision fit itself ("joint").
struct SkippedFit {
  Law law;
  std::string scope;
  std::string reason;                  // one line: "chinchilla fit of recipe X: needs at least 3 distinct N, ..."
};
struct FitPlan {
  std::string data_hash;
  std::string baseline;
  std::vector<std::string> recipes;    // the recipes some fit uses (sorted); the others' runs are left out
  std::vector<PlannedFit> fits;        // chinchilla per recipe (sorted), then precision
  std::vector<SkippedFit> skipped;     // by law, then scope
};

// Decides which fits the data allows (above; fp4::UserError, one line naming the recipe and what is
// missing, where a named law or recipe cannot be fitted) and computes the hashes. Nothing is fitted.
FitPlan plan_fits(const FitData& data, const FitRequest& request);

// Fits everything `plan` lists, from the points of plan.recipes. The returned fits have id 0 (not
// stored yet) and `created` now.
std::vector<StoredFit> run_fits(const FitData& data, const FitRequest& request, const FitPlan& plan,
                                const ProgressFn& progress = {});

}  // namespace fp4::fit
