// Data parallelism, whatever the ZeRO stage: one interface, built by one
// factory from the stage (STYLE 16). The trainer calls it in this order each
// step, and never asks which stage it has:
//
//   begin_backward(micro)   before each backward of the step; returns the
//                           frontier callback the model calls as layers finish
//                           (empty when nothing is launched during backward)
//   finish_gradients()      after the schedule: every gradient of this rank's
//                           shard [shard_begin, shard_end) is the global sum
//   -- the optimizer steps param_shard() with grad_shard() --
//   publish_params()        the updated shard reaches every replica
//
// Implementations (data_parallel.cpp):
//   ZeRO 0-1  the model owns full parameter and gradient buffers; buckets
//             of the gradients are all-reduced (0) or reduce-scattered into
//             the shard (1) as backward produces them (gradient_sync.hpp);
//             stage 1 all-gathers the parameters after the step.
//   ZeRO 2-3  the shards live here and the model is served segment by
//             segment (storage(); zero_storage.hpp).
//
// Gradients that other groups share (the tied embedding's two copies on the
// first and last pipeline stage; norms and biases replicated over the tensor
// group under sequence parallelism; replicated KV heads) are summed over
// those groups here too: the tied copies on the full local gradients before
// the data reduction, the replicated slices on the reduced shard after it
// (the sums commute).
// All ranks of the data group call these in the same order.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/segment_storage.hpp"
#include "parallel/communicator.hpp"
#include "parallel/gather_cast.hpp"

namespace trident::parallel {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) of the local flat buffer

// Which gradient ranges are shared with which group (model/params.hpp says
// which parameters they are).
struct SharedGradients {
  Ranges tied;               // summed over `embedding` before the data reduction
  Ranges tensor_replicated;  // summed over `tensor` after it
  Ranges kv_replicated;      // summed over `kv` after it
  Communicator *embedding = nullptr, *tensor = nullptr, *kv = nullptr;
};

struct DataParallelSpec {
  int zero = 0;
  int64_t bucket_bytes = 25 << 20;  // ZeRO 0-1
  Device device;
  // Gradients are final only after the whole schedule (pipelines, split
  // backward): nothing is launched during backward, all is reduced at the end.
  bool pipelined = false;
  int64_t micro_batches = 1;  // per step (gradient accumulation)
  Communicator* data = nullptr;
  SharedGradients shared;
  // ZeRO 2-3, several micro-batches, not pipelined: each micro-batch's gradients reduce-scattered and added
  // into the shard (parallel.zero_accumulate shard), no full-size accumulation buffer
  bool shard_accumulation = false;
  // HSDP: the replicas of this rank's shard (`data` is then the shard group):
  // each reduced piece of the shard is all-reduced over them, once a step.
  Communicator* replicas = nullptr;
  // ZeRO 3: the parameter gathers cast (parallel/gather_cast.hpp; null:
  // float32); this part's segment s is the cast's segment cast_first + s.
  GatherCast* cast = nullptr;
  int cast_first = 0;
};

// ZeRO 0-1: the model keeps full parameter and gradient buffers.
inline bool model_owns_buffers(int zero) { return zero < 2; }

class DataParallel {
 public:
  virtual ~DataParallel() = default;

  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  int64_t shard_size() const { return shard_end_ - shard_begin_; }
  const std::vector<int64_t>& shard_counts() const { return counts_; }
  // ZeRO >= 1: ranks hold disjoint reduced shards (a norm sums over the group).
  virtual bool sharded() const = 0;
  virtual float* param_shard() = 0;
  virtual float* grad_shard() = 0;
  // Where the model finds its segments (ZeRO 2-3), else nullptr.
  virtual SegmentStorage<float>* storage() { return nullptr; }
  // Fills the parameters this rank keeps (fill(dst, begin, end): elements
  // [begin, end) of the flat buffer); ZeRO 0-1 keep the model's own.
  virtual void initialize(const std::function<void(float*, int64_t, int64_t)>& fill) {}

  virtual std::function<void(int64_t)> begin_backward(int64_t micro) = 0;
  void finish_gradients();
  virtual void publish_params() = 0;
  // Seconds blocked waiting for the data-group reduction since the last call
  // (the communication backward did not hide).
  virtual double take_wait_seconds() = 0;

