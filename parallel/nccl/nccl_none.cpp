// Stand-in for the NCCL backend in builds without CUDA: a clear refusal.
#include "core/error.hpp"
#include "parallel/nccl/nccl_communicator.hpp"

namespace trident::parallel {

bool nccl_built() { return false; }
std::string nccl_version() { return "not built (no CUDA toolkit with NCCL at configure time)"; }

struct NcclCommunicator::Impl {};

NcclCommunicator::NcclCommunicator(const MpiCommunicator&, int) {
  throw Error("this build has no NCCL backend (configure with TRIDENT_CUDA=ON where the CUDA toolkit and NCCL exist)");
}
NcclCommunicator::~NcclCommunicator() = default;
WorkPtr NcclCommunicator::record(std::vector<Tensor>, const char*) { return nullptr; }
void NcclCommunicator::after_compute() {}
WorkPtr NcclCommunicator::all_reduce(Tensor, const AllReduceOptions&) { return nullptr; }
WorkPtr NcclCommunicator::reduce_scatter(Tensor, Tensor, const ReduceScatterOptions&) { return nullptr; }
WorkPtr NcclCommunicator::all_gather(Tensor, const AllGatherOptions&) { return nullptr; }
WorkPtr NcclCommunicator::broadcast(Tensor, const BroadcastOptions&) { return nullptr; }
WorkPtr NcclCommunicator::all_to_all(Tensor, Tensor, const AllToAllOptions&) { return nullptr; }
WorkPtr NcclCommunicator::send(Tensor, const PointToPointOptions&) { return nullptr; }
WorkPtr NcclCommunicator::recv(Tensor, const PointToPointOptions&) { return nullptr; }
WorkPtr NcclCommunicator::barrier() { return nullptr; }

}  // namespace trident::parallel
