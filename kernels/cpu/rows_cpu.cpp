// CPU row scaling, row dot products and head gathers (kernels/rows.hpp).
#include "kernels/rows.hpp"

#include <omp.h>

#include <algorithm>

namespace trident::kernels {

namespace cpu {

template <typename T>
void rows_scale_add(T* out, const T* x, const T* g, int64_t N, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T s = g ? g[n] : T(1);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) out[n * C + c] += s * x[n * C + c];
  }
}

template <typename T>
void rows_scale(T* out, const T* x, const T* g, int64_t N, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T s = g[n];
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = s * x[n * C + c];
  }
}

template <typename T>
void rows_dot(T* d, const T* x, const T* y, int64_t N, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T s = 0;
    for (int64_t c = 0; c < C; ++c) s += x[n * C + c] * y[n * C + c];
    d[n] = s;
  }
}

// The row of head h (h < H: query, else key) of token n in the heads layout.
inline int64_t head_row(int64_t n, int64_t h, int64_t N, int64_t H, int64_t KV) {
  return h < H ? n * H + h : N * H + n * KV + (h - H);
}

template <typename T>
void heads_gather(T* heads, const T* qkv, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H + KV; ++h)
      std::copy(qkv + n * W + h * D, qkv + n * W + (h + 1) * D, heads + head_row(n, h, N, H, KV) * D);
}

template <typename T>
void heads_scatter(T* qkv, const T* heads, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H + KV; ++h) {
      const T* src = heads + head_row(n, h, N, H, KV) * D;
      std::copy(src, src + D, qkv + n * W + h * D);
    }
}

}  // namespace cpu

#define INSTANTIATE(T)                                                                                          \
  template void cpu::rows_scale_add<T>(T*, const T*, const T*, int64_t, int64_t);                               \
  template void cpu::rows_scale<T>(T*, const T*, const T*, int64_t, int64_t);                                   \
  template void cpu::rows_dot<T>(T*, const T*, const T*, int64_t, int64_t);                                     \
  template void cpu::heads_gather<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);                \
  template void cpu::heads_scatter<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