 protected:
  DataParallel(const DataParallelSpec& spec, int64_t begin, int64_t end, std::vector<int64_t> counts);
  virtual float* local_grads() = 0;  // the full local gradients, before the data reduction
  virtual void reduce() = 0;         // the data-group reduction of the step
  DataParallelSpec spec_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  std::vector<int64_t> counts_;
  Ranges tensor_in_shard_, kv_in_shard_;  // the replicated ranges, relative to grad_shard()
};

// The per-rank memory of ZeRO's formula for P parameters (fp32) over d ranks,
// as the start-up log shows it: "params 4P = ..., grads 4P/d = ..., ...".
// Model-state bytes per rank under ZeRO stage `zero`, for `params` elements
// of this rank's model shard replicated over `data` ranks: parameters of
// `param_bytes` each (sharded from stage 3), fp32 gradients (from stage 2),
// AdamW's two fp32 moments plus fp32 master weights when parameters are
// 2-byte (from stage 1). The one formula: the start-up log and the planner
// use it; what the stages add beyond it (ZeRO 1's reduced-shard buffer,
// ZeRO 2/3 windows and gathers) is the planner's (docs/planner.md).
struct ZeroStateBytes {
  double params = 0, grads = 0, optimizer = 0;
};
ZeroStateBytes zero_state_bytes(int zero, double params, int64_t data, double param_bytes = 4);
std::string describe_zero_memory(int zero, int64_t params, int64_t data);

// params / grads: the model's full buffers (ZeRO 0-1; unused for 2-3).
std::unique_ptr<DataParallel> make_data_parallel(const DataParallelSpec& spec, const std::vector<Segment>& segments,
                                                 int64_t numel, Tensor* params, Tensor* grads);

// One part of the flat buffer with its own replicas: with experts split over
// an expert group (model/params.hpp, expert_begin), the dense parameters
// [0, expert_begin) are replicated over data x context and the routed
// experts [expert_begin, numel) over the expert-data group only (the expert
// group's ranks hold other experts). Each part is one DataParallel, in the
// part's own coordinates; shard_begin()/shard_end() are flat.
struct DataParallelPart {
  int64_t base = 0, numel = 0;            // [base, base + numel) of the flat buffer
  std::unique_ptr<DataParallel> dp;       // over the part (its element 0 is flat element base)
  Communicator* shard_group = nullptr;    // the ranks sharing the part's ZeRO shards (dp's group)
  Communicator* replica_group = nullptr;  // HSDP: the ranks holding the same shard, or none
  Communicator* peers = nullptr;   // the ranks holding the other, disjoint shares of it (the expert group), or none
  Tensor params_view, grads_view;  // ZeRO 0-1: the part of the model's buffers
  int64_t shard_begin() const { return base + dp->shard_begin(); }
  int64_t shard_end() const { return base + dp->shard_end(); }
};

// The parts of one model's flat buffer, driven as one DataParallel is
// (begin_backward, finish_gradients, publish_params: each part's, in part
// order); the optimizer, the gradient norm and checkpoints go part by part.
// One part (no split experts): the DataParallel of old, unchanged.
class DataParallelParts {
 public:
  // dense: the spec of [0, expert_begin); experts: of [expert_begin, numel)
  // (its `data` the expert-data group), with `peers` the expert group.
  DataParallelParts(const DataParallelSpec& dense, const DataParallelSpec& experts, Communicator* peers,
                    int64_t expert_begin, const std::vector<Segment>& segments, int64_t numel, Tensor* params,
                    Tensor* grads);
  ~DataParallelParts();
  size_t size() const { return parts_.size(); }
  DataParallelPart& operator[](size_t i) { return parts_[i]; }
  const DataParallelPart& operator[](size_t i) const { return parts_[i]; }
  std::vector<DataParallelPart>::iterator begin() { return parts_.begin(); }
  std::vector<DataParallelPart>::iterator end() { return parts_.end(); }

  // What DataParallel says, for the whole buffer.
  SegmentStorage<float>* storage();
  void initialize(const std::function<void(float*, int64_t, int64_t)>& fill);
  std::function<void(int64_t)> begin_backward(int64_t micro);  // routes each frontier to its part
  void finish_gradients();
  void publish_params();
  double take_wait_seconds();

 private:
  class Router;  // ZeRO 2-3: the model's segments, each served by its part's storage
  std::vector<DataParallelPart> parts_;
  std::unique_ptr<Router> router_;
};

}  // namespace trident::parallel
