// The communicator of one group for a rank that trains on a GPU (device:
// cuda). Host tensors (loss sums, flags, checkpoint bookkeeping) go to the
// group's MPI communicator; device tensors go to NCCL when the job has one
// GPU per rank on every node, and otherwise (several ranks sharing a GPU:
// tests, debugging) through host staging over MPI: the compute stream is
// drained, the buffer copied to host memory, the MPI operation run, the
// result copied back. The trainer logs which path it took.
// The contract of parallel/communicator.hpp holds for both paths: all ranks
// of a group call its collectives in the same order.
#pragma once
#include <memory>

#include "parallel/communicator.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

namespace trident::parallel {

class DeviceCommunicator : public Communicator {
 public:
  // nccl: the group's NCCL communicator, or nullptr for host staging.
  DeviceCommunicator(MpiCommunicator& mpi, std::unique_ptr<Communicator> nccl);

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  std::string name() const override { return mpi_.name() + (nccl_ ? "+nccl" : "+staged"); }
  bool uses_nccl() const { return nccl_ != nullptr; }

  WorkPtr all_reduce(Tensor buf, const AllReduceOptions& opts = {}) override;
  WorkPtr reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts = {}) override;
  WorkPtr all_gather(Tensor buf, const AllGatherOptions& opts = {}) override;
  WorkPtr broadcast(Tensor buf, const BroadcastOptions& opts = {}) override;
  WorkPtr all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) override;
  WorkPtr send(Tensor buf, const PointToPointOptions& opts) override;
  WorkPtr recv(Tensor buf, const PointToPointOptions& opts) override;
  WorkPtr barrier() override { return mpi_.barrier(); }

 private:
  MpiCommunicator& mpi_;
  std::unique_ptr<Communicator> nccl_;
};

// The node-local rank and rank count of this process (MPI shared-memory split).
std::pair<int, int> local_rank_and_size(const MpiCommunicator& world);

// Collective over world: true when every node has no more ranks than GPUs
// (each rank its own GPU), the condition for NCCL.
bool one_gpu_per_rank(const MpiCommunicator& world, int device_count);

}  // namespace trident::parallel
