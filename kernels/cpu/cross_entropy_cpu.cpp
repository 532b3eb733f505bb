// CPU fused softmax cross-entropy, and its three vocabulary-parallel passes.
#include "kernels/cross_entropy.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vmath.hpp"

namespace trident::kernels {

namespace cpu {
template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           LossGrad<T> grad) {
  const T dscale = grad.scale;
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* row = logits + n * V;
    T mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < Vvalid; ++v) mx = row[v] > mx ? row[v] : mx;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < Vvalid; ++v) sum += vexp(row[v] - mx);
    T lse = mx + std::log(sum);
    int64_t tgt = targets[n];
    if (tgt < 0) {  // an ignored target: no loss, no gradient
      losses[n] = 0;
      if (grad.write) std::fill(row, row + V, T(0));
      continue;
    }
    losses[n] = lse - row[tgt];
    if (grad.write) {
#pragma omp simd
      for (int64_t v = 0; v < Vvalid; ++v) row[v] = vexp(row[v] - lse) * dscale;
      for (int64_t v = Vvalid; v < V; ++v) row[v] = 0;
      row[tgt] -= dscale;
    }
  }
}

template <typename T>
void cross_entropy_local_max(T* row_max, const T* logits, int64_t N, int64_t V, int64_t Vvalid) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    T mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < Vvalid; ++v) mx = row[v] > mx ? row[v] : mx;
    row_max[n] = mx;
  }
}

template <typename T>
void cross_entropy_local_sums(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t N, int64_t V,
                              int64_t Vvalid, int64_t vocab_begin) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    const T mx = row_max[n];
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < Vvalid; ++v) sum += vexp(row[v] - mx);
    sums[n] = sum;
    const int64_t tgt = int64_t(targets[n]) - vocab_begin;
    sums[N + n] = targets[n] >= 0 && tgt >= 0 && tgt < Vvalid ? row[tgt] : T(0);
  }
}

template <typename T>
void cross_entropy_finish(T* losses, T* logits, const T* row_max, const T* sums, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vvalid, int64_t vocab_begin, LossGrad<T> grad) {
  const T dscale = grad.scale;
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T lse = row_max[n] + std::log(sums[n]);
    T* row = logits + n * V;
    if (targets[n] < 0) {  // an ignored target: no loss, no gradient
      losses[n] = 0;
      if (grad.write) std::fill(row, row + V, T(0));
      continue;
    }
    losses[n] = lse - sums[N + n];
    if (!grad.write) continue;
#pragma omp simd
    for (int64_t v = 0; v < Vvalid; ++v) row[v] = vexp(row[v] - lse) * dscale;
    for (int64_t v = Vvalid; v < V; ++v) row[v] = 0;
    const int64_t tgt = int64_t(targets[n]) - vocab_begin;
    if (tgt >= 0 && tgt < Vvalid) row[tgt] -= dscale;
  }
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                                              \
  template void cpu::softmax_cross_entropy<T>(T*, T*, const int32_t*, int64_t, int64_t, int64_t, LossGrad<T>);      \
  template void cpu::cross_entropy_local_max<T>(T*, const T*, int64_t, int64_t, int64_t);                           \
  template void cpu::cross_entropy_local_sums<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, \
                                                 int64_t);                                                          \
  template void cpu::cross_entropy_finish<T>(T*, T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, \
                                             int64_t, LossGrad<T>);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
