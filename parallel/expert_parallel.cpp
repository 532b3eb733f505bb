// Expert parallelism's token exchange (see expert_parallel.hpp).
#include "parallel/expert_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace trident::parallel {

namespace {
// Where the exchanged rows live: the bound GPU or the host.
Device device_of(const void* p) { return is_device_pointer(p) ? Device{DeviceType::cuda, current_device()} : Device{}; }
}  // namespace

ExpertParallel::ExpertParallel(Communicator* group, int64_t experts) : group_(group), experts_(experts) {
  TRIDENT_CHECK(experts >= 1 && experts % size() == 0, "{} experts over an expert group of {}", experts, size());
}

ExpertPlan ExpertParallel::plan(const int64_t* offsets) {
  const int n = size();
  const int64_t E = experts_, L = local_experts(), first = first_expert();
  ExpertPlan p;
  p.rows = offsets[E];
  // every rank's counts [n, E] (int32: a layer's rows per expert are far below 2^31)
  Tensor all = Tensor::empty({int64_t(n) * E}, DType::i32, MemCategory::comm);
  int32_t* c = all.data<int32_t>();
  for (int64_t e = 0; e < E; ++e) c[int64_t(rank()) * E + e] = int32_t(offsets[e + 1] - offsets[e]);
  if (group_ && n > 1) group_->all_gather(all)->wait();
  auto count = [&](int q, int64_t e) { return int64_t(c[int64_t(q) * E + e]); };
  // what goes to each rank (its experts' chunk of my rows) and comes from it
  p.send_rows.assign(size_t(n), 0), p.recv_rows.assign(size_t(n), 0);
  for (int q = 0; q < n; ++q)
    for (int64_t l = 0; l < L; ++l) {
      p.send_rows[size_t(q)] += count(rank(), q * L + l);
      p.recv_rows[size_t(q)] += count(q, first + l);
    }
  // arrival order: by source, then local expert; GEMM order: by local expert, then source
  p.local_offsets.assign(size_t(L + 1), 0);
  for (int64_t l = 0; l < L; ++l) {
    int64_t sum = 0;
    for (int q = 0; q < n; ++q) sum += count(q, first + l);
    p.local_offsets[size_t(l + 1)] = p.local_offsets[size_t(l)] + sum;
  }
  p.received = p.local_offsets[size_t(L)];
  std::vector<int64_t> cursor(p.local_offsets.begin(), p.local_offsets.end() - 1);
  int64_t by_source = 0;
  for (int q = 0; q < n; ++q)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t k = count(q, first + l);
      if (k > 0) p.blocks.push_back({by_source, cursor[size_t(l)], k});
      by_source += k, cursor[size_t(l)] += k;
    }
  return p;
}

template <typename T>
T* ExpertParallel::grow(Tensor& staging, int64_t elements, const void* like) {
  const Device dev = device_of(like);
  const int64_t n = std::max<int64_t>(elements, 1);
  if (!staging.defined() || staging.nbytes() < size_t(n) * sizeof(T) || staging.device().type != dev.type)
    staging = Tensor::empty({n}, dtype_of<T>(), MemCategory::comm, dev);
  return static_cast<T*>(staging.raw());
}

