// stored_fit.cpp — see stored_fit.h; docs/fit.md "The stored fit" is the layout written here.
#include "fit/stored_fit.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace fp4::fit {

using nlohmann::json;

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

namespace {

// ---- JSON helpers: NaN travels as null; a missing key reads as its default ----------------------

json interval_json(const Interval& ci) { return json::array({number_or_null(ci.lo), number_or_null(ci.hi)}); }
json estimate_json(const Estimate& e) {
  return {{"value", number_or_null(e.value)}, {"lo", number_or_null(e.ci.lo)}, {"hi", number_or_null(e.ci.hi)}};
}

double read_number(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return kNaN;
  if (!it->is_number()) throw std::runtime_error(std::string("\"") + key + "\" is not a number");
  return it->get<double>();
}
double read_number_or(const json& j, const char* key, double fallback) {
  const double v = read_number(j, key);
  return std::isnan(v) ? fallback : v;
}
int64_t read_integer(const json& j, const char* key, int64_t fallback = 0) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw std::runtime_error(std::string("\"") + key + "\" is not an integer");
  return it->get<int64_t>();
}
std::string read_string(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string()) throw std::runtime_error(std::string("\"") + key + "\" is not a string");
  return it->get<std::string>();
}
bool read_bool(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_boolean()) throw std::runtime_error(std::string("\"") + key + "\" is not a boolean");
  return it->get<bool>();
}
const json& read_array(const json& j, const char* key) {
  static const json empty = json::array();
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return empty;
  if (!it->is_array()) throw std::runtime_error(std::string("\"") + key + "\" is not an array");
  return *it;
}
const json& read_object(const json& j, const char* key) {
  static const json empty = json::object();
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return empty;
  if (!it->is_object()) throw std::runtime_error(std::string("\"") + key + "\" is not an object");
  return *it;
}
double element_number(const json& e) {
  if (e.is_null()) return kNaN;
  if (!e.is_number()) throw std::runtime_error("an array element is not a number");
  return e.get<double>();
}
Interval read_interval(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_array() || it->size() != 2) throw std::runtime_error(std::string("\"") + key + "\" is not [lo, hi]");
  return {element_number((*it)[0]), element_number((*it)[1])};
}
Estimate read_estimate(const json& j, const char* key) {
  const json& e = read_object(j, key);
  return {read_number(e, "value"), {read_number(e, "lo"), read_number(e, "hi")}};
}

// ---- The parameter layout --------------------------------------------------------------------

// The shared parameters every law reports, in display order; a and b are derived from alpha, beta.
constexpr const char* kSharedNames[] = {"E", "A", "B", "alpha", "beta"};

double shared_value(const LawParameters& p, const std::string& name) {
  if (name == "E") return p.E;
  if (name == "A") return p.A;
  if (name == "B") return p.B;
  if (name == "alpha") return p.alpha;
  if (name == "beta") return p.beta;
  if (name == "gamma") return p.gamma;
  throw std::logic_error("shared_value: " + name);
}
void set_shared_value(LawParameters& p, const std::string& name, double v) {
  if (name == "E") p.E = v;
  else if (name == "A") p.A = v;
  else if (name == "B") p.B = v;
  else if (name == "alpha") p.alpha = v;
  else if (name == "beta") p.beta = v;
  else if (name == "gamma") p.gamma = v;
  else throw std::runtime_error("unknown sample column \"" + name + "\"");
}

bool is_precision(const StoredFit& fit) { return fit.law == "precision"; }

// The columns of a bootstrap sample row: the shared parameters, gamma for precision, then rho_N and
// rho_D of each recipe (sorted).
std::vector<std::pair<std::string, std::string>> sample_columns(const StoredFit& fit) {
  std::vector<std::pair<std::string, std::string>> cols;
  for (const char* n : kSharedNames) cols.emplace_back(n, "");
  if (is_precision(fit)) {
    cols.emplace_back("gamma", "");
    for (const auto& [recipe, v] : fit.point.rho_n) {
      (void)v;
      cols.emplace_back("rho_N", recipe);
      cols.emplace_back("rho_D", recipe);
    }
  }
  return cols;
}

double sample_value(const LawParameters& p, const std::pair<std::string, std::string>& col) {
  if (col.first == "rho_N") return p.rho_n.at(col.second);
  if (col.first == "rho_D") return p.rho_d.at(col.second);
  return shared_value(p, col.first);
}

