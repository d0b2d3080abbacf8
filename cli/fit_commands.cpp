// fit_commands.cpp — `fp4lab fit` (docs/fit.md): the options, from the study's [fit] table and the
// flags; the data, from the store or a CSV; stored fits found again or fitted and stored; output.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/files.h"
#include "base/format.h"
#include "base/user_error.h"
#include "cli/commands.h"
#include "cli/number_options.h"
#include "fit/fit_data.h"
#include "fit/fit_output.h"
#include "fit/fitter.h"
#include "fit/stored_fit.h"
#include "store/store.h"
#include "sweeps/spec.h"

namespace fp4::cli {

namespace {

struct FitCliOptions {
  std::string spec, store, points;
  std::vector<std::string> laws, recipes, targets;
  std::optional<std::string> n_kind;
  std::optional<int64_t> bootstrap;
  std::optional<uint64_t> seed;
  std::optional<double> huber_delta;
  bool gamma = false, refit = false, plain = false;
  std::string format = "table", out;
  int threads = 0;
};

fit::Target parse_target(const std::string& text) {
  const size_t comma = text.find(',');
  auto number = [&](const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0')
      throw UserError("--target " + text + ": expected N,D such as 1.5e9,1e11 (parameters, tokens)");
    return v;
  };
  if (comma == std::string::npos)
    throw UserError("--target " + text + ": expected N,D such as 1.5e9,1e11 (parameters, tokens)");
  return {number(text.substr(0, comma)), number(text.substr(comma + 1))};
}

// The study's [fit] table (validated by the spec parser) under the flags.
fit::FitRequest request_from(const nlohmann::json& fit_table, const FitCliOptions& o, std::string& n_kind) {
  fit::FitRequest r;
  n_kind = "nonembedding";
  if (fit_table.contains("law"))
    for (const auto& l : fit_table["law"]) r.laws.push_back(fit::parse_law(l.get<std::string>()));
  if (fit_table.contains("n")) n_kind = fit_table["n"].get<std::string>();
  if (fit_table.contains("bootstrap")) r.bootstrap = fit_table["bootstrap"].get<int64_t>();
  if (fit_table.contains("seed")) r.seed = fit_table["seed"].get<uint64_t>();
  if (fit_table.contains("huber_delta")) r.huber_delta = fit_table["huber_delta"].get<double>();
  if (fit_table.contains("gamma")) r.gamma = fit_table["gamma"].get<bool>();
  if (fit_table.contains("targets")) {
    r.targets.clear();
    for (const auto& t : fit_table["targets"]) r.targets.push_back({t["n"].get<double>(), t["d"].get<double>()});
  }
  if (!o.laws.empty()) {
    r.laws.clear();
    for (const std::string& l : o.laws) r.laws.push_back(fit::parse_law(l));
  }
  if (o.n_kind) n_kind = *o.n_kind;
  if (o.bootstrap) r.bootstrap = *o.bootstrap;
  if (o.seed) r.seed = *o.seed;
  if (o.huber_delta) r.huber_delta = *o.huber_delta;
  if (o.gamma) r.gamma = true;
  if (!o.targets.empty()) {
    r.targets.clear();
    for (const std::string& t : o.targets) r.targets.push_back(parse_target(t));
  }
  r.threads = o.threads;
  return r;
}

// Progress on stderr: one redrawn line on a terminal, a line per finished stage otherwise.
class FitProgressPrinter {
 public:
  explicit FitProgressPrinter(bool terminal) : terminal_(terminal) {}
  ~FitProgressPrinter() {
    if (terminal_ && drawn_) std::fprintf(stderr, "\n");
  }
  void operator()(const fit::FitProgress& p) {
    const double now = monotonic_s();
    if (p.stage != stage_) {
      stage_ = p.stage;
      start_ = now;
    }
    const double elapsed = now - start_;
    if (p.done == p.total && !terminal_) {
      std::fprintf(stderr, "fit: %s: %zu/%zu done in %s\n", p.stage.c_str(), p.done, p.total,
                   format_duration(elapsed).c_str());
      return;
    }
    if (!terminal_) return;
    const double left = p.done > 0 ? elapsed * static_cast<double>(p.total - p.done) / static_cast<double>(p.done) : -1;
    std::fprintf(stderr, "\r\033[Kfit: %s: %zu/%zu, %s left", p.stage.c_str(), p.done, p.total,
                 format_duration(left).c_str());
    drawn_ = true;
  }

