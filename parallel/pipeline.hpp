// Pipeline executor: runs one step's action list (parallel/schedule.hpp) on
// this pipeline rank. Compute goes through hooks (the trainer binds them to
// the model); transfers are asynchronous point-to-point messages on the
// pipeline group:
// - receives are posted early: when an action starts, every receive among
//   the next `lookahead` compute actions is already posted, into pooled
//   buffers; the consuming action waits for it;
// - sends copy the produced tensor into a pooled buffer and return at once;
//   finished sends recycle their buffers; the step waits for all at the end.
// Buffers are allocated on first use and reused by later steps.
// Messages are matched by tag: direction, receiving global chunk and
// micro-batch (so receive order need not equal send order).
// A transfer that does not complete within `timeout_s` is an error naming
// the action, chunk, micro-batch and peer: a hang is never silent.
//
// Messages between two chunks of the same rank (one pipeline rank with
// several chunks; the turn of dualpipev's V) are handed over in memory.
// All ranks of the pipeline group run their own lists of the same schedule;
// deadlock-freedom of those lists is what the simulator tests.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <vector>

#include "parallel/communicator.hpp"
#include "parallel/schedule.hpp"

namespace trident::parallel {

struct PipelineHooks {
  // forward of local chunk `chunk`, micro-batch `micro`; input [R,C] is the
  // previous chunk's output (null on global chunk 0)
  std::function<void(int chunk, int micro, const float* input)> forward;
  // after forward: the chunk's output [R,C], sent to the next chunk
  std::function<const float*(int chunk, int micro)> output;
  // backward / backward_input (d_output: the next chunk's input gradient, null
  // on the last chunk) and backward_weight (d_output null)
  std::function<void(int chunk, int micro, const float* d_output, ActionType part)> backward;
  // after backward / backward_input: the chunk's input gradient [R,C], sent back
  std::function<const float*(int chunk, int micro)> input_grad;
  // A paired step (ActionType::paired, dualpipev), once both inputs are
  // here: set, the model runs its forward and backward as paired passes
  // (parallel/paired_passes.hpp), each computing while the other's expert
  // exchange travels, each in a workspace of its own; unset, forward then
  // backward.
  std::function<void(const Action& forward, const float* input, const Action& backward, const float* d_output)> paired;
};

// A span of this rank's step, for traces: seconds from the step's start.
struct PipelineSpan {
  ActionType type;
  int chunk, micro;
  double start, end;
};

class PipelineExecutor {
 public:
  // group: the pipeline group (nullptr or one rank: no transfers).
  // message_elems: floats per activation / gradient message (R x C).
  // device: where the message buffers live (the model's activations).
  PipelineExecutor(Communicator* group, ScheduleKind kind, int stages, int virtual_stages, int64_t message_elems,
                   double timeout_s, int lookahead = 2, Device device = {});
  void run(const std::vector<Action>& actions, const PipelineHooks& hooks);

  double step_seconds() const { return step_s_; }
  double idle_seconds() const { return idle_s_; }  // blocked on receives and on the final sends
  int paired_steps() const { return pairs_; }      // forward-backward pairs run as paired passes
  const std::vector<PipelineSpan>& spans() const { return spans_; }

 private:
  struct Transfer {
    Tensor buf;
    WorkPtr work;
  };
  Tensor take();
  void give_back(Tensor t);
  int neighbour(const Action& a) const;  // the global chunk at the other end of a transfer
  int peer(const Action& a) const;       // its pipeline rank
  bool in_memory(const Action& a) const { return !group_ || peer(a) == rank_; }
  int tag(const Action& a) const;
  void wait(Transfer& t, const Action& a);
  void post_receives(const std::vector<Action>& actions, size_t from);
  void reap_sends(bool all);
  void run_list(const std::vector<Action>& actions, const PipelineHooks& hooks);
  void abandon();

  Communicator* group_;
  ScheduleKind kind_;
  int P_, V_, rank_;
  int64_t elems_;
  double timeout_s_;
  int lookahead_;
  Device device_;
  std::vector<Tensor> pool_;
  std::map<size_t, Transfer> posted_;  // action index -> receive in flight
  size_t next_post_ = 0;
  std::vector<std::pair<Action, Transfer>> sends_;
  std::map<int, Tensor> local_;  // messages between this rank's chunks, by tag
  double step_s_ = 0, idle_s_ = 0;
  int pairs_ = 0;
  std::chrono::steady_clock::time_point t0_;
  std::vector<PipelineSpan> spans_;
  double now() const;
};

}  // namespace trident::parallel
