// plan_commands.cpp — `fp4lab plan` (docs/statistics.md "Planning"): the flags, wired to
// fit::plan_study (fit/planner.h).
#include <limits>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/number_options.h"
#include "fit/planner.h"
#include "sweeps/study.h"

namespace fp4::cli {

namespace {

struct PlanCliOptions {
  std::string spec, pilot, rates;
  double effect = 0.3, power = 0.8, alpha = 0.05;
};

void run_plan(const PlanCliOptions& o) {
  // The grids beside it too: the default contrast families compare the recipes they declare with a
  // `base` against that base (fit/contrasts.h).
  const sweeps::Study study = sweeps::read_study(o.spec, sweeps::DataCheck::plan, sweeps::Siblings::read);
  fit::PlanCommand c;
  c.study = &study.declared;
  c.pilot = o.pilot;
  c.rates = o.rates;
  c.effect_pp = o.effect;
  c.power = o.power;
  c.alpha = o.alpha;
  bool gpu = false;
  for (const sweeps::GridPoint& p : study.spec.points) gpu = gpu || p.config.value("device", "cpu") == "cuda";
  c.runs_per_device = gpu ? study.spec.executor.runs_per_gpu : study.spec.executor.cpu_jobs;
  fit::plan_study(c);
}

}  // namespace

void register_plan_commands(CLI::App& app) {
  auto p = std::make_shared<PlanCliOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Before a study runs: its device time from measured tokens/s, and the seeds each contrast needs "
              "(docs/statistics.md \"Planning\")");
  plan->add_option("study", p->spec, "The study's TOML file")->required();
  plan->add_option("--pilot", p->pilot,
                   "A store whose paired seeds give the sd of each contrast (default: the study's), and whose runs "
                   "give the speed of a size and recipe the study's store has not measured");
  plan->add_option("--rates", p->rates,
                   "A rates file (CSV: size,recipe,tokens_per_s,runs_per_device,device,source; e.g. "
                   "bench/train-rates.csv) whose bench figures stand in for a size and recipe no store has measured");
  plan->add_option("--effect", p->effect, "The difference to detect, in percentage points of the BF16 loss (default 0.3)")
      ->check(real_number(0, std::numeric_limits<double>::infinity(), true));
  plan->add_option("--power", p->power, "The power to detect it with (default 0.8)");
  plan->add_option("--alpha", p->alpha, "The two-sided level (default 0.05)");
  plan->callback([p] { run_plan(*p); });
}

}  // namespace fp4::cli