// ---- Columns to JSON ------------------------------------------------------------------------

json params_to_json(const StoredFit& fit) {
  json j = json::object();
  for (const char* n : kSharedNames) j[n] = number_or_null(shared_value(fit.point, n));
  j["a"] = number_or_null(allocation_exponent_a(fit.point));
  j["b"] = number_or_null(allocation_exponent_b(fit.point));
  if (is_precision(fit)) {
    j["gamma"] = number_or_null(fit.point.gamma);
    json rho = json::object();
    for (const auto& [recipe, rn] : fit.point.rho_n)
      rho[recipe] = {{"rho_N", number_or_null(rn)}, {"rho_D", number_or_null(fit.point.rho_d.at(recipe))}};
    j["rho"] = rho;
  }
  return j;
}

json intervals_to_json(const StoredFit& fit) {
  json params = json::object();
  json rho = json::object();
  for (const ParameterEstimate& p : fit.parameters) {
    if (p.recipe.empty()) params[p.name] = interval_json(p.ci);
    else rho[p.recipe][p.name] = interval_json(p.ci);
  }
  if (!rho.empty()) params["rho"] = rho;
  json columns = json::array();
  const auto cols = sample_columns(fit);
  for (const auto& [name, recipe] : cols) columns.push_back(json::array({name, recipe}));
  json replicate = json::array(), values = json::array();
  for (const BootstrapSample& s : fit.samples) {
    replicate.push_back(s.replicate);
    json row = json::array();
    for (const auto& c : cols) row.push_back(number_or_null(sample_value(s.params, c)));
    values.push_back(std::move(row));
  }
  return {{"level", 0.95},
          {"method", "percentile"},
          {"replicates", fit.replicates_asked},
          {"kept", fit.samples.size()},
          {"params", params},
          {"samples", {{"columns", columns}, {"replicate", replicate}, {"values", values}}}};
}

json quality_to_json(const StoredFit& fit) {
  const OptimizerSummary& o = fit.optimizer;
  json optimizer = {{"library", o.library},           {"method", o.method},
                    {"starts_tried", o.starts_tried}, {"starts_succeeded", o.starts_succeeded},
                    {"best_start", o.best_start},     {"iterations", o.iterations},
                    {"termination", o.termination},   {"message", o.message},
                    {"initial_cost", number_or_null(o.initial_cost)}, {"final_cost", number_or_null(o.final_cost)}};
  json residuals = json::array();
  for (const Residual& r : fit.residuals)
    residuals.push_back({{"run", r.run_id}, {"name", r.run_name}, {"recipe", r.recipe}, {"n", r.n}, {"d", r.d},
                         {"observed", number_or_null(r.observed)}, {"fitted", number_or_null(r.fitted)},
                         {"log_residual", number_or_null(r.log_residual)}});
  json held_recipes = json::array();
  for (const HeldOutRecipe& h : fit.held_out.recipes) {
    json points = json::array();
    for (const HeldOutPoint& p : h.points)
      points.push_back({{"run", p.run_id}, {"name", p.run_name}, {"n", p.n}, {"d", p.d},
                        {"observed", number_or_null(p.observed)}, {"predicted", number_or_null(p.predicted)},
                        {"rel_error", number_or_null(p.rel_error)}});
    held_recipes.push_back({{"recipe", h.recipe}, {"points", points},
                            {"mean_abs_rel_error", number_or_null(h.mean_abs_rel_error)},
                            {"max_abs_rel_error", number_or_null(h.max_abs_rel_error)}});
  }
  json excluded = json::array();
  for (const ExcludedRun& e : fit.excluded)
    excluded.push_back({{"run", e.run_id}, {"name", e.run_name}, {"recipe", e.recipe}, {"state", e.state},
                        {"reason", e.reason}});
  json failures = json::array();
  for (const ReplicateFailure& r : fit.replicate_failures) failures.push_back({{"reason", r.reason}, {"count", r.count}});
  json guardrails = json::array();
  for (const Guardrail& g : fit.guardrails)
    guardrails.push_back({{"check", g.check}, {"message", g.message}, {"unidentified", g.unidentified},
                          {"parameter", g.parameter}, {"recipe", g.recipe}});
  return {{"objective", number_or_null(fit.objective)},
          {"n_points", fit.n_points},
          {"optimizer", optimizer},
          {"residuals", residuals},
          {"held_out",
           {{"done", fit.held_out.done}, {"reason", fit.held_out.reason}, {"n", number_or_null(fit.held_out.held_out_n)},
            {"recipes", held_recipes}}},
          {"excluded", excluded},
          {"replicate_failures", failures},
          {"guardrails", guardrails}};
}

