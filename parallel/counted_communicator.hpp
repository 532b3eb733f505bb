// A group's communicator that counts the bytes this rank sends through it:
// every operation is forwarded unchanged, its volume added first. The
// volume is the standard algorithms' (what the planner costs, docs/planner.md):
// all_reduce 2 (n-1)/n B, reduce_scatter and all_gather (n-1)/n B (B the
// whole buffer), broadcast B from the root, all_to_all and send the bytes
// bound for other ranks; a one-rank group sends nothing. The mesh wraps each
// of its groups (mesh.hpp) so that the metrics can say, per step, what each
// group kind moved (docs/metrics.md): under HSDP what crossed between shard
// groups (data_replicate) against what stayed inside them (data_shard).
#pragma once
#include "parallel/communicator.hpp"

namespace trident::parallel {

class CountedCommunicator final : public Communicator {
 public:
  explicit CountedCommunicator(Communicator* inner) : inner_(inner) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  // Bytes sent so far (a double: the ring shares are fractions of a buffer).
  double bytes() const { return bytes_; }

  WorkPtr all_reduce(Tensor buf, const AllReduceOptions& opts = {}) override;
  WorkPtr reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts = {}) override;
  WorkPtr all_gather(Tensor buf, const AllGatherOptions& opts = {}) override;
  WorkPtr broadcast(Tensor buf, const BroadcastOptions& opts = {}) override;
  WorkPtr all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) override;
  WorkPtr send(Tensor buf, const PointToPointOptions& opts) override;
  WorkPtr recv(Tensor buf, const PointToPointOptions& opts) override { return inner_->recv(buf, opts); }
  WorkPtr barrier() override { return inner_->barrier(); }

 private:
  double ring(const Tensor& t) const;  // (n-1)/n of t's bytes
  Communicator* inner_;
  double bytes_ = 0;
};

}  // namespace trident::parallel
