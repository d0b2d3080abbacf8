// ingest.cpp — see ingest.h.
#include "sweeps/ingest.h"

#include <utility>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/user_error.h"
#include "engine/run/config.h"
#include "sweeps/lease_owner.h"
#include "sweeps/run_dir_reader.h"
#include "sweeps/sweep_plan.h"

namespace fp4::sweeps {

namespace fs = std::filesystem;

namespace {

std::string run_id_of_dir(const fs::path& dir) {
  for (const fs::path& p : {dir / "config.json", requested_config_path(dir)}) {
    std::error_code ec;
    if (!fs::exists(p, ec)) continue;
    return run::config_hash(run::load_config(p));
  }
  throw UserError(dir.string() + " holds no config.json or run.json: it is not a run directory");
}

// Empty `dirs` with a spec: every run directory the store knows for its grid.
IngestSummary ingest_run_dirs(store::Store& store, const SweepSpec* spec, std::vector<fs::path> dirs, std::ostream& out) {
  if (dirs.empty() && spec != nullptr) {
    for (const GridPoint& p : spec->points)
      if (const auto rec = store.run(p.id); rec && fs::is_directory(rec->dir)) dirs.emplace_back(rec->dir);
  }
  IngestSummary sum;
  for (const fs::path& dir : dirs) {
    const std::string id = run_id_of_dir(dir);
    const std::optional<store::RunRecord> rec = store.run(id);
    if (!rec)
      throw UserError(fmt::format("{}: run {} is not in {}: ingest it with --spec <the grid TOML that "
                                  "declares it>",
                                  dir.string(), id.substr(0, 12), store.path().string()));
    const double now = unix_time_s();
    if (classify_record(*rec, now) == PlanAction::running && rec->lease_owner != current_lease_owner()) {
      out << fmt::format("skip {}: {} is running it and ingests it\n", rec->name, rec->lease_owner);
      ++sum.skipped;
      continue;
    }
    const IngestResult r = ingest_metrics_file(store, id, dir, rec->ingested_bytes);
    sum.rows += static_cast<int>(r.rows);
    ++sum.dirs;
    const RunDirOutcome o = read_outcome(dir);
    std::string what = "no outcome yet";
    if (o.final) {
      what = store::run_state_name(o.state);
      if (rec->state != o.state) {
        // One attempt row per outcome learned, so ingesting again adds nothing.
        store::Provenance p;
        const HeartbeatInfo h = read_heartbeat(dir);
        p.host = h.host.empty() ? "unknown" : h.host;
        p.devices = "external";
        const int64_t attempt = store.begin_attempt(id, p, now, 0);
        store::AttemptEnd end;
        end.state = o.state;
        end.exit_code = o.state == store::RunState::succeeded ? 0 : o.state == store::RunState::diverged ? 3 : 1;
        end.error = o.detail;
        store.end_attempt(attempt, end, now);
        store.set_state(id, o.state, o.detail);
      }
    } else if (rec->state == store::RunState::pending || rec->state == store::RunState::running) {
      store.set_state(id, store::RunState::orphaned, "");
      what = "no outcome yet: orphaned (the next `sweep run` resumes it)";
    }
    out << fmt::format("ingested {}: {} new row(s), {}\n", rec->name, r.rows, what);
  }
  return sum;
}

}  // namespace

IngestSummary ingest_grid_run_dirs(const SweepSpec& spec, std::vector<fs::path> dirs, std::ostream& out) {
  auto store = store::Store::open(spec.store, store::Store::Mode::read_write);
  store->record_grid(grid_record(spec));
  return ingest_run_dirs(*store, &spec, std::move(dirs), out);
}

IngestSummary ingest_store_run_dirs(const fs::path& store_path, std::vector<fs::path> dirs, std::ostream& out) {
  auto store = store::Store::open(store_path, store::Store::Mode::read_write);
  return ingest_run_dirs(*store, nullptr, std::move(dirs), out);
}

}  // namespace fp4::sweeps
