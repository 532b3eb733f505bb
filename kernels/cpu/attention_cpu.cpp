// CPU causal attention and rotary embedding: direct loops over (batch, head).
// Forward parallelises over (b, h); backward over (b, kv head) so the k/v
// gradients shared by a query group are written by one thread only.
// Left out on purpose: a tiled (flash-style) CPU kernel; T^2 probabilities
// are materialised, which is cheap at the sequence lengths run on CPU.
#include <cmath>

#include <cstring>
#include <vector>
#include "kernels/cpu/vmath.hpp"

#include "kernels/attention.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/rotary.hpp"

namespace trident::kernels {

template <typename T>
static void probs_row(T* p, const T* qkv, int64_t b, int64_t t, int64_t h, int64_t T_, int64_t H, int64_t KV,
                      int64_t D, const int32_t* doc_start) {
  const int64_t s0 = doc_start ? doc_start[b * T_ + t] : 0;  // first key of this query's document
  const int64_t W = (H + 2 * KV) * D;
  const int64_t kvh = h / (H / KV);
  const T* q = qkv + (b * T_ + t) * W + h * D;
  const T scale = T(1) / std::sqrt(T(D));
  T mx = -INFINITY;
  for (int64_t s = 0; s < s0; ++s) p[s] = 0;
  for (int64_t s = s0; s <= t; ++s) {
    const T* k = qkv + (b * T_ + s) * W + (H + kvh) * D;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
    p[s] = dot * scale;
    mx = p[s] > mx ? p[s] : mx;
  }
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t s = s0; s <= t; ++s) {
    p[s] = vexp(p[s] - mx);
    sum += p[s];
  }
  T inv = T(1) / sum;
  for (int64_t s = s0; s <= t; ++s) p[s] *= inv;
  for (int64_t s = t + 1; s < T_; ++s) p[s] = 0;
}

int64_t attention_state_elements(int64_t B, int64_t T_, int64_t H, bool on_cuda) {
  return on_cuda ? B * H * T_ : B * H * T_ * T_;
}

template <typename T>
void attention_probs(T* probs, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                     const int32_t* doc_start) {
  TRIDENT_ON_CUDA(T, qkv, cuda::attention_lse(probs, qkv, B, T_, H, KV, D, doc_start));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T_; ++t) probs_row(probs + ((b * H + h) * T_ + t) * T_, qkv, b, t, h, T_, H, KV, D, doc_start);
}

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                       const int32_t* doc_start) {
  TRIDENT_ON_CUDA(T, qkv, cuda::attention_forward(out, probs, qkv, B, T_, H, KV, D, doc_start));
  const int64_t W = (H + 2 * KV) * D;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KV);
      for (int64_t t = 0; t < T_; ++t) {
        T* p = probs + ((b * H + h) * T_ + t) * T_;
        probs_row(p, qkv, b, t, h, T_, H, KV, D, doc_start);
        T* o = out + (b * T_ + t) * H * D + h * D;
        for (int64_t d = 0; d < D; ++d) o[d] = 0;
        for (int64_t s = doc_start ? doc_start[b * T_ + t] : 0; s <= t; ++s) {
          const T* v = qkv + (b * T_ + s) * W + (H + KV + kvh) * D;
          const T ps = p[s];
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) o[d] += ps * v[d];
        }
      }
    }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* probs, int64_t B, int64_t T_,
                        int64_t H, int64_t KV, int64_t D, const int32_t* doc_start) {
  TRIDENT_ON_CUDA(T, qkv, cuda::attention_backward(dqkv, dout, qkv, out, probs, B, T_, H, KV, D, doc_start));
  const int64_t W = (H + 2 * KV) * D;
  const int64_t group = H / KV;
  const T scale = T(1) / std::sqrt(T(D));
  std::memset(dqkv, 0, sizeof(T) * size_t(B * T_ * W));
#pragma omp parallel
  {
    std::vector<T> dp(static_cast<size_t>(T_));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t kvh = 0; kvh < KV; ++kvh)
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
          for (int64_t t = 0; t < T_; ++t) {
            const T* p = probs + ((b * H + h) * T_ + t) * T_;
            const T* go = dout + (b * T_ + t) * H * D + h * D;
            const T* q = qkv + (b * T_ + t) * W + h * D;
            T* dq = dqkv + (b * T_ + t) * W + h * D;
            T dot = 0;
            const int64_t s0 = doc_start ? doc_start[b * T_ + t] : 0;  // keys before s0 have p = 0
            for (int64_t s = s0; s <= t; ++s) {
              const T* v = qkv + (b * T_ + s) * W + (H + KV + kvh) * D;
              T* dv = dqkv + (b * T_ + s) * W + (H + KV + kvh) * D;
              T acc = 0;
#pragma omp simd reduction(+ : acc)
              for (int64_t d = 0; d < D; ++d) {
                acc += go[d] * v[d];
                dv[d] += p[s] * go[d];
              }
              dp[s] = acc;
              dot += p[s] * acc;
            }
            for (int64_t s = s0; s <= t; ++s) {
              const T ds = p[s] * (dp[s] - dot) * scale;
              const T* k = qkv + (b * T_ + s) * W + (H + kvh) * D;
              T* dk = dqkv + (b * T_ + s) * W + (H + kvh) * D;
#pragma omp simd
              for (int64_t d = 0; d < D; ++d) {
                dq[d] += ds * k[d];
                dk[d] += ds * q[d];
              }
            }
          }
  }
}

std::vector<double> rope_table(int64_t T_, int64_t D, double theta) {
  std::vector<double> table(size_t(T_ * D));
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t i = 0; i < D / 2; ++i) {
      double freq = std::pow(theta, -2.0 * double(i) / double(D));
      table[size_t((t * (D / 2) + i) * 2)] = std::cos(double(t) * freq);
      table[size_t((t * (D / 2) + i) * 2 + 1)] = std::sin(double(t) * freq);
    }
  return table;
}

// Rotates heads [0, H + KV) of every token by +angle (sign = 1) or -angle.
template <typename T>
static void rope_apply(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                       double sign, const int32_t* doc_start) {
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
void rope_forward(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start) {
  TRIDENT_ON_CUDA(T, qkv, cuda::rope_forward(qkv, table, B, T_, H, KV, D, doc_start));
  rope_apply(qkv, table, B, T_, H, KV, D, 1.0, doc_start);
}
template <typename T>
void rope_backward(T* dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start) {
  TRIDENT_ON_CUDA(T, dqkv, cuda::rope_backward(dqkv, table, B, T_, H, KV, D, doc_start));
  rope_apply(dqkv, table, B, T_, H, KV, D, -1.0, doc_start);
}

#define INSTANTIATE(T)                                                                                                \
  template void attention_probs<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*);        \
  template void attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*);  \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, \
                                      int64_t, const int32_t*);                                                       \
  template void rope_forward<T>(T*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*);      \
  template void rope_backward<T>(T*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::kernels
