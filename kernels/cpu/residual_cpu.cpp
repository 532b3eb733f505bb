// CPU residual add (with a bias) and the bias gradient.
#include "kernels/residual.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace trident::kernels {

namespace cpu {
template <typename T>
void residual_forward(T* out, const T* a, const T* b, const T* bias, int64_t N, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T *x = a + n * C, *y = b + n * C;
    T* o = out + n * C;
    if (bias) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = x[c] + y[c] + bias[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = x[c] + y[c];
    }
  }
}

// Threads own disjoint channel ranges; each channel sums its rows in order.
template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t C, bool accumulate) {
  if (!dbias) return;
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
    if (!accumulate) std::fill(dbias + c0, dbias + c1, T(0));
    for (int64_t n = 0; n < N; ++n) {
      const T* g = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dbias[c] += g[c];
    }
  }
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                        \
  template void cpu::residual_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t); \
  template void cpu::bias_backward<T>(T*, const T*, int64_t, int64_t, bool);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
