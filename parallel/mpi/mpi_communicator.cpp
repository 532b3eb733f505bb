// MPI communicator (see mpi_communicator.hpp).
#include "parallel/mpi/mpi_communicator.hpp"
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "parallel/flight_recorder.hpp"

namespace trident::parallel {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, size_t(len));
}

std::vector<int64_t> split_counts(int64_t n, int size, const std::vector<int64_t>& counts) {
  if (!counts.empty()) {
    TRIDENT_CHECK(int(counts.size()) == size, "{} counts for a group of {}", counts.size(), size);
    TRIDENT_CHECK(std::accumulate(counts.begin(), counts.end(), int64_t(0)) == n, "counts do not sum to {}", n);
    return counts;
  }
  std::vector<int64_t> out(size_t(size), n / size);
  for (int r = 0; r < n % size; ++r) out[size_t(r)] += 1;
  return out;
}

void check_all_to_all(const Tensor& out, const Tensor& in, const AllToAllOptions& opts, int size) {
  TRIDENT_CHECK(out.dtype() == in.dtype(), "all_to_all dtypes differ");
  TRIDENT_CHECK(int(opts.send_counts.size()) == size && int(opts.recv_counts.size()) == size,
                "all_to_all: {} send and {} receive counts for a group of {}", opts.send_counts.size(),
                opts.recv_counts.size(), size);
  const int64_t s = std::accumulate(opts.send_counts.begin(), opts.send_counts.end(), int64_t(0)),
                r = std::accumulate(opts.recv_counts.begin(), opts.recv_counts.end(), int64_t(0));
  TRIDENT_CHECK(s == in.numel() && r == out.numel(),
                "all_to_all: counts send {} and receive {} elements, the buffers hold {} and {}", s, r, in.numel(),
                out.numel());
}

namespace {

MPI_Op g_bf16_sum = MPI_OP_NULL;

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT;
    case DType::bf16:
      return MPI_UINT16_T;
    case DType::f16:
      return MPI_UINT16_T;
    case DType::u8:
    case DType::f8_e4m3:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::bf16) {
    TRIDENT_CHECK(op == ReduceOp::sum, "bf16 reductions support sum only");
    return g_bf16_sum;
  }
  TRIDENT_CHECK(t != DType::f16, "f16 reductions are not supported by the MPI backend");
  return op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
}

double g_timeout_s = 600;

class MpiWork : public Work {
 public:
  MpiWork(std::vector<Tensor> keep, const char* op, const MpiCommunicator* comm, int64_t numel, int peer = -1,
          int tag = -1)
      : keep_(std::move(keep)), op_(op), comm_(comm), numel_(numel), peer_(peer), tag_(tag) {
    int64_t bytes = 0;
    for (const Tensor& t : keep_) bytes = std::max<int64_t>(bytes, int64_t(t.nbytes()));
    record_ =
        flight::started(op, comm->label(), comm->next_seq(), bytes, peer >= 0 ? comm->world_ranks()[size_t(peer)] : -1);
  }
  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  // Polls until done; past the timeout the request is abandoned (the job is
  // about to end) and an Error says which operation, group and peer.
  void wait() override {
    if (request_ == MPI_REQUEST_NULL) return;
    if (g_timeout_s <= 0) {
      MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
      flight::finished(record_);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t spin = 0;; ++spin) {
      int done = 0;
      MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
      if (done) return flight::finished(record_);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > g_timeout_s) {
        request_ = MPI_REQUEST_NULL;                        // never completed: not waited for again
        static std::vector<std::vector<Tensor>> abandoned;  // MPI may still write into the buffers
        abandoned.push_back(std::move(keep_));
        throw Error(timeout_message(waited));
      }
      if (waited > 1e-3)
        std::this_thread::sleep_for(std::chrono::microseconds(20));  // long waits yield the core
      else
        std::this_thread::yield();
    }
  }
  bool is_completed() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    if (done) flight::finished(record_);
    return done != 0;
  }
  // The timeout, and what the flight recorder makes of it (which member is
  // behind); the members that time out too write their records meanwhile.
  std::string diagnose_timeout() override {
    return flight::diagnose_timeout(record_, comm_->world_ranks(), std::clamp(g_timeout_s / 2, 2.0, 30.0));
  }
  std::string timeout_message(double waited) {
    const std::string diagnosis = diagnose_timeout();
    return diagnosis.empty() ? describe(waited) : describe(waited) + ". " + diagnosis;
  }
  std::string describe(double waited) const {
    std::string peer;
    if (peer_ >= 0) {
      MPI_Group g, w;
      MPI_Comm_group(comm_->comm(), &g);
      MPI_Comm_group(MPI_COMM_WORLD, &w);
      int world_peer = -1;
      MPI_Group_translate_ranks(g, 1, &peer_, w, &world_peer);
      MPI_Group_free(&g);
      MPI_Group_free(&w);
      peer = fmt::format(" {} peer {} (world rank {}), tag {},", std::string(op_) == "send" ? "to" : "from", peer_,
                         world_peer, tag_);
    }
    return fmt::format(
        "timed out after {:.0f} s in {} of {} elements{} on group '{}' (this rank {} of {}): a peer did "
        "not take part; it may have failed, hung, or be running other code (parallel.timeout_s)",
        waited, op_, numel_, peer, comm_->name(), comm_->rank(), comm_->size());
  }
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;  // must outlive the request (v-collectives)

 private:
  std::vector<Tensor> keep_;
  const char* op_;
  const MpiCommunicator* comm_;
  int64_t numel_;
  int peer_, tag_;
  int64_t record_ = 0;  // the flight recorder's
};

