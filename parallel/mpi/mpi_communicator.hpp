// MPI backend of the Communicator (CPU buffers), and the process groups of a
// Topology built with MPI_Comm_split (each kind split once per rank).
// Non-blocking MPI operations (MPI_Iallreduce, MPI_Ireduce_scatter, ...);
// bf16 sums use a user-defined op that adds in f32 and rounds once.
// MPI is initialised by MpiRuntime (thread level FUNNELED: only the main
// thread calls MPI; OpenMP threads compute).
#pragma once
#include <mpi.h>
#include <atomic>

#include <array>
#include <memory>
#include <string>

#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"

namespace trident::parallel {

std::string mpi_error_string(int code);
#define MPI_CHECK(stmt) TRIDENT_LIBRARY_CHECK("MPI", stmt, MPI_SUCCESS, ::trident::parallel::mpi_error_string)

// Every wait() on an MPI operation gives up after this many seconds (<= 0:
// never) with an Error naming the operation, group and peer; the recipe's
// parallel.timeout_s. Default 600.
void set_collective_timeout(double seconds);
double collective_timeout();
// "Open MPI v4.1.4, ..." (first line of MPI_Get_library_version).
std::string mpi_library_version();

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  int rank() const { return rank_; }
  int world() const { return world_; }
  // Ends every process of the job with this exit code (a failure on one rank
  // that would leave the others waiting in their next collective).
  [[noreturn]] static void abort_job(int code);

 private:
  int rank_ = 0, world_ = 1;
};

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of comm (freed on destruction unless it is MPI_COMM_WORLD).
  // label: the group's kind and index in the flight recorder ("data(1)").
  MpiCommunicator(MPI_Comm comm, std::string name, std::string label = "");
  ~MpiCommunicator() override;
  static std::unique_ptr<MpiCommunicator> world();
  // Collective over this communicator: ranks with the same color form a group.
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }
  const std::string& label() const { return label_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }  // of the members, by group rank
  int64_t next_seq() const { return ++seq_; }

  WorkPtr all_reduce(Tensor buf, const AllReduceOptions& opts = {}) override;
  WorkPtr reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts = {}) override;
  WorkPtr all_gather(Tensor buf, const AllGatherOptions& opts = {}) override;
  WorkPtr broadcast(Tensor buf, const BroadcastOptions& opts = {}) override;
  WorkPtr all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) override;
  WorkPtr send(Tensor buf, const PointToPointOptions& opts) override;
  WorkPtr recv(Tensor buf, const PointToPointOptions& opts) override;
  WorkPtr barrier() override;

 private:
  MPI_Comm comm_;
  std::string name_, label_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  mutable std::atomic<int64_t> seq_{0};  // operations issued on this group
};

// This rank's group of every kind of a Topology.
class ProcessGroups {
 public:
  ProcessGroups(const Topology& topo, const MpiCommunicator& world);
  MpiCommunicator& get(GroupKind kind) { return *groups_[size_t(kind)]; }
  const Topology& topology() const { return topo_; }

 private:
  Topology topo_;
  std::array<std::unique_ptr<MpiCommunicator>, kAllGroupKinds.size()> groups_;
};

}  // namespace trident::parallel
