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
// run.json before the trainer wrote one); one that does not is a UserError naming it and what to do.

// `sweep ingest --spec`: records the grid in its store (made when missing), then ingests `dirs`;
// empty `dirs` means every run directory the store knows for the grid.
IngestSummary ingest_grid_run_dirs(const SweepSpec& spec, std::vector<std::filesystem::path> dirs, std::ostream& out);

// `sweep ingest --store`: `dirs` of runs the store at `store_path` already holds.
IngestSummary ingest_store_run_dirs(const std::filesystem::path& store_path, std::vector<std::filesystem::path> dirs,
                                    std::ostream& out);

}  // namespace fp4::sweeps
