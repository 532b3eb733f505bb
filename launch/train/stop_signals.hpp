// Stop signals (SIGTERM, SIGUSR1: Slurm's warning before a time limit or a
// preemption). Call install_stop_signals() first thing in main, before MPI or
// any thread starts: the signals are then blocked in every thread (the mask
// is inherited by the threads MPI and OpenMP create later), so they never
// interrupt MPI or a kernel mid-call, and one thread waits for them.
// While a StopWindow is open (a run with somewhere to save) a signal is
// recorded and the trainer stops after the current step with a checkpoint;
// once a run has taken a stop signal, later ones are absorbed until the
// process exits (a second signal during the save or the shutdown changes
// nothing); otherwise the default action (termination) is restored and the
// signal raised again.
#pragma once

namespace trident::launch {

void install_stop_signals();
void request_stop(int sig);  // the same, in-process (tests)

// Signals are caught while one exists (and its run can save).
class StopWindow {
 public:
  explicit StopWindow(bool can_save);
  ~StopWindow();
  StopWindow(const StopWindow&) = delete;
  StopWindow& operator=(const StopWindow&) = delete;
  int pending() const;  // the signal received, or 0
};

const char* signal_name(int sig);  // "SIGTERM", "SIGUSR1", or the number

}  // namespace trident::launch