json options_to_json(const StoredFit& fit) {
  const FitOptions& o = fit.options;
  json targets = json::array();
  for (const Target& t : o.targets) targets.push_back({{"n", t.n}, {"d", t.d}});
  return {{"law", fit.law},         {"n", o.n_kind},         {"huber_delta", o.huber_delta},
          {"bootstrap", o.bootstrap}, {"seed", o.seed},       {"gamma", o.gamma},
          {"targets", targets},     {"recipes", o.recipes},  {"baseline", o.baseline},
          {"source", o.source},     {"grid", o.grid},        {"data_hash", o.data_hash}};
}

json observed_gap_json(const ObservedGap& o) {
  return {{"n", o.n}, {"d", o.d}, {"seeds", o.seeds}, {"mean", number_or_null(o.mean)}, {"sd", number_or_null(o.sd)},
          {"min", number_or_null(o.min)}, {"max", number_or_null(o.max)}, {"lo", number_or_null(o.ci.lo)}, {"hi", number_or_null(o.ci.hi)}};
}
json fitted_gap_json(const FittedGap& f) {
  return {{"n", f.n}, {"d", f.d}, {"value", number_or_null(f.gap.value)}, {"lo", number_or_null(f.gap.ci.lo)},
          {"hi", number_or_null(f.gap.ci.hi)}};
}
json slope_json(const GapSlope& s) {
  return {{"per_decade", number_or_null(s.per_decade.value)}, {"lo", number_or_null(s.per_decade.ci.lo)},
          {"hi", number_or_null(s.per_decade.ci.hi)}, {"points", s.points}};
}
json observed_difference_json(const ObservedDifference& o) {
  return {{"n", number_or_null(o.n)},       {"points", o.points}, {"wins", o.wins},        {"mean", number_or_null(o.mean)},
          {"sd", number_or_null(o.sd)},     {"lo", number_or_null(o.ci.lo)}, {"hi", number_or_null(o.ci.hi)}};
}

json predictions_to_json(const StoredFit& fit) {
  json targets = json::array();
  for (const TargetPrediction& p : fit.predictions)
    targets.push_back({{"n", p.target.n}, {"d", p.target.d}, {"recipe", p.recipe}, {"loss", estimate_json(p.loss)},
                       {"gap", estimate_json(p.gap)}});
  json gaps = json::array();
  for (const RecipeGap& g : fit.gaps) {
    json observed = json::array(), tail = json::array(), fitted = json::array();
    for (const ObservedGap& o : g.observed) observed.push_back(observed_gap_json(o));
    for (const ObservedGap& o : g.observed_train_tail) tail.push_back(observed_gap_json(o));
    for (const FittedGap& f : g.fitted) fitted.push_back(fitted_gap_json(f));
    gaps.push_back({{"recipe", g.recipe},
                    {"baseline", g.baseline},
                    {"observed", observed},
                    {"observed_train_tail", tail},
                    {"fitted", fitted},
                    {"slope", slope_json(g.slope)},
                    {"slope_train_tail", slope_json(g.slope_train_tail)}});
  }
  json comparisons = json::array();
  for (const RecipeComparison& c : fit.comparisons) {
    json by_n = json::array(), points = json::array(), fitted = json::array(), at_targets = json::array();
    for (const ObservedDifference& o : c.observed_by_n) by_n.push_back(observed_difference_json(o));
    for (const ObservedGap& o : c.observed_points) points.push_back(observed_gap_json(o));
    for (const FittedGap& f : c.fitted) fitted.push_back(fitted_gap_json(f));
    for (const FittedGap& f : c.targets) at_targets.push_back(fitted_gap_json(f));
    comparisons.push_back({{"recipe", c.recipe},
                           {"against", c.against},
                           {"baseline", c.baseline},
                           {"observed", observed_difference_json(c.observed)},
                           {"observed_by_n", by_n},
                           {"observed_points", points},
                           {"fitted", fitted},
                           {"targets", at_targets},
                           {"slope", slope_json(c.slope)}});
  }
  return {{"targets", targets}, {"gaps", gaps}, {"comparisons", comparisons}};
}

// ---- JSON to columns ------------------------------------------------------------------------

