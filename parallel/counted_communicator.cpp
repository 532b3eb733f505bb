// Byte counts of a group's operations (see counted_communicator.hpp).
#include "parallel/counted_communicator.hpp"

namespace trident::parallel {

double CountedCommunicator::ring(const Tensor& t) const {
  const int n = size();
  return n > 1 ? double(t.nbytes()) * double(n - 1) / double(n) : 0.0;
}

WorkPtr CountedCommunicator::all_reduce(Tensor buf, const AllReduceOptions& opts) {
  bytes_ += 2 * ring(buf);
  return inner_->all_reduce(buf, opts);
}

WorkPtr CountedCommunicator::reduce_scatter(Tensor out, Tensor in, const ReduceScatterOptions& opts) {
  bytes_ += ring(in);
  return inner_->reduce_scatter(out, in, opts);
}

WorkPtr CountedCommunicator::all_gather(Tensor buf, const AllGatherOptions& opts) {
  bytes_ += ring(buf);
  return inner_->all_gather(buf, opts);
}

WorkPtr CountedCommunicator::broadcast(Tensor buf, const BroadcastOptions& opts) {
  if (size() > 1 && rank() == opts.root) bytes_ += double(buf.nbytes());
  return inner_->broadcast(buf, opts);
}

WorkPtr CountedCommunicator::all_to_all(Tensor out, Tensor in, const AllToAllOptions& opts) {
  int64_t elements = 0;
  for (int q = 0; q < int(opts.send_counts.size()); ++q)
    if (q != rank()) elements += opts.send_counts[size_t(q)];
  bytes_ += double(elements) * double(dtype_size(in.dtype()));
  return inner_->all_to_all(out, in, opts);
}

WorkPtr CountedCommunicator::send(Tensor buf, const PointToPointOptions& opts) {
  bytes_ += double(buf.nbytes());
  return inner_->send(buf, opts);
}

}  // namespace trident::parallel
