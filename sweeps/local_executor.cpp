// local_executor.cpp — see local_executor.h.
#include "sweeps/local_executor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/child_process.h"
#include "base/clock.h"
#include "base/directory_lock.h"
#include "base/format.h"
#include "base/numerics_identity.h"
#include "base/stop_signals.h"
#include "base/user_error.h"
#include "engine/run/config.h"
#include "store/store.h"
#include "sweeps/gpu_list.h"
#include "sweeps/lease_owner.h"
#include "sweeps/mps_daemon.h"
#include "sweeps/provenance.h"
#include "sweeps/run_dir_reader.h"
#include "sweeps/run_duration.h"
#include "sweeps/sweep_plan.h"

namespace fp4::sweeps {

namespace fs = std::filesystem;

namespace {

// ---- Slots ---------------------------------------------------------------------------------------
struct Slot {
  bool gpu = false;
  std::string device;    // CUDA_VISIBLE_DEVICES: one GPU (index or UUID), or gpus_per_run of them ("0,1")
  bool busy = false;
};

// --gpus, else [executor] gpus, else CUDA_VISIBLE_DEVICES (read as strictly as the other two: a
// UUID entry is kept and handed on, a malformed one refused), else every GPU nvidia-smi lists.
std::vector<std::string> visible_gpus(const LocalRunOptions& o, const ExecutorSpec& e) {
  if (!o.gpus.empty()) return o.gpus;
  if (!e.gpus.empty()) return e.gpus;
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"); env != nullptr)
    return parse_gpu_list(env, fmt::format("CUDA_VISIBLE_DEVICES={}", env));
  std::vector<std::string> gpus;
  if (const auto out = capture_output({"nvidia-smi", "--query-gpu=index", "--format=csv,noheader"})) {
    std::stringstream s(*out);
    std::string line;
    while (std::getline(s, line))
      if (!line.empty()) add_gpu(gpus, line, "nvidia-smi --query-gpu=index");
  }
  return gpus;
}

// ---- The run loop --------------------------------------------------------------------------------
struct Child {
  pid_t pid = 0;
  const GridPoint* point = nullptr;
  fs::path dir;
  int64_t attempt = 0;
  size_t slot = 0;
  int64_t offset = 0;         // metrics.jsonl bytes ingested
  int64_t tokens_done = 0;    // the last train row's tokens
  double tokens_per_s = 0;
  double started = 0;         // Unix seconds
  bool killed_for_silence = false;
};

struct QueueItem {
  const GridPoint* point = nullptr;
  double not_before = 0;      // a busy directory is retried after a pause...
  double busy_since = 0;      // ...until it has been busy for the heartbeat timeout
};

class LocalExecutor {
 public:
  LocalExecutor(const SweepSpec& spec, const LocalRunOptions& o, std::ostream& out)
      : spec_(spec), o_(o), out_(out), owner_(current_lease_owner()) {}

  int run();

 private:
  bool launch(QueueItem& item, size_t slot);
  void finish(Child& c, const ExitStatus& st);
  void ingest(Child& c);
  void check_heartbeat(Child& c, double now);
  void progress(bool force);
  void say(const std::string& line);
  bool is_gpu_run(const GridPoint& p) const { return p.config.value("device", "cpu") == "cuda"; }