json parse_column(const std::string& text, const char* column) {
  try {
    json j = json::parse(text.empty() ? std::string("{}") : text);
    if (!j.is_object()) throw std::runtime_error("not a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string(column) + ": " + e.what());
  }
}

void read_params(StoredFit& fit, const json& j) {
  for (const char* n : kSharedNames) set_shared_value(fit.point, n, read_number(j, n));
  fit.point.gamma = read_number_or(j, "gamma", 1.0);
  for (const auto& [recipe, r] : read_object(j, "rho").items()) {
    fit.point.rho_n[recipe] = read_number(r, "rho_N");
    fit.point.rho_d[recipe] = read_number(r, "rho_D");
  }
}

void read_intervals(StoredFit& fit, const json& j) {
  const json& params = read_object(j, "params");
  auto add = [&](const std::string& name, const std::string& recipe, double value, const json& from) {
    fit.parameters.push_back({name, recipe, value, read_interval(from, name.c_str())});
  };
  for (const char* n : kSharedNames) add(n, "", shared_value(fit.point, n), params);
  add("a", "", allocation_exponent_a(fit.point), params);
  add("b", "", allocation_exponent_b(fit.point), params);
  if (is_precision(fit)) {
    add("gamma", "", fit.point.gamma, params);
    const json& rho = read_object(params, "rho");
    for (const auto& [recipe, rn] : fit.point.rho_n) {
      const json& r = read_object(rho, recipe.c_str());
      add("rho_N", recipe, rn, r);
      add("rho_D", recipe, fit.point.rho_d.at(recipe), r);
    }
  }
  fit.replicates_asked = read_integer(j, "replicates");
  const json& samples = read_object(j, "samples");
  std::vector<std::pair<std::string, std::string>> cols;
  for (const json& c : read_array(samples, "columns")) {
    if (!c.is_array() || c.size() != 2 || !c[0].is_string() || !c[1].is_string())
      throw std::runtime_error("samples.columns: each column is [name, recipe]");
    cols.emplace_back(c[0].get<std::string>(), c[1].get<std::string>());
  }
  const json& replicate = read_array(samples, "replicate");
  const json& values = read_array(samples, "values");
  if (replicate.size() != values.size()) throw std::runtime_error("samples: replicate and values differ in length");
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].is_array() || values[i].size() != cols.size())
      throw std::runtime_error("samples.values: a row does not match the columns");
    BootstrapSample s;
    if (!replicate[i].is_number_integer()) throw std::runtime_error("samples.replicate: not an integer");
    s.replicate = replicate[i].get<int64_t>();
    for (size_t c = 0; c < cols.size(); ++c) {
      const double v = element_number(values[i][c]);
      if (cols[c].first == "rho_N") s.params.rho_n[cols[c].second] = v;
      else if (cols[c].first == "rho_D") s.params.rho_d[cols[c].second] = v;
      else set_shared_value(s.params, cols[c].first, v);
    }
    fit.samples.push_back(std::move(s));
  }
}

void read_quality(StoredFit& fit, const json& j) {
  fit.objective = read_number(j, "objective");
  fit.n_points = read_integer(j, "n_points", fit.n_points);
  const json& o = read_object(j, "optimizer");
  OptimizerSummary& s = fit.optimizer;
  s.library = read_string(o, "library");
  s.method = read_string(o, "method");
  s.starts_tried = read_integer(o, "starts_tried");
  s.starts_succeeded = read_integer(o, "starts_succeeded");
  s.best_start = read_integer(o, "best_start", -1);
  s.iterations = read_integer(o, "iterations");
  s.termination = read_string(o, "termination");
  s.message = read_string(o, "message");
  s.initial_cost = read_number(o, "initial_cost");
  s.final_cost = read_number(o, "final_cost");
  for (const json& r : read_array(j, "residuals"))
    fit.residuals.push_back({read_string(r, "run"), read_string(r, "name"), read_string(r, "recipe"),
                             read_number(r, "n"), read_number(r, "d"), read_number(r, "observed"),
                             read_number(r, "fitted"), read_number(r, "log_residual")});
  const json& h = read_object(j, "held_out");
  fit.held_out.done = read_bool(h, "done");
  fit.held_out.reason = read_string(h, "reason");
  fit.held_out.held_out_n = read_number(h, "n");
  for (const json& r : read_array(h, "recipes")) {
    HeldOutRecipe hr;
    hr.recipe = read_string(r, "recipe");
    hr.mean_abs_rel_error = read_number(r, "mean_abs_rel_error");
    hr.max_abs_rel_error = read_number(r, "max_abs_rel_error");
    for (const json& p : read_array(r, "points"))
      hr.points.push_back({read_string(p, "run"), read_string(p, "name"), read_number(p, "n"), read_number(p, "d"),
                           read_number(p, "observed"), read_number(p, "predicted"), read_number(p, "rel_error")});
    fit.held_out.recipes.push_back(std::move(hr));
  }
  for (const json& e : read_array(j, "excluded"))
    fit.excluded.push_back({read_string(e, "run"), read_string(e, "name"), read_string(e, "recipe"),
                            read_string(e, "state"), read_string(e, "reason")});
  for (const json& r : read_array(j, "replicate_failures"))
    fit.replicate_failures.push_back({read_string(r, "reason"), read_integer(r, "count")});
  fit.guardrails_checked = j.contains("guardrails");
  for (const json& g : read_array(j, "guardrails"))
    fit.guardrails.push_back({read_string(g, "check"), read_string(g, "message"), read_bool(g, "unidentified"),
                              read_string(g, "parameter"), read_string(g, "recipe")});
}

