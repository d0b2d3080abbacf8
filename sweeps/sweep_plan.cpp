// sweep_plan.cpp — see sweep_plan.h.
#include "sweeps/sweep_plan.h"

#include <signal.h>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/numerics_identity.h"
#include "sweeps/lease_owner.h"
#include "sweeps/run_dir_reader.h"

namespace fp4::sweeps {

const char* plan_action_name(PlanAction a) {
  switch (a) {
    case PlanAction::new_run: return "new";
    case PlanAction::pending: return "pending";
    case PlanAction::orphaned: return "orphaned";
    case PlanAction::running: return "running";
    case PlanAction::done: return "done";
    case PlanAction::diverged: return "diverged";
    case PlanAction::failed: return "failed";
  }
  return "?";
}

bool attempt_failed(int exit_code) {
  if (exit_code == 0 || exit_code == 3 || exit_code == 75 || exit_code == 130 || exit_code == 143) return false;
  if (exit_code < 0) {
    const int sig = -exit_code;
    return !(sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP);
  }
  return true;
}

PlanAction classify_record(const store::RunRecord& r, double now) {
  switch (r.state) {
    case store::RunState::pending: return PlanAction::pending;
    case store::RunState::succeeded: return PlanAction::done;
    case store::RunState::diverged: return PlanAction::diverged;
    case store::RunState::failed: return PlanAction::failed;
    case store::RunState::orphaned: return PlanAction::orphaned;
    case store::RunState::running: break;
  }
  if (r.lease_owner.empty()) return PlanAction::orphaned;
  switch (owner_liveness(r.lease_owner)) {
    case OwnerLiveness::alive: return PlanAction::running;
    case OwnerLiveness::dead: return PlanAction::orphaned;
    case OwnerLiveness::unknown: return r.lease_expires > now ? PlanAction::running : PlanAction::orphaned;
  }
  return PlanAction::orphaned;
}

std::optional<MixedNumerics> mixed_numerics(const std::vector<PlanEntry>& plan, const store::Store& store) {
  std::map<std::string, std::vector<store::RunRecord>> by_key;  // match_key → runs with a known identity
  for (store::RunRecord& r : store.runs())
    if (r.numerics) by_key[r.match_key].push_back(std::move(r));
  MixedNumerics m;
  std::set<int> others;
  for (const PlanEntry& e : plan) {
    if (!e.will_run) continue;
    const auto it = by_key.find(e.point->match_key);
    if (it == by_key.end()) continue;
    bool counted = false;
    for (const store::RunRecord& twin : it->second) {
      if (twin.id == e.point->id || *twin.numerics == kNumericsIdentity) continue;
      others.insert(*twin.numerics);
      if (m.example.empty())
        m.example = fmt::format("{} beside {} (identity {})", e.point->name, twin.name, *twin.numerics);
      if (!counted) ++m.runs;
      counted = true;
    }
  }
  if (m.runs == 0) return std::nullopt;
  m.others.assign(others.begin(), others.end());
  return m;
}

std::string mixed_numerics_error(const SweepSpec& spec, const MixedNumerics& m) {
  return fmt::format("{}: {} run(s) to start would be compared with runs trained under numerics identity {}, and "
                     "this fp4lab's is {} (e.g. {}; docs/train.md \"Numerics identity\"): run them with a build of "
                     "that identity, or pass --mix-numerics to run them here (the report then marks the mix)",
                     spec.file.string(), m.runs, fmt::join(m.others, " and "), kNumericsIdentity, m.example);
}

std::vector<PlanEntry> plan_sweep(const SweepSpec& spec, const store::Store* store, double now, bool retry_failed) {
  std::vector<PlanEntry> plan;
  plan.reserve(spec.points.size());
  for (const GridPoint& p : spec.points) {
    PlanEntry e;
    e.point = &p;
    if (store != nullptr) e.record = store->run(p.id);
    if (!e.record) {
      e.action = PlanAction::new_run;
      e.will_run = true;
    } else {
      e.action = classify_record(*e.record, now);
      switch (e.action) {
        case PlanAction::new_run:
        case PlanAction::pending:
          e.will_run = true;
          break;
        case PlanAction::orphaned:
          e.will_run = true;
          e.note = "resumes from its last checkpoint";
          break;
        case PlanAction::running:
          e.note = "held by " + e.record->lease_owner;
          break;
        case PlanAction::done:
        case PlanAction::diverged:
          break;
        case PlanAction::failed: {
          int failures = 0;
          for (const store::Store::AttemptRecord& a : store->attempts(p.id))
            if (a.end != 0 && attempt_failed(a.exit_code)) ++failures;
          const bool capped = failures >= spec.executor.max_attempts;
          e.will_run = retry_failed && !capped;
          e.note = fmt::format("{} of {} attempts failed{}", failures, spec.executor.max_attempts,
                               capped ? " (cap reached)" : retry_failed ? "" : "; --retry-failed retries it");
          break;
        }
      }
    }
    plan.push_back(std::move(e));
  }
  return plan;
}

namespace {

std::string counts_line(const std::map<std::string, int>& counts) {
  std::string s;
  for (const char* a : {"new", "pending", "orphaned", "running", "done", "diverged", "failed"}) {
    const auto it = counts.find(a);
    if (it == counts.end()) continue;
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {}", a, it->second);
  }
  return s;
}

}  // namespace

void print_plan(const SweepSpec& spec, const std::vector<PlanEntry>& plan, std::ostream& out) {
  size_t width = 4;
  for (const PlanEntry& e : plan) width = std::max(width, e.point->name.size());
  out << fmt::format("{:<9} {:<{}} {:<12} {:>10} {:>12}  {}\n", "action", "run", width, "id", "N", "D", "note");
  std::map<std::string, int> counts;
  int to_run = 0;
  for (const PlanEntry& e : plan) {
    const GridPoint& p = *e.point;
    ++counts[plan_action_name(e.action)];
    to_run += e.will_run;
    out << fmt::format("{:<9} {:<{}} {:<12} {:>10} {:>12}  {}\n", plan_action_name(e.action), p.name, width,
                       p.id.substr(0, 12), compact_count(p.n_params_nonembedding), compact_count(p.tokens), e.note);
  }
  out << fmt::format("sweep {}: {} runs ({}); `sweep run` would start or resume {}\n", spec.name, plan.size(),
                     counts_line(counts), to_run);
}

void print_status(const SweepSpec& spec, const std::vector<PlanEntry>& plan, const store::Store* store, std::ostream& out) {
  std::map<std::string, int> counts;
  // axis → value → action → count, in the axis's declaration order and the values' first appearance.
  std::map<std::string, std::vector<std::string>> value_order;
  std::map<std::string, std::map<std::string, std::map<std::string, int>>> per_axis;
  for (const PlanEntry& e : plan) {
    const char* a = plan_action_name(e.action);
    ++counts[a];
    for (const auto& [axis, written] : e.point->axes) {
      // A model written as a table reads as its label ("L1-d16"), as in the run names.
      const std::string& value = axis == "model" ? e.point->model_label : written;
      auto& order = value_order[axis];
      if (std::find(order.begin(), order.end(), value) == order.end()) order.push_back(value);
      ++per_axis[axis][value][a];
    }
  }
  out << fmt::format("sweep {} ({}): {} runs: {}\n", spec.name, spec.file.string(), plan.size(), counts_line(counts));
  out << fmt::format("store {}\n", spec.store.string());
  for (const std::string& axis : spec.axis_names) {
    if (!per_axis.count(axis)) continue;
    out << fmt::format("by {}:\n", axis);
    for (const std::string& value : value_order[axis])
      out << fmt::format("  {:<16} {}\n", value, counts_line(per_axis[axis][value]));
  }
  bool header = false;
  for (const PlanEntry& e : plan) {
    if (e.action != PlanAction::failed || !e.record) continue;
    if (!header) out << "failed runs:\n";
    header = true;
    const std::filesystem::path dir = e.record->dir;
    out << fmt::format("  {} ({}): {}\n    log: {}\n", e.point->name, e.note, e.record->error,
                       output_log_path(dir).string());
  }
  // The BF16-relative gap of every finished quantized run of this grid whose baseline finished.
  if (store != nullptr) {
    std::map<std::string, std::string> in_grid;  // id → this grid's name for it
    for (const PlanEntry& e : plan) in_grid[e.point->id] = e.point->name;
    bool gap_header = false;
    for (const store::Bf16GapRow& g : store->bf16_gaps()) {
      const auto named = in_grid.find(g.id);
      if (named == in_grid.end()) continue;
      if (!gap_header)
        out << fmt::format("BF16-relative gap (final eval loss, nats/token; gap = loss / bf16 - 1):\n  {:<28} {:>9} {:>9} {:>9}\n",
                           "run", "loss", "bf16", "gap");
      gap_header = true;
      out << fmt::format("  {:<28} {:>9.4f} {:>9.4f} {:>+8.3f}%\n", named->second, g.loss, g.bf16_loss, 100.0 * g.gap);
    }
  }
  for (const PlanEntry& e : plan) {
    if (e.action != PlanAction::running || !e.record || store == nullptr) continue;
    const std::vector<store::MetricRow> loss = store->metrics(e.point->id, "train/loss");
    const int64_t steps = e.record->config_json.empty() ? 0
                              : nlohmann::json::parse(e.record->config_json)["train"]["steps"].get<int64_t>();
    out << fmt::format("running: {} step {}/{}{}\n", e.point->name, loss.empty() ? 0 : loss.back().step, steps,
                       loss.empty() || loss.back().is_nan ? std::string() : fmt::format(" loss {:.4f}", loss.back().value));
  }
}

void show_plan(const SweepSpec& spec, double now, bool retry_failed, std::ostream& out) {
  const auto store = store::Store::open(spec.store, store::Store::Mode::read_if_present);
  print_plan(spec, plan_sweep(spec, store.get(), now, retry_failed), out);
}

void show_status(const SweepSpec& spec, double now, std::ostream& out) {
  const auto store = store::Store::open(spec.store, store::Store::Mode::read_if_present);
  print_status(spec, plan_sweep(spec, store.get(), now, false), store.get(), out);
}

}  // namespace fp4::sweeps
