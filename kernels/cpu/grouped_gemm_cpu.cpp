// The grouped linear on the CPU (see grouped_gemm.hpp): oneDNN's sgemm per
// group, the groups in sequence or spread over the OpenMP threads (inside a
// parallel region oneDNN runs each GEMM on its calling thread).
#include "kernels/grouped_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/buffer.hpp"
#include "kernels/gemm.hpp"

namespace trident::kernels {
namespace {

// Across the threads when there are groups enough to share out (twice the
// threads: the largest go first, the rest fill in). Measured in
// bench/bench_moe.cpp: on 2 threads spreading beat one GEMM per expert on
// every shape there (docs/performance.md); with fewer groups than that, each
// GEMM on every thread keeps them all busy.
bool across(GroupedSchedule s, int64_t G) {
  if (s != GroupedSchedule::automatic) return s == GroupedSchedule::across_groups;
  const int threads = omp_get_max_threads();
  return threads > 1 && G >= 2 * int64_t(threads);
}

// fn(g) for every group with rows, largest first when spread over threads
template <typename F>
void for_groups(bool spread, const int64_t* offsets, int64_t G, F fn) {
  if (!spread) {
    for (int64_t g = 0; g < G; ++g) fn(g);
    return;
  }
  std::vector<int64_t> order(static_cast<size_t>(G));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return offsets[a + 1] - offsets[a] > offsets[b + 1] - offsets[b]; });
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < G; ++i) fn(order[size_t(i)]);
}

}  // namespace

namespace cpu {

template <typename T>
void grouped_linear_forward(T* y, const T* x, const T* w, const int64_t* offsets, int64_t G, int64_t C, int64_t OC,
                            Precision math, GroupedSchedule schedule) {
  for_groups(across(schedule, G), offsets, G, [&](int64_t g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    if (rows > 0)
      kernels::gemm<T>(false, true, rows, OC, C, T(1), x + r0 * C, C, w + g * OC * C, C, T(0), y + r0 * OC, OC, math);
  });
}

template <typename T>
void grouped_linear_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const int64_t* offsets, int64_t G,
                             int64_t C, int64_t OC, bool accumulate, Precision math, GroupedSchedule schedule) {
  for_groups(across(schedule, G), offsets, G, [&](int64_t g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    T* dwg = dw + g * OC * C;
    if (rows == 0) {
      if (!accumulate) std::fill(dwg, dwg + OC * C, T(0));
      return;
    }
    if (dx)
      kernels::gemm<T>(false, false, rows, C, OC, T(1), dy + r0 * OC, OC, w + g * OC * C, C, T(0), dx + r0 * C, C,
                       math);
    kernels::gemm<T>(true, false, OC, C, rows, T(1), dy + r0 * OC, OC, x + r0 * C, C, accumulate ? T(1) : T(0), dwg, C,
                     math);
  });
}

template <typename T>
void grouped_bias_forward(T* y, const T* b, const int64_t* offsets, int64_t G, int64_t OC) {
  for (int64_t g = 0; g < G; ++g) {
    const T* bg = b + g * OC;
#pragma omp parallel for
    for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r)
      for (int64_t c = 0; c < OC; ++c) y[r * OC + c] += bg[c];
  }
}

template <typename T>
void grouped_bias_backward(T* db, const T* dy, const int64_t* offsets, int64_t G, int64_t OC, bool accumulate) {
#pragma omp parallel for
  for (int64_t g = 0; g < G; ++g) {
    T* d = db + g * OC;
    if (!accumulate) std::fill(d, d + OC, T(0));
    for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r)
      for (int64_t c = 0; c < OC; ++c) d[c] += dy[r * OC + c];
  }
}

template void grouped_bias_forward<float>(float*, const float*, const int64_t*, int64_t, int64_t);
template void grouped_bias_forward<double>(double*, const double*, const int64_t*, int64_t, int64_t);
template void grouped_bias_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t, bool);
template void grouped_bias_backward<double>(double*, const double*, const int64_t*, int64_t, int64_t, bool);

template void grouped_linear_forward<float>(float*, const float*, const float*, const int64_t*, int64_t, int64_t,
                                            int64_t, Precision, GroupedSchedule);
template void grouped_linear_forward<double>(double*, const double*, const double*, const int64_t*, int64_t, int64_t,
                                             int64_t, Precision, GroupedSchedule);
template void grouped_linear_backward<float>(float*, float*, const float*, const float*, const float*, const int64_t*,
                                             int64_t, int64_t, int64_t, bool, Precision, GroupedSchedule);
template void grouped_linear_backward<double>(double*, double*, const double*, const double*, const double*,
                                              const int64_t*, int64_t, int64_t, int64_t, bool, Precision,
                                              GroupedSchedule);

}  // namespace cpu
}  // namespace trident::kernels
