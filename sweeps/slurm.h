// slurm.h — `fp4lab sweep slurm grid.toml --out job.sbatch`: an array job for the runs that still
// need running (new, pending, orphaned; failed ones with --retry-failed), one task per run.
//
// The grid is recorded in the store (so every run has its directory), each run's directory gets
// its run.json, and the script is written atomically. Task i executes, in the TOML file's
// directory, `fp4lab train --config DIR/run.json --dir DIR --resume --quiet` through `exec`, so
// Slurm's signals reach the trainer: a pre-empted or timed-out task checkpoints (with
// `--signal=B:TERM@120`) and a requeued or resubmitted task resumes. `fp4lab sweep ingest` then
// imports the directories into the store. The script's format is documented in docs/sweeps.md.
//
// Nothing the user wrote reaches the script unchecked or unquoted: a name or path with a control
// character (a newline would end a line and make the rest a command) is refused, #SBATCH values
// are quoted for sbatch's own parser, and the script's words for bash.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "sweeps/spec.h"

namespace fp4::sweeps {

struct SlurmOptions {
  std::filesystem::path out;                // the sbatch file
  std::vector<std::string> sbatch_options;  // extra "#SBATCH" options, e.g. "--partition=gpu"
  std::filesystem::path trainer;            // fp4lab on the cluster (default: this executable)
  int max_parallel = 0;                     // "%N" throttle on the array; 0: none
  bool retry_failed = false;
  bool mix_numerics = false;                // --mix-numerics (sweep_plan.h mixed_numerics)
};

// Returns the number of tasks written (0: nothing to run, and no file is written).
int write_slurm_job(const SweepSpec& spec, const SlurmOptions& options, std::ostream& out);

// Quotes a string as sbatch reads the arguments of an #SBATCH line: "a \"b\" c\\d" (double quotes
// group, a backslash escapes the next character, an unquoted '#' would start a comment).
std::string sbatch_quote(const std::string& s);

}  // namespace fp4::sweeps
