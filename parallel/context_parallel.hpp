// Context parallelism: each sequence split over the context group, the only
// place where the model's attention talks to other ranks of that group.
//
// Causal load balance: the sequence of T tokens is cut into 2N chunks of
// c = T / 2N (N ranks); rank r holds chunks r and 2N-1-r, so every rank has
// the same amount of causal attention work. Its local rows are those two
// chunks back to back; positions() gives each row's global position, which
// rotary and learned positions, the causal mask and document masking use.
// Everything but attention is token-wise and runs on the local rows alone.
//
// Attention (kernels/attention.hpp's blocks, merged by their log-sum-exp):
//   ring        the key/value block of every rank passes around the group
//               (send to rank+1, receive from rank-1) while the block in hand
//               is attended to; forward merges N partial results. Backward
//               passes the key/value block around again, and with it the
//               block's dK/dV partial sums, which come home after N steps.
//   all_to_all  (Ulysses) an all-to-all gives each rank heads/N of the heads
//               for the whole sequence; attention runs on them; an all-to-all
//               brings the output back to the local rows. Backward does the
//               same with the gradients (and sends q, k, v again rather than
//               keeping them). Needs heads and KV heads divisible by N.
// The state the model keeps per layer is B x H x T/N log-sum-exp floats in
// both modes (all_to_all: this rank's heads over the whole sequence). The
// transfer buffers are kept between calls and counted as communication
// memory: ring, six blocks of B x T/N x 2 KV x D and the row dot products
// B x H x T/N; all_to_all, about a dozen buffers of this rank's q, k, v.
// With one rank every call is the plain attention kernel.
//
// All ranks of the context group run the same model code, so they call these
// in the same order (communicator.hpp's contract). Host buffers only: the
// packing and transfers here are host code, so device: cuda is refused by
// the recipe although the CUDA block kernels exist (kernels/attention.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "core/batch.hpp"
#include "core/enums.hpp"
#include "kernels/attention.hpp"
#include "parallel/communicator.hpp"

namespace trident::parallel {

// What the attention calls moved and waited for (benchmarks, the report).
struct ContextTraffic {
  int64_t bytes = 0;     // sent by this rank
  int64_t calls = 0;     // attention forward / backward / recompute calls
  double seconds = 0;    // inside them, compute and communication
  double exposed_s = 0;  // of which waiting for transfers the compute did not hide
};

// One layer's attention call: B sequences of this rank's H query and KV
// key/value heads (queries and keys of D, values of Dv); doc_start [B,
// local_len]: the global position each row's document starts at (document
// masking), or null; window: sliding-window attention (0: none); sinks [H]:
// gpt-oss's attention sinks (null: none), whose gradient the backward adds
// to dsinks [H]. Under all_to_all each rank's share of the heads takes its
// share of the sinks; under ring every rank holds all H.
template <typename T>
struct AttentionArgs {
  int64_t B = 1, H = 1, KV = 1, D = 0, Dv = 0;
  const int32_t* doc_start = nullptr;
  int64_t window = 0;
  const T* sinks = nullptr;
  T* dsinks = nullptr;
  // QK-clip (forward, CPU): [H] this rank's heads' largest logit, max'ed in (under all_to_all this rank's
  // share of the heads only; the others stay as they were), or null
  T* head_max = nullptr;
};

class ContextParallel {
 public:
  ContextParallel() = default;  // one rank: the whole sequence
  // group: the context group (nullptr or one rank: plain attention).
  ContextParallel(Communicator* group, ContextMode mode, int64_t seq_len);

  int rank() const { return group_ ? group_->rank() : 0; }
  int size() const { return group_ ? group_->size() : 1; }
  Communicator* group() const { return group_; }
  ContextMode mode() const { return mode_; }
  // This rank's rows of each sequence, and their global positions.
  int64_t local_len() const { return seq_len_ / size(); }
  const std::vector<int32_t>& positions() const { return positions_[size_t(rank())]; }
  // This rank's rows [B, local_len] of a [B, seq_len] array.
  void take_local(const int32_t* full, int32_t* local, int64_t B) const;
  // A batch of whole sequences -> this rank's rows of each (tokens, targets,
  // document starts), with each row's position origin (the global position
  // of local row t is t - origin: its place in the sequence, or in its
  // document under document masking). One rank: left as it is.
  void shard(Batch& batch) const;

  // The model's attention over the local rows: qkv [B, local_len, (H + KV) D
  // + KV Dv] (this rank's heads of the tensor split), out [B, local_len, H Dv],
  // state [B, H, local_len]; the heads, masks and sinks in args.
  template <typename T>
  void attention_forward(T* out, T* state, const T* qkv, const AttentionArgs<T>& args);
  template <typename T>
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* state,
                          const AttentionArgs<T>& args);
  // Refills the state alone (selective recompute); scratch_out [B, local_len,
  // H Dv] is overwritten.
  template <typename T>
  void attention_state(T* state, T* scratch_out, const T* qkv, const AttentionArgs<T>& args);

  // values [n] -> their sum over the context group, in place (the MoE
  // layer's expert counts of the whole micro-batch, or of each sequence).
  template <typename T>
  void sum(T* values, int64_t n);

  const ContextTraffic& traffic() const { return traffic_; }

 private:
  // Every rank's send[j] (per elements each) to rank j; recv[i] from rank i.
  template <typename T>
  void exchange(const T* send, T* recv, int64_t per, int tag);
  template <typename T>
  T* scratch(int i, int64_t n);
  template <typename T>
  void ring_forward(T* out, T* lse, const T* qkv, const AttentionArgs<T>& x);
  template <typename T>
  void ring_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, const AttentionArgs<T>& x);
  template <typename T>
  void all_to_all_forward(T* out, T* lse, const T* qkv, const AttentionArgs<T>& x);
  template <typename T>
  void all_to_all_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, const AttentionArgs<T>& x);
  // all_to_all: q, k, v of this rank's heads over the whole sequence
  // [B, seq_len (rank-major), W'] in scratch 0, and the rows' doc starts;
  // returned as the attention block over them (q = the gathered buffer).
  template <typename T>
  kernels::AttentionBlock<T> gather_heads(const T* qkv, const AttentionArgs<T>& x);

  Communicator* group_ = nullptr;
  ContextMode mode_ = ContextMode::ring;
  int64_t seq_len_ = 0;
  std::vector<std::vector<int32_t>> positions_{{}};  // per rank
  std::vector<int32_t> positions_full_;              // every rank's rows, rank-major
  std::vector<int32_t> doc_full_;
  std::vector<Tensor> scratch_;  // transfer and re-shard buffers (MemCategory::comm)
  ContextTraffic traffic_;
};

}  // namespace trident::parallel