void read_options(StoredFit& fit, const json& j) {
  FitOptions& o = fit.options;
  o.n_kind = read_string(j, "n");
  o.huber_delta = read_number(j, "huber_delta");
  o.bootstrap = read_integer(j, "bootstrap");
  if (const auto it = j.find("seed"); it != j.end() && it->is_number_unsigned()) o.seed = it->get<uint64_t>();
  o.gamma = read_bool(j, "gamma");
  for (const json& t : read_array(j, "targets")) o.targets.push_back({read_number(t, "n"), read_number(t, "d")});
  for (const json& r : read_array(j, "recipes")) {
    if (!r.is_string()) throw std::runtime_error("\"recipes\" holds a non-string");
    o.recipes.push_back(r.get<std::string>());
  }
  o.baseline = read_string(j, "baseline");
  o.source = read_string(j, "source");
  o.grid = read_string(j, "grid");
  o.data_hash = read_string(j, "data_hash");
}

ObservedGap read_observed_gap(const json& o) {
  return {read_number(o, "n"), read_number(o, "d"), read_integer(o, "seeds"), read_number(o, "mean"),
          read_number(o, "sd"), read_number(o, "min"), read_number(o, "max"),
          {read_number(o, "lo"), read_number(o, "hi")}};
}
FittedGap read_fitted_gap(const json& f) {
  return {read_number(f, "n"), read_number(f, "d"), {read_number(f, "value"), {read_number(f, "lo"), read_number(f, "hi")}}};
}
GapSlope read_slope(const json& s) {
  return {{read_number(s, "per_decade"), {read_number(s, "lo"), read_number(s, "hi")}}, read_integer(s, "points")};
}
ObservedDifference read_observed_difference(const json& o) {
  return {read_number(o, "n"),    read_integer(o, "points"), read_integer(o, "wins"),
          read_number(o, "mean"), read_number(o, "sd"),      {read_number(o, "lo"), read_number(o, "hi")}};
}

void read_predictions(StoredFit& fit, const json& j) {
  for (const json& t : read_array(j, "targets"))
    fit.predictions.push_back({{read_number(t, "n"), read_number(t, "d")}, read_string(t, "recipe"),
                               read_estimate(t, "loss"), read_estimate(t, "gap")});
  for (const json& g : read_array(j, "gaps")) {
    RecipeGap rg;
    rg.recipe = read_string(g, "recipe");
    rg.baseline = read_string(g, "baseline");
    for (const json& o : read_array(g, "observed")) rg.observed.push_back(read_observed_gap(o));
    for (const json& o : read_array(g, "observed_train_tail")) rg.observed_train_tail.push_back(read_observed_gap(o));
    for (const json& f : read_array(g, "fitted")) rg.fitted.push_back(read_fitted_gap(f));
    rg.slope = read_slope(read_object(g, "slope"));
    rg.slope_train_tail = read_slope(read_object(g, "slope_train_tail"));  // absent before: none
    fit.gaps.push_back(std::move(rg));
  }
  // Absent in fits stored before comparisons existed: read as none.
  for (const json& c : read_array(j, "comparisons")) {
    RecipeComparison rc;
    rc.recipe = read_string(c, "recipe");
    rc.against = read_string(c, "against");
    rc.baseline = read_string(c, "baseline");
    rc.observed = read_observed_difference(read_object(c, "observed"));
    for (const json& o : read_array(c, "observed_by_n")) rc.observed_by_n.push_back(read_observed_difference(o));
    for (const json& o : read_array(c, "observed_points")) rc.observed_points.push_back(read_observed_gap(o));
    for (const json& f : read_array(c, "fitted")) rc.fitted.push_back(read_fitted_gap(f));
    for (const json& f : read_array(c, "targets")) rc.targets.push_back(read_fitted_gap(f));
    rc.slope = read_slope(read_object(c, "slope"));
    fit.comparisons.push_back(std::move(rc));
  }
}

