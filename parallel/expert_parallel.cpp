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
T* ExpertParallel::staging(int64_t elements, const void* like) {
  const Device dev = device_of(like);
  const int64_t n = std::max<int64_t>(elements, 1);
  if (scratch_.nbytes() < size_t(n) * sizeof(T) || scratch_.device().type != dev.type)
    scratch_ = Tensor::empty({n}, dtype_of<T>(), MemCategory::comm, dev);
  return static_cast<T*>(scratch_.raw());
}

template <typename T>
void ExpertParallel::exchange(T* out, const T* in, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                              int64_t C) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t ns = std::accumulate(send.begin(), send.end(), int64_t(0)),
                nr = std::accumulate(recv.begin(), recv.end(), int64_t(0));
  if (!group_ || size() == 1) {
    copy_bytes(out, in, size_t(ns * C) * sizeof(T));
  } else {
    AllToAllOptions o;
    for (size_t q = 0; q < send.size(); ++q) o.send_counts.push_back(send[q] * C), o.recv_counts.push_back(recv[q] * C);
    const Device dev = device_of(in);
    group_->all_to_all(Tensor::borrow(out, nr * C, dev), Tensor::borrow(const_cast<T*>(in), ns * C, dev), o)->wait();
  }
  traffic_.rows_sent += ns, traffic_.rows_received += nr, ++traffic_.calls;
  traffic_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename T>
void ExpertParallel::dispatch(const ExpertPlan& p, T* out, const T* rows, int64_t C) {
  T* arrived = staging<T>(p.received * C, rows);
  exchange(arrived, rows, p.send_rows, p.recv_rows, C);
  for (const ExpertPlan::Block& b : p.blocks)
    copy_bytes(out + b.by_expert * C, arrived + b.by_source * C, size_t(b.rows * C) * sizeof(T));
}

template <typename T>
void ExpertParallel::combine(const ExpertPlan& p, T* out, const T* rows, int64_t C) {
  T* leaving = staging<T>(p.received * C, rows);
  for (const ExpertPlan::Block& b : p.blocks)
    copy_bytes(leaving + b.by_source * C, rows + b.by_expert * C, size_t(b.rows * C) * sizeof(T));
  exchange(out, leaving, p.recv_rows, p.send_rows, C);
}

ExpertTraffic ExpertParallel::take_traffic() {
  ExpertTraffic t = traffic_;
  traffic_ = {};
  return t;
}

template void ExpertParallel::dispatch<float>(const ExpertPlan&, float*, const float*, int64_t);
template void ExpertParallel::dispatch<double>(const ExpertPlan&, double*, const double*, int64_t);
template void ExpertParallel::combine<float>(const ExpertPlan&, float*, const float*, int64_t);
template void ExpertParallel::combine<double>(const ExpertPlan&, double*, const double*, int64_t);

}  // namespace trident::parallel
