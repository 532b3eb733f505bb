// This rank's process groups and device (see mesh.hpp).
#include "parallel/mesh.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "parallel/counted_communicator.hpp"
#include "parallel/device_communicator.hpp"
#include "parallel/flight_recorder.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#include "parallel/slow_link.hpp"

namespace trident::parallel {

MeshSpec mesh_spec(const Recipe& rc, bool single_process) {
  const auto& p = rc.parallel;
  const std::string flight = !rc.log.flight_recorder.empty() ? rc.log.flight_recorder
                             : !rc.checkpoint.dir.empty()    ? rc.checkpoint.dir + "/flight_recorder"
                                                             : "";
  MeshSpec s{int(p.data),       int(p.tensor),     int(p.pipeline), int(p.context), p.order,        int(p.expert),
             p.whole_experts(), rc.model.kv_heads, rc.device,       p.timeout_s,    single_process, flight};
  s.data_shard = int(p.data_shard_size());
  return s;
}

Topology topology_of(const ParallelConfig& p) {
  return Topology(int(p.data), int(p.pipeline), int(p.tensor), p.order, int(p.context), int(p.expert),
                  p.whole_experts(), int(p.data_shard_size()));
}

Mesh::Mesh(const MeshSpec& spec, const std::string& source)
    : topology_(spec.data, spec.pipeline, spec.tensor, spec.order, spec.context, spec.expert, spec.whole_experts,
                spec.data_shard),
      groups_(kAllGroupKinds.size(), nullptr) {
  int mpi_on = 0;
  MPI_Initialized(&mpi_on);
  if (mpi_on && !spec.single_process) world_ = MpiCommunicator::world();
  set_collective_timeout(spec.timeout_s);  // a hang is an error naming the operation, group and peer
  const int world_size = world_ ? world_->size() : 1;
  if (world_) std::tie(node_rank_, node_size_) = local_rank_and_size(*world_);
  if (topology_.world() != world_size)
    fail_input("{}: parallel mesh data({}) x tensor({}) x pipeline({}){} != world size {}", source, spec.data,
               spec.tensor, spec.pipeline, spec.context > 1 ? fmt::format(" x context({})", spec.context) : "",
               world_size);
  if (spec.device == DeviceType::cuda) {
    const int gpus = device_count();
    if (gpus == 0)
      fail_input("{}: key 'device': cuda, but {}", source,
                 kernels::cuda_built() ? "no CUDA device is visible to this process (" + kernels::cuda_backend() + ")"
                                       : std::string("this build has no CUDA backend"));
    device_ = Device{DeviceType::cuda, node_rank_ % gpus};
    set_device(device_.index);
    nccl_ = world_ && nccl_built() && one_gpu_per_rank(*world_, gpus);
  }
  if (!world_) return;
  std::string flight_dir = spec.flight_dir;
  if (flight_dir.empty()) {  // one directory for every rank of this job: rank 0's PID
    Tensor pid = Tensor::zeros({1}, DType::i32, MemCategory::other);
    if (world_->rank() == 0) pid.data<int32_t>()[0] = int32_t(::getpid());
    world_->broadcast(pid, {.root = 0})->wait();
    const char* tmp = std::getenv("TMPDIR");
    flight_dir = fmt::format("{}/trident-flight-{}", tmp && *tmp ? tmp : "/tmp", pid.data<int32_t>()[0]);
  }
  flight::configure(flight_dir, world_->rank());
  mpi_groups_ = std::make_unique<ProcessGroups>(topology_, *world_);
  const std::optional<SlowLink> slow = slow_link_from_env();  // benchmarks only (slow_link.hpp)
  if (slow && world_->rank() == 0)
    log::warn("TRIDENT_SLOW_LINK: groups spanning runs of {} ranks send at {:.3g} GB/s (a simulated network)",
              slow->ranks_per_node, slow->bytes_per_s / 1e9);
  for (GroupKind k : kAllGroupKinds) {
    counted_.push_back(std::make_unique<CountedCommunicator>(on_device(mpi_groups_->get(k))));
    groups_[size_t(k)] = counted_.back().get();
    if (!slow) continue;
    const std::vector<int> members = topology_.members(k, world_->rank());
    const int node = members.front() / slow->ranks_per_node;
    if (std::all_of(members.begin(), members.end(), [&](int r) { return r / slow->ranks_per_node == node; })) continue;
    slowed_.push_back(std::make_unique<SlowLinkCommunicator>(counted_.back().get(), *slow));
    groups_[size_t(k)] = slowed_.back().get();
  }
  if (spec.kv_heads < spec.tensor) {  // KV head r * kv_heads / tensor is held by tensor / kv_heads ranks
    auto& tg = mpi_groups_->get(GroupKind::tensor);
    kv_mpi_ = tg.split(int(tg.rank() * spec.kv_heads / spec.tensor), tg.rank(), "kv");
    kv_ = on_device(*kv_mpi_);
  }
}

Mesh::~Mesh() = default;

// device cuda: device buffers over NCCL (one GPU per rank) or host staging.
Communicator* Mesh::on_device(MpiCommunicator& g) {
  if (device_.type != DeviceType::cuda) return &g;
  std::unique_ptr<Communicator> nccl;
  if (nccl_) nccl = std::make_unique<NcclCommunicator>(g, device_.index);
  device_groups_.push_back(std::make_unique<DeviceCommunicator>(g, std::move(nccl)));
  return device_groups_.back().get();
}

double Mesh::traffic(GroupKind kind) const {
  const Communicator* g = groups_[size_t(kind)];
  return g ? counted_[size_t(kind)]->bytes() : 0.0;
}

int Mesh::world_size() const { return world_ ? world_->size() : 1; }
int Mesh::world_rank() const { return world_ ? world_->rank() : 0; }
Communicator* Mesh::world() { return world_.get(); }
Coords Mesh::coords() const { return topology_.coords(world_rank()); }

std::vector<Coords> Mesh::model_parallel_members() const {
  std::vector<Coords> out;
  for (int r : topology_.members(GroupKind::model_parallel, world_rank())) out.push_back(topology_.coords(r));
  return out;
}

std::string Mesh::describe_device() const {
  if (device_.type != DeviceType::cuda) return "cpu";
  return fmt::format("device cuda:{} (local rank % {} GPUs) | {} | device buffers {}", device_.index, device_count(),
                     kernels::cuda_backend(),
                     !world_ ? "(one rank: no communication)"
                     : nccl_ ? "over NCCL for every group (" + nccl_version() + ")"
                             : "staged through host memory over MPI: ranks share a GPU (NCCL needs one GPU per rank)");
}

}  // namespace trident::parallel