int as_int(int64_t n) {
  TRIDENT_CHECK(n <= INT32_MAX, "MPI message of {} elements exceeds INT32_MAX; split it", n);
  return int(n);
}

}  // namespace

void set_collective_timeout(double seconds) { g_timeout_s = seconds; }
double collective_timeout() { return g_timeout_s; }

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string v(buf, size_t(len));
  if (v.find('\n') != std::string::npos) v.resize(v.find('\n'));
  while (!v.empty() && (v.back() == ',' || v.back() == ' ' || v.back() == '\0')) v.pop_back();
  return v;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  // A process started without a launcher is an MPI singleton: it talks to no
  // one, so PMIx's security plugin need not be munge (which, installed but
  // not running, makes MPI_Init retry for seconds). Launchers set their own.
  if (!std::getenv("PMIX_RANK") && !std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("SLURM_PROCID"))
    setenv("PMIX_MCA_psec", "native", /*overwrite=*/0);
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  MPI_Op_create(&bf16_sum, 1, &g_bf16_sum);
  log::set_rank(rank_, world_);
}

void MpiRuntime::abort_job(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // not reached
}

MpiRuntime::~MpiRuntime() {
  MPI_Op_free(&g_bf16_sum);
  MPI_Finalize();
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, std::string label)
    : comm_(comm), name_(std::move(name)), label_(label.empty() ? name_ : std::move(label)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Group g, w;
  MPI_Comm_group(comm_, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  std::vector<int> mine(size_t(size_), 0);
  std::iota(mine.begin(), mine.end(), 0);
  world_ranks_.assign(size_t(size_), -1);
  MPI_Group_translate_ranks(g, size_, mine.data(), w, world_ranks_.data());
  MPI_Group_free(&g);
  MPI_Group_free(&w);
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key, std::string name) const {
  MPI_Comm c;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &c));
  const std::string label = fmt::format("{}({})", name, color);
  return std::make_unique<MpiCommunicator>(c, std::move(name), label);
}

WorkPtr MpiCommunicator::all_reduce(Tensor buf, const AllReduceOptions& opts) {
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{buf}, "all_reduce", this, buf.numel());
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.raw(), as_int(buf.numel()), mpi_type(buf.dtype()),
                           mpi_op(opts.op, buf.dtype()), comm_, &w->request_));
  return w;
}

