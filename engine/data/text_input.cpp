// text_input.cpp — plain files through read(2); .xz files through a child `xz -dc` and a pipe.
#include "engine/data/text_input.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"

namespace fp4::data {
namespace {

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& what) {
  throw UserError(path.string() + ": " + what);
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Exit status the child uses when exec itself fails (xz not installed), as shells do.
constexpr int kExecFailed = 127;

}  // namespace

void check_text_input_name(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  for (const char* ext : {".gz", ".bz2", ".zst", ".lz4", ".zip", ".lzma", ".tgz"}) {
    if (ends_with(name, ext))
      refuse(path, std::string("is compressed with a format fp4lab does not read (") + ext +
                       "); decompress it first, or recompress it with xz");
  }
}

TextInput::TextInput(const std::filesystem::path& path) : path_(path) {
  check_text_input_name(path);
  const std::string name = path.filename().string();
  // Open it ourselves first, even for .xz: a missing file is then reported like any other input
  // (the descriptor is close-on-exec, so xz does not inherit it).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) refuse(path, std::string("cannot open: ") + std::strerror(errno) + "; check the path");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(path, "not a regular file; give text files (.txt or .txt.xz)");
  }
  if (!ends_with(name, ".xz")) {
    fd_ = fd;
    text_size_ = static_cast<uint64_t>(st.st_size);
    return;
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot create a pipe for xz: " + std::string(std::strerror(errno)));
  }
  // Everything the child needs is built before fork: after fork only async-signal-safe calls.
  std::string file = path.string();
  std::array<char*, 5> argv{const_cast<char*>("xz"), const_cast<char*>("-dc"), const_cast<char*>("--"),
                            file.data(), nullptr};
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(fd);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    throw std::runtime_error("cannot start xz: fork failed: " + std::string(std::strerror(err)));
  }
  if (pid == 0) {
    // Child: stdout into the pipe; stderr stays shared, since xz's own message about a damaged
    // file is worth seeing. xz opens the file by name so that its messages name it too.
    if (::dup2(pipefd[1], 1) < 0) ::_exit(kExecFailed);
    ::execvp("xz", argv.data());
    ::_exit(kExecFailed);
  }
  ::close(fd);
  ::close(pipefd[1]);
  fd_ = pipefd[0];
  child_ = pid;
  compressed_ = true;
}

TextInput::~TextInput() {
  if (fd_ >= 0) ::close(fd_);
  if (child_ > 0) {
    // Abandoned mid-stream (an error elsewhere): stop xz and reap it so no zombie is left.
    ::kill(child_, SIGTERM);
    int status = 0;
    while (::waitpid(child_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

size_t TextInput::read(char* out, size_t size) {
  if (fd_ < 0) return 0;
  for (;;) {
    ssize_t n = ::read(fd_, out, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) refuse(path_, std::string("read error: ") + std::strerror(errno));
    if (n == 0) {
      ::close(fd_);
      fd_ = -1;
      if (child_ > 0) finish_child();
    }
    return static_cast<size_t>(n);
  }
}

void TextInput::finish_child() {
  int status = 0;
  pid_t pid = child_;
  child_ = -1;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("cannot wait for xz: " + std::string(std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExecFailed)
    refuse(path_, "cannot run `xz` to decompress it: install xz-utils, or decompress it first (xz -dk FILE)");
  if (WIFEXITED(status))
    refuse(path_, "xz failed with exit status " + std::to_string(WEXITSTATUS(status)) +
                      " (its message is above): the file is damaged or not .xz; fetch it again");
  refuse(path_, "xz was killed by signal " + std::to_string(WTERMSIG(status)) + " while decompressing it");
}

}  // namespace fp4::data
