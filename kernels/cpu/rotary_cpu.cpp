// CPU rotary position embedding: the (cos, sin) table and the rotation of
// the q and k heads, forward and inverse (see rotary.hpp).
#include "kernels/rotary.hpp"

#include <cmath>
#include <vector>

namespace trident::kernels {

std::vector<double> rope_table(int64_t T_, int64_t D, double theta) {
  std::vector<double> freq(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) freq[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(D));
  return rope_table(T_, freq, 1.0);
}

std::vector<double> rope_table(int64_t T_, const std::vector<double>& inv_freq, double attention_factor) {
  const int64_t half = int64_t(inv_freq.size());
  std::vector<double> table(size_t(T_ * half * 2));
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double freq = inv_freq[size_t(i)];
      table[size_t((t * half + i) * 2)] = std::cos(double(t) * freq) * attention_factor;
      table[size_t((t * half + i) * 2 + 1)] = std::sin(double(t) * freq) * attention_factor;
    }
  return table;
}

// Rotates heads [0, H + KV) of every token by +angle (sign = 1) or -angle.
namespace {

template <typename T>
void rope_apply(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D, double sign,
                const int32_t* doc_start) {
  const int64_t W = (H + 2 * KV) * D, half = D / 2;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const double* tab = table + (doc_start ? t - doc_start[b * T_ + t] : t) * half * 2;
      for (int64_t h = 0; h < H + KV; ++h) {
        T* x = qkv + (b * T_ + t) * W + h * D;
        for (int64_t i = 0; i < half; ++i) {
          T c = T(tab[2 * i]), s = T(sign * tab[2 * i + 1]);
          T x1 = x[i], x2 = x[i + half];
          x[i] = x1 * c - x2 * s;
          x[i + half] = x2 * c + x1 * s;
        }
      }
    }
}

template <typename T>
void rope_pairs(T* x, const double* table, int64_t B, int64_t T_, int64_t heads, int64_t ld, int64_t stride,
                int64_t offset, int64_t Dr, double sign, const int32_t* doc_start) {
  const int64_t half = Dr / 2;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const double* tab = table + (doc_start ? t - doc_start[b * T_ + t] : t) * half * 2;
      for (int64_t h = 0; h < heads; ++h) {
        T* v = x + (b * T_ + t) * ld + h * stride + offset;
        for (int64_t i = 0; i < half; ++i) {
          const T c = T(tab[2 * i]), s = T(sign * tab[2 * i + 1]);
          const T x1 = v[2 * i], x2 = v[2 * i + 1];
          v[2 * i] = x1 * c - x2 * s;
          v[2 * i + 1] = x2 * c + x1 * s;
        }
      }
    }
}

}  // namespace

namespace cpu {
template <typename T>
void rope_pairs_forward(T* x, const double* table, int64_t B, int64_t T_, int64_t heads, int64_t ld, int64_t stride,
                        int64_t offset, int64_t Dr, const int32_t* doc_start) {
  rope_pairs(x, table, B, T_, heads, ld, stride, offset, Dr, 1.0, doc_start);
}
template <typename T>
void rope_pairs_backward(T* x, const double* table, int64_t B, int64_t T_, int64_t heads, int64_t ld, int64_t stride,
                         int64_t offset, int64_t Dr, const int32_t* doc_start) {
  rope_pairs(x, table, B, T_, heads, ld, stride, offset, Dr, -1.0, doc_start);
}
template <typename T>
void rope_forward(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start) {
  rope_apply(qkv, table, B, T_, H, KV, D, 1.0, doc_start);
}
template <typename T>
void rope_backward(T* dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start) {
  rope_apply(dqkv, table, B, T_, H, KV, D, -1.0, doc_start);
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                                                 \
  template void cpu::rope_forward<T>(T*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*);  \
  template void cpu::rope_backward<T>(T*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*); \
  template void cpu::rope_pairs_forward<T>(T*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,    \
                                           int64_t, const int32_t*);                                                   \
  template void cpu::rope_pairs_backward<T>(T*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,   \
                                            int64_t, const int32_t*);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