  const SweepSpec& spec_;
  const LocalRunOptions& o_;
  std::ostream& out_;
  std::string owner_;
  std::unique_ptr<store::Store> store_;
  std::vector<Slot> slots_;
  int cpu_threads_ = 1;
  std::deque<QueueItem> queue_;
  std::map<pid_t, Child> children_;
  std::map<std::string, int> interruptions_;   // per run, in this invocation
  int total_ = 0, finished_ = 0, failed_ = 0, elsewhere_ = 0;
  std::map<std::string, int64_t> remaining_tokens_;  // runs not finished: tokens left
  bool stopping_ = false;
  // The time limit: the deadline (Unix seconds, 0: none), what the store says of run durations,
  // and whether the limit stopped the sweep (by the deadline, or because nothing left would fit).
  double deadline_ = 0;
  std::unique_ptr<RunDurationModel> durations_;
  std::unique_ptr<MpsDaemon> mps_;  // while runs share GPUs
  bool time_limited_ = false;
  std::set<std::string> told_wont_fit_;
  bool fits_before_deadline(const QueueItem& item, double now);
  double last_progress_ = 0;
  double last_ingest_ = 0;
  bool progress_line_open_ = false;
};

void LocalExecutor::say(const std::string& line) {
  if (progress_line_open_) out_ << "\r\033[K";
  progress_line_open_ = false;
  out_ << line << "\n";
  out_.flush();
}

void LocalExecutor::progress(bool force) {
  const double now = unix_time_s();
  double rate = 0;
  for (const auto& [pid, c] : children_) rate += c.tokens_per_s;
  int64_t left = 0;
  for (const auto& [id, t] : remaining_tokens_) left += t;
  const std::string line =
      fmt::format("[{}/{} done, {} running, {} queued{}] {} | ETA {}", finished_, total_, children_.size(),
                  queue_.size(), failed_ ? fmt::format(", {} failed", failed_) : "", format_rate(rate) + " tok/s",
                  rate > 0 ? format_duration(static_cast<double>(left) / rate) : std::string("?"));
  if (o_.terminal) {
    if (!force && now - last_progress_ < 0.5) return;
    out_ << "\r\033[K" << line;
    out_.flush();
    progress_line_open_ = true;
  } else {
    if (!force && now - last_progress_ < o_.progress_every_s) return;
    out_ << "progress " << line << "\n";
    out_.flush();
  }
  last_progress_ = now;
}

void LocalExecutor::ingest(Child& c) {
  const IngestResult r = ingest_metrics_file(*store_, c.point->id, c.dir, c.offset);
  c.offset = r.offset;
  if (r.last_step >= 0) {
    c.tokens_done = r.last_tokens;
    c.tokens_per_s = r.tokens_per_s;
    remaining_tokens_[c.point->id] = std::max<int64_t>(0, c.point->tokens - c.tokens_done);
  }
}

// Liveness by heartbeat: a trainer beats every 5 s from a thread of its own, whatever its loop
// does; a child silent for heartbeat_timeout_s (counted from its start, since the directory may
// hold an old attempt's beat) is hung, or its disk is. It is killed, which makes the run
// orphaned: resumed from its last checkpoint like any interrupted run.
void LocalExecutor::check_heartbeat(Child& c, double now) {
  if (c.killed_for_silence) return;
  const HeartbeatInfo h = read_heartbeat(c.dir);
  const double silent = std::min(now - c.started, h.exists ? h.age_s : now - c.started);
  if (silent <= spec_.executor.heartbeat_timeout_s) return;
  say(fmt::format("{}: no heartbeat for {:.0f} s: killing pid {} (it resumes from its last checkpoint)",
                  c.point->name, silent, c.pid));
  ::kill(c.pid, SIGKILL);
  c.killed_for_silence = true;
}

bool LocalExecutor::launch(QueueItem& item, size_t slot) {
  const GridPoint& p = *item.point;
  const double now = unix_time_s();
  std::optional<store::RunRecord> rec = store_->run(p.id);
  if (!rec) throw std::logic_error("run " + p.id + " vanished from the store");
  if (rec->state == store::RunState::succeeded || rec->state == store::RunState::diverged) return false;  // done by another
  if (!rec->lease_owner.empty() && rec->lease_owner != owner_) {
    const OwnerLiveness live = owner_liveness(rec->lease_owner);
    if (live == OwnerLiveness::alive || (live == OwnerLiveness::unknown && rec->lease_expires > now)) {
      say(fmt::format("skip {}: running under {}", p.name, rec->lease_owner));
      ++elsewhere_;
      return false;
    }
    store_->release_lease(p.id, rec->lease_owner);  // its holder is gone
  }
  const fs::path dir = rec->dir;
  fs::create_directories(dir);
  if (alive_elsewhere(read_heartbeat(dir), spec_.executor.heartbeat_timeout_s)) {
    say(fmt::format("skip {}: a trainer on another host is writing {}", p.name, dir.string()));
    ++elsewhere_;
    return false;
  }
  try {
    DirectoryLock probe(dir);  // released at once: we only ask whether a trainer still holds it
  } catch (const DirectoryInUse&) {
    // Usually a previous attempt still writing its last checkpoint: wait a little. A directory
    // that stays locked is being trained by a process we did not start.
    if (item.busy_since == 0) item.busy_since = now;
    if (now - item.busy_since > spec_.executor.heartbeat_timeout_s) {
      say(fmt::format("skip {}: another process on this host keeps {} locked", p.name, dir.string()));
      ++elsewhere_;
      return false;
    }
    item.not_before = now + 1.0;
    return true;
  }
  // Attempts left open by an orchestrator that died (no live lease holder got this far) are closed
  // first, so every attempt row ends with an exit code: unknown here, so recorded as a kill (an
  // interruption, not a failure), with the reason.
  for (const store::Store::AttemptRecord& a : store_->attempts(p.id)) {
    if (a.end != 0) continue;
    store::AttemptEnd gone;
    gone.exit_code = -SIGKILL;
    gone.state = store::RunState::orphaned;
    gone.error = "no outcome recorded: its orchestrator died";
    store_->end_attempt(a.id, gone, now);
  }
  if (!store_->try_lease(p.id, owner_, now, o_.lease_ttl_s)) {
    say(fmt::format("skip {}: another orchestrator took it", p.name));
    ++elsewhere_;
    return false;
  }
  // The config the run is asked to train, beside what it writes (identical to its config.json).
  write_requested_config(dir, p.config);
  const fs::path request = requested_config_path(dir);
  Child c;
  c.point = &p;
  c.dir = dir;
  c.slot = slot;
  c.offset = rec->ingested_bytes;
  ingest(c);  // whatever a previous attempt wrote after the last ingest

  SpawnRequest req;
  req.argv = {o_.trainer.string(), "train", "--config", request.string(), "--dir", dir.string(), "--resume", "--quiet"};
  req.cwd = spec_.base_dir;
  req.output = output_log_path(dir);
  std::string devices;
  if (slots_[slot].gpu) {
    req.env.emplace_back("CUDA_VISIBLE_DEVICES", slots_[slot].device);
    if (mps_) req.env.insert(req.env.end(), mps_->child_env().begin(), mps_->child_env().end());
    devices = fmt::format("cuda:{}", slots_[slot].device);
  } else {
    req.env.emplace_back("OMP_NUM_THREADS", std::to_string(cpu_threads_));
    devices = fmt::format("cpu:{}", cpu_threads_);
  }
  c.pid = spawn(req);
  c.started = now;
  c.attempt = store_->begin_attempt(p.id, current_provenance(devices), now, static_cast<int>(c.pid));
  slots_[slot].busy = true;
  const bool resumed = rec->attempts > 0;
  say(fmt::format("{} {} ({}; {}, pid {})", resumed ? "resume" : "start", p.name, p.id.substr(0, 12), devices,
                  c.pid));
  children_.emplace(c.pid, c);
  return false;
}

void LocalExecutor::finish(Child& c, const ExitStatus& st) {
  const GridPoint& p = *c.point;
  ingest(c);
  const RunDirOutcome outcome = read_outcome(c.dir);
  store::AttemptEnd end;
  end.exit_code = st.signaled ? -st.code : st.code;
  bool requeue = false;
  std::string verdict;
  if (!st.signaled && st.code == 0 && outcome.final && outcome.state == store::RunState::succeeded) {
    end.state = store::RunState::succeeded;
    const std::optional<double> loss = store_->final_loss(p.id);
    verdict = loss ? fmt::format("succeeded (final loss {:.4f})", *loss) : "succeeded";
  } else if (!st.signaled && st.code == 3) {
    end.state = store::RunState::diverged;
    end.error = outcome.detail;
    verdict = "diverged: " + outcome.detail;
  } else if (!attempt_failed(end.exit_code)) {
    // Interrupted or busy: resumable. Requeued unless we are stopping or it keeps being killed.
    end.state = store::RunState::orphaned;
    end.error = st.code == 75 && !st.signaled ? "directory in use by another process" : "interrupted (" + st.describe() + ")";
    const int n = ++interruptions_[p.id];
    requeue = !stopping_ && n <= spec_.executor.max_attempts;
    verdict = end.error + (requeue ? ": resuming" : ": left for the next `sweep run`");
  } else {
    end.state = store::RunState::failed;
    end.error = outcome.final && outcome.state == store::RunState::failed && !outcome.detail.empty()
                    ? "fp4lab: failed: " + outcome.detail
                    : last_error_line(c.dir);
    if (end.error.empty()) end.error = st.describe();
    verdict = fmt::format("failed ({}): {}", st.describe(), end.error);
  }
  const double now = unix_time_s();
  store_->end_attempt(c.attempt, end, now);
  store_->set_state(p.id, end.state, end.error);
  store_->release_lease(p.id, owner_);
  slots_[c.slot].busy = false;
  if (durations_ && end.state == store::RunState::succeeded) durations_->measure(*store_, p.id);
  if (end.state != store::RunState::orphaned) {
    ++finished_;
    remaining_tokens_.erase(p.id);
    if (end.state == store::RunState::failed) ++failed_;
  }
  say(fmt::format("{} {} [{}/{}]", p.name, verdict, finished_, total_));
  if (requeue) queue_.push_back({&p, now + (st.code == 75 && !st.signaled ? 1.0 : 0.0)});
}

// Whether the run, started now, is expected to end before the deadline. A run nothing is known
// about yet is started (the deadline stops it, resumably, if it runs over).
bool LocalExecutor::fits_before_deadline(const QueueItem& item, double now) {
  if (deadline_ <= 0) return true;
  const GridPoint& p = *item.point;
  const auto left = remaining_tokens_.find(p.id);
  const std::optional<double> est =
      durations_->estimate_s(p, left != remaining_tokens_.end() ? left->second : p.tokens);
  if (!est || now + *est <= deadline_) return true;
  if (told_wont_fit_.insert(p.id).second)
    say(fmt::format("not starting {}: expected to take {}, {} of the time limit are left", p.name,
                    format_duration(*est), format_duration(std::max(0.0, deadline_ - now))));
  return false;
}

int LocalExecutor::run() {
  store_ = store::Store::open(spec_.store, store::Store::Mode::read_write);
  store_->record_grid(grid_record(spec_));
  const double start = unix_time_s();
  const std::vector<PlanEntry> plan = plan_sweep(spec_, store_.get(), start, o_.retry_failed);
  if (const auto mixed = mixed_numerics(plan, *store_)) {
    if (!o_.mix_numerics) throw UserError(mixed_numerics_error(spec_, *mixed));
    say(fmt::format("note: --mix-numerics: {} run(s) start beside twins of numerics identity {} (this fp4lab: {})",
                    mixed->runs, fmt::join(mixed->others, " and "), kNumericsIdentity));
  }

  // The queue: largest runs first (by training FLOPs) unless the spec asks for declared order.
  std::vector<const PlanEntry*> todo;
  total_ = static_cast<int>(plan.size());
  for (const PlanEntry& e : plan) {
    if (e.will_run) {
      todo.push_back(&e);
      // A run that resumes has only its remaining tokens to train.
      int64_t done = 0;
      if (e.record) {
        const std::vector<store::MetricRow> rows = store_->metrics(e.point->id, "train/loss");
        if (!rows.empty()) done = rows.back().tokens;
      }
      remaining_tokens_[e.point->id] = std::max<int64_t>(0, e.point->tokens - done);
    } else if (e.action == PlanAction::done || e.action == PlanAction::diverged || e.action == PlanAction::failed) {
      ++finished_;
      failed_ += e.action == PlanAction::failed;
    } else if (e.action == PlanAction::running) {
      ++elsewhere_;
    }
  }
  if (spec_.executor.order == "largest")
    std::stable_sort(todo.begin(), todo.end(), [](const PlanEntry* a, const PlanEntry* b) {
      return a->point->flops_per_token * static_cast<double>(a->point->tokens) >
             b->point->flops_per_token * static_cast<double>(b->point->tokens);
    });
  for (const PlanEntry* e : todo) queue_.push_back({e->point, 0});

  // Slots.
  bool any_gpu_run = false;
  for (const QueueItem& q : queue_) any_gpu_run |= is_gpu_run(*q.point);
  if (any_gpu_run) {
    // The spec reads in any build (plans, reports and fits of GPU studies work without CUDA);
    // training them needs a build with CUDA.
    if (std::string e = run::device_error("cuda"); !e.empty())
      throw UserError(spec_.file.string() + ": runs use " + e);
    const std::vector<std::string> gpus = visible_gpus(o_, spec_.executor);
    if (gpus.empty())
      throw UserError(spec_.file.string() + ": runs use device \"cuda\" but no GPU is visible: pass --gpus, "
                      "set CUDA_VISIBLE_DEVICES, or use [sweep] device = \"cpu\"");
    const int per_run = spec_.executor.gpus_per_run;
    if (per_run > 1) {
      // A multi-GPU run takes a group of GPUs to itself: the visible GPUs in consecutive groups of
      // gpus_per_run, each group one slot (its CUDA_VISIBLE_DEVICES lists the group).
      if (static_cast<int>(gpus.size()) < per_run)
        throw UserError(fmt::format("{}: executor.gpus_per_run = {} but {} GPU(s) are visible ({}): pass --gpus "
                                    "with at least {} GPUs or lower gpus_per_run",
                                    spec_.file.string(), per_run, gpus.size(), fmt::join(gpus, ","), per_run));
      for (size_t first = 0; first + per_run <= gpus.size(); first += per_run) {
        std::vector<std::string> group(gpus.begin() + static_cast<std::ptrdiff_t>(first),
                                       gpus.begin() + static_cast<std::ptrdiff_t>(first + per_run));
        slots_.push_back({true, fmt::format("{}", fmt::join(group, ",")), false});
      }
      if (gpus.size() % per_run != 0)
        say(fmt::format("note: {} GPU(s) visible, runs take {} each: {} stay idle", gpus.size(), per_run,
                        gpus.size() % per_run));
    } else {
      for (const std::string& g : gpus)
        for (int k = 0; k < spec_.executor.runs_per_gpu; ++k) slots_.push_back({true, g, false});
    }
    if (spec_.executor.runs_per_gpu > 1 && spec_.executor.mps == "auto")
      mps_ = std::make_unique<MpsDaemon>([this](const std::string& line) { say(line); });
  }
  const int jobs = o_.jobs > 0 ? o_.jobs : spec_.executor.cpu_jobs;
  for (int k = 0; k < jobs; ++k) slots_.push_back({false, "", false});
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cpu_threads_ = spec_.executor.threads_per_job > 0 ? spec_.executor.threads_per_job
                                                    : std::max(1, static_cast<int>(cores) / std::max(1, jobs));

  say(fmt::format("sweep {}: {} runs, {} to run, {} finished, {} running elsewhere; store {}", spec_.name, total_,
                  queue_.size(), finished_, elsewhere_, spec_.store.string()));
  if (o_.time_limit_s > 0) {
    deadline_ = start + o_.time_limit_s;
    durations_ = std::make_unique<RunDurationModel>(*store_);
    say(fmt::format("time limit {}: runs expected to end after it are not started (estimates from {} finished "
                    "run(s) in the store); at the limit the running ones checkpoint and stop",
                    format_duration(o_.time_limit_s), durations_->measured_runs()));
  }
  // The first signal stops cleanly, a second kills the children; neither kills us.
  const StopSignals signals(StopSignals::Second::counted);
  double last_renew = unix_time_s();
  last_progress_ = last_renew;  // the first plain progress line after progress_every_s
  int stop_signal = 0;
  for (;;) {
    // Stop requests: the first stops cleanly, the second kills.
    if (StopSignals::count() > 0 && !stopping_) {
      stopping_ = true;
      stop_signal = StopSignals::first();
      say(fmt::format("stopping: {} running run(s) will checkpoint and exit (signal again to kill them)",
                      children_.size()));
      for (const auto& [pid, c] : children_) ::kill(pid, SIGTERM);
    }
    if (StopSignals::count() > 1) {
      for (const auto& [pid, c] : children_) ::kill(pid, SIGKILL);
    }
    // Reap.
    for (auto it = children_.begin(); it != children_.end();) {
      const std::optional<ExitStatus> st = poll_child(it->first);
      if (!st) {
        ++it;
        continue;
      }
      Child c = it->second;
      it = children_.erase(it);
      finish(c, *st);
    }
    const double now = unix_time_s();
    // The time limit stops the running runs as a first signal would.
    if (deadline_ > 0 && now >= deadline_ && !stopping_) {
      stopping_ = true;
      time_limited_ = true;
      say(fmt::format("time limit reached: {} running run(s) will checkpoint and exit", children_.size()));
      for (const auto& [pid, c] : children_) ::kill(pid, SIGTERM);
    }
    // Launch into free slots.
    if (!stopping_) {
      for (size_t s = 0; s < slots_.size(); ++s) {
        if (slots_[s].busy) continue;
        for (auto q = queue_.begin(); q != queue_.end(); ++q) {
          if (q->not_before > now || is_gpu_run(*q->point) != slots_[s].gpu) continue;
          if (!fits_before_deadline(*q, now)) continue;
          QueueItem item = *q;
          queue_.erase(q);
          if (launch(item, s)) queue_.push_back(item);  // busy directory: later
          break;
        }
      }
    }
    // Nothing running and nothing left that would end before the limit: done for this time.
    if (deadline_ > 0 && children_.empty() && !queue_.empty() && !stopping_ &&
        std::none_of(queue_.begin(), queue_.end(), [&](const QueueItem& q) { return fits_before_deadline(q, now); })) {
      time_limited_ = true;
      break;
    }
    if (children_.empty() && (queue_.empty() || stopping_)) break;
    // Keep-alive and progress.
    if (now - last_renew > o_.lease_ttl_s / 4) {
      store_->renew_leases(owner_, now, o_.lease_ttl_s);
      last_renew = now;
    }
    if (now - last_ingest_ > 1.0) {
      for (auto& [pid, c] : children_) {
        ingest(c);
        check_heartbeat(c, now);
      }
      last_ingest_ = now;
    }
    progress(false);
    sleep_s(o_.poll_interval_s);
  }
  if (o_.terminal) {
    progress(true);
    out_ << "\n";
    progress_line_open_ = false;
  }
  mps_.reset();  // every child has exited: the daemon can go
  const std::vector<PlanEntry> after = plan_sweep(spec_, store_.get(), unix_time_s(), false);
  std::map<std::string, int> counts;
  for (const PlanEntry& e : after) ++counts[plan_action_name(e.action)];
  std::string summary;
  for (const auto& [k, v] : counts) summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", k, v);
  say(fmt::format("sweep {}: {}", spec_.name, summary));
  if (time_limited_) {
    int left = 0;
    for (const PlanEntry& e : after) left += e.will_run;
    if (left > 0) {
      say(fmt::format("time limit: {} run(s) left for the next `sweep run`", left));
      return kExitTimeLimit;
    }
  }
  if (stopping_ && stop_signal != 0) return 128 + stop_signal;
  // 0 when every run has an outcome other than failed, or is being run by another orchestrator.
  int unfinished = 0, held = 0;
  for (const PlanEntry& e : after) {
    if (e.action == PlanAction::running) ++held;
    else if (e.action != PlanAction::done && e.action != PlanAction::diverged) ++unfinished;
  }
  if (held > 0) say(fmt::format("{} run(s) are being run by another orchestrator (`sweep status` follows them)", held));
  return unfinished > 0 ? 1 : 0;
}

}  // namespace

int run_sweep_locally(const SweepSpec& spec, const LocalRunOptions& options, std::ostream& out) {
  LocalRunOptions o = options;
  if (o.trainer.empty()) o.trainer = self_executable();
  LocalExecutor ex(spec, o, out);
  return ex.run();
}

}  // namespace fp4::sweeps
