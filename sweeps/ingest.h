// ingest.h — `fp4lab sweep ingest`: imports run directories produced elsewhere (a Slurm array, a
// run started by hand) into the store, idempotently: metric rows are upserted from the store's
// ingest offset on, and an outcome in status.json sets the run's state once (an attempt row
// records where it ran). A directory without an outcome leaves its run orphaned, so the next
// `sweep run` resumes it. A run whose lease a live orchestrator holds is skipped: that
// orchestrator is ingesting it.
#pragma once

#include <filesystem>
#include <ostream>
#include <vector>

#include "store/store.h"
#include "sweeps/spec.h"

namespace fp4::sweeps {

struct IngestSummary {
  int dirs = 0, rows = 0, skipped = 0;
};

// Each directory must hold a run of the store (matched by the hash of its config.json, or of
// run.json before the trainer wrote one); one that does not is a UserError naming it
// and what to do. Empty `dirs` means every run directory the store knows for `spec`'s grid.
IngestSummary ingest_run_dirs(store::Store& store, const SweepSpec* spec, std::vector<std::filesystem::path> dirs,
                              std::ostream& out);

}  // namespace fp4::sweeps
