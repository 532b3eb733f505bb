// Tensor-parallel region ops (see tensor_parallel.hpp).
#include "parallel/tensor_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/buffer.hpp"
#include "kernels/cross_entropy.hpp"

namespace trident::parallel {

namespace {
// Adds the seconds of its scope to a counter.
struct Timed {
  double& total;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~Timed() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};
}  // namespace

TensorParallel::TensorParallel(Communicator* group, bool sequence_parallel)
    : group_(group && group->size() > 1 ? group : nullptr), sp_(sequence_parallel && group_ != nullptr) {}

template <typename T>
const T* TensorParallel::enter(T* full, const T* local, int64_t N, int64_t C) {
  if (!sp_) return local;
  Timed timed{traffic_.seconds};
  T* mine = full + row_begin(N) * C;
  if (mine != local) kernels::copy(mine, local, rows(N) * C);
  group_->all_gather(Tensor::borrow(full, N * C))->wait();
  traffic_.all_gather += N * C, traffic_.calls += 1;
  return full;
}

template <typename T>
const T* TensorParallel::enter_backward(T* dlocal, T* dfull, int64_t N, int64_t C) {
  if (!group_) return dfull;
  Timed timed{traffic_.seconds};
  traffic_.calls += 1;
  if (!sp_) {
    group_->all_reduce(Tensor::borrow(dfull, N * C))->wait();
    traffic_.all_reduce += N * C;
    return dfull;
  }
  group_->reduce_scatter(Tensor::borrow(dlocal, rows(N) * C), Tensor::borrow(dfull, N * C))->wait();
  traffic_.reduce_scatter += N * C;
  return dlocal;
}

template <typename T>
const T* TensorParallel::exit(T* local, T* partial, int64_t N, int64_t C) {
  return enter_backward(local, partial, N, C);  // the same collective: sum the partials of these rows
}

template <typename T>
void TensorParallel::sum_partials(T* values, int64_t n) {
  if (!group_ || n == 0) return;
  Timed timed{traffic_.seconds};
  group_->all_reduce(Tensor::borrow(values, n))->wait();
  traffic_.all_reduce += n, traffic_.calls += 1;
}

template <typename T>
const T* TensorParallel::exit_backward(T* dfull, const T* dlocal, int64_t N, int64_t C) {
  return enter(dfull, dlocal, N, C);  // the same collective: every rank needs every row
}

template <typename T>
void TensorParallel::cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                                   int64_t vocab_begin, kernels::LossGrad<T> grad) {
  if (!group_) {
    kernels::softmax_cross_entropy(losses, logits, targets, N, V, Vvalid, grad);
    return;
  }
  const Device where = Tensor::borrow(logits, 1).device();  // the scratch lives with the logits
  if (!scratch_.defined() || scratch_.dtype() != dtype_of<T>() || scratch_.numel() < 3 * N ||
      !(scratch_.device() == where))
    scratch_ = Tensor::empty({3 * N}, dtype_of<T>(), MemCategory::comm, where);
  Timed timed{traffic_.seconds};
  T* row_max = scratch_.data<T>();
  T* sums = row_max + N;  // [sum exp | target logit]
  kernels::cross_entropy_local_max(row_max, logits, N, V, Vvalid);
  group_->all_reduce(scratch_.view(0, {N}), {.op = ReduceOp::max})->wait();
  kernels::cross_entropy_local_sums(sums, logits, row_max, targets, N, V, Vvalid, vocab_begin);
  group_->all_reduce(scratch_.view(N, {2 * N}))->wait();
  traffic_.all_reduce += 3 * N, traffic_.calls += 2;
  kernels::cross_entropy_finish(losses, logits, row_max, sums, targets, N, V, Vvalid, vocab_begin, grad);
}

void all_reduce_ranges(Communicator* group, float* base, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  if (!group || group->size() == 1) return;
  int64_t n = 0;
  for (auto [b, e] : ranges) n += e - b;
  if (n == 0) return;
  if (ranges.size() == 1) {  // contiguous: in place, no copy (the tied embedding's gradient table)
    group->all_reduce(Tensor::borrow(base + ranges[0].first, n))->wait();
    return;
  }
  Tensor packed = Tensor::empty({n}, DType::f32, MemCategory::comm, Tensor::borrow(base, 1).device());
  float* p = packed.data<float>();
  for (auto [b, e] : ranges) kernels::copy(p, base + b, e - b), p += e - b;
  group->all_reduce(packed)->wait();
  p = packed.data<float>();
  for (auto [b, e] : ranges) kernels::copy(base + b, p, e - b), p += e - b;
}

#define INSTANTIATE(T)                                                                                       \
  template const T* TensorParallel::enter<T>(T*, const T*, int64_t, int64_t);                                \
  template const T* TensorParallel::enter_backward<T>(T*, T*, int64_t, int64_t);                             \
  template const T* TensorParallel::exit<T>(T*, T*, int64_t, int64_t);                                       \
  template const T* TensorParallel::exit_backward<T>(T*, const T*, int64_t, int64_t);                        \
  template void TensorParallel::sum_partials<T>(T*, int64_t);                                                \
  template void TensorParallel::cross_entropy<T>(T*, T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, \
                                                 kernels::LossGrad<T>);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::parallel
