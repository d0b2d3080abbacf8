// slurm.cpp — see slurm.h.
#include "sweeps/slurm.h"

#include <fmt/format.h>

#include "base/clock.h"
#include "base/files.h"
#include "base/user_error.h"
#include "sweeps/process.h"
#include "sweeps/run_dir_reader.h"
#include "sweeps/store.h"
#include "sweeps/sweep_plan.h"

namespace fp4::sweeps {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

int write_slurm_job(const SweepSpec& spec, const SlurmOptions& o, std::ostream& out) {
  if (o.out.empty()) throw UserError("sweep slurm: --out is required (the sbatch file to write)");
  for (const std::string& opt : o.sbatch_options)
    if (opt.find('\n') != std::string::npos || opt.rfind("--", 0) != 0)
      throw UserError("sweep slurm: --sbatch \"" + opt + "\" must be one option starting with --");
  const fs::path trainer = o.trainer.empty() ? self_executable() : o.trainer;
  auto store = Store::open(spec.store, Store::Mode::read_write);
  store->record_grid(spec);
  const double now = unix_time_s();
  const std::vector<PlanEntry> plan = plan_sweep(spec, store.get(), now, o.retry_failed);
  std::vector<std::string> dirs;
  bool gpu = false;
  for (const PlanEntry& e : plan) {
    if (!e.will_run) continue;
    const std::optional<RunRecord> rec = store->run(e.point->id);
    const fs::path dir = rec->dir;
    fs::create_directories(dir);
    write_requested_config(dir, e.point->config);
    dirs.push_back(dir.string());
    gpu |= e.point->config.value("device", "cpu") == "cuda";
  }
  if (dirs.empty()) {
    out << fmt::format("sweep {}: nothing to run ({} runs, all done, diverged, failed or running); no job written\n",
                       spec.name, plan.size());
    return 0;
  }
  std::string s;
  s += "#!/bin/bash\n";
  s += fmt::format("# Written by `fp4lab sweep slurm` from {} (sweep {}) at {}: {} run(s).\n",
                   fs::absolute(spec.file).string(), spec.name, utc_timestamp(), dirs.size());
  s += "# One array task per run; a requeued or resubmitted task resumes its run from its last checkpoint.\n";
  s += fmt::format("# Afterwards: fp4lab sweep ingest --spec {}\n", shell_quote(fs::absolute(spec.file).string()));
  s += fmt::format("#SBATCH --job-name=fp4lab-{}\n", spec.name);
  s += fmt::format("#SBATCH --array=0-{}{}\n", dirs.size() - 1,
                   o.max_parallel > 0 ? fmt::format("%{}", o.max_parallel) : std::string());
  s += fmt::format("#SBATCH --output={}/slurm-%A_%a.out\n", spec.run_root.string());
  s += "#SBATCH --open-mode=append\n";
  s += "#SBATCH --requeue\n";
  s += "#SBATCH --signal=B:TERM@120\n";
  s += "#SBATCH --ntasks=1\n";
  if (gpu) s += "#SBATCH --gpus-per-task=1\n";
  else if (spec.executor.threads_per_job > 0)
    s += fmt::format("#SBATCH --cpus-per-task={}\n", spec.executor.threads_per_job);
  for (const std::string& opt : o.sbatch_options) s += "#SBATCH " + opt + "\n";
  s += "set -euo pipefail\n";
  s += "RUNS=(\n";
  for (const std::string& d : dirs) s += "  " + shell_quote(d) + "\n";
  s += ")\n";
  s += "DIR=\"${RUNS[$SLURM_ARRAY_TASK_ID]}\"\n";
  s += "cd " + shell_quote(spec.base_dir.string()) + "\n";
  if (!gpu && spec.executor.threads_per_job > 0)
    s += fmt::format("export OMP_NUM_THREADS={}\n", spec.executor.threads_per_job);
  s += "exec " + shell_quote(trainer.string()) +
       " train --config \"$DIR/run.json\" --dir \"$DIR\" --resume --quiet >>\"$DIR/output.log\" 2>&1\n";
  write_file_atomic(o.out, {s});
  out << fmt::format("sweep {}: wrote {} with {} task(s); submit with: sbatch {}\n", spec.name, o.out.string(),
                     dirs.size(), shell_quote(o.out.string()));
  return static_cast<int>(dirs.size());
}

}  // namespace fp4::sweeps
