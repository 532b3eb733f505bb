// Small reductions over the ranks of a group, for scalars and host vectors:
// what the trainer, the checkpoints and the run report need to agree on
// (a loss summed over the data group, "did any rank fail", per-rank counts
// before a variable-size gather). Every call is a collective of the group;
// without a group (nullptr, or one rank) each returns the local value.
// Large buffers go through the Communicator directly (parallel/communicator.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"

namespace trident::parallel {

double sum_over(Communicator* group, double local);
double max_over(Communicator* group, double local);
// Element-wise sum of a small vector (the same length on every rank).
std::vector<double> sum_over(Communicator* group, std::vector<double> local);
// Element-wise max of a small vector (the same length on every rank).
std::vector<double> max_over(Communicator* group, std::vector<double> local);
// Every rank's count, in group rank order.
std::vector<int64_t> gather_counts(Communicator* group, int64_t mine);
// Every rank's values, concatenated in group rank order (lengths may differ);
// `counts`, when given, receives each rank's length.
std::vector<double> gather_varying(Communicator* group, const std::vector<double>& mine,
                                   std::vector<int64_t>* counts = nullptr);
// Every rank's value of a scalar, in group rank order.
std::vector<double> gather_scalar(Communicator* group, double mine);

// A check every rank runs before any of them changes state: `check` runs
// here; when it throws InputError on any rank, every rank throws InputError,
// the failing ones their own message, the others `elsewhere` (which should
// say that another rank's message tells why). Never leaves some ranks
// waiting in a collective that the failing ones have left.
void agree_or_fail(Communicator* group, const std::function<void()>& check, const std::string& elsewhere);

}  // namespace trident::parallel
