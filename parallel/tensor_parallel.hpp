// Tensor-parallel region ops: Megatron-LM's conjugate mappings, the only
// places where a tensor-parallel model communicates.
//
// Shapes: N token rows of a micro-batch (B x T flattened), C channels.
// Without sequence parallelism every rank of the tensor group holds all N
// rows of the residual stream (replicated); with it, rank r holds the rows
// [r N/t, (r+1) N/t) and the norms and residual adds run on those only.
//
//   op      forward                        backward
//   enter   identity   | all-gather        all-reduce | reduce-scatter
//   exit    all-reduce | reduce-scatter    identity   | all-gather
//   (left of the bar: without sequence parallelism; right: with it)
//
// enter() precedes a column-parallel linear, whose input must be the full
// activation on every rank; exit() follows a row-parallel linear (or the
// vocab-parallel embedding), whose output is a partial sum over the group.
// cross_entropy() is the vocab-parallel loss: two reductions of 3N values,
// never the logits. With one rank every op is the identity, nothing is
// allocated and nothing is sent.
//
// All ranks of the tensor group run the same model code, so they call these
// ops in the same order with the same sizes (communicator.hpp's contract).
// The ops are synchronous: they wait for their collective before returning.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "parallel/communicator.hpp"

namespace trident::parallel {

// Elements moved by the region ops, per kind of collective (the size of the
// full buffer of each call: N x C for an activation), for benchmarks.
struct TensorTraffic {
  int64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0;
  int64_t calls = 0;
  double seconds = 0;  // spent inside the collectives (issue to completion)
};

class TensorParallel {
 public:
  TensorParallel() = default;  // one rank
  // group: the tensor group (nullptr or one rank: the identity everywhere).
  TensorParallel(Communicator* group, bool sequence_parallel);

  int rank() const { return group_ ? group_->rank() : 0; }
  int size() const { return group_ ? group_->size() : 1; }
  bool sequence_parallel() const { return sp_; }
  Communicator* group() const { return group_; }
  // Residual-stream rows held by this rank, and the first one's global index.
  int64_t rows(int64_t N) const { return sp_ ? N / size() : N; }
  int64_t row_begin(int64_t N) const { return sp_ ? rank() * (N / size()) : 0; }
  // Whether enter() fills a separate full-size buffer (else it returns `local`).
  bool gathers() const { return sp_; }

  // local [rows, C] -> the full input [N, C] of a column-parallel linear.
  // With sequence parallelism `full` receives it (no copy of this rank's rows
  // when local == full + row_begin * C); otherwise local is returned.
  template <typename T>
  const T* enter(T* full, const T* local, int64_t N, int64_t C);
  // dfull [N, C] (this rank's partial input gradient) -> the summed gradient
  // of this rank's rows: in place in dfull, or reduce-scattered into dlocal.
  template <typename T>
  const T* enter_backward(T* dlocal, T* dfull, int64_t N, int64_t C);
  // partial [N, C] (a row-parallel output) -> the sum for this rank's rows:
  // all-reduced in place (returns partial), or reduce-scattered into local.
  template <typename T>
  const T* exit(T* local, T* partial, int64_t N, int64_t C);
  // dlocal [rows, C] -> the output gradient [N, C] every rank needs:
  // dlocal itself, or all-gathered into dfull.
  template <typename T>
  const T* exit_backward(T* dfull, const T* dlocal, int64_t N, int64_t C);

  // values [n]: numbers each rank computed from its partial sums (the MoE
  // layer's gradients of its routing weights and shared-expert gate, dot
  // products with a row-parallel output) -> their sum over the group, in place.
  template <typename T>
  void sum_partials(T* values, int64_t n);

  // Vocab-parallel softmax cross-entropy (kernels/cross_entropy.hpp): this
  // rank holds logits [N, V] for vocabulary columns [vocab_begin, vocab_begin
  // + V), the first Vvalid of them real. Every rank gets all N losses.
  template <typename T>
  void cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                     int64_t vocab_begin, kernels::LossGrad<T> grad);

  const TensorTraffic& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

 private:
  Communicator* group_ = nullptr;
  bool sp_ = false;
  TensorTraffic traffic_;
  Tensor scratch_;  // cross-entropy row statistics (3N)
};

// Sum over `group` of the element ranges [begin, end) of base (packed into
// one all-reduce). For gradients of parameters replicated over a group.
void all_reduce_ranges(Communicator* group, float* base, const std::vector<std::pair<int64_t, int64_t>>& ranges);

}  // namespace trident::parallel
