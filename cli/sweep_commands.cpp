// sweep_commands.cpp — `fp4lab sweep plan|run|status|slurm|ingest` (docs/sweeps.md).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/duration.h"
#include "base/user_error.h"
#include "cli/commands.h"
#include "cli/number_options.h"
#include "sweeps/gpu_list.h"
#include "sweeps/ingest.h"
#include "sweeps/local_executor.h"
#include "sweeps/slurm.h"
#include "sweeps/study.h"
#include "sweeps/sweep_plan.h"

namespace fp4::cli {

namespace {

struct SweepCliOptions {
  std::string spec;
  std::string gpus;
  int jobs = 0;
  bool retry_failed = false;
  bool mix_numerics = false;
  bool plain = false;
  std::string time_limit;
  std::string out;
  std::vector<std::string> sbatch;
  std::string trainer;
  int max_parallel = 0;
  std::string store;
  std::vector<std::string> dirs;
};

void exit_with(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::cout.flush();
  std::cerr.flush();
  if (code != 0) std::exit(code);
}

}  // namespace

void register_sweep_commands(CLI::App& app) {
  auto o = std::make_shared<SweepCliOptions>();
  CLI::App* sweep = app.add_subcommand("sweep", "Grids of training runs declared in TOML, kept in SQLite (docs/sweeps.md)");
  sweep->require_subcommand(1);

  CLI::App* plan = sweep->add_subcommand("plan", "Print what `sweep run` would do with each run; writes nothing");
  plan->add_option("spec", o->spec, "The sweep's TOML file")->required();
  plan->callback([o] {
    const sweeps::SweepSpec spec = sweeps::read_study(o->spec, sweeps::DataCheck::plan, sweeps::Siblings::skip).spec;
    sweeps::show_plan(spec, unix_time_s(), o->retry_failed, std::cout);
  });
  plan->add_flag("--retry-failed", o->retry_failed, "Plan as `sweep run --retry-failed` would");

  CLI::App* run = sweep->add_subcommand(
      "run",
      "Run every run of the grid that has no outcome yet, here; rerun after any interruption.\n"
      "Exit codes: 0 all runs done (or diverged), 1 some failed or remain, 2 bad input, 124 the time limit left\n"
      "runs to do, 130/143 stopped");
  run->add_option("spec", o->spec, "The sweep's TOML file")->required();
  run->add_option("--gpus", o->gpus, "GPUs for runs on device cuda: indices or UUIDs, e.g. 0,1 (default: [executor] gpus, "
                                     "else CUDA_VISIBLE_DEVICES, else every GPU)");
  run->add_option("--jobs", o->jobs, "CPU runs at once (default: [executor] cpu_jobs)")->check(whole_number(1, 4096));
  run->add_flag("--retry-failed", o->retry_failed, "Also retry failed runs (up to [executor] max_attempts failures)");
  run->add_flag("--mix-numerics", o->mix_numerics,
                "Start runs whose twins in the store (same config but the recipe) trained under another numerics "
                "identity; refused without it (docs/sweeps.md)");
  run->add_flag("--plain", o->plain, "Plain progress lines even on a terminal");
  run->add_option("--time-limit", o->time_limit,
                  "Start no run expected to end after this long (e.g. 9m30s, 2h, 600), then stop as Ctrl-C does "
                  "when it comes; estimates from the runs the store has seen finish");
  run->callback([o] {
    const sweeps::SweepSpec spec = sweeps::read_study(o->spec, sweeps::DataCheck::run, sweeps::Siblings::skip).spec;
    sweeps::LocalRunOptions r;
    r.gpus = sweeps::parse_gpu_list(o->gpus, "--gpus " + o->gpus);
    r.jobs = o->jobs;
    r.retry_failed = o->retry_failed;
    r.mix_numerics = o->mix_numerics;
    r.terminal = !o->plain && ::isatty(STDERR_FILENO);
    if (!o->time_limit.empty()) {
      const std::optional<double> limit = parse_duration_s(o->time_limit);
      if (!limit || *limit <= 0)
        throw UserError("--time-limit: \"" + o->time_limit +
                        "\" is not a duration; write it as e.g. 9m30s, 2h, 1.5h or 600 (seconds), more than 0");
      r.time_limit_s = *limit;
    }
    if (const char* t = std::getenv("FP4LAB_TRAINER"); t != nullptr && *t != '\0') r.trainer = t;
    exit_with(sweeps::run_sweep_locally(spec, r, std::cerr));
  });

  CLI::App* status = sweep->add_subcommand("status", "Counts per state and per axis value, failed runs' errors; "
                                                     "safe while a sweep runs");
  status->add_option("spec", o->spec, "The sweep's TOML file")->required();
  status->callback([o] {
    const sweeps::SweepSpec spec = sweeps::read_study(o->spec, sweeps::DataCheck::plan, sweeps::Siblings::skip).spec;
    sweeps::show_status(spec, unix_time_s(), std::cout);
  });

  CLI::App* slurm = sweep->add_subcommand("slurm", "Write a Slurm array job (one task per run still to run)");
  slurm->add_option("spec", o->spec, "The sweep's TOML file")->required();
  slurm->add_option("--out", o->out, "The sbatch file to write")->required();
  slurm->add_option("--sbatch", o->sbatch, "An extra #SBATCH option, e.g. --sbatch=--partition=gpu (repeatable)");
  slurm->add_option("--fp4lab", o->trainer, "fp4lab's path on the cluster (default: this executable)");
  slurm->add_option("--max-parallel", o->max_parallel, "At most this many tasks at once (0: no limit)")
      ->check(whole_number(0, 1000000));
  slurm->add_flag("--retry-failed", o->retry_failed, "Include failed runs");
  slurm->add_flag("--mix-numerics", o->mix_numerics, "As sweep run --mix-numerics");
  slurm->callback([o] {
    const sweeps::SweepSpec spec = sweeps::read_study(o->spec, sweeps::DataCheck::run, sweeps::Siblings::skip).spec;
    sweeps::SlurmOptions s;
    s.out = o->out;
    s.sbatch_options = o->sbatch;
    s.trainer = o->trainer;
    s.max_parallel = o->max_parallel;
    s.retry_failed = o->retry_failed;
    s.mix_numerics = o->mix_numerics;
    sweeps::write_slurm_job(spec, s, std::cout);
  });

  CLI::App* ingest = sweep->add_subcommand("ingest", "Import run directories (finished or partial) into the store");
  ingest->add_option("--spec", o->spec, "The grid whose runs these are (records it in its store)");
  ingest->add_option("--store", o->store, "The store, when the runs are already in it");
  ingest->add_option("dirs", o->dirs, "Run directories (default with --spec: every run directory of the grid)");
  ingest->callback([o] {
    if (o->spec.empty() == o->store.empty())
      throw UserError("sweep ingest: give exactly one of --spec grid.toml or --store FILE");
    std::vector<std::filesystem::path> dirs(o->dirs.begin(), o->dirs.end());
    sweeps::IngestSummary sum;
    if (!o->spec.empty()) {
      const sweeps::SweepSpec spec = sweeps::read_study(o->spec, sweeps::DataCheck::plan, sweeps::Siblings::skip).spec;
      sum = sweeps::ingest_grid_run_dirs(spec, std::move(dirs), std::cout);
    } else {
      if (dirs.empty()) throw UserError("sweep ingest --store: name the run directories to import");
      sum = sweeps::ingest_store_run_dirs(o->store, std::move(dirs), std::cout);
    }
    std::cout << "ingested " << sum.dirs << " run directories, " << sum.rows << " rows\n";
  });
}

}  // namespace fp4::cli
