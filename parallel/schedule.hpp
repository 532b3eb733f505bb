// Pipeline schedules as data (DESIGN principle 4): a pure function
// (schedule, stages P, virtual stages V, micro-batches M, rank) -> the list
// of actions that rank runs in order, and a simulator that runs every rank's
// list with per-action costs and no communication.
//
// Chunks: the model's layers are cut into P x V chunks; rank p holds the V
// chunks with global index c = v P + p (v = 0..V-1, Megatron's interleaving),
// or, under dualpipev (V = 2), the V shape: c = p and c = 2 P - 1 - p, so
// rank 0 holds the first and the last chunk and rank P - 1 the two middle
// ones (global_chunk). Chunk 0 has the embedding, chunk P V - 1 the final
// norm, head and loss. A forward of chunk c receives its input from chunk
// c - 1 and sends its output to chunk c + 1; a backward receives its output
// gradient from chunk c + 1 and sends its input gradient to chunk c - 1.
// Between two chunks of the same rank the message is handed over in memory.
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
//   dualpipev         DeepSeek's DualPipeV (the V-shaped half of DualPipe):
//                     V = 2 chunks per rank in the V shape, M >= 2 P; its
//                     eight phases (warm-up forwards of chunk 0, forwards of
//                     both, zero-bubble B/W/F of chunk 1, the main phase of
//                     paired forward-backward steps, the drain with split
//                     backwards and deferred weight passes). A paired step
//                     (ActionType::paired, DualPipe's overlapped F&B,
//                     torchtitan's OVERLAP_F_B) is one action holding the
//                     forward of one micro-batch and the whole backward of
//                     another, whose compute and expert all-to-alls
//                     DualPipe overlaps; it starts once both inputs are
//                     there. The simulator, the planner and the executor
//                     all take it as that one unit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/enums.hpp"

namespace trident::parallel {

using trident::ScheduleKind;                           // parallel.schedule (core/enums.hpp)
ScheduleKind parse_schedule(const std::string& name);  // InputError on an unknown name
inline const char* schedule_name(ScheduleKind k) { return enum_name(k); }

enum class ActionType {
  forward,
  backward,
  backward_input,
  backward_weight,
  send_act,
  recv_act,
  send_grad,
  recv_grad,
  paired  // a paired step: the forward of (chunk, micro) and the backward of (pair_chunk, pair_micro)
};

struct Action {
  ActionType type;
  int chunk;  // local chunk index v (global chunk: global_chunk)
  int micro;  // micro-batch
  // a paired step's backward (local chunk, micro-batch); -1 otherwise
  int pair_chunk = -1, pair_micro = -1;
  bool operator==(const Action&) const = default;
};

// A paired step's two sub-actions: its forward and its (whole) backward.
inline Action paired_forward(const Action& a) { return {ActionType::forward, a.chunk, a.micro}; }
inline Action paired_backward(const Action& a) { return {ActionType::backward, a.pair_chunk, a.pair_micro}; }
// The compute actions of a list in order, a paired step as its forward then
// its backward (what runs on the chunks, for counting).
std::vector<Action> compute_steps(const std::vector<Action>& actions);

// The global chunk of local chunk v on pipeline rank p: v P + p, or the V
// shape under dualpipev. chunk_rank: the pipeline rank holding global chunk c.
int global_chunk(ScheduleKind kind, int stages, int v, int rank);
int chunk_rank(ScheduleKind kind, int stages, int chunk);

// Checks (P, V, M) for a schedule; throws InputError with the arithmetic.
void validate_schedule(ScheduleKind kind, int stages, int virtual_stages, int micro_batches);

// The actions of `rank`, compute and communication, in execution order.
std::vector<Action> make_schedule(ScheduleKind kind, int stages, int virtual_stages, int micro_batches, int rank);

bool is_compute(ActionType t);

// Forward passes only (evaluation): micro-batch by micro-batch, each through
// this rank's chunks in order, with their activation transfers.
std::vector<Action> make_forward_schedule(ScheduleKind kind, int stages, int virtual_stages, int micro_batches,
                                          int rank);

// Per local chunk: the most micro-batches at once whose forward has run and
// whose backward (or, split, weight pass) has not, over one rank's list —
// the activation contexts the chunk needs.
std::vector<int> in_flight_per_chunk(const std::vector<Action>& actions, int chunks);

// Schedules that split some backward passes into B and W: their chunks keep
// the output gradients until the weight pass.
inline bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::zero_bubble || kind == ScheduleKind::dualpipev;
}

struct Costs {
  double forward = 1, backward_input = 1, backward_weight = 1;  // per chunk; B = input + weight
  double paired = -1;  // a paired forward-backward step (F&B); < 0: F + B, not overlapped
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
// A paired step runs as one unit of cost Costs::paired once both its
// inputs exist; both outputs exist when it ends (its spans: the forward
// and the backward, sharing the unit in proportion to their costs).
Simulation simulate(ScheduleKind kind, int stages, int virtual_stages, int micro_batches, const Costs& costs = {});

// Text timeline: one row per rank, one column per time unit (scaled to
// `width` columns), F/B/W with the micro-batch, '.' idle.
std::string render_timeline(const Simulation& sim, int virtual_stages, int width = 120);

// Published bubble fractions with uniform costs (B = 2F): (P-1)/(M+P-1) for
// gpipe and 1f1b; (P-1)/(V M + P - 1) for interleaved_1f1b.
double bubble_formula(ScheduleKind kind, int stages, int virtual_stages, int micro_batches);

// Idle time per rank by DeepSeek-V3's Table 2 (arXiv 2412.19437), with F,
// B (input and weight gradient together) and W the costs of one stage's
// work on one micro-batch and F&B a paired forward-backward step
// (Costs::paired, else F + B): 1f1b (P-1)(F+B), zero_bubble (P-1)(F+B-2W),
// dualpipev (P-1)(F&B+B-3W) with one chunk's costs (the table's PP/2 - 1
// with PP = 2 P chunks). The simulator meets the dualpipev one on its
// busiest rank when a chunk's F equals its input-gradient cost, W <= F and
// F&B >= B; our zero_bubble idles (P-1)(F+B-W), not ZB1P's (see
// docs/parallelism.md). Other schedules: not in the table (-1).
double bubble_time_formula(ScheduleKind kind, int stages, const Costs& costs);

}  // namespace trident::parallel

namespace trident {
TRIDENT_ENUM_NAMES(parallel::ActionType, {parallel::ActionType::forward, "forward"},
                   {parallel::ActionType::backward, "backward"},
                   {parallel::ActionType::backward_input, "backward_input"},
                   {parallel::ActionType::backward_weight, "backward_weight"},
                   {parallel::ActionType::send_act, "send_act"}, {parallel::ActionType::recv_act, "recv_act"},
                   {parallel::ActionType::send_grad, "send_grad"}, {parallel::ActionType::recv_grad, "recv_grad"},
                   {parallel::ActionType::paired, "paired"});
}  // namespace trident
