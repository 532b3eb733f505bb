// `trident supervise [--restarts N] [--grace S] -- LAUNCH...` (docs/commands.md#supervise):
// runs a launch command (`mpirun ... trident train ...`, `srun ... trident
// train ...`) and, when it fails (a rank's exit or signal, the launcher's
// exit, a hang the flight recorder's timeout turns into an exit), makes
// sure every process it started is gone and starts the same command again,
// up to N times, without leaving the machine or the allocation. MPI cannot
// continue after a rank dies: a restart is of every rank. The restarted
// ranks resume by themselves from the newest checkpoint (TRIDENT_RESUME=auto,
// which `trident train` reads as `--resume auto`); TRIDENT_ATTEMPT tells
// each attempt its number (0 first), for the log and for fault injection;
// TRIDENT_RESTART tells a restarted one when the last attempt ended, how
// long its teardown took and why it failed (the trainer's `restart` record:
// the time the failure cost).
// A stop signal (SIGTERM, SIGINT, SIGUSR1) is passed on to the command and
// ends supervision: no restart follows.
#pragma once
#include <string>
#include <vector>

namespace trident::launch {

struct SuperviseOptions {
  int restarts = 3;
  double grace = 10;  // seconds from SIGTERM to SIGKILL for what is left of a failed attempt
  std::vector<std::string> command;
};

// The command's exit code: 0 once an attempt finishes, else the last
// attempt's (128 + the signal where one ended it).
int supervise(const SuperviseOptions& o);

}  // namespace trident::launch
