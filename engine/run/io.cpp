// io.cpp — see io.h.
#include "engine/run/io.h"

#include <chrono>

namespace fp4::run {

double unix_time_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double monotonic_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace fp4::run
