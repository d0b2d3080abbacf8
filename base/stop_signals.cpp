// stop_signals.cpp — see stop_signals.h.
#include "base/stop_signals.h"

#include <csignal>

namespace fp4 {

namespace {

volatile std::sig_atomic_t g_first = 0;
volatile std::sig_atomic_t g_count = 0;
volatile std::sig_atomic_t g_second_kills = 0;
struct sigaction g_old_int = {}, g_old_term = {};

// Only async-signal-safe calls here.
extern "C" void on_stop_signal(int signo) {
  if (g_first == 0) g_first = signo;
  g_count = g_count + 1;
  if (g_second_kills) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signo, &dfl, nullptr);
  }
}

}  // namespace

StopSignals::StopSignals(Second second) {
  g_first = 0;
  g_count = 0;
  g_second_kills = second == Second::kills;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::first() { return static_cast<int>(g_first); }
int StopSignals::count() { return static_cast<int>(g_count); }

const char* stop_signal_name(int s) { return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace fp4
