#include "kev/core/interrupt.h"

#include <csignal>

#include "kev/core/error.h"

namespace kev {
namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) {
  g_signal = sig;
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() {
  return g_signal != 0;
}

void check_interrupted() {
  if (g_signal)
    fail(ErrorKind::kInterrupted, "interrupted by signal {}; nothing was kept", int(g_signal));
}

}  // namespace kev
