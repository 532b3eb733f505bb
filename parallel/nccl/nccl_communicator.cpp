// NCCL communicator (see nccl_communicator.hpp). Compiled only with the CUDA
// backend; parallel/nccl/nccl_none.cpp stands in otherwise.
#include "parallel/nccl/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "core/device_memory.hpp"
#include "core/error.hpp"

#define CUDA_CHECK(stmt) TRIDENT_LIBRARY_CHECK("CUDA", stmt, cudaSuccess, cudaGetErrorString)
#define NCCL_CHECK(stmt) TRIDENT_LIBRARY_CHECK("NCCL", stmt, ncclSuccess, ncclGetErrorString)

namespace trident::parallel {

bool nccl_built() { return true; }
std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL >= 2.9: major * 10000 + minor * 100 + patch
  return fmt::format("NCCL {}.{}.{} (built against {}.{}.{})", v / 10000, v / 100 % 100, v % 100, NCCL_MAJOR,
                     NCCL_MINOR, NCCL_PATCH);
}

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
    case DType::f8_e4m3:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

void check_device(const Tensor& t, int device) {
  TRIDENT_CHECK(t.device().type == DeviceType::cuda && t.device().index == device,
                "NCCL communicator on cuda:{} got a tensor on {}", device, t.device().str());
}

class NcclWork : public Work {
 public:
  NcclWork(cudaEvent_t e, std::vector<Tensor> keep, std::string what)
      : event_(e), keep_(std::move(keep)), what_(std::move(what)) {}
  ~NcclWork() override {
    cudaEventSynchronize(event_);
    cudaEventDestroy(event_);
  }
  // Polls, as the MPI backend's waits do: after parallel.timeout_s an error
  // names the operation and the group (a rank that never joined).
  void wait() override {
    const auto t0 = std::chrono::steady_clock::now();
    const double limit = collective_timeout();
    while (!is_completed()) {
      if (limit > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit)
        throw Error(
            fmt::format("{} did not complete within parallel.timeout_s = {} s (a rank of the group did not "
                        "join, or the GPU hangs)",
                        what_, limit));
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  bool is_completed() override {
    cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    CUDA_CHECK(e);
    return true;
  }

 private:
  cudaEvent_t event_;
  std::vector<Tensor> keep_;
  std::string what_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(const MpiCommunicator& group, int device)
    : impl_(std::make_unique<Impl>()),
      rank_(group.rank()),
      size_(group.size()),
      device_(device),
      name_(group.name() + ":nccl") {
  set_device(device);  // binds this process (and its compute stream) if not yet
  ncclUniqueId id;
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group.comm()));
  NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_->stream) cudaStreamSynchronize(impl_->stream), cudaStreamDestroy(impl_->stream);
  if (impl_->comm) ncclCommDestroy(impl_->comm);
}

// The communication stream waits for the work queued so far on the compute
// stream (the producer of the buffers); the host does not wait.
void NcclCommunicator::after_compute() {
  cudaStream_t compute = static_cast<cudaStream_t>(compute_stream());
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(e, compute));
  CUDA_CHECK(cudaStreamWaitEvent(impl_->stream, e, 0));
  CUDA_CHECK(cudaEventDestroy(e));  // released once the wait is satisfied
}

WorkPtr NcclCommunicator::record(std::vector<Tensor> keep, const char* op) {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(e, impl_->stream));
  const int64_t n = keep.empty() ? 0 : keep.front().numel();
  return std::make_unique<NcclWork>(
      e, std::move(keep),
      fmt::format("NCCL {} of {} elements on group '{}' (rank {} of {})", op, n, name_, rank_, size_));
}

WorkPtr NcclCommunicator::all_reduce(Tensor buf, const AllReduceOptions& opts) {
  check_device(buf, device_);
  after_compute();
  NCCL_CHECK(ncclAllReduce(buf.raw(), buf.raw(), size_t(buf.numel()), nccl_type(buf.dtype()), nccl_op(opts.op),
                           impl_->comm, impl_->stream));
  return record({buf}, "all_reduce");
}