// ---- Evaluation -----------------------------------------------------------------------------

// ρN, ρD of `recipe` under `params` for this fit's law (1, 1 for chinchilla).
std::pair<double, double> rho_of(const StoredFit& fit, const LawParameters& params, const std::string& recipe) {
  if (!is_precision(fit)) {
    if (!recipe.empty() && recipe != fit.scope)
      throw std::invalid_argument("fit " + std::to_string(fit.id) + " (chinchilla, " + fit.scope +
                                  ") cannot predict recipe \"" + recipe + "\"");
    return {1.0, 1.0};
  }
  const auto n = params.rho_n.find(recipe);
  const auto d = params.rho_d.find(recipe);
  if (n == params.rho_n.end() || d == params.rho_d.end())
    throw std::invalid_argument("fit " + std::to_string(fit.id) + " (precision) has no recipe \"" + recipe + "\"");
  return {n->second, d->second};
}

const std::string& baseline_of(const StoredFit& fit) {
  if (fit.options.baseline.empty())
    throw std::invalid_argument("fit " + std::to_string(fit.id) + " has no BF16 baseline to take a gap against");
  return fit.options.baseline;
}

}  // namespace

std::optional<ParameterEstimate> StoredFit::parameter(const std::string& name, const std::string& recipe) const {
  for (const ParameterEstimate& p : parameters)
    if (p.name == name && p.recipe == recipe) return p;
  return std::nullopt;
}

std::vector<std::string> StoredFit::recipes() const {
  if (law != "precision") return {scope};
  std::vector<std::string> out;
  for (const auto& [recipe, v] : point.rho_n) {
    (void)v;
    out.push_back(recipe);
  }
  return out;
}

store::FitRecord to_record(const StoredFit& fit) {
  store::FitRecord r;
  r.id = fit.id;
  r.law = fit.law;
  r.scope = fit.scope;
  r.input_hash = fit.input_hash;
  r.params_json = params_to_json(fit).dump();
  r.intervals_json = intervals_to_json(fit).dump();
  r.quality_json = quality_to_json(fit).dump();
  r.options_json = options_to_json(fit).dump();
  r.predictions_json = predictions_to_json(fit).dump();
  r.n_points = fit.n_points;
  r.fp4lab_version = fit.fp4lab_version;
  r.created = fit.created;
  return r;
}

StoredFit from_record(const store::FitRecord& r) {
  StoredFit fit;
  fit.id = r.id;
  fit.law = r.law;
  fit.scope = r.scope;
  fit.input_hash = r.input_hash;
  fit.n_points = r.n_points;
  fit.fp4lab_version = r.fp4lab_version;
  fit.created = r.created;
  const char* column = "";
  try {
    column = "params_json";
    read_params(fit, parse_column(r.params_json, column));
    column = "intervals_json";
    read_intervals(fit, parse_column(r.intervals_json, column));
    column = "quality_json";
    read_quality(fit, parse_column(r.quality_json, column));
    column = "options_json";
    read_options(fit, parse_column(r.options_json, column));
    column = "predictions_json";
    read_predictions(fit, parse_column(r.predictions_json, column));
  } catch (const std::exception& e) {
    throw std::runtime_error("fits row " + std::to_string(r.id) + ": " + column + ": " + e.what());
  }
  return fit;
}

int64_t insert_fit(store::Store& store, const StoredFit& fit) { return store.insert_fit(to_record(fit)); }

std::vector<StoredFit> read_all_fits(const store::Store& store) {
  std::vector<StoredFit> out;
  for (const store::FitRecord& r : store.fits()) out.push_back(from_record(r));
  return out;
}

