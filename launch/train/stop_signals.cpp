// The stop-signal thread and window (see stop_signals.hpp).
#include "launch/train/stop_signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <string>
#include <thread>

namespace trident::launch {
namespace {
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_stop_accepted{false};  // a run with somewhere to save is in progress
}  // namespace

void request_stop(int sig) { g_stop_signal = sig; }

void install_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      // while a run can save, and through the whole shutdown after it took a stop signal (its save, the
      // marker, MPI's end), a signal is recorded or absorbed: a second one never kills a stopping run
      if (g_stop_accepted || g_stop_signal != 0) {
        if (g_stop_accepted) g_stop_signal = sig;
        continue;
      }
      std::signal(sig, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      ::kill(::getpid(), sig);
    }
  }).detach();
}

StopWindow::StopWindow(bool can_save) {
  g_stop_signal = 0;
  g_stop_accepted = can_save;
}
StopWindow::~StopWindow() { g_stop_accepted = false; }
int StopWindow::pending() const { return g_stop_signal.load(); }

const char* signal_name(int sig) {
  static thread_local std::string other;
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGUSR1) return "SIGUSR1";
  other = std::to_string(sig);
  return other.c_str();
}

}  // namespace trident::launch
