// Pipeline schedules as data (DESIGN principle 4): a pure function
// (schedule, stages P, virtual stages V, micro-batches M, rank) -> the list
// of actions that rank runs in order, and a simulator that runs every rank's
// list with per-action costs and no communication.
//
// Chunks: the model's layers are cut into P x V chunks; rank p holds the V
// chunks with global index c = v P + p (v = 0..V-1, Megatron's interleaving).
// Chunk 0 has the embedding, chunk P V - 1 the final norm, head and loss.
// A forward of chunk c receives its input from chunk c - 1 (rank (p-1) mod P)
// and sends its output to chunk c + 1; a backward receives its output
// gradient from chunk c + 1 and sends its input gradient to chunk c - 1.
//
// Actions: forward F, backward B (input and weight gradients together), and
// for zero_bubble the split B = input gradient (backward_input) then weight
// gradient W (backward_weight); send / recv of activations and gradients
// appear in the list right after the action producing them / right before
// the action consuming them. The executor posts receives early (several
// actions ahead); the simulator treats transfers as free.
//
// Schedules:
//   gpipe             all M forwards, then all M backwards
//   1f1b              PipeDream-flush: P - p - 1 warm-up forwards, then one
//                     forward / one backward, then the remaining backwards
//   interleaved_1f1b  Megatron's interleaved 1F1B over V chunks; needs V >= 2
//                     and M a multiple of P
//   zero_bubble       ZB-H1: backward split into B and W; at most P - p
//                     micro-batches in flight on rank p (1F1B's memory), W
//                     fills what would be idle time; built by list scheduling
//                     with unit costs (deterministic, so a pure function)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/enums.hpp"

namespace trident::parallel {

using trident::ScheduleKind;                           // parallel.schedule (core/enums.hpp)
ScheduleKind parse_schedule(const std::string& name);  // InputError on an unknown name
inline const char* schedule_name(ScheduleKind k) { return enum_name(k); }

enum class ActionType { forward, backward, backward_input, backward_weight, send_act, recv_act, send_grad, recv_grad };

struct Action {
  ActionType type;
  int chunk;  // local chunk index v (global chunk v P + rank)
  int micro;  // micro-batch
  bool operator==(const Action&) const = default;
};

// Checks (P, V, M) for a schedule; throws InputError with the arithmetic.
void validate_schedule(ScheduleKind kind, int stages, int virtual_stages, int micro_batches);

// The actions of `rank`, compute and communication, in execution order.
std::vector<Action> make_schedule(ScheduleKind kind, int stages, int virtual_stages, int micro_batches, int rank);

bool is_compute(ActionType t);

// Forward passes only (evaluation): micro-batch by micro-batch, each through
// this rank's chunks in order, with their activation transfers.
std::vector<Action> make_forward_schedule(int stages, int virtual_stages, int micro_batches, int rank);

// Per local chunk: the most micro-batches at once whose forward has run and
// whose backward (or, split, weight pass) has not, over one rank's list —
// the activation contexts the chunk needs.
std::vector<int> in_flight_per_chunk(const std::vector<Action>& actions, int chunks);

struct Costs {
  double forward = 1, backward_input = 1, backward_weight = 1;  // per chunk; B = input + weight
};

struct Span {
  Action action;
  double start, end;
};

struct Simulation {
  bool deadlock = false;
  std::string deadlock_reason;
  double makespan = 0;
  std::vector<double> busy;              // per rank
  std::vector<double> bubble;            // per rank: idle / makespan
  std::vector<int> peak_in_flight;       // per rank: max micro-batches forwarded, weights not yet done (all chunks)
  std::vector<std::vector<Span>> spans;  // per rank, compute actions only
  double bubble_fraction() const;        // mean over ranks
};

// Runs every rank's list; a rank runs its next compute action as soon as its
// inputs exist (forward of chunk c - 1 / backward of chunk c + 1 finished).
Simulation simulate(ScheduleKind kind, int stages, int virtual_stages, int micro_batches, const Costs& costs = {});

// Text timeline: one row per rank, one column per time unit (scaled to
// `width` columns), F/B/W with the micro-batch, '.' idle.
std::string render_timeline(const Simulation& sim, int virtual_stages, int width = 120);

// Published bubble fractions with uniform costs (B = 2F): (P-1)/(M+P-1) for
// gpipe and 1f1b; (P-1)/(V M + P - 1) for interleaved_1f1b.
double bubble_formula(ScheduleKind kind, int stages, int virtual_stages, int micro_batches);

}  // namespace trident::parallel

namespace trident {
TRIDENT_ENUM_NAMES(parallel::ActionType, {parallel::ActionType::forward, "forward"},
                   {parallel::ActionType::backward, "backward"},
                   {parallel::ActionType::backward_input, "backward_input"},
                   {parallel::ActionType::backward_weight, "backward_weight"},
                   {parallel::ActionType::send_act, "send_act"}, {parallel::ActionType::recv_act, "recv_act"},
                   {parallel::ActionType::send_grad, "send_grad"}, {parallel::ActionType::recv_grad, "recv_grad"});
}  // namespace trident
