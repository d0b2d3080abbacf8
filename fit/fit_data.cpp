// fit_data.cpp — see fit_data.h.
#include "fit/fit_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "base/csv_table.h"
#include "base/user_error.h"
#include "fit/contrasts.h"
#include "store/store.h"

namespace fp4::fit {

namespace {

void sort_data(FitData& data) {
  std::sort(data.points.begin(), data.points.end(), [](const FitPoint& a, const FitPoint& b) {
    return std::tie(a.recipe, a.n, a.d, a.group, a.run_id) < std::tie(b.recipe, b.n, b.d, b.group, b.run_id);
  });
  std::sort(data.excluded.begin(), data.excluded.end(), [](const ExcludedRun& a, const ExcludedRun& b) {
    return std::tie(a.recipe, a.run_name, a.run_id) < std::tie(b.recipe, b.run_name, b.run_id);
  });
  std::set<std::string> recipes;
  for (const FitPoint& p : data.points) recipes.insert(p.recipe);
  for (const ExcludedRun& e : data.excluded) recipes.insert(e.recipe);
  data.recipes.assign(recipes.begin(), recipes.end());
  std::erase_if(data.baselines, [&](const std::string& b) { return !recipes.contains(b); });
}

// A number cell: the whole cell must parse; "nan" (any case) reads as NaN where allowed.
double parse_cell(const std::string& cell, const std::string& where, const char* column, bool nan_ok) {
  std::string lower = cell;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (nan_ok && lower == "nan") return std::nan("");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (cell.empty() || end != cell.c_str() + cell.size() || errno == ERANGE || !std::isfinite(v))
    throw UserError(fmt::format("{}: column {}: \"{}\" is not a finite number", where, column, cell));
  if (!(v > 0)) throw UserError(fmt::format("{}: column {}: must be > 0, got {}", where, column, cell));
  return v;
}

// The points and exclusions of `runs` (rows of the final_losses view), for load_store_data and
// load_grid_data.
FitData data_from_runs(const store::Store& store, const std::vector<store::FinalLossRecord>& runs,
                       const std::string& n_kind) {
  if (n_kind != "nonembedding" && n_kind != "total")
    throw UserError("n must be \"nonembedding\" or \"total\", got \"" + n_kind + "\"");
  FitData data;
  data.n_kind = n_kind;
  data.source = "store";
  data.origin = store.path().string();
  std::set<std::string> baselines;
  for (const store::FinalLossRecord& r : runs) {
    if (r.baseline) baselines.insert(r.recipe);
    auto exclude = [&](const std::string& reason) {
      data.excluded.push_back({r.id, r.name, r.recipe, store::run_state_name(r.state), reason});
    };
    const double n = static_cast<double>(n_kind == "total" ? r.n_params : r.n_params_nonembedding);
    const double d = static_cast<double>(r.tokens);
    if (r.state != store::RunState::succeeded) {
      exclude(std::string("state ") + store::run_state_name(r.state) + (r.error.empty() ? "" : ": " + r.error));
    } else if (!r.final_step) {
      exclude("no eval/loss recorded");
    } else if (!std::isfinite(r.final_loss)) {
      exclude(fmt::format("final eval/loss is NaN (step {})", *r.final_step));
    } else if (!(r.final_loss > 0) || !(n > 0) || !(d > 0)) {
      exclude(fmt::format("loss, N and D must be > 0 (loss {}, N {}, D {})", r.final_loss, n, d));
    } else {
      data.points.push_back({r.id, r.name, r.recipe, r.match_key, n, d, r.final_loss, *r.final_step,
                             train_tail(store.metrics(r.id, "train/loss")).mean});
    }
  }
  data.baselines.assign(baselines.begin(), baselines.end());
  return data;
}

std::vector<store::FinalLossRecord> store_runs(const store::Store& store) {
  auto runs = store.final_losses();
  if (runs.empty())
    throw UserError(store.path().string() +
                    ": the store has no runs: run the study first (fp4lab sweep run STUDY.toml)");
  return runs;
}

}  // namespace

FitData load_store_data(const store::Store& store, const std::string& n_kind) {
  FitData data = data_from_runs(store, store_runs(store), n_kind);
  sort_data(data);
  return data;
}

FitData load_grid_data(const store::Store& store, const store::GridRecord& spec, const std::string& n_kind) {
  // By run id, not by the grid's row in the store: a grid row is the TOML's exact text, so an
  // edited comment would lose every run, while the ids change only when the computation does.
  std::map<std::string, const store::GridPointRecord*> declared;
  for (const store::GridPointRecord& p : spec.points) declared.emplace(p.id, &p);
  std::vector<store::FinalLossRecord> runs;
  for (store::FinalLossRecord& r : store_runs(store))
    if (declared.erase(r.id) > 0) runs.push_back(std::move(r));
  FitData data = data_from_runs(store, runs, n_kind);
  data.grid = spec.name;
  data.origin = fmt::format("{}'s runs in {}", spec.file.string(), store.path().string());
  std::set<std::string> baselines(data.baselines.begin(), data.baselines.end());
  for (const auto& [id, p] : declared) {
    if (p->baseline) baselines.insert(p->recipe);
    data.excluded.push_back({id, p->name, p->recipe, "",
                             "not in the store: not run yet (fp4lab sweep run " + spec.file.string() + ")"});
  }
  data.baselines.assign(baselines.begin(), baselines.end());
  sort_data(data);
  return data;
}

FitData load_csv_data(const std::filesystem::path& path) {
  FitData data;
  data.n_kind = "given";
  data.source = "points";
  data.origin = path.string();
  std::map<std::string, int> seen;  // recipe|n|d → rows so far
  for (const CsvRow& row : read_csv_table(path, {"recipe", "n", "d", "loss"}, "points file")) {
    const std::string where = fmt::format("{}:{}", path.string(), row.line);
    const std::string& recipe = row.cells[0];
    if (recipe.empty()) throw UserError(where + ": column recipe: empty");
    const double n = parse_cell(row.cells[1], where, "n", false);
    const double d = parse_cell(row.cells[2], where, "d", false);
    const double loss = parse_cell(row.cells[3], where, "loss", true);
    // The row's name counts data rows from 1, whatever comments or blank lines lie between them.
    const std::string name = fmt::format("row {}", data.points.size() + data.excluded.size() + 1);
    if (std::isnan(loss)) {
      data.excluded.push_back({"", name, recipe, "", "loss is NaN"});
      continue;
    }
    const std::string nd = fmt::format("{:.17g}|{:.17g}", n, d);
    const int k = seen[recipe + "|" + nd]++;
    data.points.push_back({"", name, recipe, fmt::format("{}|{}", nd, k), n, d, loss});
  }
  data.baselines = {"bf16"};
  sort_data(data);
  return data;
}

FitData select_recipes(const FitData& data, const std::vector<std::string>& recipes) {
  if (recipes.empty()) return data;
  for (const std::string& r : recipes)
    if (std::find(data.recipes.begin(), data.recipes.end(), r) == data.recipes.end())
      throw UserError(fmt::format("--recipe {}: {} has no such recipe (it has {})", r, data.origin,
                                  fmt::join(data.recipes, ", ")));
  FitData out = data;
  auto keep = [&](const std::string& r) { return std::find(recipes.begin(), recipes.end(), r) != recipes.end(); };
  std::erase_if(out.points, [&](const FitPoint& p) { return !keep(p.recipe); });
  std::erase_if(out.excluded, [&](const ExcludedRun& e) { return !keep(e.recipe); });
  sort_data(out);
  return out;
}

std::string baseline_of(const FitData& data) {
  if (data.baselines.size() > 1)
    throw UserError(fmt::format("{}: several recipes are BF16 everywhere ({}): keep one with --recipe", data.origin,
                                fmt::join(data.baselines, ", ")));
  return data.baselines.empty() ? "" : data.baselines[0];
}

}  // namespace fp4::fit
