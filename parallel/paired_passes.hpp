// Two passes of the model on one thread, each running while the other
// waits for its expert exchange: DualPipe's overlap of a forward chunk and a
// backward chunk of different micro-batches (parallel.schedule: dualpipev,
// docs/parallelism.md#dualpipev). The pipeline executor runs a paired
// forward in `first` and the backward after it in `second`; ExpertParallel
// calls switch_pass() when an exchange has been issued and is about to be
// waited for, so the other pass computes while the tokens travel.
//
// The switches are cooperative and happen at the same points of the same
// passes on every rank (the exchanges of the MoE layers, in the model's
// order), never by timing, so every group's collectives keep one order on
// all of its ranks and the results are those of running the passes one after
// the other. MPI is only called from this thread (its FUNNELED level).
#pragma once
#include <functional>

namespace trident::parallel {

// Runs `first` on a stack of its own until its first switch point, then
// `second` on the caller's until its own, and so on; a finished pass is not
// switched to. Nothing is swapped at a switch: the two passes must not
// share written memory (the model gives each a workspace of its own,
// model/workspace.hpp). An exception of either pass is rethrown once both
// have ended. The sanitizer builds run the interleaving too, told of every
// switch (ASan: the stacks; TSan: each pass a fiber; with
// TRIDENT_TSAN_CONCURRENT_PASSES=1 concurrent with the other, so memory
// both passes write is a reported race). TRIDENT_PAIRED_SEQUENTIAL=1 runs
// the passes one after the other instead.
void run_paired(const std::function<void()>& first, const std::function<void()>& second);

// Inside run_paired: hand the thread to the other pass, if it has not
// finished. Elsewhere: nothing.
void switch_pass();

// The switches made by run_paired on this thread since the last call (tests,
// the trace).
long take_pass_switches();

}  // namespace trident::parallel
