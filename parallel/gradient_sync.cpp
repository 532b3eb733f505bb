// Bucketed gradient reduction, ZeRO 0-1 (see gradient_sync.hpp).
#include "parallel/gradient_sync.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace trident::parallel {

std::vector<Bucket> make_buckets(int64_t numel, int64_t elems) {
  std::vector<Bucket> out;
  for (int64_t end = numel; end > 0; end -= elems) out.push_back({std::max<int64_t>(0, end - elems), end});
  return out;
}

GradientSync::GradientSync(Communicator* dp, int64_t numel, DType dtype, int zero_stage, int64_t bucket_bytes,
                           Device device, Communicator* replicas)
    : dp_(dp && dp->size() > 1 ? dp : nullptr),
      replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
      zero_(zero_stage) {
  TRIDENT_CHECK(!replicas_ || zero_stage == 1, "HSDP replicas need ZeRO >= 1 (stage {})", zero_stage);
  TRIDENT_CHECK(zero_stage == 0 || zero_stage == 1, "ZeRO stage {} is not implemented", zero_stage);
  const int n = dp_size();
  counts_ = split_counts(numel, n, {});
  const int r = dp_ ? dp_->rank() : 0;
  for (int q = 0; q < r; ++q) shard_begin_ += counts_[size_t(q)];
  shard_end_ = shard_begin_ + counts_[size_t(r)];
  if (zero_ == 0) shard_begin_ = 0, shard_end_ = numel;
  buckets_ = make_buckets(numel, std::max<int64_t>(1, bucket_bytes / int64_t(dtype_size(dtype))));
  if (dp_ && zero_ == 1) recv_ = Tensor::empty({shard_end_ - shard_begin_}, dtype, MemCategory::comm, device);
}

void GradientSync::launch(const Tensor& grads, const Bucket& b) {
  Tensor chunk = grads.view(b.begin, {b.end - b.begin});
  if (zero_ == 0) {
    inflight_.push_back({dp_->all_reduce(chunk), {}, {}});
    return;
  }
  // rank q receives bucket ∩ shard_q
  std::vector<int64_t> counts(counts_.size());
  int64_t s = 0;
  for (size_t q = 0; q < counts_.size(); ++q) {
    int64_t lo = std::max(b.begin, s), hi = std::min(b.end, s + counts_[q]);
    counts[q] = std::max<int64_t>(0, hi - lo);
    s += counts_[q];
  }
  int64_t lo = std::max(b.begin, shard_begin_);
  Tensor out = recv_.view(std::min(lo - shard_begin_, recv_.numel()), {counts[size_t(dp_->rank())]});
  inflight_.push_back({dp_->reduce_scatter(out, chunk, {ReduceOp::sum, counts}), out, {}});
}

// HSDP: the replica all-reduce of each bucket whose reduce-scatter is done,
// in bucket order (every replica issues them in the same order); block:
// wait for each reduce-scatter instead of stopping at the first unfinished.
void GradientSync::launch_replicas(bool block) {
  if (!replicas_) return;
  for (; replicated_ < inflight_.size(); ++replicated_) {
    InFlight& f = inflight_[replicated_];
    if (block)
      f.work->wait();
    else if (!f.work->is_completed())
      return;
    f.replica = replicas_->all_reduce(f.piece);
  }
}

void GradientSync::grads_ready(const Tensor& grads, int64_t frontier) {
  if (!dp_ && !replicas_) return;
  if (dp_)
    while (next_ < buckets_.size() && buckets_[next_].begin >= frontier) launch(grads, buckets_[next_++]);
  for (auto& f : inflight_) f.work->is_completed();  // drive progress
  launch_replicas(false);
}

void GradientSync::finish(const Tensor& grads) {
  if (!dp_ && !replicas_) return;
  if (!dp_) {  // a one-rank shard group: the whole buffer is the shard, all-reduced over the replicas
    auto t0 = std::chrono::steady_clock::now();
    replicas_->all_reduce(grads)->wait();
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  while (next_ < buckets_.size()) launch(grads, buckets_[next_++]);
  auto t0 = std::chrono::steady_clock::now();
  launch_replicas(true);
  for (auto& f : inflight_) {
    f.work->wait();
    if (f.replica) f.replica->wait();
  }
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  inflight_.clear();
  next_ = 0, replicated_ = 0;
  if (zero_ == 1 && recv_.numel() > 0)
    copy_bytes(static_cast<char*>(grads.raw()) + shard_begin_ * int64_t(dtype_size(grads.dtype())), recv_.raw(),
               recv_.nbytes());
}

void GradientSync::gather_params(const Tensor& params) {
  if (!dp_ || zero_ == 0) return;
  auto t0 = std::chrono::steady_clock::now();
  dp_->all_gather(params, {counts_})->wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double GradientSync::take_wait_seconds() {
  double s = wait_s_;
  wait_s_ = 0;
  return s;
}

}  // namespace trident::parallel
