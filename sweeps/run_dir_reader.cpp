// run_dir_reader.cpp — see run_dir_reader.h.
#include "sweeps/run_dir_reader.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/files.h"
#include "sweeps/metrics_jsonl.h"
#include "sweeps/provenance.h"

namespace fp4::sweeps {

namespace fs = std::filesystem;

namespace {

std::string read_from(const fs::path& path, int64_t offset) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(offset);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

void write_requested_config(const fs::path& dir, const nlohmann::json& config) {
  const fs::path path = requested_config_path(dir);
  const std::string text = config.dump(2) + "\n";
  std::error_code ec;
  if (fs::exists(path, ec) && read_from(path, 0) == text) return;
  write_file_atomic(path, {text});
}

IngestResult ingest_metrics_file(store::Store& store, const std::string& run_id, const fs::path& dir, int64_t offset) {
  IngestResult r;
  r.offset = offset;
  const fs::path path = dir / "metrics.jsonl";
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  // No file: the run directory is new here (a store carried from another machine, a directory
  // removed), so the next file is read from its first byte; a file shorter than the offset was
  // started over. Either way upserts make reading from 0 safe.
  if (ec) {
    r.offset = 0;
    return r;
  }
  if (static_cast<int64_t>(size) < offset) offset = 0;
  if (static_cast<int64_t>(size) == offset) return r;
  const std::string text = read_from(path, offset);
  const store::MetricsBatch batch = parse_metrics_jsonl(text, path.string());
  if (batch.consumed_bytes == 0) return r;
  store.ingest(run_id, batch, offset + batch.consumed_bytes);
  r.offset = offset + batch.consumed_bytes;
  r.rows = static_cast<int64_t>(batch.metrics.size() + batch.probes.size() + batch.probe_gemms.size());
  for (const store::MetricRow& m : batch.metrics) {
    if (m.key == "train/loss" && m.step >= r.last_step) {
      r.last_step = m.step;
      r.last_tokens = m.tokens;
    }
    if (m.key == "train/tokens_per_s" && m.step >= r.last_step && !m.is_nan) r.tokens_per_s = m.value;
  }
  return r;
}

RunDirOutcome read_outcome(const fs::path& dir) {
  RunDirOutcome o;
  std::ifstream f(dir / "status.json");
  if (!f) return o;
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception&) {
    return o;  // written atomically, so unreadable means foreign: treat as no outcome
  }
  if (!j.is_object() || !j.contains("state") || !j["state"].is_string()) return o;
  const std::string state = j["state"].get<std::string>();
  if (state == "succeeded") {
    o.state = store::RunState::succeeded;
  } else if (state == "diverged") {
    o.state = store::RunState::diverged;
    if (j.contains("reason") && j["reason"].is_string()) o.detail = j["reason"].get<std::string>();
  } else if (state == "failed") {
    o.state = store::RunState::failed;
    if (j.contains("error") && j["error"].is_string()) o.detail = j["error"].get<std::string>();
  } else {
    return o;
  }
  if (j.contains("step") && j["step"].is_number_integer()) o.step = j["step"].get<int64_t>();
  o.final = true;
  return o;
}

HeartbeatInfo read_heartbeat(const fs::path& dir) {
  HeartbeatInfo h;
  const fs::path path = dir / "heartbeat";
  std::error_code ec;
  const auto mtime = fs::last_write_time(path, ec);
  if (ec) return h;
  h.exists = true;
  h.age_s = std::chrono::duration<double>(fs::file_time_type::clock::now() - mtime).count();
  std::ifstream f(path);
  try {
    nlohmann::json j;
    f >> j;
    if (j.contains("phase") && j["phase"].is_string()) h.phase = j["phase"].get<std::string>();
    if (j.contains("host") && j["host"].is_string()) h.host = j["host"].get<std::string>();
  } catch (const std::exception&) {
    // a beat being replaced right now: the mtime alone decides
  }
  return h;
}

bool alive_elsewhere(const HeartbeatInfo& h, double timeout_s) {
  return h.exists && h.phase != "exited" && h.age_s < timeout_s && !h.host.empty() && h.host != host_name();
}

std::string last_error_line(const fs::path& dir) {
  std::ifstream f(output_log_path(dir));
  std::string line, last_error, last_any;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    last_any = line;
    if (line.rfind("fp4lab: error:", 0) == 0 || line.rfind("fp4lab: failed:", 0) == 0 ||
        line.rfind("fp4lab: busy:", 0) == 0)
      last_error = line;
  }
  return last_error.empty() ? last_any : last_error;
}

}  // namespace fp4::sweeps
