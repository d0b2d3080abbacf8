// slurm.cpp — see slurm.h.
#include "sweeps/slurm.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "base/child_process.h"
#include "base/clock.h"
#include "base/files.h"
#include "base/format.h"
#include "base/shell_quote.h"
#include "base/user_error.h"
#include "store/store.h"
#include "sweeps/run_dir_reader.h"
#include "sweeps/sweep_plan.h"

namespace fp4::sweeps {

namespace fs = std::filesystem;

std::string sbatch_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

namespace {

// Every name and path written into the script is checked here: a control character (a newline
// above all) would end a line early and turn the rest into a command.
void refuse_control_characters(const std::string& what, const std::string& text) {
  if (const size_t at = find_control_character(text); at != std::string::npos)
    throw UserError(fmt::format("sweep slurm: {} \"{}\" contains the control character {} (at byte {}); a job "
                                "script cannot hold it safely: rename it",
                                what, text.substr(0, at), control_character_name(text[at]), at));
}

// An extra option from --sbatch, as one #SBATCH argument: "--name" or "--name=value", the value
// quoted for sbatch's own reading of the line (so spaces and '#' stay part of it).
std::string sbatch_option(const std::string& opt) {
  refuse_control_characters("--sbatch", opt);
  const size_t eq = opt.find('=');
  const std::string name = opt.substr(0, eq);
  const bool plain_name = name.size() > 2 && name.rfind("--", 0) == 0 &&
                          std::all_of(name.begin() + 2, name.end(), [](unsigned char c) {
                            return std::isalnum(c) || c == '-';
                          });
  if (!plain_name)
    throw UserError("sweep slurm: --sbatch \"" + opt + "\" must be one long option, --name or --name=value");
  return eq == std::string::npos ? name : name + "=" + sbatch_quote(opt.substr(eq + 1));
}

// The --output pattern: '%' in the directory is a literal percent (sbatch reads %A, %a, ... as
// replacements), and a backslash would switch every replacement off, so it is refused.
std::string output_pattern(const fs::path& run_root) {
  const std::string dir = run_root.string();
  if (dir.find('\\') != std::string::npos)
    throw UserError("sweep slurm: run_root \"" + dir + "\" contains a backslash, which sbatch reads in --output as "
                    "\"no replacements\"; use a run_root without one");
  std::string out;
  for (char c : dir) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out + "/slurm-%A_%a.out";
}

}  // namespace

int write_slurm_job(const SweepSpec& spec, const SlurmOptions& o, std::ostream& out) {
  if (o.out.empty()) throw UserError("sweep slurm: --out is required (the sbatch file to write)");
  std::vector<std::string> extra;
  for (const std::string& opt : o.sbatch_options) extra.push_back(sbatch_option(opt));
  const fs::path trainer = o.trainer.empty() ? self_executable() : o.trainer;
  const std::string spec_file = fs::absolute(spec.file).string();
  refuse_control_characters("the spec's path", spec_file);
  refuse_control_characters("the spec's directory", spec.base_dir.string());
  refuse_control_characters("run_root", spec.run_root.string());
  refuse_control_characters("--fp4lab", trainer.string());
  refuse_control_characters("the sweep name", spec.name);
  const std::string output = output_pattern(spec.run_root);
  auto store = store::Store::open(spec.store, store::Store::Mode::read_write);
  store->record_grid(grid_record(spec));
  const double now = unix_time_s();
  const std::vector<PlanEntry> plan = plan_sweep(spec, store.get(), now, o.retry_failed);
  // The cluster's fp4lab (--fp4lab) is taken to be of this one's numerics; its trainer refuses to
  // resume a checkpoint of another identity in any case.
  if (const auto mixed = mixed_numerics(plan, *store); mixed && !o.mix_numerics)
    throw UserError(mixed_numerics_error(spec, *mixed));
  std::vector<std::string> dirs;
  bool gpu = false;
  for (const PlanEntry& e : plan) {
    if (!e.will_run) continue;
    const std::optional<store::RunRecord> rec = store->run(e.point->id);
    const fs::path dir = rec->dir;
    refuse_control_characters("the run directory", dir.string());
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

  // Comment lines hold only checked text; #SBATCH values are quoted for sbatch, the script body's
  // words for bash.
  std::string s;
  s += "#!/bin/bash\n";
  s += fmt::format("# Written by `fp4lab sweep slurm` from {} (sweep {}) at {}: {} run(s).\n", shell_quote(spec_file),
                   spec.name, utc_timestamp(), dirs.size());
  s += "# One array task per run; a requeued or resubmitted task resumes its run from its last checkpoint.\n";
  s += fmt::format("# Afterwards: fp4lab sweep ingest --spec {}\n", shell_quote(spec_file));
  s += fmt::format("#SBATCH --job-name={}\n", sbatch_quote("fp4lab-" + spec.name));
  s += fmt::format("#SBATCH --array=0-{}{}\n", dirs.size() - 1,
                   o.max_parallel > 0 ? fmt::format("%{}", o.max_parallel) : std::string());
  s += fmt::format("#SBATCH --output={}\n", sbatch_quote(output));
  s += "#SBATCH --open-mode=append\n";
  s += "#SBATCH --requeue\n";
  s += "#SBATCH --signal=B:TERM@120\n";
  s += "#SBATCH --ntasks=1\n";
  // A multi-GPU run is one task (fp4lab train starts its ranks itself) holding gpus_per_run GPUs.
  if (gpu) s += fmt::format("#SBATCH --gpus-per-task={}\n", sbatch_quote(std::to_string(spec.executor.gpus_per_run)));
  else if (spec.executor.threads_per_job > 0)
    s += fmt::format("#SBATCH --cpus-per-task={}\n", spec.executor.threads_per_job);
  for (const std::string& opt : extra) s += "#SBATCH " + opt + "\n";
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
