// io.h — small helpers the run files share: whole-file reads and the two clocks.
// (Crash-safe writes come from engine/data/atomic_file.h, SHA-256 from base/sha256.h.)
#pragma once

#include <filesystem>
#include <string>

namespace fp4::run {

// The whole file. Throws std::runtime_error naming the path and the system's reason.
std::string read_file(const std::filesystem::path& path);

// Seconds since the Unix epoch (heartbeat and status files) and a monotonic clock (rates).
double unix_time_s();
double monotonic_s();

}  // namespace fp4::run
