// rank_launcher.cpp — see rank_launcher.h.
#include "engine/run/rank_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "base/child_process.h"
#include "base/clock.h"
#include "base/stop_signals.h"
#include "engine/run/ranks.h"

extern char** environ;

namespace fp4::run {

namespace {

// A rank that ended with one of these reached an outcome all ranks agreed on (or was asked to stop).
bool ended_cleanly(int status) {
  if (!WIFEXITED(status)) return false;
  const int c = WEXITSTATUS(status);
  return c == 0 || c == 3 || c == 130 || c == 143;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return fmt::format("was killed by SIG{}", name ? name : std::to_string(WTERMSIG(status)));
  }
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

LaunchOutcome outcome_of(int status) {
  const ExitStatus s = exit_status_of(status);
  LaunchOutcome o;
  o.signaled = s.signaled;
  o.code = s.code;
  return o;
}

// Everything the child needs is built before fork: after it, only async-signal-safe calls.
struct ChildImage {
  std::vector<std::string> args, envs;
  std::vector<char*> argv, envp;
};

ChildImage child_image(const LaunchRequest& req, int rank, const std::string& token) {
  ChildImage c;
  c.args = req.argv;
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(req.world)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(req.world)},
      {kRendezvousTokenEnv, token}};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& [k, v] : ours) replaced = replaced || kv.rfind(k + "=", 0) == 0;
    if (!replaced) c.envs.push_back(kv);
  }
  for (const auto& [k, v] : ours) c.envs.push_back(k + "=" + v);
  for (std::string& a : c.args) c.argv.push_back(a.data());
  c.argv.push_back(nullptr);
  for (std::string& e : c.envs) c.envp.push_back(e.data());
  c.envp.push_back(nullptr);
  return c;
}

}  // namespace

std::string new_rendezvous_token() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{}-{:.0f}-{:016x}", static_cast<long>(::getpid()), unix_time_s() * 1e6, r);
}

LaunchOutcome launch_ranks(const LaunchRequest& req) {
  if (req.argv.empty() || req.world < 1) throw std::logic_error("launch_ranks: no command or no ranks");
  const std::string token = new_rendezvous_token();
  std::vector<ChildImage> images;
  for (int r = 0; r < req.world; ++r) images.push_back(child_image(req, r, token));

  // Signals: counted while we watch; the first is handed on, a second kills the ranks.
  const StopSignals signals(StopSignals::Second::counted);
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(static_cast<size_t>(req.world), 0);
  std::vector<bool> alive(static_cast<size_t>(req.world), false);
  const auto kill_alive = [&](int sig) {
    for (size_t r = 0; r < pids.size(); ++r)
      if (alive[r]) ::kill(pids[r], sig);
  };
  for (int r = 0; r < req.world; ++r) {
    ChildImage& img = images[static_cast<size_t>(r)];
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      kill_alive(SIGKILL);
      for (size_t k = 0; k < pids.size(); ++k)
        if (alive[k]) ::waitpid(pids[k], nullptr, 0);
      throw std::runtime_error(fmt::format("cannot start rank {}: fork: {}", r, std::strerror(err)));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(143);  // the launcher died before the request took effect
      // The launcher's handlers do not survive exec; its blocked mask would, so it is cleared.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(img.argv[0], img.argv.data(), img.envp.data());
      const char msg[] = "fp4lab: cannot exec the rank's command\n";
      (void)!::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    pids[static_cast<size_t>(r)] = pid;
    alive[static_cast<size_t>(r)] = true;
  }

  int forwarded = 0;
  std::optional<LaunchOutcome> failure;  // the first rank that ended badly
  std::optional<int> rank0_status;
  double rank0_ended = 0;
  size_t running = pids.size();
  while (running > 0) {
    const int count = StopSignals::count();
    if (count > forwarded) {
      kill_alive(count == 1 ? SIGTERM : SIGKILL);
      forwarded = count;
    }
    for (size_t r = 0; r < pids.size(); ++r) {
      if (!alive[r]) continue;
      int status = 0;
      const pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      alive[r] = false;
      --running;
      if (got < 0) status = 0x7f00;  // not ours any more: counted as a failure (exit 127)
      const bool after_rank0 = rank0_status.has_value();
      if (r == 0) {
        rank0_status = status;
        rank0_ended = monotonic_s();
      }
      // Once rank 0 has ended, the run's outcome is its: what the others do afterwards changes nothing.
      if (!failure && !ended_cleanly(status) && (r == 0 || !after_rank0)) {
        failure = outcome_of(status);
        failure->message = fmt::format("rank {} of {} (pid {}) {}: {}", r, req.world, static_cast<long>(pids[r]),
                                       describe(status),
                                       running > 0 ? "stopping the other ranks" : "the run has stopped");
        kill_alive(SIGKILL);
      }
    }
    if (rank0_status && running > 0 && monotonic_s() - rank0_ended >= req.grace_s) kill_alive(SIGKILL);
    if (running > 0) sleep_s(req.poll_s);
  }
  if (failure) return *failure;
  return outcome_of(*rank0_status);
}

}  // namespace fp4::run
