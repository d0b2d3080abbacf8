// process.cpp — see process.h.
#include "base/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace fp4 {

namespace {

// Writes a message from the child between fork and exec (only async-signal-safe calls there).
void child_write(int fd, const char* a, const char* b) {
  auto put = [fd](const char* s) {
    size_t n = std::strlen(s);
    while (n > 0) {
      const ssize_t w = ::write(fd, s, n);
      if (w <= 0) return;
      s += w;
      n -= static_cast<size_t>(w);
    }
  };
  put(a);
  put(b);
  put("\n");
}

}  // namespace

std::string ExitStatus::describe() const {
  if (!signaled) return "exit code " + std::to_string(code);
  const char* name = sigabbrev_np(code);
  return name ? std::string("killed by SIG") + name : "killed by signal " + std::to_string(code);
}

pid_t spawn(const SpawnRequest& r) {
  if (r.argv.empty()) throw std::logic_error("spawn: empty argument vector");
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& a : r.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The child's environment: ours, with the requested variables replaced or added.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    bool overridden = false;
    for (const auto& kv : r.env)
      if (entry.size() > kv.first.size() && entry.compare(0, kv.first.size(), kv.first) == 0 &&
          entry[kv.first.size()] == '=')
        overridden = true;
    if (!overridden) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : r.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out_fd = -1;
  if (!r.output.empty()) {
    out_fd = ::open(r.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) throw std::runtime_error("cannot open " + r.output.string() + ": " + std::strerror(errno));
  }
  int in_fds[2] = {-1, -1};
  if (r.input && ::pipe2(in_fds, O_CLOEXEC) != 0) {
    if (out_fd >= 0) ::close(out_fd);
    throw std::runtime_error(std::string("cannot start a process: pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  // Every signal blocked across the fork: the child resets its dispositions before it unblocks
  // them, so a SIGTERM from the parent's death (PR_SET_PDEATHSIG) that arrives before exec kills
  // it instead of running the parent's inherited stop handler (which would set a flag that exec
  // then discards, leaving a trainer that outlives its orchestrator).
  sigset_t all, before;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &before);
  const pid_t pid = ::fork();
  if (pid != 0) ::sigprocmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    const int err = errno;
    if (out_fd >= 0) ::close(out_fd);
    if (in_fds[0] >= 0) ::close(in_fds[0]), ::close(in_fds[1]);
    throw std::runtime_error(std::string("cannot start a process: fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    // Signal dispositions and the mask are inherited; exec resets handlers but not the mask or
    // ignored signals: start the child clean, the dispositions first (signals are still blocked).
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the parent died before prctl took effect
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // a pending SIGTERM now ends the child
    if (out_fd >= 0) {
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(out_fd, STDERR_FILENO);
    }
    if (in_fds[0] >= 0) {
      ::dup2(in_fds[0], STDIN_FILENO);
    } else {
      const int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    }
    if (!r.cwd.empty() && ::chdir(r.cwd.c_str()) != 0) {
      child_write(STDERR_FILENO, "fp4lab: failed: cannot enter the working directory ", r.cwd.c_str());
      ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    child_write(STDERR_FILENO, "fp4lab: failed: cannot execute ", argv[0]);
    ::_exit(127);
  }
  if (out_fd >= 0) ::close(out_fd);
  if (in_fds[0] >= 0) {
    // The input is a few bytes (a command for a control program): it fits in the pipe's buffer,
    // so writing it all before the child reads cannot block.
    ::close(in_fds[0]);
    // A child that exits without reading must not kill us with SIGPIPE.
    struct sigaction ignore {}, previous {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &previous);
    const std::string& text = *r.input;
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(in_fds[1], text.data() + done, text.size() - done);
      if (n <= 0) break;  // the child closed its stdin: it did not want the rest
      done += static_cast<size_t>(n);
    }
    ::close(in_fds[1]);
    ::sigaction(SIGPIPE, &previous, nullptr);
  }
  return pid;
}

ExitStatus exit_status_of(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.code = WTERMSIG(status);
  } else {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

std::optional<ExitStatus> poll_child(pid_t pid) {
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return exit_status_of(status);
    if (r == 0) return std::nullopt;
    if (errno == EINTR) continue;
    throw std::runtime_error("waitpid(" + std::to_string(pid) + "): " + std::strerror(errno));
  }
}

ExitStatus wait_child(pid_t pid) {
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return exit_status_of(status);
    if (errno == EINTR) continue;
    throw std::runtime_error("waitpid(" + std::to_string(pid) + "): " + std::strerror(errno));
  }
}

std::optional<std::string> capture_output(const std::vector<std::string>& argv_in) {
  if (argv_in.empty()) return std::nullopt;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  std::vector<char*> argv;
  for (const std::string& a : argv_in) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDERR_FILENO);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  ::close(fds[0]);
  const ExitStatus s = wait_child(pid);
  if (s.signaled || s.code != 0) return std::nullopt;
  return out;
}

std::filesystem::path self_executable() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the fp4lab executable (/proc/self/exe): " + ec.message());
  return p;
}

}  // namespace fp4
