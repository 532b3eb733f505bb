// A slow network between simulated nodes, for benchmarks on one machine
// (bench/hsdp.sh): TRIDENT_SLOW_LINK=R:GBPS[:US] makes every group whose
// members span more than one run of R consecutive world ranks (a simulated
// node) send at GBPS gigabytes per second with US microseconds of latency
// per operation. Each operation on such a group completes no sooner than
// the link, taken in issue order by this rank, would have carried its
// bytes (those the group's counter adds: counted_communicator.hpp); the
// operation itself runs at the machine's speed underneath. Groups inside a
// simulated node are untouched. Not for training: the mesh logs a warning
// when it is set (mesh.hpp).
#pragma once
#include <chrono>
#include <optional>

#include "parallel/counted_communicator.hpp"

namespace trident::parallel {

struct SlowLink {
  int ranks_per_node = 1;
  double bytes_per_s = 1e9, latency_s = 0;
};
// TRIDENT_SLOW_LINK, or none; InputError naming the variable when malformed.
std::optional<SlowLink> slow_link_from_env();

class SlowLinkCommunicator final : public Communicator {
 public:
  SlowLinkCommunicator(CountedCommunicator* inner, const SlowLink& link) : inner_(inner), link_(link) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name() + "+slow"; }

  WorkPtr all_reduce(Tensor buf, const AllReduceOptions& opts = {}) override {
    const double b = inner_->bytes();
    return delay(inner_->all_reduce(buf, opts), b);
  }
  WorkPtr reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts = {}) override {
    const double b = inner_->bytes();
    return delay(inner_->reduce_scatter(out, in, opts), b);
  }
  WorkPtr all_gather(Tensor buf, const AllGatherOptions& opts = {}) override {
    const double b = inner_->bytes();
    return delay(inner_->all_gather(buf, opts), b);
  }
  WorkPtr broadcast(Tensor buf, const BroadcastOptions& opts = {}) override {
    const double b = inner_->bytes();
    return delay(inner_->broadcast(buf, opts), b);
  }
  WorkPtr all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) override {
    const double b = inner_->bytes();
    return delay(inner_->all_to_all(out, in, opts), b);
  }
  WorkPtr send(Tensor buf, const PointToPointOptions& opts) override {
    const double b = inner_->bytes();
    return delay(inner_->send(buf, opts), b);
  }
  WorkPtr recv(Tensor buf, const PointToPointOptions& opts) override { return inner_->recv(buf, opts); }
  WorkPtr barrier() override { return inner_->barrier(); }

 private:
  using Clock = std::chrono::steady_clock;
  // w, done no sooner than the link has carried the bytes counted since `before`
  WorkPtr delay(WorkPtr w, double before);
  CountedCommunicator* inner_;
  SlowLink link_;
  Clock::time_point free_at_{};  // when the simulated link has carried everything issued so far
};

}  // namespace trident::parallel
