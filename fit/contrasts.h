// contrasts.h — recipe against recipe over every seed (docs/statistics.md "Paired contrasts"):
// for a contrast "A - B" at a grid point, d = (L_A - L_B) / L̄_bf16 per seed, in percentage points,
// where L̄_bf16 is the mean final loss of the point's finished BF16 runs over all their seeds, and
// runs are paired by seed (same N, D, seed and data order: the runs of one seed share their
// initial weights and batches); the mean of d with its Student-t interval, the paired t-test, the
// exact sign-flip p-value and how many seeds A wins; across a family of contrasts (every point of
// one contrast; the variants against their base), Holm-adjusted sign-flip p-values. The same
// definitions as results/second-study/analysis.py: both give the same numbers on the same store.
//
// `fp4lab fit` computes a set from the study's store and stores it (store/'s contrast_sets and
// contrasts tables); the report shows the stored set.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fit/paired.h"
#include "fit/trend.h"
#include "store/grid_record.h"

namespace fp4::store {
class Store;
struct ContrastSetRecord;
struct MetricRow;
}  // namespace fp4::store

namespace fp4::fit {

// What groups runs, from a resolved run config: the config without its seeds (runs that differ
// only in their seed are replicates of one grid point), and without its seeds and its recipe (runs
// that are compared pairwise, seed by seed: a grid point of a contrast). train.data_seed is dropped
// with train.seed when the two are equal (the default: the run seed drives the data order), and
// kept when it was set apart (then each data order is a point of its own).
std::string replicate_key(const nlohmann::json& config);
std::string comparison_key(const nlohmann::json& config);

// One finished or unfinished run as the contrasts read it.
struct ContrastRun {
  std::string id, recipe, model;
  std::string point;                    // comparison_key of its config
  std::string point_label;              // "d4 25M (first-study, first-study-ablation)"
  bool baseline = false;
  int64_t n = 0, tokens = 0;            // non-embedding parameters, training tokens
  uint64_t seed = 0;
  bool finished = false;                // succeeded with a finite final eval/loss
  double final_loss = kNaN;
  // The paper's metric: the mean train/loss of the run's last K logged steps, K = tail_steps (NaN
  // when the run did not succeed, logged no train loss, or a NaN lies in its tail).
  double train_tail = kNaN;
  int64_t tail_steps = 0;
};

// The paper's metric, defined once for fp4lab (docs/statistics.md "Two losses"): the mean
// train/loss of a run's last K logged steps, K = train_tail_steps(rows), the last tenth as
// results/second-study/analysis.py takes it (ceil(rows / 10)), at most the paper's 1000 steps.
// The contrasts' train_tail tests and the report's train-loss gap both use it. `mean` is NaN, and
// `steps` 0, when no train loss was logged or a NaN lies in the tail.
int64_t train_tail_steps(int64_t rows);
struct TrainTail {
  double mean = kNaN;
  int64_t steps = 0;
};
TrainTail train_tail(const std::vector<store::MetricRow>& train_loss_rows);

// Every run of the store, with the labels of its grid point (model, tokens, the grids declaring it).
std::vector<ContrastRun> load_contrast_runs(const store::Store& store);

// One test: a contrast at a grid point on one metric.
struct ContrastTest {
  std::string family, recipe, against, baseline;
  bool primary = false;
  std::string metric = "final_eval";
  std::string point, model;             // point: its label
  int64_t n = 0, tokens = 0;
  int64_t baseline_seeds = 0;           // finished baseline runs averaged into the denominator
  int64_t missing_twins = 0;            // pairs whose seed has no finished baseline run
  double baseline_mean = kNaN;
  std::vector<std::pair<uint64_t, double>> d;  // (seed, d in pp), by seed
  int64_t wins = 0;                     // d < 0: A closer to the baseline
  int64_t tail_steps_min = 0, tail_steps_max = 0;  // train_tail: K of the runs used
  PairedT t;                            // of d, in pp
  SignFlip flip;
  double p_holm = kNaN;                 // flip.p, Holm-adjusted within the family
  // The variance decomposition over the pairs' seeds, in pp of baseline_mean: each recipe's seed sd
  // and their correlation. The seed-shared variance is their covariance, the rest is run-specific;
  // pairing removes 1 − var d / (var A + var B) of the unpaired variance (pairing_removed()).
  double sd_recipe = kNaN, sd_against = kNaN, correlation = kNaN;
  double pairing_removed() const;
  double shared_sd() const;             // √cov(A, B) (NaN when the covariance is negative)
};

struct ContrastFamily {
  std::string name;
  std::vector<std::pair<std::string, std::string>> contrasts;  // as asked
  std::vector<ContrastTest> tests;      // per metric of `metrics`, in kContrastMetrics' order: its tests
                                        // by contrast as asked, then N, D, point; Holm within each metric
  std::vector<std::string> untested;    // "ufp4 - e2m1: one paired seed (a test needs two) at d3 25M, ..."
  std::vector<std::string> metrics = {std::begin(store::kContrastMetrics), std::end(store::kContrastMetrics)};
  bool declared = false;                // named by a [compare] table (else one of the defaults)
  bool metrics_declared = false;        // its metrics named by the table (else every metric, the default)
  // Its tests on one metric (Holm's set: the count its p-values were adjusted over).
  std::vector<const ContrastTest*> tests_on(const std::string& metric) const;
  // Where the family and its metrics come from, in words: "declared in the [compare] table, on
  // final_eval as declared" or "a default family (no [compare] table), on every metric (the default)".
  std::string origin() const;
};

struct ContrastSet {
  int64_t id = 0;                       // its row in contrast_sets (0: not stored)
  std::string grid;                     // the study's [sweep] name, "" for every run of a store
  std::string input_hash;
  std::string source;                   // "[compare] of study.toml", or "defaults (no [compare] table): ..."
  std::vector<ContrastFamily> families;
  std::vector<std::string> notes;       // what was left out and why
  std::string fp4lab_version;
  double created = 0;
};

// The families asked: the [compare] table's (each primary contrast that no family names gets a
// family of its own, "A - B"), else the defaults: one family per pair of the main recipes'
// quantized recipes (A the later name in sorted order, as the fits' comparisons), and one family
// "variants against their base" of every recipe declared with `base = X` in the study's grids that
// is compared with X. `main_recipes`: the main grid's recipes (empty: every recipe of `runs`).
struct FamilyRequest {
  std::vector<store::CompareFamily> families;
  bool declared = false;                // the families are a [compare] table's, not the defaults
  std::vector<std::pair<std::string, std::string>> primary;
  std::string source;
};
FamilyRequest families_asked(const store::CompareTable& table, const std::string& file,
                             const std::vector<std::string>& main_recipes,
                             const std::map<std::string, std::string>& recipe_bases,
                             const std::vector<ContrastRun>& runs);

// The tests of every family on each of its metrics (its `metrics`; every metric when the request
// names none): the final eval loss ("final_eval", the primary one), and the paper's mean train loss
// of the last steps ("train_tail"). A point enters a contrast's tests when it has
// at least two seeds with finished runs of A and of B and at least one finished baseline run;
// points with one pair are listed in `untested`, points with no baseline in `notes`.
ContrastSet compute_contrasts(const std::vector<ContrastRun>& runs, const FamilyRequest& request,
                              const std::string& grid);

// Conversions to and from the store's rows, and reading: the latest set of `grid` (nullopt when none).
store::ContrastSetRecord to_record(const ContrastSet& set);
ContrastSet from_record(const store::ContrastSetRecord& record);
std::optional<ContrastSet> latest_contrast_set(const store::Store& store, const std::string& grid);

// The trend of one contrast of a family with compute (fit/trend.h): x = log10(6·N·D) of its tested
// points on `metric` (the final eval loss, or the paper's train tail where the family is tested on
// it), each point's per-seed d, clustered by model. An empty Trend (points 0) with fewer than two
// distinct x. kTrendReplicates bootstrap resamples from seed 0.
inline constexpr int64_t kTrendReplicates = 10000;
Trend contrast_trend(const ContrastFamily& family, const std::pair<std::string, std::string>& contrast,
                     const std::string& metric = "final_eval");

// Words shared by `fp4lab fit`'s table and the report: a metric ("final_eval", "train_tail") as a
// heading says it; a metric's Holm set of `tests` tests; which tests of the set were declared
// ("none. Every family below is one of fp4lab's defaults...", after "declared tests: ").
std::string metric_in_words(const std::string& metric);
std::string holm_set_in_words(size_t tests);
std::string declared_in_words(const ContrastSet& set);

// The table `fp4lab fit` prints after the fits.
std::string format_contrasts_table(const ContrastSet& set);

// The set as `fp4lab fit --format json` writes it (docs/fit.md "Output"): the contrast_sets row's
// fields, each family with its tests (the contrasts table's columns, d as [[seed, d_pp], ...]) and
// the trend of each of its contrasts (contrast_trend); a number that could not be estimated is null.
nlohmann::json contrast_set_json(const ContrastSet& set);

}  // namespace fp4::fit
