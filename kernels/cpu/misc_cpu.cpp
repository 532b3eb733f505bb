// CPU embedding, fused softmax cross-entropy and AdamW.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vmath.hpp"

#include "kernels/adamw.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/residual.hpp"

namespace trident::kernels {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C, int64_t vocab_begin,
                       int64_t V) {
  TRIDENT_ON_CUDA(T, out, cuda::embedding_forward(out, tokens, wte, N, C, vocab_begin, V));
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
  TRIDENT_ON_CUDA(T, dwte, cuda::embedding_backward(dwte, dout, tokens, N, C, vocab_begin, V));
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
  TRIDENT_ON_CUDA(T, out, cuda::position_forward(out, inp, wpe, row_begin, rows, T_, C, doc_start));
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
  TRIDENT_ON_CUDA(T, dwpe, cuda::position_backward(dwpe, dout, row_begin, rows, T_, C, doc_start));
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

template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           T dscale) {
  TRIDENT_ON_CUDA(T, logits, cuda::softmax_cross_entropy(losses, logits, targets, N, V, Vvalid, dscale));
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
    if (tgt < 0) {  // an ignored target: no loss, no gradient
      losses[n] = 0;
      if (dscale != T(0)) std::fill(row, row + V, T(0));
      continue;
    }
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
void residual_forward(T* out, const T* a, const T* b, const T* bias, int64_t N, int64_t C) {
  TRIDENT_ON_CUDA(T, out, cuda::residual_forward(out, a, b, bias, N, C));
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
  TRIDENT_ON_CUDA(T, dout, cuda::bias_backward(dbias, dout, N, C, accumulate));
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

template <typename T>
void cross_entropy_local_max(T* row_max, const T* logits, int64_t N, int64_t V, int64_t Vvalid) {
  TRIDENT_ON_CUDA(T, logits, cuda::cross_entropy_local_max(row_max, logits, N, V, Vvalid));
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    T mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < Vvalid; ++v) mx = row[v] > mx ? row[v] : mx;
    row_max[n] = mx;
  }
}

template <typename T>
void cross_entropy_local_sums(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t N, int64_t V,
                              int64_t Vvalid, int64_t vocab_begin) {
  TRIDENT_ON_CUDA(T, logits, cuda::cross_entropy_local_sums(sums, logits, row_max, targets, N, V, Vvalid, vocab_begin));
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    const T mx = row_max[n];
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < Vvalid; ++v) sum += vexp(row[v] - mx);
    sums[n] = sum;
    const int64_t tgt = int64_t(targets[n]) - vocab_begin;
    sums[N + n] = targets[n] >= 0 && tgt >= 0 && tgt < Vvalid ? row[tgt] : T(0);
  }
}

template <typename T>
void cross_entropy_finish(T* losses, T* logits, const T* row_max, const T* sums, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vvalid, int64_t vocab_begin, T dscale) {
  TRIDENT_ON_CUDA(
      T, logits, cuda::cross_entropy_finish(losses, logits, row_max, sums, targets, N, V, Vvalid, vocab_begin, dscale));
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T lse = row_max[n] + std::log(sums[n]);
    T* row = logits + n * V;
    if (targets[n] < 0) {  // an ignored target: no loss, no gradient
      losses[n] = 0;
      if (dscale != T(0)) std::fill(row, row + V, T(0));
      continue;
    }
    losses[n] = lse - sums[N + n];
    if (dscale == T(0)) continue;
#pragma omp simd
    for (int64_t v = 0; v < Vvalid; ++v) row[v] = vexp(row[v] - lse) * dscale;
    for (int64_t v = Vvalid; v < V; ++v) row[v] = 0;
    const int64_t tgt = int64_t(targets[n]) - vocab_begin;
    if (tgt >= 0 && tgt < Vvalid) row[tgt] -= dscale;
  }
}

template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& hp) {
  TRIDENT_ON_CUDA(T, param,
                  cuda::adamw_update_multi(param, m, v, grad, {{0, n, float(hp.weight_decay)}}, hp.lr, hp.beta1,
                                           hp.beta2, hp.eps, hp.step, hp.grad_scale));
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

template <typename T>
void adamw_update_multi(T* param, T* m, T* v, const T* grad, const std::vector<AdamWRange>& ranges,
                        const AdamWParams& hp) {
#ifdef TRIDENT_HAVE_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (is_device_pointer(param)) {
      std::vector<cuda::AdamWRangeDevice> dr;
      for (const auto& r : ranges) dr.push_back({r.offset, r.size, float(r.weight_decay)});
      return cuda::adamw_update_multi(param, m, v, grad, dr, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.step, hp.grad_scale);
    }
#endif
  for (const auto& r : ranges) {
    AdamWParams one = hp;
    one.weight_decay = r.weight_decay;
    adamw_update(param + r.offset, m + r.offset, v + r.offset, grad + r.offset, r.size, one);
  }
}

#define INSTANTIATE(T)                                                                                           \
  template void adamw_update_multi<T>(T*, T*, T*, const T*, const std::vector<AdamWRange>&, const AdamWParams&); \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int64_t);          \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);         \
  template void position_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, const int32_t*); \
  template void position_backward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, const int32_t*);          \
  template void cross_entropy_local_max<T>(T*, const T*, int64_t, int64_t, int64_t);                             \
  template void cross_entropy_local_sums<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t,   \
                                            int64_t);                                                            \
  template void cross_entropy_finish<T>(T*, T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t,   \
                                        int64_t, T);                                                             \
  template void residual_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t);                         \
  template void bias_backward<T>(T*, const T*, int64_t, int64_t, bool);                                          \
  template void softmax_cross_entropy<T>(T*, T*, const int32_t*, int64_t, int64_t, int64_t, T);                  \
  template void adamw_update<T>(T*, T*, T*, const T*, int64_t, const AdamWParams&);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::kernels
