// gnuplot.cpp — see gnuplot.h.
#include "reports/gnuplot.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "base/user_error.h"
#include "base/child_process.h"

extern char** environ;

namespace fp4::reports {

namespace {

bool is_executable_file(const std::filesystem::path& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// A pipe whose two ends are closed on exec: the child gets its end through dup2 only.
struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void close_write() {
    if (write >= 0) ::close(write);
    write = -1;
  }
};

// Writing to a pipe whose reader died raises SIGPIPE; block it in this thread while we write (the
// write then fails with EPIPE) and discard a pending one afterwards, leaving the process's signal
// dispositions alone.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_{}, old_{};
};

std::string first_lines(const std::string& text, size_t max_lines) {
  std::string out;
  size_t start = 0, lines = 0;
  while (start < text.size() && lines < max_lines) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t^") != std::string::npos) {  // gnuplot's caret lines point at columns
      if (!out.empty()) out += " | ";
      out += line;
      ++lines;
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

std::filesystem::path find_gnuplot(const std::string& program) {
  const std::string hint = "install Debian's gnuplot-nox package (apt-get install gnuplot-nox, or scripts/setup-deps.sh)";
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program)) return program;
    throw UserError("gnuplot not found at " + program + ": " + hint);
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(start, end - start);
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / program;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  throw UserError("fp4lab report draws its figures with gnuplot, which is not installed: " + hint);
}

std::string run_gnuplot(const std::filesystem::path& gnuplot, const std::string& script, const std::string& what,
                        double timeout_s) {
  Pipe in, out, err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.read, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.write, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.write, STDERR_FILENO);
  const std::string program = gnuplot.string();
  std::vector<char*> argv = {const_cast<char*>(program.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + program + ": " + std::strerror(rc));
  in.close_read();
  out.close_write();
  err.close_write();
  ::fcntl(in.write, F_SETFL, O_NONBLOCK);

  SigpipeBlock no_sigpipe;
  std::string svg, errors;
  size_t written = 0;
  if (script.empty()) in.close_write();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  // Feed stdin while draining stdout and stderr: gnuplot may write (warnings, output) before it
  // has read everything, and a full pipe on either side must not deadlock us.
  while (out.read >= 0 || err.read >= 0) {
    std::vector<pollfd> fds;
    if (in.write >= 0) fds.push_back({in.write, POLLOUT, 0});
    if (out.read >= 0) fds.push_back({out.read, POLLIN, 0});
    if (err.read >= 0) fds.push_back({err.read, POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == in.write) {
        const ssize_t w = ::write(in.write, script.data() + written, script.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == script.size()) in.close_write();
      } else {
        char buf[65536];
        const ssize_t r = ::read(p.fd, buf, sizeof buf);
        if (r > 0) {
          (p.fd == out.read ? svg : errors).append(buf, static_cast<size_t>(r));
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          if (p.fd == out.read) out.close_read();
          else err.close_read();
        }
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  const ExitStatus status = wait_child(pid);
  if (timed_out)
    throw std::runtime_error("gnuplot took more than " + std::to_string(static_cast<int>(timeout_s)) +
                             " s drawing " + what + " and was stopped");
  if (status.signaled || status.code != 0)
    throw std::runtime_error("gnuplot failed drawing " + what + " (" + status.describe() + "): " +
                             first_lines(errors, 3));
  return svg;
}

}  // namespace fp4::reports