 private:
  bool terminal_, drawn_ = false;
  std::string stage_;
  double start_ = 0;
};

void run_fit(const FitCliOptions& o) {
  const int sources = !o.spec.empty() + !o.store.empty() + !o.points.empty();
  if (sources != 1)
    throw UserError("fp4lab fit: give exactly one of STUDY.toml, --store FILE.db or --points FILE.csv");
  const fit::OutputFormat format = fit::parse_output_format(o.format);

  nlohmann::json fit_table = nlohmann::json::object();
  std::filesystem::path store_path = o.store;
  std::optional<sweeps::SweepSpec> spec;
  if (!o.spec.empty()) {
    spec = sweeps::load_sweep_spec(o.spec);
    fit_table = spec->fit;
    store_path = spec->store;
  }
  std::string n_kind;
  fit::FitRequest request = request_from(fit_table, o, n_kind);
  request.recipes_named = !o.recipes.empty();

  std::unique_ptr<store::Store> store;
  fit::FitData data;
  if (!o.points.empty()) {
    if (o.n_kind) throw UserError("--n applies to a store; a points file gives N itself");
    data = fit::load_csv_data(o.points);
  } else {
    if (!std::filesystem::exists(store_path))
      throw UserError(store_path.string() + ": no store yet: run the study first (fp4lab sweep run STUDY.toml)");
    // Read-only (printing stored fits is a pure read), once an older schema is migrated.
    store = store::Store::open(store_path, store::Store::Mode::read_migrating);
    // A study's grid picks its own runs out of a store that other grids share; --store fits them all.
    data = spec ? fit::load_grid_data(*store, *spec, n_kind) : fit::load_store_data(*store, n_kind);
  }
  data = fit::select_recipes(data, o.recipes);
  const fit::FitPlan plan = fit::plan_fits(data, request);
  // The table lists what was skipped at its end; other formats, and a table written to a file, say it here.
  if (format != fit::OutputFormat::table || !o.out.empty())
    for (const fit::SkippedFit& s : plan.skipped) std::fprintf(stderr, "fp4lab fit: skipped %s\n", s.reason.c_str());

  std::vector<fit::StoredFit> fits;
  std::vector<std::string> notes;
  bool all_found = store != nullptr && !o.refit;
  if (all_found)
    for (const fit::PlannedFit& p : plan.fits) {
      auto found = fit::find_fit(*store, fit::law_name(p.law), p.scope, p.input_hash);
      if (!found) {
        all_found = false;
        break;
      }
      fits.push_back(std::move(*found));
      notes.push_back(fmt::format("stored fit {} (same data and options; --refit fits again)", fits.back().id));
    }
  if (!all_found) {
    fits.clear();
    notes.clear();
    std::vector<fit::StoredFit> fitted;
    {
      FitProgressPrinter printer(::isatty(STDERR_FILENO) == 1 && !o.plain);
      fitted = fit::run_fits(data, request, plan, [&](const fit::FitProgress& p) { printer(p); });
    }
    if (store) {
      store.reset();
      store = store::Store::open(store_path, store::Store::Mode::read_write);
      for (size_t i = 0; i < fitted.size(); ++i) {
        const fit::PlannedFit& p = plan.fits[i];
        std::optional<fit::StoredFit> found;
        if (!o.refit) found = fit::find_fit(*store, fit::law_name(p.law), p.scope, p.input_hash);
        if (found) {
          fits.push_back(std::move(*found));
          notes.push_back(fmt::format("stored fit {} (same data and options)", fits.back().id));
        } else {
          fitted[i].id = fit::insert_fit(*store, fitted[i]);
          notes.push_back(fmt::format("stored as fit {} in {}", fitted[i].id, store_path.string()));
          fits.push_back(std::move(fitted[i]));
        }
      }
    } else {
      fits = std::move(fitted);
      notes.assign(fits.size(), "from " + data.origin + " (not stored)");
    }
  }

  const std::string text = fit::format_fits(fits, format, notes, plan.skipped);
  if (o.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    write_file_atomic(o.out, {text});
    for (const std::string& n : notes) std::fprintf(stderr, "fp4lab fit: %s\n", n.c_str());
    std::fprintf(stderr, "fp4lab fit: wrote %s\n", o.out.c_str());
  }
}

}  // namespace

void register_fit_commands(CLI::App& app) {
  auto o = std::make_shared<FitCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "fit", "Fit scaling laws (chinchilla per recipe, precision jointly) to a study's final losses (docs/fit.md)");
  cmd->add_option("study", o->spec, "The study's TOML file: the runs its grid declares, from its store, as its [fit] table asks");
  cmd->add_option("--store", o->store, "Every run of a store instead of a study's grid (options: defaults and flags)");
  cmd->add_option("--points", o->points, "A CSV with the header recipe,n,d,loss instead of a store (nothing is stored)");
  cmd->add_option("--law", o->laws, "chinchilla and/or precision (default: [fit] law, else both where possible)")
      ->delimiter(',');
  cmd->add_option("--n", o->n_kind, "Which N: nonembedding (default) or total");
  cmd->add_option("--bootstrap", o->bootstrap, "Bootstrap replicates (default 1000; 0: no intervals)")
      ->check(whole_number(0));
  cmd->add_option("--seed", o->seed, "The bootstrap's seed (default 0)")->check(seed_number());
  cmd->add_option("--huber-delta", o->huber_delta, "δ of the Huber loss on log residuals (default 1e-3)")
      ->check(real_number(0, std::numeric_limits<double>::infinity(), true));
  cmd->add_flag("--gamma", o->gamma, "precision: fit Quartet's outer exponent gamma");
  cmd->add_option("--target", o->targets, "N,D to predict at (repeatable; default 1.5e9,1e11)");
  cmd->add_option("--recipe", o->recipes, "Fit only these recipes (repeatable or comma-separated)")->delimiter(',');
  cmd->add_option("--format", o->format, "table (default), json or csv");
  cmd->add_option("--out", o->out, "Write the output to this file (atomically) instead of stdout");
  cmd->add_flag("--refit", o->refit, "Fit again even when the store holds a fit of the same data and options");
  cmd->add_option("--threads", o->threads, "Worker threads (default 0: one per core); results do not depend on it")
      ->check(whole_number(0, 4096));
  cmd->add_flag("--plain", o->plain, "Progress as plain lines even on a terminal");
  cmd->callback([o] { run_fit(*o); });
}

}  // namespace fp4::cli
