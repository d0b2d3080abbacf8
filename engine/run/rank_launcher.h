// rank_launcher.h — `fp4lab train --gpus N` without RANK in its environment: starts the N rank
// processes of a data-parallel run and watches them (docs/train.md, "Several GPUs").
//
// Each rank is the same command (an argument vector, exec'd directly, never through a shell) with
// RANK, WORLD_SIZE, LOCAL_RANK (= RANK), LOCAL_WORLD_SIZE and a fresh FP4LAB_RENDEZVOUS_TOKEN added
// to the environment. The ranks run in a process group of their own, so a Ctrl-C at the terminal
// reaches only the launcher, which hands it on once; they ask the kernel for SIGTERM should the
// launcher die (PR_SET_PDEATHSIG), and then checkpoint and stop together.
//
// What ends the launch:
//   - a first SIGINT/SIGTERM is forwarded to every rank (they agree on the step to stop after,
//     rank 0 checkpoints); a second one kills them;
//   - a rank that ends badly (killed by a signal, or an exit code other than 0, 3 diverged, 130 or
//     143 interrupted) takes the others down at once (SIGKILL: nothing they hold is worth waiting
//     for, and every file the run writes is replaced atomically), within one poll (50 ms);
//   - rank 0 ending at all: the run's outcome is rank 0's to write, so once it has gone the others
//     get `grace_s` to end on their own, then SIGKILL.
// The launcher then ends as the run ended: as the first rank that ended badly (its exit code, or
// killed by the same signal, so that an orchestrator sees a killed run as interrupted and resumes
// it), else as rank 0.
#pragma once

#include <string>
#include <vector>

namespace fp4::run {

struct LaunchRequest {
  std::vector<std::string> argv;  // each rank's command; argv[0] is the executable's path
  int world = 2;
  double grace_s = 5.0;           // after rank 0 has ended
  double poll_s = 0.05;
};

struct LaunchOutcome {
  bool signaled = false;  // end by raising `code` as a signal
  int code = 0;           // the exit code, or the signal
  std::string message;    // empty, or one line saying which rank ended the launch and how
};

// Starts the ranks, waits for them as above. Throws std::runtime_error when a rank cannot be
// started (the ones already started are killed first).
LaunchOutcome launch_ranks(const LaunchRequest& request);

// A fresh rendezvous token: the launcher's pid, the time and 64 random bits.
std::string new_rendezvous_token();

}  // namespace fp4::run
