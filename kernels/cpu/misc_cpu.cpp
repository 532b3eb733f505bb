// CPU embedding, fused softmax cross-entropy and AdamW.
#include <omp.h>

#include <cmath>

#include "kernels/cpu/vmath.hpp"

#include "kernels/adamw.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"

namespace trident::kernels {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_, int64_t C) {
#pragma omp parallel for
  for (int64_t i = 0; i < B * T_; ++i) {
    const T* e = wte + int64_t(tokens[i]) * C;
    const T* p = wpe ? wpe + (i % T_) * C : nullptr;
    T* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = e[c] + (p ? p[c] : T(0));
  }
}

// Threads own disjoint channel ranges, so rows sharing a token never race.
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_, int64_t C) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
    for (int64_t i = 0; i < B * T_; ++i) {
      const T* g = dout + i * C;
      T* e = dwte + int64_t(tokens[i]) * C;
      for (int64_t c = c0; c < c1; ++c) e[c] += g[c];
      if (dwpe) {
        T* p = dwpe + (i % T_) * C;
        for (int64_t c = c0; c < c1; ++c) p[c] += g[c];
      }
    }
  }
}

template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           T dscale) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* row = logits + n * V;
    T mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < Vvalid; ++v) mx = row[v] > mx ? row[v] : mx;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < Vvalid; ++v) sum += vexp(row[v] - mx);
    T lse = mx + std::log(sum);
    int64_t tgt = targets[n];
    losses[n] = lse - row[tgt];
    if (dscale != T(0)) {
#pragma omp simd
      for (int64_t v = 0; v < Vvalid; ++v) row[v] = vexp(row[v] - lse) * dscale;
      for (int64_t v = Vvalid; v < V; ++v) row[v] = 0;
      row[tgt] -= dscale;
    }
  }
}

template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& hp) {
  const T b1 = T(hp.beta1), b2 = T(hp.beta2);
  const T c1 = T(1.0 / (1.0 - std::pow(hp.beta1, double(hp.step))));
  const T c2 = T(1.0 / (1.0 - std::pow(hp.beta2, double(hp.step))));
  const T lr = T(hp.lr), eps = T(hp.eps), wd = T(hp.weight_decay), gs = T(hp.grad_scale);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i] * gs;
    T mi = b1 * m[i] + (T(1) - b1) * g;
    T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * c1 / (std::sqrt(vi * c2) + eps) + wd * param[i]);
  }
}

#define INSTANTIATE(T)                                                                                     \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t);  \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t);       \
  template void softmax_cross_entropy<T>(T*, T*, const int32_t*, int64_t, int64_t, int64_t, T);            \
  template void adamw_update<T>(T*, T*, T*, const T*, int64_t, const AdamWParams&);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::kernels
