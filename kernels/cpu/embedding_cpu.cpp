// CPU token embedding (a vocabulary range of it) and learned positions, forward and backward.
#include "kernels/embedding.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace trident::kernels {

namespace cpu {
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C, int64_t vocab_begin,
                       int64_t V) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = int64_t(tokens[i]) - vocab_begin;
    T* o = out + i * C;
    if (row < 0 || row >= V) {
      std::fill(o, o + C, T(0));
      continue;
    }
    const T* e = wte + row * C;
    for (int64_t c = 0; c < C; ++c) o[c] = e[c];
  }
}

// Threads own disjoint channel ranges, so rows sharing a token never race.
template <typename T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C, int64_t vocab_begin,
                        int64_t V) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t row = int64_t(tokens[i]) - vocab_begin;
      if (row < 0 || row >= V) continue;
      const T* g = dout + i * C;
      T* e = dwte + row * C;
      for (int64_t c = c0; c < c1; ++c) e[c] += g[c];
    }
  }
}

template <typename T>
void position_forward(T* out, const T* inp, const T* wpe, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                      const int32_t* doc_start) {
#pragma omp parallel for
  for (int64_t i = 0; i < rows; ++i) {
    const T* x = inp + i * C;
    T* o = out + i * C;
    if (!wpe) {
      if (o != x) std::copy(x, x + C, o);
      continue;
    }
    const int64_t row = row_begin + i;
    const T* p = wpe + (row % T_ - (doc_start ? doc_start[row] : 0)) * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] + p[c];
  }
}

template <typename T>
void position_backward(T* dwpe, const T* dout, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                       const int32_t* doc_start) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
    for (int64_t i = 0; i < rows; ++i) {
      const T* g = dout + i * C;
      const int64_t row = row_begin + i;
      T* p = dwpe + (row % T_ - (doc_start ? doc_start[row] : 0)) * C;
      for (int64_t c = c0; c < c1; ++c) p[c] += g[c];
    }
  }
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                                                \
  template void cpu::embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int64_t);          \
  template void cpu::embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);         \
  template void cpu::position_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, const int32_t*); \
  template void cpu::position_backward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, const int32_t*);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
