// ZeRO stages 2 and 3 (see zero_storage.hpp).
#include "parallel/zero_storage.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "kernels/buffer.hpp"
#include "kernels/residual.hpp"

namespace trident::parallel {

ZeroStorage::ZeroStorage(Communicator* dp, std::vector<Segment> segments, int64_t numel, int stage, Device device,
                         Communicator* replicas, GatherCast* cast, int cast_first)
    : dp_(dp && dp->size() > 1 ? dp : nullptr),
      replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
      cast_(stage == 3 ? cast : nullptr),
      cast_first_(cast_first),
      segments_(std::move(segments)),
      stage_(stage),
      device_(device) {
  TRIDENT_CHECK(stage == 2 || stage == 3, "ZeroStorage serves stages 2 and 3, not {}", stage);
  const int n = dp_ ? dp_->size() : 1, r = dp_ ? dp_->rank() : 0;
  counts_ = split_counts(numel, n, {});
  for (int q = 0; q < r; ++q) shard_begin_ += counts_[size_t(q)];
  shard_end_ = shard_begin_ + counts_[size_t(r)];
  params_ = Tensor::empty({stage == 2 ? numel : shard_end_ - shard_begin_}, DType::f32, MemCategory::params, device_);
  grad_shard_ = Tensor::zeros({shard_end_ - shard_begin_}, DType::f32, MemCategory::grads, device_);
}

Tensor ZeroStorage::take(int64_t n, MemCategory cat, DType dtype) {
  auto& pool = pool_[dtype == DType::u8 ? 2 : cat == MemCategory::params ? 0 : 1];
  size_t best = pool.size();  // the smallest pooled buffer that fits
  for (size_t i = 0; i < pool.size(); ++i)
    if (pool[i].numel() >= n && (best == pool.size() || pool[i].numel() < pool[best].numel())) best = i;
  if (best == pool.size()) return Tensor::empty({n}, dtype, cat, device_);
  Tensor t = pool[best];
  pool.erase(pool.begin() + long(best));
  return t;
}

void ZeroStorage::give_back(Tensor base, MemCategory cat) {
  if (base.defined())
    pool_[base.dtype() == DType::u8 ? 2 : cat == MemCategory::params ? 0 : 1].push_back(std::move(base));
}

ZeroStorage::~ZeroStorage() {
  for (auto& w : reducing_)
    if (w.work) w.work->wait();
  for (auto& w : replicating_) w->wait();
  for (auto& [s, w] : param_windows_)
    if (w.work) w.work->wait();
}

float* ZeroStorage::param_shard() { return stage_ == 2 ? params_.data<float>() + shard_begin_ : params_.data<float>(); }

std::vector<int64_t> ZeroStorage::counts_for(const Segment& seg) const {
  std::vector<int64_t> out(counts_.size());
  int64_t s = 0;
  for (size_t q = 0; q < counts_.size(); ++q) {
    out[q] = std::max<int64_t>(0, std::min(seg.end, s + counts_[q]) - std::max(seg.begin, s));
    s += counts_[q];
  }
  return out;
}

void ZeroStorage::wait(Window& w) {
  if (!w.work) return;
  auto t0 = std::chrono::steady_clock::now();
  w.work->wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  w.work.reset();
}

double ZeroStorage::take_wait_seconds() {
  double s = wait_s_;
  wait_s_ = 0;
  return s;
}

// ---- parameters ----

void ZeroStorage::start_gather(int s) {
  const Segment& seg = segments_[size_t(s)];
  Window w;
  w.base = take(seg.size(), MemCategory::params);
  w.buf = w.base.view(0, {seg.size()});
  if (casts(s)) {
    start_cast_gather(s, w);
    param_windows_[s] = std::move(w);
    return;
  }
  const int64_t lo = std::max(seg.begin, shard_begin_), hi = std::min(seg.end, shard_end_);
  if (hi > lo)
    copy_bytes(w.buf.data<float>() + (lo - seg.begin), params_.data<float>() + (lo - shard_begin_),
               size_t(hi - lo) * sizeof(float));
  w.work = dp_->all_gather(w.buf, {counts_for(seg)});
  param_windows_[s] = std::move(w);
}

float* ZeroStorage::acquire_params(int s, int next) {
  // stage 2 keeps a replica; one rank's shard is the whole buffer
  if (stage_ == 2 || !dp_)
    return params_.data<float>() + (segments_[size_t(s)].begin - (stage_ == 2 ? 0 : shard_begin_));
  if (!param_windows_.count(s)) start_gather(s);
  if (next >= 0 && !param_windows_.count(next)) start_gather(next);  // prefetch
  Window& w = param_windows_.at(s);
  w.users += 1;
  wait(w);
  if (w.packed.defined()) decode(s, w);
  return w.buf.data<float>();
}

void ZeroStorage::release_params(int s) {
  if (stage_ == 2 || !dp_) return;
  auto it = param_windows_.find(s);
  TRIDENT_CHECK(it != param_windows_.end() && it->second.users > 0, "release of segment {} that was not acquired", s);
  if (--it->second.users > 0) return;
  wait(it->second);
  give_back(std::move(it->second.base), MemCategory::params);
  give_back(std::move(it->second.packed), MemCategory::params);
  param_windows_.erase(it);
  if (casts(s)) cast_->released(cast_first_ + s);
}

// ---- cast gathers ----

template <typename F>
void ZeroStorage::walk(int s, int64_t a, int64_t b, F f) const {
  const std::vector<GatherCast::Range>& R = cast_->ranges(cast_first_ + s);
  size_t r = size_t(std::partition_point(R.begin(), R.end(), [&](const GatherCast::Range& x) { return x.end <= a; }) -
                    R.begin());
  for (int64_t p = a; p < b;) {
    if (r < R.size() && R[r].begin <= p) {
      const int64_t e = std::min(b, R[r].end);
      f(p, e, int(r));
      p = e, r += e == R[r].end;
    } else {
      const int64_t e = r < R.size() ? std::min(b, R[r].begin) : b;
      f(p, e, -1);
      p = e;
    }
  }
}

int64_t ZeroStorage::wire_bytes(int s, int64_t a, int64_t b) const {
  int64_t n = 0;
  walk(s, a, b, [&](int64_t p, int64_t e, int r) { n += (e - p) * (r >= 0 ? 1 : int64_t(sizeof(float))); });
  return n;
}

std::vector<std::pair<int64_t, int64_t>> ZeroStorage::pieces(int s) const {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (int64_t c : counts_for(segments_[size_t(s)])) out.push_back({at, at + c}), at += c;
  return out;
}

void ZeroStorage::start_cast_gather(int s, Window& w) {
  const Segment& seg = segments_[size_t(s)];
  const auto ranks = pieces(s);
  std::vector<int64_t> bytes;
  for (const auto& [a, b] : ranks) bytes.push_back(wire_bytes(s, a, b));
  int64_t total = 0, mine = 0;
  for (size_t q = 0; q < bytes.size(); ++q) mine += q < size_t(dp_->rank()) ? bytes[q] : 0, total += bytes[q];
  w.packed = take(std::max<int64_t>(total, 1), MemCategory::params, DType::u8).view(0, {total});
  const auto [lo, hi] = ranks[size_t(dp_->rank())];
  const float* x = params_.data<float>() + (seg.begin + lo - shard_begin_);  // this rank's values of the segment
  cast_->prepare(cast_first_ + s, x, lo, hi, dp_);
  uint8_t* out = w.packed.data<uint8_t>() + mine;
  walk(s, lo, hi, [&](int64_t p, int64_t e, int r) {
    if (r >= 0)
      cast_->encode(cast_first_ + s, size_t(r), x + (p - lo), e - p, out);
    else
      copy_bytes(out, x + (p - lo), size_t(e - p) * sizeof(float));
    out += (e - p) * (r >= 0 ? 1 : int64_t(sizeof(float)));
  });
  w.work = dp_->all_gather(w.packed, {bytes});
}

void ZeroStorage::decode(int s, Window& w) {
  const uint8_t* in = w.packed.data<uint8_t>();
  float* y = w.buf.data<float>();
  for (const auto& [a, b] : pieces(s))
    walk(s, a, b, [&](int64_t p, int64_t e, int r) {
      if (r >= 0)
        cast_->decode(cast_first_ + s, size_t(r), in, e - p, y + p);
      else
        copy_bytes(y + p, in, size_t(e - p) * sizeof(float));
      in += (e - p) * (r >= 0 ? 1 : int64_t(sizeof(float)));
    });
  give_back(std::move(w.packed), MemCategory::params);
  w.packed = Tensor();
  cast_->gathered(cast_first_ + s, y);
}

void ZeroStorage::gather_params() {
  if (stage_ != 2 || !dp_) return;
  auto t0 = std::chrono::steady_clock::now();
  dp_->all_gather(params_, {counts_})->wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- gradients ----

void ZeroStorage::begin_backward(bool accumulating, bool last_micro, bool add_to_shard) {
  accumulating_ = accumulating && dp_;  // one rank accumulates straight into its (whole) shard
  last_micro_ = last_micro;
  add_to_shard_ = add_to_shard && dp_ && !accumulating_;
  if (accumulating_ && !accum_.defined())
    accum_ = Tensor::empty({segments_.back().end}, DType::f32, MemCategory::grads, device_);
}

float* ZeroStorage::acquire_grads(int s) {
  const Segment& seg = segments_[size_t(s)];
  if (!dp_) return grad_shard() + seg.begin;
  if (accumulating_) return accum_.data<float>() + seg.begin;
  retire_grad_windows(2);  // bound the windows in flight
  Window w;
  w.base = take(seg.size(), MemCategory::grads);
  w.buf = w.base.view(0, {seg.size()});
  float* p = w.buf.data<float>();
  if (add_to_shard_) kernels::fill_zero(p, seg.size());  // the model adds this micro-batch's gradients into it
  grad_windows_[s] = std::move(w);
  return p;
}

void ZeroStorage::reduce(int s, Window w, bool last) {
  const Segment& seg = segments_[size_t(s)];
  const int64_t lo = std::max(seg.begin, shard_begin_), hi = std::min(seg.end, shard_end_);
  Tensor out = grad_shard_.view(hi > lo ? lo - shard_begin_ : 0, {std::max<int64_t>(0, hi - lo)});
  w.add_at = hi > lo ? lo - shard_begin_ : 0, w.add_n = std::max<int64_t>(0, hi - lo), w.last = last;
  if (add_to_shard_ && w.base.defined() && hi > lo) {  // into a piece of its own, added to the shard when it arrives
    w.sum = Tensor::empty({hi - lo}, DType::f32, MemCategory::grads, device_);
    out = w.sum;
  }
  w.work = dp_->reduce_scatter(out, w.buf, {ReduceOp::sum, counts_for(seg)});
  reducing_.push_back(std::move(w));
}

void ZeroStorage::grads_done(int s) {
  if (!dp_) return;
  const Segment& seg = segments_[size_t(s)];
  if (accumulating_) {
    if (last_micro_) {
      Window w;
      w.buf = accum_.view(seg.begin, {seg.size()});
      reduce(s, std::move(w), true);
    }
    return;
  }
  auto it = grad_windows_.find(s);
  TRIDENT_CHECK(it != grad_windows_.end(), "grads_done of segment {} that was not acquired", s);
  reduce(s, std::move(it->second), last_micro_);
  grad_windows_.erase(it);
  for (auto& w : reducing_)
    if (w.work) w.work->is_completed();  // drive progress
}

void ZeroStorage::retire_grad_windows(size_t keep) {
  while (reducing_.size() > keep) {
    Window& w = reducing_.front();
    wait(w);
    if (w.sum.defined()) {  // zero_accumulate shard: this micro-batch's share, added to the shard
      float* shard = grad_shard_.data<float>() + w.add_at;
      if (w.add_n > 0)
        kernels::residual_forward(shard, shard, w.sum.data<float>(), static_cast<const float*>(nullptr), 1, w.add_n);
      w.sum = Tensor();
    }
    if (replicas_ && w.last) replicating_.push_back(replicas_->all_reduce(grad_shard_.view(w.add_at, {w.add_n})));
    give_back(std::move(reducing_.front().base), MemCategory::grads);
    reducing_.erase(reducing_.begin());
  }
}

float* ZeroStorage::accumulated_grads() {
  if (!dp_) return grad_shard();  // one rank: the shard is the whole buffer
  TRIDENT_CHECK(accumulating_ && accum_.defined(), "accumulated_grads() outside an accumulating step");
  return accum_.data<float>();
}

void ZeroStorage::reduce_accumulated() {
  if (!dp_) return;
  for (int s = 0; s < int(segments_.size()); ++s) {
    Window w;
    w.buf = accum_.view(segments_[size_t(s)].begin, {segments_[size_t(s)].size()});
    reduce(s, std::move(w), true);
  }
  retire_grad_windows(0);
}

void ZeroStorage::finish_step(bool whole) {
  retire_grad_windows(0);
  if ((!dp_ || whole) && replicas_)  // a one-rank shard group (the whole buffer), or the whole shard at once
    replicating_.push_back(replicas_->all_reduce(grad_shard_));
  for (WorkPtr& w : replicating_) {
    auto t0 = std::chrono::steady_clock::now();
    w->wait();
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  replicating_.clear();
  if (last_micro_) accum_ = Tensor();  // release the accumulation buffer
}

}  // namespace trident::parallel
