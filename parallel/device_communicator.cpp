// DeviceCommunicator (see device_communicator.hpp).
#include "parallel/device_communicator.hpp"

#include <functional>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace trident::parallel {

namespace {

bool on_device(const Tensor& t) { return t.device().type == DeviceType::cuda; }

// A host copy of a device tensor (the compute stream drained first).
Tensor stage_out(const Tensor& t) {
  Tensor h = Tensor::empty({t.numel()}, t.dtype(), MemCategory::comm);
  copy_bytes(h.raw(), t.raw(), t.nbytes());  // waits: dst is host
  return h;
}

void stage_in(const Tensor& dev, const Tensor& host) {
  copy_bytes(dev.raw(), host.raw(), dev.nbytes());
  device_synchronize();  // the host buffer may go as soon as this returns
}

// An MPI operation on host copies; `after` (copying results back) runs once,
// when the operation is known complete.
class StagedWork : public Work {
 public:
  StagedWork(WorkPtr inner, std::function<void()> after) : inner_(std::move(inner)), after_(std::move(after)) {}
  ~StagedWork() override {
    try {
      wait();
    } catch (...) {}
  }
  void wait() override {
    inner_->wait();
    finish();
  }
  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    finish();
    return true;
  }
  std::string diagnose_timeout() override { return inner_->diagnose_timeout(); }

 private:
  void finish() {
    if (after_) {
      auto f = std::move(after_);
      after_ = nullptr;
      f();
    }
  }
  WorkPtr inner_;
  std::function<void()> after_;
};

}  // namespace

DeviceCommunicator::DeviceCommunicator(MpiCommunicator& mpi, std::unique_ptr<Communicator> nccl)
    : mpi_(mpi), nccl_(std::move(nccl)) {}

WorkPtr DeviceCommunicator::all_reduce(Tensor buf, const AllReduceOptions& opts) {
  if (!on_device(buf)) return mpi_.all_reduce(buf, opts);
  if (nccl_) return nccl_->all_reduce(buf, opts);
  Tensor h = stage_out(buf);
  return std::make_unique<StagedWork>(mpi_.all_reduce(h, opts), [buf, h] { stage_in(buf, h); });
}

WorkPtr DeviceCommunicator::reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts) {
  if (!on_device(in)) return mpi_.reduce_scatter(out, in, opts);
  if (nccl_) return nccl_->reduce_scatter(out, in, opts);
  Tensor hin = stage_out(in);
  Tensor hout = Tensor::empty({out.numel()}, out.dtype(), MemCategory::comm);
  return std::make_unique<StagedWork>(mpi_.reduce_scatter(hout, hin, opts), [out, hout, hin] { stage_in(out, hout); });
}

WorkPtr DeviceCommunicator::all_gather(Tensor buf, const AllGatherOptions& opts) {
  if (!on_device(buf)) return mpi_.all_gather(buf, opts);
  if (nccl_) return nccl_->all_gather(buf, opts);
  Tensor h = stage_out(buf);
  return std::make_unique<StagedWork>(mpi_.all_gather(h, opts), [buf, h] { stage_in(buf, h); });
}

WorkPtr DeviceCommunicator::broadcast(Tensor buf, const BroadcastOptions& opts) {
  if (!on_device(buf)) return mpi_.broadcast(buf, opts);
  if (nccl_) return nccl_->broadcast(buf, opts);
  Tensor h = stage_out(buf);
  return std::make_unique<StagedWork>(mpi_.broadcast(h, opts), [buf, h] { stage_in(buf, h); });
}

WorkPtr DeviceCommunicator::all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) {
  if (!on_device(in)) return mpi_.all_to_all(out, in, opts);
  if (nccl_) return nccl_->all_to_all(out, in, opts);
  Tensor hin = stage_out(in);
  Tensor hout = Tensor::empty({out.numel()}, out.dtype(), MemCategory::comm);
  return std::make_unique<StagedWork>(mpi_.all_to_all(hout, hin, opts), [out, hout, hin] { stage_in(out, hout); });
}

WorkPtr DeviceCommunicator::send(Tensor buf, const PointToPointOptions& opts) {
  if (!on_device(buf)) return mpi_.send(buf, opts);
  if (nccl_) return nccl_->send(buf, opts);
  Tensor h = stage_out(buf);
  return std::make_unique<StagedWork>(mpi_.send(h, opts), [h] {});
}

WorkPtr DeviceCommunicator::recv(Tensor buf, const PointToPointOptions& opts) {
  if (!on_device(buf)) return mpi_.recv(buf, opts);
  if (nccl_) return nccl_->recv(buf, opts);
  Tensor h = Tensor::empty({buf.numel()}, buf.dtype(), MemCategory::comm);
  return std::make_unique<StagedWork>(mpi_.recv(h, opts), [buf, h] { stage_in(buf, h); });
}

std::pair<int, int> local_rank_and_size(const MpiCommunicator& world) {
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &local));
  int r = 0, n = 1;
  MPI_Comm_rank(local, &r);
  MPI_Comm_size(local, &n);
  MPI_Comm_free(&local);
  return {r, n};
}

bool one_gpu_per_rank(const MpiCommunicator& world, int device_count) {
  const int local = local_rank_and_size(world).second;
  int ok = local <= device_count ? 1 : 0, all = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, world.comm()));
  return all == 1;
}

}  // namespace trident::parallel
