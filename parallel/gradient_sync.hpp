// Bucketed gradient reduction over the data group, ZeRO stages 0 and 1, on
// flat gradient buffers (one of the two DataParallel implementations,
// parallel/data_parallel.hpp; the other is ZeroStorage).
//
// Buckets are ranges of the flat gradient buffer of at most bucket_bytes,
// cut from the end of the buffer backwards, because backward produces the
// gradients of the last layers first. The model reports a frontier F after
// each layer (gradients [F, numel) are final for the step); every bucket that
// lies inside [F, numel) is launched at once, asynchronously, in a fixed
// order, so communication overlaps the rest of backward. finish() launches
// what is left and waits. With gradient accumulation, only the last
// micro-batch's backward reports frontiers (one reduction per step).
//
// stage 0: each bucket is all-reduced (sum); every rank holds the full sum.
// stage 1: each bucket is reduce-scattered: rank r receives the part of the
//          bucket inside its shard [shard_begin, shard_end) (contiguous,
//          equal split of the buffer). After finish() only that shard of the
//          gradient buffer holds the reduced sum; the optimizer steps the
//          shard and gather_params() all-gathers the parameters.
// HSDP (replicas: the ranks holding the same shard in the other shard
// groups): each bucket's reduced piece is all-reduced over them as soon as
// its reduce-scatter completes (stage 1; stage 0 has no shards to replicate).
// A one-rank group (or none) makes every call a no-op.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/communicator.hpp"

namespace trident::parallel {

struct Bucket {
  int64_t begin, end;  // elements of the flat buffer
};

// Buckets of at most `elems` elements, from the end of [0, numel) backwards.
std::vector<Bucket> make_buckets(int64_t numel, int64_t elems);

class GradientSync {
 public:
  // device: where the gradients live (its receive buffer goes there too).
  GradientSync(Communicator* dp, int64_t numel, DType dtype, int zero_stage, int64_t bucket_bytes, Device device = {},
               Communicator* replicas = nullptr);

  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  const std::vector<int64_t>& shard_counts() const { return counts_; }
  int dp_size() const { return dp_ ? dp_->size() : 1; }

  // Gradients [frontier, numel) of `grads` are final: launch the buckets inside.
  void grads_ready(const Tensor& grads, int64_t frontier);
  // Launch the remaining buckets and wait for all of them.
  void finish(const Tensor& grads);
  // stage >= 1: every rank's shard of params -> the full buffer on every rank.
  void gather_params(const Tensor& params);
  // Seconds spent blocked in wait() since the last call (the exposed comm time).
  double take_wait_seconds();

 private:
  Communicator *dp_, *replicas_;
  int zero_;
  std::vector<Bucket> buckets_;
  size_t next_ = 0;  // next bucket to launch
  struct InFlight {
    WorkPtr work;     // the data group's reduction
    Tensor piece;     // HSDP: this rank's reduced piece, all-reduced over the replicas once `work` completes
    WorkPtr replica;  // that all-reduce
  };
  std::vector<InFlight> inflight_;
  size_t replicated_ = 0;  // HSDP: the buckets whose replica all-reduce was launched (in bucket order)
  void launch_replicas(bool block);
  std::vector<int64_t> counts_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  Tensor recv_;  // stage 1: this rank's reduced part of every bucket (shard-sized, comm memory)
  double wait_s_ = 0;
  void launch(const Tensor& grads, const Bucket& b);
};

}  // namespace trident::parallel
