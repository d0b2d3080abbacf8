// metrics.h — metrics.jsonl: one JSON object per line, appended, never rewritten.
//
// Each row has "kind" ("run", "train", "eval", "probe", "probe_gemm"), "step" and "tokens";
// docs/train.md lists every key of every kind. A value that is not finite is written as null
// (JSON has no NaN); consumers read null as is_nan. After a resume the steps between the
// checkpoint and the interruption are done again and appended again: consumers keep the last row
// per (kind, step, and for probes layer/linear/slot), which is exactly what the store's upsert does.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4::run {

// A double as JSON: the number, or null when it is NaN or infinite.
nlohmann::json finite_or_null(double v);

class MetricsWriter {
 public:
  // Opens `path` for appending (creating it). A last line without its newline (the process died
  // while writing it) is cut off first, so the next row starts on a line of its own.
  // An empty path writes nothing (the ranks other than 0 of a multi-GPU run).
  explicit MetricsWriter(const std::filesystem::path& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends one row and flushes it to the kernel (a crash of this process loses nothing written).
  void write(const nlohmann::json& row);
  // fsync: called with every checkpoint, so rows up to the checkpoint survive a power loss too.
  void sync();

 private:
  std::filesystem::path path_;
  std::FILE* f_ = nullptr;
};

}  // namespace fp4::run
