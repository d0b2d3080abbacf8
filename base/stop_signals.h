// stop_signals.h — SIGINT and SIGTERM as requests to stop cleanly, for the trainer and the
// orchestrator alike: while a StopSignals lives, the handler only records the signal (async-signal
// safe), and the process's loop looks at it when it can act (finish a step and checkpoint; stop
// starting runs and ask the children to checkpoint).
//
// What a second signal does is the owner's choice: a trainer lets it kill the process at once (an
// impatient Ctrl-C still works), the orchestrator counts it and kills its children instead, so it
// can still record their outcomes. Handlers use SA_RESTART, so file writes in flight never fail
// with EINTR; a sleep (nanosleep, which is never restarted) still ends early on a signal.
// One StopSignals at a time per process; the previous handlers come back when it is destroyed.
#pragma once

#include <signal.h>

namespace fp4 {

class StopSignals {
 public:
  enum class Second {
    kills,    // the first signal restores the default action: a second one ends the process
    counted,  // every signal is only counted
  };
  explicit StopSignals(Second second);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received since the scope began (SIGINT or SIGTERM), 0 while none has.
  static int first();
  // How many have arrived since the scope began.
  static int count();
};

// "SIGINT", "SIGTERM", else "a signal".
const char* stop_signal_name(int signo);

}  // namespace fp4
