// CPU GELU and SwiGLU.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/vmath.hpp"

#include "kernels/activation.hpp"

namespace trident::kernels {

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)

namespace cpu {
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    T x = inp[i];
    T u = T(kGeluScale) * (x + T(0.044715) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + vtanh(u));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    T x = inp[i];
    T u = T(kGeluScale) * (x + T(0.044715) * x * x * x);
    T th = vtanh(u);
    T sech2 = T(1) - th * th;
    T grad = T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * T(kGeluScale) * (T(1) + T(3 * 0.044715) * x * x);
    dinp[i] = grad * dout[i];
  }
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * F;
    const T* u = g + F;
    T* o = out + n * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) o[f] = g[f] / (T(1) + vexp(-g[f])) * u[f];
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * F;
    const T* u = g + F;
    const T* d = dout + n * F;
    T* dg = dinp + n * 2 * F;
    T* du = dg + F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      T sig = T(1) / (T(1) + vexp(-g[f]));
      T silu = g[f] * sig;
      du[f] = d[f] * silu;
      dg[f] = d[f] * u[f] * sig * (T(1) + g[f] * (T(1) - sig));
    }
  }
}

template <typename T>
void clamped_swiglu_forward(T* out, const T* inp, int64_t N, int64_t F, double alpha, double limit) {
  const T a = T(alpha), L = T(limit);
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * F;
    const T* u = g + F;
    T* o = out + n * F;
    for (int64_t f = 0; f < F; ++f) {
      const T gc = std::min(g[f], L), uc = std::min(std::max(u[f], -L), L);
      o[f] = gc / (T(1) + std::exp(-a * gc)) * (uc + T(1));
    }
  }
}

template <typename T>
void clamped_swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F, double alpha, double limit) {
  const T a = T(alpha), L = T(limit);
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * F;
    const T* u = g + F;
    const T* d = dout + n * F;
    T* dg = dinp + n * 2 * F;
    T* du = dg + F;
    for (int64_t f = 0; f < F; ++f) {
      const T gc = std::min(g[f], L), uc = std::min(std::max(u[f], -L), L);
      const T sig = T(1) / (T(1) + std::exp(-a * gc)), glu = gc * sig;
      du[f] = u[f] >= -L && u[f] <= L ? d[f] * glu : T(0);
      dg[f] = g[f] <= L ? d[f] * (uc + T(1)) * sig * (T(1) + a * gc * (T(1) - sig)) : T(0);
    }
  }
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                          \
  template void cpu::gelu_forward<T>(T*, const T*, int64_t);                                    \
  template void cpu::gelu_backward<T>(T*, const T*, const T*, int64_t);                         \
  template void cpu::swiglu_forward<T>(T*, const T*, int64_t, int64_t);                         \
  template void cpu::swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t);              \
  template void cpu::clamped_swiglu_forward<T>(T*, const T*, int64_t, int64_t, double, double); \
  template void cpu::clamped_swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t, double, double);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::kernels
