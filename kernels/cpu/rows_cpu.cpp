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

template <typename T>
void mla_heads(T* qkv, const T* q, const T* kvb, const T* kr, int64_t N, int64_t H, int64_t Dn, int64_t Dr,
               int64_t Dv) {
  const int64_t Dq = Dn + Dr, W = H * (2 * Dq + Dv), Wkv = H * (Dn + Dv);
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* row = qkv + n * W;
    std::copy(q + n * H * Dq, q + (n + 1) * H * Dq, row);
    for (int64_t h = 0; h < H; ++h) {
      const T* kv = kvb + n * Wkv + h * (Dn + Dv);
      T *k = row + (H + h) * Dq, *v = row + 2 * H * Dq + h * Dv;
      std::copy(kv, kv + Dn, k);
      std::copy(kr + n * Dr, kr + (n + 1) * Dr, k + Dn);
      std::copy(kv + Dn, kv + Dn + Dv, v);
    }
  }
}

template <typename T>
void mla_heads_backward(T* dq, T* dkvb, T* dkr, const T* dqkv, int64_t N, int64_t H, int64_t Dn, int64_t Dr,
                        int64_t Dv) {
  const int64_t Dq = Dn + Dr, W = H * (2 * Dq + Dv), Wkv = H * (Dn + Dv);
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* row = dqkv + n * W;
    std::copy(row, row + H * Dq, dq + n * H * Dq);
    T* r = dkr + n * Dr;
    std::fill(r, r + Dr, T(0));
    for (int64_t h = 0; h < H; ++h) {
      T* kv = dkvb + n * Wkv + h * (Dn + Dv);
      const T *k = row + (H + h) * Dq, *v = row + 2 * H * Dq + h * Dv;
      std::copy(k, k + Dn, kv);
      for (int64_t d = 0; d < Dr; ++d) r[d] += k[Dn + d];
      std::copy(v, v + Dv, kv + Dn);
    }
  }
}

template <typename T>
void columns_concat(T* out, const T* a, const T* b, int64_t N, int64_t A, int64_t B) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    std::copy(a + n * A, a + (n + 1) * A, out + n * (A + B));
    std::copy(b + n * B, b + (n + 1) * B, out + n * (A + B) + A);
  }
}

template <typename T>
void columns_split(T* a, T* b, const T* in, int64_t N, int64_t A, int64_t B) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    std::copy(in + n * (A + B), in + n * (A + B) + A, a + n * A);
    std::copy(in + n * (A + B) + A, in + (n + 1) * (A + B), b + n * B);
  }
}

}  // namespace cpu

#define INSTANTIATE(T)                                                                                            \
  template void cpu::rows_scale_add<T>(T*, const T*, const T*, int64_t, int64_t);                                 \
  template void cpu::rows_scale<T>(T*, const T*, const T*, int64_t, int64_t);                                     \
  template void cpu::rows_dot<T>(T*, const T*, const T*, int64_t, int64_t);                                       \
  template void cpu::heads_gather<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);                  \
  template void cpu::heads_scatter<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);                 \
  template void cpu::mla_heads<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t); \
  template void cpu::mla_heads_backward<T>(T*, T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);    \
  template void cpu::columns_concat<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);                        \
  template void cpu::columns_split<T>(T*, T*, const T*, int64_t, int64_t, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
