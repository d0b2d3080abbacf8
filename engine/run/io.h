// io.h — the two clocks the run files use. (Whole-file reads and crash-safe writes come from
// base/files.h, SHA-256 from base/sha256.h.)
#pragma once

namespace fp4::run {

// Seconds since the Unix epoch (heartbeat and status files) and a monotonic clock (rates).
double unix_time_s();
double monotonic_s();

}  // namespace fp4::run
