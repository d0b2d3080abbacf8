// provenance.cpp — see provenance.h.
#include "sweeps/provenance.h"

#include <unistd.h>

#include <Eigen/Core>
#include <fmt/core.h>
#include <openssl/crypto.h>

#include <optional>

#include "build_info.h"
#include "base/child_process.h"

namespace fp4::sweeps {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

namespace {

// "NVIDIA H200, 570.124.06" → name and driver of the first GPU; nothing when nvidia-smi is absent.
void probe_gpu(store::Provenance& p) {
  const std::optional<std::string> out =
      capture_output({"nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"});
  if (!out) return;
  std::string line = out->substr(0, out->find('\n'));
  const size_t comma = line.rfind(',');
  if (comma == std::string::npos) return;
  auto trim = [](std::string s) {
    const size_t b = s.find_first_not_of(" \t\r");
    const size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  p.gpu_name = trim(line.substr(0, comma));
  p.gpu_driver = trim(line.substr(comma + 1));
}

}  // namespace

store::Provenance current_provenance(const std::string& devices) {
  store::Provenance p;
  p.host = host_name();
  p.devices = devices;
  p.git_commit = FP4LAB_GIT_COMMIT;
  p.git_dirty = FP4LAB_GIT_DIRTY != 0;
  p.fp4lab_version = FP4LAB_VERSION;
#ifdef FP4LAB_CUDA_VERSION
  p.cuda_version = FP4LAB_CUDA_VERSION;
#endif
  probe_gpu(p);
  p.libraries = {
      {"sqlite", store::sqlite_library_version()},
      {"eigen", fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION)},
      {"openssl", OpenSSL_version(OPENSSL_VERSION)},
      {"fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)},
  };
  return p;
}

}  // namespace fp4::sweeps
