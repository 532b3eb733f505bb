// NCCL backend of the Communicator (GPU buffers: Tensors on cuda:N).
// Created from an MPI group: the group's rank 0 makes the unique id, MPI
// broadcasts it, every rank calls ncclCommInitRank. Operations run on the
// communicator's own stream; a Work is a CUDA event recorded after the
// operation (wait = cudaEventSynchronize, is_completed = cudaEventQuery).
// Each operation first makes its stream wait (an event, not the host) for
// the work queued on the rank's compute stream, so it reads what the
// kernels before it wrote, and overlaps the kernels after it.
// Uneven reduce_scatter / all_gather counts are grouped ncclReduce /
// ncclBroadcast calls (NCCL's own collectives need equal counts); all_to_all
// is one group of ncclSend / ncclRecv per peer.
// One rank per GPU: NCCL refuses two ranks of a communicator on one device.
#pragma once
#include <memory>

#include "parallel/communicator.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

namespace trident::parallel {

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const MpiCommunicator& group, int device);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  WorkPtr all_reduce(Tensor buf, const AllReduceOptions& opts = {}) override;
  WorkPtr reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts = {}) override;
  WorkPtr all_gather(Tensor buf, const AllGatherOptions& opts = {}) override;
  WorkPtr broadcast(Tensor buf, const BroadcastOptions& opts = {}) override;
  WorkPtr all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) override;
  WorkPtr send(Tensor buf, const PointToPointOptions& opts) override;
  WorkPtr recv(Tensor buf, const PointToPointOptions& opts) override;
  WorkPtr barrier() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1, device_ = 0;
  std::string name_;
  WorkPtr record(std::vector<Tensor> keep, const char* op);
  void after_compute();
};

// True when this build has the NCCL backend.
bool nccl_built();
// "NCCL 2.x.y" (the library linked), or why there is none.
std::string nccl_version();

}  // namespace trident::parallel
