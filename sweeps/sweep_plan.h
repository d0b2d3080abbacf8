// sweep_plan.h — what each grid point's run is, and what `sweep run` would do with it, judged from
// the store without writing anything: `sweep plan` prints it, `sweep status` summarises it, and
// `sweep run` takes its queue from it.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "store/store.h"
#include "sweeps/spec.h"

namespace fp4::sweeps {

enum class PlanAction : uint8_t {
  new_run,    // not in the store yet: will run
  pending,    // recorded, never started: will run
  orphaned,   // started, no outcome, nobody running it (its orchestrator died or it was
              // interrupted): will resume from its last checkpoint
  running,    // held by a live orchestrator (this host) or an unexpired lease (another host)
  done,       // succeeded
  diverged,   // a result, not a failure: never re-run
  failed,     // re-run only with --retry-failed, while its failed attempts are below the cap
};
const char* plan_action_name(PlanAction a);  // "new", "pending", "orphaned", "running", "done", ...

struct PlanEntry {
  const GridPoint* point = nullptr;
  PlanAction action = PlanAction::new_run;
  std::optional<store::RunRecord> record;   // absent for new runs
  bool will_run = false;             // `sweep run` would start or resume it
  std::string note;                  // why not, or extra detail ("held by host/pid", "2 of 3 attempts failed")
};

// An attempt that ended in a failure (exit 1, 2, 127, or a crash signal) as opposed to a result
// (0 succeeded, 3 diverged) or an interruption (75 busy, 130/143, SIGKILL/SIGTERM/SIGINT/SIGHUP:
// the run is resumable). `exit_code` is the store's: negative for "killed by signal -code".
bool attempt_failed(int exit_code);

// The state a stored run is really in at `now`: a `running` run whose lease holder is gone (dead
// on this host, or its lease expired) is orphaned.
PlanAction classify_record(const store::RunRecord& r, double now);

// One entry per grid point, in the spec's order. `store` may be null (no store file yet).
std::vector<PlanEntry> plan_sweep(const SweepSpec& spec, const store::Store* store, double now, bool retry_failed);

// Numerics never mix silently in one grid point. The runs a grid point compares are those that
// differ only in their recipe (the store's match_key: a 4-bit run and its BF16 twin, whose ratio is
// the gap); a run `sweep run` would start now trains under this fp4lab's numerics identity
// (base/numerics_identity.h), so one whose twin in the store trained under another would put two
// numerics in one gap. Returns the first such pair, "NAME (TWIN trained under identity K)", and
// the identities found, or nothing. `sweep run` and `sweep slurm` refuse when it finds one unless
// --mix-numerics is given (docs/sweeps.md says why).
struct MixedNumerics {
  std::string example;      // "L1-d16-65.5k-e2m1-s0 beside L1-d16-65.5k-bf16-s0 (identity 1)"
  int runs = 0;             // runs to start that have such a twin
  std::vector<int> others;  // the other identities found, ascending
};
std::optional<MixedNumerics> mixed_numerics(const std::vector<PlanEntry>& plan, const store::Store& store);
// The one-line refusal: what, where (the spec), what to do.
std::string mixed_numerics_error(const SweepSpec& spec, const MixedNumerics& m);

// `sweep plan`'s table: one line per run (action, name, id prefix, N, D, recipe, note) and a
// count per action.
void print_plan(const SweepSpec& spec, const std::vector<PlanEntry>& plan, std::ostream& out);

// `sweep status`: counts per state, per axis value, each failed run's last error line and log.
void print_status(const SweepSpec& spec, const std::vector<PlanEntry>& plan, const store::Store* store,
                  std::ostream& out);

// `sweep plan` and `sweep status` as the commands run them: the grid's store opened read-only when
// it exists (none yet: every run is new), judged at `now`; nothing is written.
void show_plan(const SweepSpec& spec, double now, bool retry_failed, std::ostream& out);
void show_status(const SweepSpec& spec, double now, std::ostream& out);

}  // namespace fp4::sweeps
