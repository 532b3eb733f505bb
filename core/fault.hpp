// Deterministic fault injection for tests (docs/testing.md). TRIDENT_FAULT
// holds faults separated by ';', each
//   KIND[,step=N][,rank=R][,phase=PHASE][,ms=M][,attempt=A]
// KIND   kill (SIGKILL to this process), stall (this rank stops making
//        progress: it sleeps until killed), fail_write (this rank's
//        checkpoint file write fails, as on a full disk), nan (a non-finite
//        value: this rank's loss at phase forward, its reduced gradients at
//        backward or reduction), slow (a straggler: this rank sleeps ms=M
//        milliseconds, then carries on)
// step   the step N being run, counted from 1 as the progress lines count
//        (default: every step)
// rank   the world rank (default: every rank)
// phase  forward (before the step's schedule), backward (after it, before
//        the gradient synchronization completes), reduction (after it),
//        save (the checkpoint file write of step N); default: save for
//        fail_write, forward otherwise
// attempt  only in attempt A (0 first) of a supervised run, whose attempts
//        `trident supervise` numbers in TRIDENT_ATTEMPT (unset: 0); default:
//        every attempt
// A malformed TRIDENT_FAULT is an InputError naming the variable.
#pragma once
#include <cstdint>
#include <string>

namespace trident::fault {

enum class Phase { forward, backward, reduction, save };

// Reads TRIDENT_FAULT for this world rank (again on every call: tests set it
// between runs in one process).
void configure(int world_rank);

// At `phase` of step `step` (from 1): a due kill or stall happens here (it
// does not return), a slow one sleeps; returns true when a nan or fail_write
// fault is due.
bool hit(Phase phase, int64_t step);

// Whether TRIDENT_FAULT breaks these numerics on this rank (configure first).
enum class Break { fp8_frozen_scales, fp8_e5m2_forward };
bool broken(Break b);

// Whether any fault is configured (a run says so in its log).
std::string describe();

}  // namespace trident::fault
