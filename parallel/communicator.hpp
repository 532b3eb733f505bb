// Communicator: the one interface every parallel dimension talks through.
// Backends: parallel/mpi (CPU buffers) and parallel/nccl (GPU buffers).
//
// Contract (read before calling):
// - All ranks of a group call its collectives in the same order, with the
//   same sizes, dtypes and options. A mismatch is undefined behaviour (a hang
//   or garbage), as in MPI and NCCL.
// - Every operation is asynchronous and returns a Work. wait() blocks until
//   this rank's part is done: the output may be read and the input reused.
//   is_completed() polls without blocking (and drives progress). Destroying
//   an unfinished Work waits for it. Buffers must stay alive until then (the
//   Work holds a reference to each Tensor's storage).
// - Buffers are flat, contiguous Tensors; sizes need not divide the group
//   size: reduce_scatter and all_gather take per-rank element counts.
// - Sums of bf16 go through an f32 accumulation per pair (user-defined op).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace trident::parallel {

enum class ReduceOp { sum, max };

struct AllReduceOptions {
  ReduceOp op = ReduceOp::sum;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::sum;
  std::vector<int64_t> counts;  // elements per rank, sum = input numel; empty = equal split
};
struct AllGatherOptions {
  std::vector<int64_t> counts;  // elements per rank, sum = buffer numel; empty = equal split
};
struct BroadcastOptions {
  int root = 0;
};
struct AllToAllOptions {
  std::vector<int64_t> send_counts;  // elements for each rank, sum = in numel
  std::vector<int64_t> recv_counts;  // elements from each rank, sum = out numel
};
struct PointToPointOptions {
  int peer = 0;  // rank within the group
  int tag = 0;
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
  // After the caller gave up waiting (a timeout): what the flight recorder
  // says of it (parallel/flight_recorder.hpp), or "".
  virtual std::string diagnose_timeout() { return ""; }
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // In place: buf = op over ranks of buf.
  virtual WorkPtr all_reduce(Tensor buf, const AllReduceOptions& opts = {}) = 0;
  // in = the chunks of every rank back to back (counts[r] elements each);
  // out (counts[rank] elements) = op over ranks of this rank's chunk.
  virtual WorkPtr reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts = {}) = 0;
  // In place: buf holds every rank's chunk back to back; this rank's chunk is
  // the input, the others are filled in.
  virtual WorkPtr all_gather(Tensor buf, const AllGatherOptions& opts = {}) = 0;
  virtual WorkPtr broadcast(Tensor buf, const BroadcastOptions& opts = {}) = 0;
  // in = the chunks for every rank back to back (send_counts[r] elements for
  // rank r); out = the chunks from every rank back to back in source-rank
  // order (recv_counts[r] from rank r), never in arrival order. Rank q's
  // send_counts[r] must equal rank r's recv_counts[q] (exchange the counts
  // first: an all_to_all of one element per rank).
  virtual WorkPtr all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) = 0;
  virtual WorkPtr send(Tensor buf, const PointToPointOptions& opts) = 0;
  virtual WorkPtr recv(Tensor buf, const PointToPointOptions& opts) = 0;
  virtual WorkPtr barrier() = 0;
};

// Checks an all_to_all's counts against its buffers and the group size.
void check_all_to_all(const Tensor& out, const Tensor& in, const AllToAllOptions& opts, int size);

// counts, or the equal split of n over `size` ranks (the first n % size get one more).
std::vector<int64_t> split_counts(int64_t n, int size, const std::vector<int64_t>& counts);

}  // namespace trident::parallel
