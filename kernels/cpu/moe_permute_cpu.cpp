// CPU mixture-of-experts permutation, gather, combine and their backwards
// (kernels/moe_permute.hpp). Rows are independent: threads split them.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/moe_permute.hpp"

namespace trident::kernels::cpu {

void moe_route_index(int32_t* row, int32_t* token, int64_t* offsets, const int32_t* expert, int64_t N, int64_t K,
                     int64_t E) {
  const int64_t M = N * K;
  std::fill(offsets, offsets + E + 1, int64_t(0));
  for (int64_t i = 0; i < M; ++i) ++offsets[expert[i] + 1];
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  std::vector<int64_t> cursor(offsets, offsets + E);
  for (int64_t i = 0; i < M; ++i) {
    const int64_t r = cursor[size_t(expert[i])]++;
    row[i] = int32_t(r), token[r] = int32_t(i / K);
  }
}

template <typename T>
void moe_permute(T* x, const T* h, const int32_t* token, int64_t M, int64_t C) {
#pragma omp parallel for
  for (int64_t r = 0; r < M; ++r) std::memcpy(x + r * C, h + int64_t(token[r]) * C, size_t(C) * sizeof(T));
}

template <typename T>
void moe_combine(T* out, const T* y, const T* weight, const int32_t* row, int64_t N, int64_t K, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* o = out + n * C;
    std::fill(o, o + C, T(0));
    for (int64_t j = 0; j < K; ++j) {
      const T wt = weight[n * K + j], *yr = y + int64_t(row[n * K + j]) * C;
      for (int64_t c = 0; c < C; ++c) o[c] += wt * yr[c];
    }
  }
}

template <typename T>
void moe_combine_backward(T* dys, T* dweight, const T* dy, const T* y, const T* weight, const int32_t* row, int64_t N,
                          int64_t K, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* d = dy + n * C;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t r = row[n * K + j];
      const T *yr = y + r * C, wt = weight[n * K + j];
      T s = 0, *o = dys + r * C;
      for (int64_t c = 0; c < C; ++c) s += d[c] * yr[c], o[c] = wt * d[c];
      dweight[n * K + j] = s;
    }
  }
}

template <typename T>
void moe_unpermute(T* dh, const T* dx, const int32_t* row, int64_t N, int64_t K, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* o = dh + n * C;
    std::fill(o, o + C, T(0));
    for (int64_t j = 0; j < K; ++j) {
      const T* d = dx + int64_t(row[n * K + j]) * C;
      for (int64_t c = 0; c < C; ++c) o[c] += d[c];
    }
  }
}

#define INSTANTIATE(T)                                                                                          \
  template void moe_permute<T>(T*, const T*, const int32_t*, int64_t, int64_t);                                 \
  template void moe_combine<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t);              \
  template void moe_combine_backward<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t, \
                                        int64_t);                                                               \
  template void moe_unpermute<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t)
INSTANTIATE(float);
INSTANTIATE(double);
#undef INSTANTIATE

}  // namespace trident::kernels::cpu
