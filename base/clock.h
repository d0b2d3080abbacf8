// clock.h — the clocks: Unix time for files that other processes read (heartbeats, status files,
// the store), a monotonic clock for rates and timeouts, UTC timestamps for logs and job scripts.
#pragma once

#include <string>

namespace fp4 {

// Seconds since the Unix epoch.
double unix_time_s();
// Seconds on a clock that never steps back (rates, intervals).
double monotonic_s();
// The current time as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_timestamp();
// Sleeps for `s` seconds; a signal ends the sleep early (loops that act on signals want that).
void sleep_s(double s);

}  // namespace fp4
