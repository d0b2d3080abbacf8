// directory_lock.h — an exclusive advisory lock (flock) on a directory itself.
//
// A trainer holds one on its run directory for its whole life, so two processes never train one
// directory at once (two orchestrators, or a run resumed while the previous attempt is still
// writing its last checkpoint); the orchestrator takes and drops one to ask whether a trainer
// still holds it. The kernel drops the lock when the process dies, however it dies, so a crash
// never leaves a stale lock behind, and no file is created for it. (flock on network filesystems
// is only as good as the filesystem's support.)
#pragma once

#include <filesystem>
#include <stdexcept>

namespace fp4 {

// Another process holds the lock.
class DirectoryInUse : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DirectoryLock {
 public:
  // Locks `dir` (which must exist) without waiting; throws DirectoryInUse naming the directory
  // when another process holds it, std::runtime_error when the directory cannot be opened.
  explicit DirectoryLock(const std::filesystem::path& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace fp4
