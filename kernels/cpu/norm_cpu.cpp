// CPU LayerNorm / RMSNorm. Rows run in parallel; weight gradients are reduced
// per thread into a private row, then summed, so results do not depend on the
// order threads finish in (fixed thread count => bitwise reproducible).
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/norm.hpp"

namespace trident::kernels {

namespace cpu {
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                       double eps) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T m = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= T(C);
    T v = 0;
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= T(C);
    T s = T(1) / std::sqrt(v + T(eps));
    T* o = out + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}
}  // namespace cpu

// Per-thread partial sums for a parameter gradient, combined in thread order
// (row stride `stride` in part), added to dst or written over it.
template <typename T>
static void reduce_partials(const T* part, int threads, int64_t stride, int64_t width, T* dst, bool accumulate) {
  for (int64_t c = 0; c < width; ++c) {
    T s = accumulate ? dst[c] : T(0);
    for (int t = 0; t < threads; ++t) s += part[size_t(t) * stride + c];
    dst[c] = s;
  }
}

namespace cpu {
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t N, int64_t C, bool accumulate) {
  int threads = omp_get_max_threads();
  std::vector<T> part(size_t(threads) * 2 * C, T(0));
#pragma omp parallel
  {
    int tid = omp_get_thread_num();
    T* pw = part.data() + size_t(tid) * 2 * C;
    T* pb = pw + C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;
      const T* g = dout + n * C;
      T m = mean[n], s = rstd[n];
      T dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int64_t c = 0; c < C; ++c) {
        T xhat = (x[c] - m) * s;
        T dn = weight[c] * g[c];
        dnorm_mean += dn;
        dnorm_norm_mean += dn * xhat;
        pw[c] += xhat * g[c];
        pb[c] += g[c];
      }
      dnorm_mean /= T(C);
      dnorm_norm_mean /= T(C);
      T* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) {
        T xhat = (x[c] - m) * s;
        dx[c] += (weight[c] * g[c] - dnorm_mean - xhat * dnorm_norm_mean) * s;
      }
    }
  }
  reduce_partials(part.data(), threads, 2 * C, C, dweight, accumulate);
  reduce_partials(part.data() + C, threads, 2 * C, C, dbias, accumulate);
}

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, double eps) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    T s = T(1) / std::sqrt(ss / T(C) + T(eps));
    T* o = out + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N,
                      int64_t C, bool accumulate) {
  int threads = omp_get_max_threads();
  std::vector<T> part(size_t(threads) * C, T(0));
#pragma omp parallel
  {
    T* pw = part.data() + size_t(omp_get_thread_num()) * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;
      const T* g = dout + n * C;
      T s = rstd[n];
      T dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        dot += weight[c] * g[c] * x[c];
        pw[c] += x[c] * s * g[c];
      }
      dot = dot * s * s * s / T(C);
      T* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) dx[c] += weight[c] * g[c] * s - x[c] * dot;
    }
  }
  reduce_partials(part.data(), threads, C, C, dweight, accumulate);
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                                            \
  template void cpu::layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double);    \
  template void cpu::layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t, \
                                           int64_t, bool);                                                        \
  template void cpu::rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);                    \
  template void cpu::rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, bool);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::kernels
