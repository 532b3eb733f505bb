// Expert parallelism's region ops: an MoE layer's token exchange
// (Megatron-Core's all-to-all dispatcher), the only place where the expert
// axis communicates in a layer's forward and backward.
//
// The expert group's n ranks (topology.hpp) each hold L = E / n of the
// layer's E experts, rank r the experts [r L, (r + 1) L). Each rank routes
// its own token rows and permutes them into expert-major order
// (kernels/moe_permute.hpp), with offsets [E+1]. Then:
//
//   plan(offsets)  all-gathers every rank's counts [n, E]: what each rank
//                  sends, receives and, for the backward, sent (an
//                  ExpertPlan, which the layer keeps for its backward)
//   dispatch       the rows of expert e go to rank e / L (one all_to_all:
//                  a contiguous chunk per destination, since the rows are
//                  expert-major); they arrive by source rank, then local
//                  expert, then token, and are laid out again by local
//                  expert, then source rank, then token for the grouped
//                  GEMM (local_offsets() [L+1])
//   combine        the reverse: the experts' output rows, laid out by local
//                  expert, go back by source rank; each rank receives its
//                  own rows in its own expert-major order
//
// The backward of dispatch is combine and the backward of combine is
// dispatch (the same exchanges, gradients going the other way). Every row's
// place follows from the routes alone, never from arrival order, so the
// results do not depend on timing. One rank: copies, nothing is sent.
// All ranks of the expert group call these in the same order (the same MoE
// layers of the same micro-batches).
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "parallel/communicator.hpp"

namespace trident::parallel {

// Rows moved by the exchanges (each rank's own: sent plus received, over
// every dispatch and combine), for benchmarks and the trace.
struct ExpertTraffic {
  int64_t rows_sent = 0, rows_received = 0, calls = 0;
  double seconds = 0;  // inside the exchanges (issue to completion)
  // of which: before the wait began (other work ran: the shared experts, or
  // the other paired pass), and waited for
  double overlapped_s = 0, waited_s = 0;
};

// One exchange as the trace shows it: issued at `start`, waited for from
// `wait` (after what overlapped it) to `end`; steady-clock seconds.
struct ExpertSpan {
  bool combine = false;  // else a dispatch
  double start = 0, wait = 0, end = 0;
};

// A dispatch in flight (start_dispatch), finished by finish_dispatch.
struct PendingDispatch {
  WorkPtr work;  // none: one rank (copied at once)
  double start = 0;
  int64_t rows_sent = 0, rows_received = 0;
};

// One layer's exchange of one micro-batch, made by plan() and kept for its
// backward (pipeline schedules interleave micro-batches, so the layer holds
// one per micro-batch in flight).
struct ExpertPlan {
  int64_t rows = 0;      // this rank's rows (offsets[E])
  int64_t received = 0;  // rows its experts take
  // [L+1]: local expert l's received rows [local_offsets[l], local_offsets[l+1])
  std::vector<int64_t> local_offsets;
  std::vector<int64_t> send_rows, recv_rows;  // per rank
  // the re-layout's blocks: (offset by source, offset by local expert, rows)
  struct Block {
    int64_t by_source, by_expert, rows;
  };
  std::vector<Block> blocks;
};

class ExpertParallel {
 public:
  ExpertParallel() = default;  // one rank
  // group: the expert group (nullptr or one rank: copies); experts: E, a
  // multiple of the group's size (the recipe loader says so).
  ExpertParallel(Communicator* group, int64_t experts);

  int rank() const { return group_ ? group_->rank() : 0; }
  int size() const { return group_ ? group_->size() : 1; }
  int64_t experts() const { return experts_; }
  int64_t local_experts() const { return experts_ / size(); }
  int64_t first_expert() const { return rank() * local_experts(); }

  // offsets [E+1]: this rank's expert-major rows of one layer's micro-batch.
  ExpertPlan plan(const int64_t* offsets);

  // Every exchange lays rows out in `staging`, a buffer of the caller's
  // (grown as needed, on the rows' device): two passes that interleave
  // (paired_passes.hpp) each give their own, so a pass's rows in flight are
  // never the other's. `before_wait`, when given, runs once the exchange
  // is issued and before it is waited for: the MoE layer gives
  // parallel::switch_pass, so that under paired passes the other pass
  // computes while these rows travel (nothing runs outside a pair).
  //
  // rows [p.rows, C] in this rank's expert order -> out [p.received, C] by local expert
  template <typename T>
  void dispatch(const ExpertPlan& p, T* out, const T* rows, int64_t C, Tensor& staging,
                const std::function<void()>& before_wait = {});
  // The same in two halves, so that other work (the shared experts) runs
  // while the rows travel: start_dispatch issues the exchange (rows must
  // stay unchanged until finish_dispatch), finish_dispatch waits for it and
  // lays the rows out. One dispatch in flight at a time; nothing else of
  // this group's in between.
  template <typename T>
  PendingDispatch start_dispatch(const ExpertPlan& p, const T* rows, int64_t C, Tensor& staging);
  template <typename T>
  void finish_dispatch(PendingDispatch& pending, const ExpertPlan& p, T* out, int64_t C, const Tensor& staging,
                       const std::function<void()>& before_wait = {});
  // rows [p.received, C] by local expert -> out [p.rows, C] in this rank's expert order
  template <typename T>
  void combine(const ExpertPlan& p, T* out, const T* rows, int64_t C, Tensor& staging,
               const std::function<void()>& before_wait = {});

  ExpertTraffic take_traffic();
  // The exchanges since the last call, in order, while recording (for the
  // trace; off by default).
  void record_spans(bool on) { record_ = on; }
  std::vector<ExpertSpan> take_spans();

 private:
  Communicator* group_ = nullptr;
  int64_t experts_ = 0;
  ExpertTraffic traffic_;
  std::vector<ExpertSpan> spans_;
  bool record_ = false;
  template <typename T>
  static T* grow(Tensor& staging, int64_t elements, const void* like);
  template <typename T>
  PendingDispatch issue(T* out, const T* in, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                        int64_t C);
  void complete(PendingDispatch& x, bool combine, const std::function<void()>& before_wait);
};

}  // namespace trident::parallel
