// fit_commands.cpp — `fp4lab fit` (docs/fit.md): the flags, wired to fit::fit_study (fit/fit_study.h).
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "cli/commands.h"
#include "cli/number_options.h"
#include "fit/fit_study.h"
#include "sweeps/study.h"

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

void run_fit(const FitCliOptions& o) {
  fit::require_one_source(!o.spec.empty(), !o.store.empty(), !o.points.empty());
  fit::FitCommand c;
  c.format = fit::parse_output_format(o.format);
  std::optional<sweeps::Study> study;
  if (!o.spec.empty()) {
    // The grids beside it too: the default contrast families compare the recipes they declare with a
    // `base` against that base (fit/contrasts.h).
    study = sweeps::read_study(o.spec, sweeps::DataCheck::plan, sweeps::Siblings::read);
    c.study = &study->declared;
  }
  c.store = o.store;
  c.points = o.points;
  for (const std::string& l : o.laws) c.laws.push_back(fit::parse_law(l));
  for (const std::string& t : o.targets) c.targets.push_back(parse_target(t));
  c.recipes = o.recipes;
  c.n_kind = o.n_kind;
  c.bootstrap = o.bootstrap;
  c.seed = o.seed;
  c.huber_delta = o.huber_delta;
  c.gamma = o.gamma;
  c.refit = o.refit;
  c.threads = o.threads;
  c.out = o.out;
  c.terminal = ::isatty(STDERR_FILENO) == 1 && !o.plain;
  fit::fit_study(c);
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
