// Pipeline executor (see pipeline.hpp).
#include "parallel/pipeline.hpp"

#include <cstring>
#include <thread>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace trident::parallel {

PipelineExecutor::PipelineExecutor(Communicator* group, ScheduleKind kind, int stages, int virtual_stages,
                                   int64_t message_elems, double timeout_s, int lookahead, Device device)
    : group_(group && group->size() > 1 ? group : nullptr),
      kind_(kind),
      P_(stages),
      V_(virtual_stages),
      rank_(group_ ? group_->rank() : 0),
      elems_(message_elems),
      timeout_s_(timeout_s),
      lookahead_(lookahead),
      device_(device) {
  TRIDENT_CHECK(!group_ || group_->size() == stages, "pipeline group of {} ranks for {} stages",
                group_ ? group_->size() : 1, stages);
  TRIDENT_CHECK(stages * virtual_stages <= 64, "at most 64 pipeline chunks (message tags), found {}",
                stages * virtual_stages);
}

double PipelineExecutor::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

Tensor PipelineExecutor::take() {
  if (pool_.empty()) return Tensor::empty({elems_}, DType::f32, MemCategory::comm, device_);
  Tensor t = std::move(pool_.back());
  pool_.pop_back();
  return t;
}

void PipelineExecutor::give_back(Tensor t) { pool_.push_back(std::move(t)); }

// Activations flow to the next chunk, gradients to the previous one.
int PipelineExecutor::neighbour(const Action& a) const {
  const int c = global_chunk(kind_, P_, a.chunk, rank_);
  const bool to_next = a.type == ActionType::send_act || a.type == ActionType::recv_grad;
  return to_next ? c + 1 : c - 1;
}

int PipelineExecutor::peer(const Action& a) const { return chunk_rank(kind_, P_, neighbour(a)); }

// direction, receiving global chunk, micro-batch
int PipelineExecutor::tag(const Action& a) const {
  const bool grad = a.type == ActionType::recv_grad || a.type == ActionType::send_grad;
  const bool send = a.type == ActionType::send_act || a.type == ActionType::send_grad;
  TRIDENT_CHECK(grad || send || a.type == ActionType::recv_act, "no tag for {}", enum_name(a.type));
  const int receiver = send ? neighbour(a) : global_chunk(kind_, P_, a.chunk, rank_);
  TRIDENT_CHECK(a.micro < (1 << 16), "micro-batch {} too large for a message tag", a.micro);
  return ((int(grad) * 64 + receiver) << 16) | a.micro;
}

void PipelineExecutor::wait(Transfer& t, const Action& a) {
  const double start = now();
  while (!t.work->is_completed()) {
    if (now() - start > timeout_s_) {
      const std::string diagnosis = t.work->diagnose_timeout();
      throw Error(
          fmt::format("pipeline: timed out after {:.0f} s (parallel.timeout_s) in {} of chunk {} (global {}) "
                      "micro-batch {} with pipeline rank {}: the peer never sent or received it{}",
                      timeout_s_, enum_name(a.type), a.chunk, global_chunk(kind_, P_, a.chunk, rank_), a.micro, peer(a),
                      diagnosis.empty() ? "" : ". " + diagnosis));
    }
    std::this_thread::yield();
  }
  t.work->wait();
}

void PipelineExecutor::post_receives(const std::vector<Action>& actions, size_t from) {
  // up to the lookahead-th compute action after `from`
  size_t limit = from;
  for (int computes = 0; limit < actions.size(); ++limit)
    if (is_compute(actions[limit].type) && ++computes > lookahead_) break;
  for (next_post_ = std::max(next_post_, from); next_post_ < limit; ++next_post_) {
    const Action& a = actions[next_post_];
    if ((a.type != ActionType::recv_act && a.type != ActionType::recv_grad) || in_memory(a)) continue;
    Transfer t;
    t.buf = take();
    t.work = group_->recv(t.buf, {.peer = peer(a), .tag = tag(a)});
    posted_[next_post_] = std::move(t);
  }
}

void PipelineExecutor::reap_sends(bool all) {
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (all) wait(it->second, it->first);
    if (all || it->second.work->is_completed()) {
      give_back(std::move(it->second.buf));
      it = sends_.erase(it);
    } else {
      ++it;
    }
  }
}