namespace {
double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

template <typename T>
PendingDispatch ExpertParallel::issue(T* out, const T* in, const std::vector<int64_t>& send,
                                      const std::vector<int64_t>& recv, int64_t C) {
  PendingDispatch x;
  x.start = clock_seconds();
  x.rows_sent = std::accumulate(send.begin(), send.end(), int64_t(0));
  x.rows_received = std::accumulate(recv.begin(), recv.end(), int64_t(0));
  if (!group_ || size() == 1) {
    copy_bytes(out, in, size_t(x.rows_sent * C) * sizeof(T));
  } else {
    AllToAllOptions o;
    for (size_t q = 0; q < send.size(); ++q) o.send_counts.push_back(send[q] * C), o.recv_counts.push_back(recv[q] * C);
    const Device dev = device_of(in);
    x.work = group_->all_to_all(Tensor::borrow(out, x.rows_received * C, dev),
                                Tensor::borrow(const_cast<T*>(in), x.rows_sent * C, dev), o);
  }
  return x;
}

void ExpertParallel::complete(PendingDispatch& x, bool combine, const std::function<void()>& before_wait) {
  if (before_wait && group_ && size() > 1) before_wait();  // e.g. the other paired pass computes while the rows travel
  const double wait = clock_seconds();
  if (x.work) x.work->wait(), x.work.reset();
  const double end = clock_seconds();
  traffic_.rows_sent += x.rows_sent, traffic_.rows_received += x.rows_received, ++traffic_.calls;
  traffic_.seconds += end - x.start;
  traffic_.overlapped_s += wait - x.start, traffic_.waited_s += end - wait;
  if (record_ && group_ && size() > 1) spans_.push_back({combine, x.start, wait, end});
}

template <typename T>
PendingDispatch ExpertParallel::start_dispatch(const ExpertPlan& p, const T* rows, int64_t C, Tensor& staging) {
  T* arrived = grow<T>(staging, p.received * C, rows);
  return issue(arrived, rows, p.send_rows, p.recv_rows, C);
}

template <typename T>
void ExpertParallel::finish_dispatch(PendingDispatch& pending, const ExpertPlan& p, T* out, int64_t C,
                                     const Tensor& staging, const std::function<void()>& before_wait) {
  complete(pending, false, before_wait);
  const T* arrived = static_cast<const T*>(staging.raw());
  for (const ExpertPlan::Block& b : p.blocks)
    copy_bytes(out + b.by_expert * C, arrived + b.by_source * C, size_t(b.rows * C) * sizeof(T));
}

template <typename T>
void ExpertParallel::dispatch(const ExpertPlan& p, T* out, const T* rows, int64_t C, Tensor& staging,
                              const std::function<void()>& before_wait) {
  PendingDispatch x = start_dispatch(p, rows, C, staging);
  finish_dispatch(x, p, out, C, staging, before_wait);
}

template <typename T>
void ExpertParallel::combine(const ExpertPlan& p, T* out, const T* rows, int64_t C, Tensor& staging,
                             const std::function<void()>& before_wait) {
  T* leaving = grow<T>(staging, p.received * C, rows);
  for (const ExpertPlan::Block& b : p.blocks)
    copy_bytes(leaving + b.by_source * C, rows + b.by_expert * C, size_t(b.rows * C) * sizeof(T));
  PendingDispatch x = issue(out, leaving, p.recv_rows, p.send_rows, C);
  complete(x, true, before_wait);
}

std::vector<ExpertSpan> ExpertParallel::take_spans() {
  std::vector<ExpertSpan> out;
  out.swap(spans_);
  return out;
}

ExpertTraffic ExpertParallel::take_traffic() {
  ExpertTraffic t = traffic_;
  traffic_ = {};
  return t;
}

template PendingDispatch ExpertParallel::start_dispatch<float>(const ExpertPlan&, const float*, int64_t, Tensor&);
template PendingDispatch ExpertParallel::start_dispatch<double>(const ExpertPlan&, const double*, int64_t, Tensor&);
template void ExpertParallel::finish_dispatch<float>(PendingDispatch&, const ExpertPlan&, float*, int64_t,
                                                     const Tensor&, const std::function<void()>&);
template void ExpertParallel::finish_dispatch<double>(PendingDispatch&, const ExpertPlan&, double*, int64_t,
                                                      const Tensor&, const std::function<void()>&);
template void ExpertParallel::dispatch<float>(const ExpertPlan&, float*, const float*, int64_t, Tensor&,
                                              const std::function<void()>&);
template void ExpertParallel::dispatch<double>(const ExpertPlan&, double*, const double*, int64_t, Tensor&,
                                               const std::function<void()>&);
template void ExpertParallel::combine<float>(const ExpertPlan&, float*, const float*, int64_t, Tensor&,
                                             const std::function<void()>&);
template void ExpertParallel::combine<double>(const ExpertPlan&, double*, const double*, int64_t, Tensor&,
                                              const std::function<void()>&);

}  // namespace trident::parallel
