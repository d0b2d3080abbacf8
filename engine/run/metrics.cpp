// metrics.cpp — see metrics.h.
#include "engine/run/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace fp4::run {

nlohmann::json finite_or_null(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

MetricsWriter::MetricsWriter(const std::filesystem::path& path) : path_(path) {
  if (path.empty()) return;  // a rank other than 0 of a multi-GPU run: rank 0 writes the rows
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > 0) {
    // Find the end of the last complete line and cut there.
    std::FILE* r = std::fopen(path.c_str(), "rb");
    if (r == nullptr) throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
    uintmax_t keep = size;
    char c = 0;
    while (keep > 0) {
      std::fseek(r, static_cast<long>(keep - 1), SEEK_SET);
      if (std::fread(&c, 1, 1, r) != 1) break;
      if (c == '\n') break;
      --keep;
    }
    std::fclose(r);
    if (keep != size) std::filesystem::resize_file(path, keep);
  }
  f_ = std::fopen(path.c_str(), "ab");
  if (f_ == nullptr) throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& row) {
  if (f_ == nullptr) return;
  const std::string line = row.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    throw std::runtime_error("cannot write " + path_.string() + ": " + std::strerror(errno));
}

void MetricsWriter::sync() {
  if (f_ == nullptr) return;
  if (std::fflush(f_) != 0 || ::fsync(fileno(f_)) != 0)
    throw std::runtime_error("cannot fsync " + path_.string() + ": " + std::strerror(errno));
}

}  // namespace fp4::run