WorkPtr MpiCommunicator::reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts) {
  TRIDENT_CHECK(out.dtype() == in.dtype(), "reduce_scatter dtypes differ");
  auto counts = split_counts(in.numel(), size_, opts.counts);
  TRIDENT_CHECK(out.numel() == counts[size_t(rank_)], "reduce_scatter output has {} elements, rank {} gets {}",
                out.numel(), rank_, counts[size_t(rank_)]);
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{out, in}, "reduce_scatter", this, in.numel());
  for (int64_t c : counts) w->counts_.push_back(as_int(c));
  MPI_CHECK(MPI_Ireduce_scatter(in.raw(), out.raw(), w->counts_.data(), mpi_type(in.dtype()),
                                mpi_op(opts.op, in.dtype()), comm_, &w->request_));
  return w;
}

WorkPtr MpiCommunicator::all_gather(Tensor buf, const AllGatherOptions& opts) {
  auto counts = split_counts(buf.numel(), size_, opts.counts);
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{buf}, "all_gather", this, buf.numel());
  int64_t off = 0;
  for (int64_t c : counts) w->counts_.push_back(as_int(c)), w->displs_.push_back(as_int(off)), off += c;
  MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf.raw(), w->counts_.data(), w->displs_.data(),
                            mpi_type(buf.dtype()), comm_, &w->request_));
  return w;
}

WorkPtr MpiCommunicator::broadcast(Tensor buf, const BroadcastOptions& opts) {
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{buf}, "broadcast", this, buf.numel());
  MPI_CHECK(MPI_Ibcast(buf.raw(), as_int(buf.numel()), mpi_type(buf.dtype()), opts.root, comm_, &w->request_));
  return w;
}

WorkPtr MpiCommunicator::all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) {
  check_all_to_all(out, in, opts, size_);
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{out, in}, "all_to_all", this, in.numel());
  int64_t so = 0, ro = 0;
  for (int q = 0; q < size_; ++q) {
    w->counts_.push_back(as_int(opts.send_counts[size_t(q)])), w->displs_.push_back(as_int(so));
    w->recv_counts_.push_back(as_int(opts.recv_counts[size_t(q)])), w->recv_displs_.push_back(as_int(ro));
    so += opts.send_counts[size_t(q)], ro += opts.recv_counts[size_t(q)];
  }
  MPI_CHECK(MPI_Ialltoallv(in.raw(), w->counts_.data(), w->displs_.data(), mpi_type(in.dtype()), out.raw(),
                           w->recv_counts_.data(), w->recv_displs_.data(), mpi_type(out.dtype()), comm_, &w->request_));
  return w;
}

WorkPtr MpiCommunicator::send(Tensor buf, const PointToPointOptions& opts) {
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{buf}, "send", this, buf.numel(), opts.peer, opts.tag);
  MPI_CHECK(MPI_Isend(buf.raw(), as_int(buf.numel()), mpi_type(buf.dtype()), opts.peer, opts.tag, comm_, &w->request_));
  return w;
}

WorkPtr MpiCommunicator::recv(Tensor buf, const PointToPointOptions& opts) {
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{buf}, "recv", this, buf.numel(), opts.peer, opts.tag);
  MPI_CHECK(MPI_Irecv(buf.raw(), as_int(buf.numel()), mpi_type(buf.dtype()), opts.peer, opts.tag, comm_, &w->request_));
  return w;
}

WorkPtr MpiCommunicator::barrier() {
  auto w = std::make_unique<MpiWork>(std::vector<Tensor>{}, "barrier", this, 0);
  MPI_CHECK(MPI_Ibarrier(comm_, &w->request_));
  return w;
}

ProcessGroups::ProcessGroups(const Topology& topo, const MpiCommunicator& world) : topo_(topo) {
  TRIDENT_CHECK(topo.world() == world.size(), "topology of {} ranks on a world of {}", topo.world(), world.size());
  for (GroupKind kind : kAllGroupKinds) {
    auto all = topo.groups(kind);
    auto mine = topo.members(kind, world.rank());
    int color = int(std::find(all.begin(), all.end(), mine) - all.begin());
    groups_[size_t(kind)] = world.split(color, world.rank(), enum_name(kind));
  }
}

}  // namespace trident::parallel
