// This rank's place in the device mesh: the MPI world (when a launcher
// started several processes), the process groups of parallel/topology.hpp as
// communicators, and the device the rank computes on.
//
// device cuda binds the rank to GPU local_rank % GPUs; every group then
// carries device buffers over NCCL (one GPU per rank) or host staging over
// MPI (ranks share a GPU), host buffers over MPI (device_communicator.hpp).
// One process (no launcher, or single_process) has no groups: every
// accessor returns nullptr, which every collective helper treats as a
// one-rank group.
// Replicated KV heads (kv_heads < tensor) get one more group: the tensor
// ranks holding the same KV head, tensor / kv_heads of them.
// Every group counts the bytes this rank sends through it (traffic()).
// TRIDENT_SLOW_LINK (benchmarks: slow_link.hpp) slows the groups that span
// simulated nodes.
// What is not here: which group reduces which gradient (data_parallel.hpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/recipe/recipe.hpp"
#include "parallel/communicator.hpp"
#include "parallel/topology.hpp"

namespace trident::parallel {

class MpiCommunicator;
class ProcessGroups;
class CountedCommunicator;

struct MeshSpec {
  int data = 1, tensor = 1, pipeline = 1, context = 1;
  std::vector<MeshAxis> order{MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline};
  int expert = 1;              // the expert group, carved out of data x context (topology.hpp)
  bool whole_experts = false;  // expert_tensor 1 < tensor: carved out of data x context x tensor
  int64_t kv_heads = 1;        // the model's; fewer than tensor: a KV group
  DeviceType device = DeviceType::cpu;
  double timeout_s = 600;       // every collective and transfer (parallel.timeout_s)
  bool single_process = false;  // ignore MPI even when it is initialised (reference runs in tests)
  std::string flight_dir;       // the flight recorder's ("": /tmp/trident-flight-<rank 0's PID>)
  int data_shard = 0;           // HSDP: the ZeRO shard group's size (0: data x context)
};
MeshSpec mesh_spec(const Recipe& rc, bool single_process = false);
// The recipe's topology (every axis, experts and the HSDP shard).
Topology topology_of(const ParallelConfig& p);

class Mesh {
 public:
  // InputError (naming `source`) when the mesh does not match the world
  // size or device cuda has no GPU.
  Mesh(const MeshSpec& spec, const std::string& source);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int world_size() const;
  int world_rank() const;
  bool leader() const { return world_rank() == 0; }
  Communicator* world();
  // This rank's index among the ranks of its node (0 without MPI).
  int node_rank() const { return node_rank_; }
  int node_size() const { return node_size_; }  // ranks on this node
  Communicator* group(GroupKind kind) { return groups_[size_t(kind)]; }
  Communicator* data() { return group(GroupKind::data); }
  Communicator* tensor() { return group(GroupKind::tensor); }
  Communicator* pipeline() { return group(GroupKind::pipeline); }
  Communicator* model_parallel() { return group(GroupKind::model_parallel); }
  Communicator* embedding() { return group(GroupKind::embedding); }
  Communicator* context() { return group(GroupKind::context); }
  // data x context: the replicas of this rank's model shard (gradient
  // reduction, ZeRO shards); the data group when context is 1.
  Communicator* data_context() { return group(GroupKind::data_context); }
  // The ranks that exchange an MoE layer's tokens, and the replicas of this
  // rank's experts (topology.hpp).
  Communicator* expert() { return group(GroupKind::expert); }
  Communicator* expert_data() { return group(GroupKind::expert_data); }
  // HSDP (topology.hpp): the ranks sharing this rank's ZeRO shards, and the
  // replicas of its shard; without HSDP data_context and none (alone). The
  // expert part's the same within expert_data.
  Communicator* data_shard() { return group(GroupKind::data_shard); }
  Communicator* data_replicate() { return group(GroupKind::data_replicate); }
  Communicator* expert_shard() { return group(GroupKind::expert_shard); }
  Communicator* expert_replicate() { return group(GroupKind::expert_replicate); }
  Communicator* kv() { return kv_; }
  // The bytes this rank has sent through its group of this kind so far
  // (counted_communicator.hpp; 0 without the group).
  double traffic(GroupKind kind) const;
  Coords coords() const;
  const Topology& topology() const { return topology_; }
  // The model-parallel group's members' coordinates, in its rank order.
  std::vector<Coords> model_parallel_members() const;

  Device device() const { return device_; }
  bool nccl() const { return nccl_; }
  std::string describe_device() const;  // the start-up line of device cuda

 private:
  Topology topology_;
  std::unique_ptr<MpiCommunicator> world_;
  std::unique_ptr<ProcessGroups> mpi_groups_;
  std::unique_ptr<MpiCommunicator> kv_mpi_;
  std::vector<std::unique_ptr<Communicator>> device_groups_;
  std::vector<std::unique_ptr<CountedCommunicator>> counted_;  // each group (by kind), counting its bytes
  std::vector<std::unique_ptr<Communicator>> slowed_;          // TRIDENT_SLOW_LINK: the groups across simulated nodes
  std::vector<Communicator*> groups_;
  Communicator* world_group_ = nullptr;
  Communicator* kv_ = nullptr;
  Device device_;
  int node_rank_ = 0, node_size_ = 1;
  bool nccl_ = false;
  Communicator* on_device(MpiCommunicator& g);
};

}  // namespace trident::parallel