// After a failure the pending transfers can never complete (the run is being
// abandoned): drop their requests without waiting, which a Work's destructor
// would do forever.
void PipelineExecutor::abandon() {
  for (auto& [i, t] : posted_) (void)t.work.release();
  for (auto& [a, t] : sends_) (void)t.work.release();
  posted_.clear();
  sends_.clear();
}

void PipelineExecutor::run(const std::vector<Action>& actions, const PipelineHooks& hooks) {
  try {
    run_list(actions, hooks);
  } catch (...) {
    abandon();
    throw;
  }
}

void PipelineExecutor::run_list(const std::vector<Action>& actions, const PipelineHooks& hooks) {
  t0_ = std::chrono::steady_clock::now();
  spans_.clear();
  idle_s_ = 0;
  next_post_ = 0;
  pairs_ = 0;
  // the last activation and gradient received, consumed by the next compute action that reads each (a paired
  // step reads both), and their buffers
  const float* received[2] = {nullptr, nullptr};
  Transfer held[2];
  auto consume = [&](int kind) {  // 0: activation, 1: gradient
    if (held[kind].buf.defined()) give_back(std::move(held[kind].buf));
    held[kind] = Transfer();
    received[kind] = nullptr;
  };
  // a receive: its buffer into `into`, the message's data returned
  auto receive = [&](size_t i, Transfer& into) -> const float* {
    const Action& a = actions[i];
    const double start = now();
    if (in_memory(a)) {
      auto local = local_.find(tag(a));
      TRIDENT_CHECK(local != local_.end(), "{} of chunk {} micro-batch {} before its send", enum_name(a.type), a.chunk,
                    a.micro);
      into.buf = std::move(local->second);
      local_.erase(local);
      return into.buf.data<float>();
    }
    auto it = posted_.find(i);
    TRIDENT_CHECK(it != posted_.end(), "receive {} was not posted", i);
    into = std::move(it->second);
    posted_.erase(it);
    try {
      wait(into, a);
    } catch (...) {
      (void)into.work.release();
      throw;
    }
    idle_s_ += now() - start;
    return into.buf.data<float>();
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (group_) post_receives(actions, i);
    const double start = now();
    switch (a.type) {
      case ActionType::recv_act:
      case ActionType::recv_grad: {
        const int kind = a.type == ActionType::recv_grad ? 1 : 0;
        received[kind] = receive(i, held[kind]);
        break;
      }
      case ActionType::send_act:
      case ActionType::send_grad: {
        const float* src =
            a.type == ActionType::send_act ? hooks.output(a.chunk, a.micro) : hooks.input_grad(a.chunk, a.micro);
        Transfer t;
        t.buf = take();
        copy_bytes(t.buf.data<float>(), src, sizeof(float) * size_t(elems_));
        if (in_memory(a)) {  // the receiving chunk is this rank's: the same tag as its receive
          local_[tag(a)] = std::move(t.buf);
          break;
        }
        t.work = group_->send(t.buf, {.peer = peer(a), .tag = tag(a)});
        sends_.push_back({a, std::move(t)});
        reap_sends(false);
        break;
      }
      case ActionType::forward:
        hooks.forward(a.chunk, a.micro, received[0]);
        consume(0);
        break;
      case ActionType::backward:
      case ActionType::backward_input:
      case ActionType::backward_weight:
        hooks.backward(a.chunk, a.micro, received[1], a.type);
        consume(1);
        break;
      case ActionType::paired: {  // both inputs are here: the pair as paired passes, else one after the other
        const Action f = paired_forward(a), b = paired_backward(a);
        if (hooks.paired) {
          hooks.paired(f, received[0], b, received[1]);
          ++pairs_;
        } else {
          hooks.forward(f.chunk, f.micro, received[0]);
          hooks.backward(b.chunk, b.micro, received[1], b.type);
        }
        consume(0), consume(1);
        const double end = now();  // the trace: both sub-actions over the pair's span
        spans_.push_back({f.type, f.chunk, f.micro, start, end});
        spans_.push_back({b.type, b.chunk, b.micro, start, end});
        continue;
      }
    }
    spans_.push_back({a.type, a.chunk, a.micro, start, now()});
  }
  const double start = now();
  reap_sends(true);
  idle_s_ += now() - start;
  TRIDENT_CHECK(posted_.empty(), "{} receives left over at the end of the step", posted_.size());
  step_s_ = now();
}

}  // namespace trident::parallel
