// ZeRO stages 2 and 3 as a SegmentStorage (core/segment_storage.hpp): the
// model asks for one segment (embeddings, a layer, the head) at a time.
//
// Shards: rank r owns the contiguous range [shard_begin, shard_end) of the
// flat buffer (equal split), for optimizer state (8P/d), gradients (4P/d)
// and, in stage 3, parameters (4P/d).
//
// Gradients (stages 2, 3): with one micro-batch per step, acquire_grads(s)
// hands out a window the size of segment s; grads_done(s) reduce-scatters it
// asynchronously straight into the owners' gradient shards, and the window
// is freed when that completes (at most two windows in flight, plus the
// embeddings' window, which a tied head keeps for the whole backward). With
// gradient accumulation (several micro-batches), gradients accumulate in a
// full-size buffer for the step and are reduce-scattered once, during the
// last micro-batch's backward: that costs a transient 4P bytes; the
// alternative (parallel.zero_accumulate shard), reducing every micro-batch
// through the windows and adding each reduction into the shard, costs a
// reduction per micro-batch and no full-size buffer.
//
// HSDP (replicas: the ranks holding the same shard in the other shard
// groups): when a segment's reduction into the shard is the step's last
// (the last micro-batch's, or the step's only one), that piece of the shard
// is all-reduced over the replicas as soon as the reduction completes;
// finish_step() waits for them. Gathers stay inside the shard group.
//
// Parameters: stage 2 keeps a full replica (gathered after each step);
// stage 3 keeps only the shard: acquire_params(s, next) all-gathers segment
// s into a window (or waits for the prefetch already issued for it) and
// issues the gather of `next` early; release_params(s) frees the window.
// All ranks run the same model code, so every rank issues the same
// collectives in the same order. A segment acquired several times (a
// pipeline's head, held from each micro-batch's forward to its backward) is
// released when its last user releases it. Window buffers are pooled and reused. With a
// single rank there is nothing to gather or reduce: segments are served
// straight from the shard (which is then the whole buffer).
//
// Cast gathers (a GatherCast, parallel/gather_cast.hpp: train.fp8's
// param_gather): the parts of a segment it names travel as one byte a value;
// each rank packs its share (prepare, then encode), the bytes are
// all-gathered and every rank decodes them into the window when it is
// acquired, before the model reads it.
#pragma once
#include <map>
#include <vector>

#include "core/segment_storage.hpp"
#include "parallel/communicator.hpp"
#include "parallel/gather_cast.hpp"

namespace trident::parallel {

class ZeroStorage : public SegmentStorage<float> {
 public:
  // device: where the shards, windows and accumulation buffer live.
  // cast: stage 3's gathers cast (null: float32); segment s is the cast's
  // segment cast_first + s.
  ZeroStorage(Communicator* dp, std::vector<Segment> segments, int64_t numel, int stage, Device device = {},
              Communicator* replicas = nullptr, GatherCast* cast = nullptr, int cast_first = 0);
  ~ZeroStorage() override;

  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  const std::vector<int64_t>& shard_counts() const { return counts_; }
  // This rank's parameter shard: the full replica + shard_begin (stage 2) or
  // the shard itself (stage 3). Fill it with the initial values.
  float* param_shard();
  float* grad_shard() { return grad_shard_.data<float>(); }
  // stage 2: the full parameter replica.
  Tensor& full_params() { return params_; }

  // Before each backward: whether gradients accumulate over several
  // micro-batches this step in the full-size buffer, and whether this is the
  // step's last one. add_to_shard (not accumulating: parallel.zero_accumulate
  // shard, a micro-batch after the first): the windows start at zero (the
  // model adds into them) and their reductions are added into the shard.
  void begin_backward(bool accumulating, bool last_micro, bool add_to_shard = false);
  // After the last backward of a step: wait for every reduction; whole: the
  // replicas' all-reduce of the whole shard now (HSDP, when no reduction was
  // the step's last: a pipeline's shard accumulation), not piece by piece.
  void finish_step(bool whole = false);
  // stage 2: all-gather the updated shards into the replica.
  void gather_params();
  // Pipelines: every backward of the step accumulates (begin_backward(true,
  // false)); after the last one, the full local gradients (accumulated_grads,
  // the whole local buffer) are reduce-scattered into the shards at once.
  float* accumulated_grads();
  void reduce_accumulated();
  double take_wait_seconds();

  float* acquire_params(int s, int next) override;
  void release_params(int s) override;
  float* acquire_grads(int s) override;
  void grads_done(int s) override;

 private:
  struct Window {
    Tensor base;    // pooled buffer (returned to the pool when the window retires)
    Tensor buf;     // the segment's view of it
    WorkPtr work;   // gather (params) or reduce-scatter (grads) in flight
    Tensor packed;  // a cast gather's bytes, until decoded into buf
    int users = 0;  // params: acquisitions not yet released (pipelines hold a head for several micro-batches)
    Tensor sum;     // grads added to the shard: the reduction's output (pooled), added at [add_at, add_at + add_n)
    int64_t add_at = 0, add_n = 0;  // the shard's piece this reduction is for
    bool last = false;              // HSDP: the piece's last reduction of the step (then all-reduced over replicas)
  };
  // Window buffers are pooled per category: allocating fresh memory for every
  // window would page-fault it in again on every use.
  Tensor take(int64_t n, MemCategory cat, DType dtype = DType::f32);
  void give_back(Tensor base, MemCategory cat);
  std::vector<Tensor> pool_[3];  // params, grads, cast gathers' bytes
  // Cast gathers: [a, b) of segment s (segment-relative) in pieces f(p, e,
  // range index or -1), each inside one cast range or outside all; the bytes
  // that interval takes on the wire; the ranks' intervals of segment s.
  template <typename F>
  void walk(int s, int64_t a, int64_t b, F f) const;
  int64_t wire_bytes(int s, int64_t a, int64_t b) const;
  std::vector<std::pair<int64_t, int64_t>> pieces(int s) const;
  bool casts(int s) const { return cast_ && !cast_->ranges(cast_first_ + s).empty(); }
  void start_cast_gather(int s, Window& w);
  void decode(int s, Window& w);
  std::vector<int64_t> counts_for(const Segment& seg) const;
  void start_gather(int s);
  void reduce(int s, Window w, bool last);
  void wait(Window& w);
  void retire_grad_windows(size_t keep);

  Communicator *dp_, *replicas_;
  GatherCast* cast_;
  int cast_first_;
  std::vector<WorkPtr> replicating_;  // HSDP: the replica all-reduces in flight
  std::vector<Segment> segments_;
  int stage_;
  Device device_;
  std::vector<int64_t> counts_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  Tensor params_;      // stage 2: full replica; stage 3: shard
  Tensor grad_shard_;  // 4P/d
  Tensor accum_;       // full gradients while accumulating over micro-batches
  bool accumulating_ = false, last_micro_ = true, add_to_shard_ = false;
  std::map<int, Window> param_windows_;
  std::map<int, Window> grad_windows_;  // acquired, not yet done
  std::vector<Window> reducing_;        // done, reduction in flight (oldest first)
  double wait_s_ = 0;
};

}  // namespace trident::parallel
