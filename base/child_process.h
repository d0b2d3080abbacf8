// child_process.h — child processes (the executors' trainers, the report's gnuplot): fork/exec with an argument vector (never a
// shell, so no path or value is ever re-parsed), a working directory, extra environment
// variables, and stdout/stderr appended to a log file.
//
// Children run in their own process group, so a Ctrl-C at the terminal reaches only the
// orchestrator, which then stops its children deliberately (one SIGTERM each: finish the step,
// checkpoint, exit). They also ask the kernel for SIGTERM when the orchestrator dies
// (PR_SET_PDEATHSIG), so a SIGKILLed orchestrator leaves no trainer running unsupervised: each
// checkpoints and exits, and the next `sweep run` resumes it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fp4 {

struct SpawnRequest {
  std::vector<std::string> argv;                            // argv[0] is the executable's path
  std::filesystem::path cwd;                                // empty: inherit
  std::vector<std::pair<std::string, std::string>> env;     // set (override) in the child
  std::filesystem::path output;                             // stdout+stderr appended here; empty: inherit
  std::optional<std::string> input;                         // written to its stdin (small); none: /dev/null
};

// Starts the child; returns its pid. Failure to fork or to open the output file throws
// std::runtime_error; failure to exec makes the child exit with 127 after writing the reason to
// its output.
pid_t spawn(const SpawnRequest& request);

// How a child ended.
struct ExitStatus {
  bool signaled = false;   // killed by a signal (then `code` is the signal number)
  int code = 0;            // exit code, or the signal
  // The shell convention: 128 + signal for a signal, else the exit code.
  int shell_code() const { return signaled ? 128 + code : code; }
  std::string describe() const;  // "exit code 1", "killed by SIGKILL"
};

// A waitpid() status decoded.
ExitStatus exit_status_of(int wait_status);

// Non-blocking: the status when `pid` has exited (it is then reaped), nothing while it runs.
std::optional<ExitStatus> poll_child(pid_t pid);
// Blocks until `pid` exits.
ExitStatus wait_child(pid_t pid);

// Runs a command to completion and returns its stdout (for probing tools such as nvidia-smi);
// nothing (no value) when it cannot be run or exits non-zero.
std::optional<std::string> capture_output(const std::vector<std::string>& argv);

// The running fp4lab executable's path (/proc/self/exe), so children run the same build.
std::filesystem::path self_executable();

}  // namespace fp4