WorkPtr NcclCommunicator::reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts) {
  check_device(out, device_);
  check_device(in, device_);
  after_compute();
  auto counts = split_counts(in.numel(), size_, opts.counts);
  const size_t esize = dtype_size(in.dtype());
  NCCL_CHECK(ncclGroupStart());
  int64_t off = 0;
  for (int q = 0; q < size_; ++q) {
    const char* src = static_cast<const char*>(in.raw()) + off * int64_t(esize);
    NCCL_CHECK(ncclReduce(src, out.raw(), size_t(counts[size_t(q)]), nccl_type(in.dtype()), nccl_op(opts.op), q,
                          impl_->comm, impl_->stream));
    off += counts[size_t(q)];
  }
  NCCL_CHECK(ncclGroupEnd());
  return record({out, in}, "reduce_scatter");
}

WorkPtr NcclCommunicator::all_gather(Tensor buf, const AllGatherOptions& opts) {
  check_device(buf, device_);
  after_compute();
  auto counts = split_counts(buf.numel(), size_, opts.counts);
  const size_t esize = dtype_size(buf.dtype());
  NCCL_CHECK(ncclGroupStart());
  int64_t off = 0;
  for (int q = 0; q < size_; ++q) {
    char* p = static_cast<char*>(buf.raw()) + off * int64_t(esize);
    NCCL_CHECK(ncclBroadcast(p, p, size_t(counts[size_t(q)]), nccl_type(buf.dtype()), q, impl_->comm, impl_->stream));
    off += counts[size_t(q)];
  }
  NCCL_CHECK(ncclGroupEnd());
  return record({buf}, "all_gather");
}

WorkPtr NcclCommunicator::broadcast(Tensor buf, const BroadcastOptions& opts) {
  check_device(buf, device_);
  after_compute();
  NCCL_CHECK(ncclBroadcast(buf.raw(), buf.raw(), size_t(buf.numel()), nccl_type(buf.dtype()), opts.root, impl_->comm,
                           impl_->stream));
  return record({buf}, "broadcast");
}

WorkPtr NcclCommunicator::all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) {
  check_device(out, device_);
  check_device(in, device_);
  check_all_to_all(out, in, opts, size_);
  after_compute();
  const size_t esize = dtype_size(in.dtype());
  const ncclDataType_t type = nccl_type(in.dtype());
  NCCL_CHECK(ncclGroupStart());
  int64_t so = 0, ro = 0;
  for (int q = 0; q < size_; ++q) {
    const int64_t s = opts.send_counts[size_t(q)], r = opts.recv_counts[size_t(q)];
    if (s > 0)
      NCCL_CHECK(ncclSend(static_cast<const char*>(in.raw()) + so * int64_t(esize), size_t(s), type, q, impl_->comm,
                          impl_->stream));
    if (r > 0)
      NCCL_CHECK(ncclRecv(static_cast<char*>(out.raw()) + ro * int64_t(esize), size_t(r), type, q, impl_->comm,
                          impl_->stream));
    so += s, ro += r;
  }
  NCCL_CHECK(ncclGroupEnd());
  return record({out, in}, "all_to_all");
}

WorkPtr NcclCommunicator::send(Tensor buf, const PointToPointOptions& opts) {
  check_device(buf, device_);
  after_compute();
  NCCL_CHECK(ncclSend(buf.raw(), size_t(buf.numel()), nccl_type(buf.dtype()), opts.peer, impl_->comm, impl_->stream));
  return record({buf}, "send");
}

WorkPtr NcclCommunicator::recv(Tensor buf, const PointToPointOptions& opts) {
  check_device(buf, device_);
  after_compute();
  NCCL_CHECK(ncclRecv(buf.raw(), size_t(buf.numel()), nccl_type(buf.dtype()), opts.peer, impl_->comm, impl_->stream));
  return record({buf}, "recv");
}

WorkPtr NcclCommunicator::barrier() {
  Tensor t = Tensor::zeros({1}, DType::i32, MemCategory::comm, Device{DeviceType::cuda, device_});
  return all_reduce(t);
}

}  // namespace trident::parallel
