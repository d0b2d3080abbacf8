// files.cpp — whole-file reads; atomic replacement by temp file, fsync, rename, fsync of the directory.
#include "base/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace fp4 {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* what, int err) {
  throw std::runtime_error(path.string() + ": " + what + ": " + std::strerror(err));
}

void write_all(int fd, std::string_view bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot write", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Makes a completed rename survive a power cut; some filesystems refuse fsync on a directory,
// which only weakens durability, so that case is not an error.
void sync_directory(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string read_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(saved));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::filesystem::path temporary_path_for(const std::filesystem::path& path) {
  // Appended piecewise: GCC 12 at -O3 warns (-Wrestrict, a false positive) about "." + string.
  std::string name(".");
  name += path.filename().string();
  name += ".tmp";
  return path.parent_path() / name;
}

void write_file_atomic(const std::filesystem::path& path, const std::vector<std::string_view>& parts) {
  const std::filesystem::path tmp = temporary_path_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "cannot create", errno);
  try {
    for (std::string_view part : parts) write_all(fd, part, tmp);
    if (::fsync(fd) != 0) fail(tmp, "cannot fsync", errno);
    if (::close(fd) != 0) {
      fd = -1;
      fail(tmp, "cannot close", errno);
    }
    fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "cannot rename the temporary file into place", errno);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  sync_directory(path.parent_path());
}

}  // namespace fp4