std::vector<StoredFit> read_fits(const store::Store& store) {
  std::map<std::pair<std::string, std::string>, store::FitRecord> latest;  // rows come by id
  for (store::FitRecord& r : store.fits()) latest[{r.law, r.scope}] = std::move(r);
  std::vector<StoredFit> out;
  for (const auto& [key, r] : latest) out.push_back(from_record(r));
  return out;
}

std::optional<StoredFit> find_fit(const store::Store& store, const std::string& law, const std::string& scope,
                                  const std::string& input_hash) {
  const auto r = store.find_fit(law, scope, input_hash);
  if (!r) return std::nullopt;
  return from_record(*r);
}

double predicted_loss(const StoredFit& fit, const LawParameters& params, const std::string& recipe, double n,
                      double d) {
  const auto [rn, rd] = rho_of(fit, params, recipe);
  return law_loss(params, rn, rd, n, d);
}

double predicted_loss(const StoredFit& fit, const std::string& recipe, double n, double d) {
  return predicted_loss(fit, fit.point, recipe, n, d);
}

Estimate predicted_loss_interval(const StoredFit& fit, const std::string& recipe, double n, double d) {
  Estimate e;
  e.value = predicted_loss(fit, recipe, n, d);
  std::vector<double> values;
  values.reserve(fit.samples.size());
  for (const BootstrapSample& s : fit.samples) values.push_back(predicted_loss(fit, s.params, recipe, n, d));
  e.ci = percentile_interval(std::move(values));
  return e;
}

namespace {

// A quantity of a precision fit's parameters: its value at the point estimate and the percentile
// interval of its values over the stored replicates.
template <typename F>
Estimate replicated_estimate(const StoredFit& fit, const F& value_of) {
  Estimate e;
  e.value = value_of(fit.point);
  std::vector<double> values;
  values.reserve(fit.samples.size());
  for (const BootstrapSample& s : fit.samples) values.push_back(value_of(s.params));
  e.ci = percentile_interval(std::move(values));
  return e;
}

// gap_recipe = L_recipe / L_baseline - 1 under one set of a precision fit's parameters.
double gap_under(const StoredFit& fit, const LawParameters& p, const std::string& recipe, double n, double d) {
  return predicted_loss(fit, p, recipe, n, d) / predicted_loss(fit, p, baseline_of(fit), n, d) - 1;
}

void require_precision(const StoredFit& fit) {
  if (!is_precision(fit))
    throw std::invalid_argument("fit " + std::to_string(fit.id) +
                                " is a chinchilla fit: take the gap from it and the baseline's chinchilla fit");
}

}  // namespace

Estimate predicted_gap_interval(const StoredFit& fit, const std::string& recipe, double n, double d) {
  require_precision(fit);
  return replicated_estimate(fit, [&](const LawParameters& p) { return gap_under(fit, p, recipe, n, d); });
}

Estimate predicted_gap_difference_interval(const StoredFit& fit, const std::string& a, const std::string& b,
                                           double n, double d) {
  require_precision(fit);
  return replicated_estimate(
      fit, [&](const LawParameters& p) { return gap_under(fit, p, a, n, d) - gap_under(fit, p, b, n, d); });
}

Estimate predicted_gap_interval(const StoredFit& recipe_fit, const StoredFit& baseline_fit, double n, double d) {
  if (recipe_fit.options.data_hash.empty() || recipe_fit.options.data_hash != baseline_fit.options.data_hash)
    throw std::invalid_argument("fits " + std::to_string(recipe_fit.id) + " and " + std::to_string(baseline_fit.id) +
                                " come from different data sets or options: their replicates cannot be paired");
  Estimate e;
  e.value = predicted_loss(recipe_fit, "", n, d) / predicted_loss(baseline_fit, "", n, d) - 1;
  // Both sample lists are sorted by replicate index: pair equal indices.
  std::vector<double> values;
  size_t j = 0;
  for (const BootstrapSample& s : recipe_fit.samples) {
    while (j < baseline_fit.samples.size() && baseline_fit.samples[j].replicate < s.replicate) ++j;
    if (j == baseline_fit.samples.size()) break;
    if (baseline_fit.samples[j].replicate != s.replicate) continue;
    values.push_back(predicted_loss(recipe_fit, s.params, "", n, d) /
                         predicted_loss(baseline_fit, baseline_fit.samples[j].params, "", n, d) -
                     1);
  }
  e.ci = percentile_interval(std::move(values));
  return e;
}

}  // namespace fp4::fit
