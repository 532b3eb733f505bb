// CPU causal attention (rotary embedding: rotary_cpu.cpp).
// Attention is tiled with an online softmax (as the CUDA kernel): query
// tiles against key tiles through small GEMMs (oneDNN sgemm for float, a
// loop nest for double), each row keeping its running maximum, sum and
// output; only the log-sum-exp per row is saved. Forward parallelises over
// (batch, head, query tile). Backward recomputes the probabilities per tile
// pair and parallelises over (batch, KV head, key tile): that owner writes
// the tile's dk and dv alone; dq rows are shared between key tiles and are
// added under a lock per (batch, head, query tile).
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/cpu/vmath.hpp"
#include "kernels/gemm.hpp"

namespace trident::kernels {

namespace {

constexpr int64_t kTileQ = 64, kTileK = 64;

// C[M,N] = alpha op(A) op(B) + beta C, row-major; the tile products.
void tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  TRIDENT_CHECK(s == dnnl_success, "oneDNN sgemm failed in attention (dnnl_status_t {})", int(s));
}
void tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
               const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // the reference loop nest
}

inline int64_t position(const int32_t* pos, int64_t i) { return pos ? pos[i] : i; }

// A tile of rows [first, first + n): its smallest and largest position.
struct Span {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
};
inline Span span(const int32_t* pos, int64_t first, int64_t n) {
  if (!pos) return {first, first + n - 1};
  Span s;
  for (int64_t i = first; i < first + n; ++i)
    s.lo = std::min<int64_t>(s.lo, pos[i]), s.hi = std::max<int64_t>(s.hi, pos[i]);
  return s;
}

// How a query tile sees a key tile: not at all, wholly, or row by row.
// A query at position p sees keys from max(its doc_start, p - window + 1)
// (the window's start) to p.
enum class Sight { none, full, masked };
template <typename T>
Sight sight(const AttentionBlock<T>& a, int64_t b, int64_t t0, int64_t tn, int64_t s0, int64_t sn) {
  const Span q = span(a.q_pos, t0, tn), k = span(a.k_pos, s0, sn);
  if (k.lo > q.hi) return Sight::none;                              // every key after every query
  if (a.window > 0 && k.hi <= q.lo - a.window) return Sight::none;  // every key before every query's window
  Span d;
  if (a.doc_start) d = span(a.doc_start + b * a.Tq, t0, tn);
  if (a.doc_start && k.hi < d.lo) return Sight::none;  // every key before every query's document
  const bool in_window = a.window <= 0 || k.lo > q.hi - a.window;
  return k.hi <= q.lo && (!a.doc_start || k.lo >= d.hi) && in_window ? Sight::full : Sight::masked;
}

// S[tn, sn] := -inf where key s0 + c is hidden from query t0 + r
template <typename T>
void mask_tile(T* S, const AttentionBlock<T>& a, int64_t b, int64_t t0, int64_t tn, int64_t s0, int64_t sn) {
  for (int64_t r = 0; r < tn; ++r) {
    const int64_t qp = position(a.q_pos, t0 + r);
    int64_t first = a.doc_start ? a.doc_start[b * a.Tq + t0 + r] : INT64_MIN;
    if (a.window > 0) first = std::max(first, qp - a.window + 1);
    for (int64_t c = 0; c < sn; ++c) {
      const int64_t kp = position(a.k_pos, s0 + c);
      if (kp > qp || kp < first) S[r * sn + c] = -INFINITY;
    }
  }
}

template <typename T>
void block_forward(T* out, int64_t ldo, T* lse, const AttentionBlock<T>& a, bool merge) {
  const int64_t B = a.B, Tq = a.Tq, Tk = a.Tk, H = a.H, D = a.D, Dv = a.Dv, group = a.H / a.KV;
  const int64_t nq = (Tq + kTileQ - 1) / kTileQ, nk = (Tk + kTileK - 1) / kTileK;
  const T scale = T(1) / std::sqrt(T(D));
#pragma omp parallel
  {
    std::vector<T> S(size_t(kTileQ * kTileK)), acc(size_t(kTileQ * Dv)), mx(static_cast<size_t>(kTileQ)),
        sum(static_cast<size_t>(kTileQ));
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t t0 = i * kTileQ, tn = std::min(kTileQ, Tq - t0), kvh = h / group;
          std::fill(mx.begin(), mx.end(), T(-INFINITY));
          std::fill(sum.begin(), sum.end(), T(0));
          std::fill(acc.begin(), acc.end(), T(0));
          const T* q = a.q + (b * Tq + t0) * a.ldq + h * D;
          for (int64_t j = 0; j < nk; ++j) {
            const int64_t s0 = j * kTileK, sn = std::min(kTileK, Tk - s0);
            const Sight seen = sight(a, b, t0, tn, s0, sn);
            if (seen == Sight::none) continue;
            const T* k = a.k + (b * Tk + s0) * a.ldkv + kvh * D;
            const T* v = a.v + (b * Tk + s0) * a.ldkv + kvh * Dv;
            tile_gemm(false, true, tn, sn, D, scale, q, a.ldq, k, a.ldkv, T(0), S.data(), sn);
            if (seen == Sight::masked) mask_tile(S.data(), a, b, t0, tn, s0, sn);
            for (int64_t r = 0; r < tn; ++r) {
              T* s = S.data() + r * sn;
              T m = mx[size_t(r)];
              for (int64_t c = 0; c < sn; ++c) m = s[c] > m ? s[c] : m;
              if (m == T(-INFINITY)) {  // nothing visible in this row yet
                std::fill(s, s + sn, T(0));
                continue;
              }
              const T corr = mx[size_t(r)] == T(-INFINITY) ? T(0) : vexp(mx[size_t(r)] - m);
              T add = 0;
#pragma omp simd reduction(+ : add)
              for (int64_t c = 0; c < sn; ++c) {
                const T p = s[c] == T(-INFINITY) ? T(0) : vexp(s[c] - m);
                s[c] = p;
                add += p;
              }
              sum[size_t(r)] = sum[size_t(r)] * corr + add;
              mx[size_t(r)] = m;
              if (corr != T(1))
                for (int64_t d = 0; d < Dv; ++d) acc[size_t(r * Dv + d)] *= corr;
            }
            tile_gemm(false, false, tn, Dv, sn, T(1), S.data(), sn, v, a.ldkv, T(1), acc.data(), Dv);
          }
          if (a.head_max) {  // the tile's rows' largest visible logit
            const T top = *std::max_element(mx.begin(), mx.begin() + tn);
#pragma omp critical(trident_attention_head_max)
            a.head_max[h] = std::max(a.head_max[h], top);
          }
          for (int64_t r = 0; r < tn; ++r) {
            const T l = sum[size_t(r)];
            const T row_lse = l > 0 ? mx[size_t(r)] + std::log(l) : T(-INFINITY);
            T& L = lse[(b * H + h) * Tq + t0 + r];
            T* o = out ? out + (b * Tq + t0 + r) * ldo + h * Dv : nullptr;
            const T* x = acc.data() + r * Dv;
            const T inv = l > 0 ? T(1) / l : T(0);
            if (!merge || L == T(-INFINITY)) {
              L = row_lse;
              if (o)
                for (int64_t d = 0; d < Dv; ++d) o[d] = x[d] * inv;
            } else if (row_lse != T(-INFINITY)) {  // out, lse := the softmax over both key sets
              const T top = std::max(L, row_lse);
              const T w_old = std::exp(L - top), w_new = std::exp(row_lse - top), tot = w_old + w_new;
              if (o)
                for (int64_t d = 0; d < Dv; ++d) o[d] = (o[d] * w_old + x[d] * inv * w_new) / tot;
              L = top + std::log(tot);
            }
          }
        }
  }
}

template <typename T>
void block_backward(T* dq, int64_t lddq, T* dk, T* dv, int64_t lddkv, const T* dout, int64_t lddo, const T* lse,
                    const T* delta, const AttentionBlock<T>& a) {
  const int64_t B = a.B, Tq = a.Tq, Tk = a.Tk, H = a.H, KV = a.KV, D = a.D, Dv = a.Dv, group = a.H / a.KV;
  const int64_t nq = (Tq + kTileQ - 1) / kTileQ, nk = (Tk + kTileK - 1) / kTileK;
  const T scale = T(1) / std::sqrt(T(D));
  std::vector<std::mutex> dq_locks(size_t(B * H * nq));
#pragma omp parallel
  {
    std::vector<T> P(size_t(kTileQ * kTileK)), dS(size_t(kTileQ * kTileK)), dk_acc(size_t(kTileK * D)),
        dv_acc(size_t(kTileK * Dv)), dq_part(size_t(kTileQ * D));
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t kvh = 0; kvh < KV; ++kvh)
        for (int64_t j = 0; j < nk; ++j) {
          const int64_t s0 = j * kTileK, sn = std::min(kTileK, Tk - s0);
          const T* k = a.k + (b * Tk + s0) * a.ldkv + kvh * D;
          const T* v = a.v + (b * Tk + s0) * a.ldkv + kvh * Dv;
          std::fill(dk_acc.begin(), dk_acc.end(), T(0));
          std::fill(dv_acc.begin(), dv_acc.end(), T(0));
          bool touched = false;
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
            for (int64_t i = 0; i < nq; ++i) {
              const int64_t t0 = i * kTileQ, tn = std::min(kTileQ, Tq - t0);
              const Sight seen = sight(a, b, t0, tn, s0, sn);
              if (seen == Sight::none) continue;
              touched = true;
              const T* q = a.q + (b * Tq + t0) * a.ldq + h * D;
              const T* go = dout + (b * Tq + t0) * lddo + h * Dv;
              const T* L = lse + (b * H + h) * Tq + t0;
              const T* Dl = delta + (b * H + h) * Tq + t0;
              tile_gemm(false, true, tn, sn, D, scale, q, a.ldq, k, a.ldkv, T(0), P.data(), sn);
              if (seen == Sight::masked) mask_tile(P.data(), a, b, t0, tn, s0, sn);
              for (int64_t r = 0; r < tn; ++r) {
                T* p = P.data() + r * sn;
                const T l = L[r];
#pragma omp simd
                for (int64_t c = 0; c < sn; ++c)
                  p[c] = p[c] == T(-INFINITY) || l == T(-INFINITY) ? T(0) : vexp(p[c] - l);
              }
              tile_gemm(true, false, sn, Dv, tn, T(1), P.data(), sn, go, lddo, T(1), dv_acc.data(),
                        Dv);                                                                       // dV += P^T dO
              tile_gemm(false, true, tn, sn, Dv, T(1), go, lddo, v, a.ldkv, T(0), dS.data(), sn);  // dP = dO V^T
              for (int64_t r = 0; r < tn; ++r) {
                T* ds = dS.data() + r * sn;
                const T* p = P.data() + r * sn;
                const T dl = Dl[r];
#pragma omp simd
                for (int64_t c = 0; c < sn; ++c) ds[c] = p[c] * (ds[c] - dl) * scale;
              }
              tile_gemm(true, false, sn, D, tn, T(1), dS.data(), sn, q, a.ldq, T(1), dk_acc.data(), D);  // dK += dS^T Q
              tile_gemm(false, false, tn, D, sn, T(1), dS.data(), sn, k, a.ldkv, T(0), dq_part.data(), D);  // dS K
              std::lock_guard<std::mutex> hold(dq_locks[size_t((b * H + h) * nq + i)]);
              for (int64_t r = 0; r < tn; ++r) {
                T* d = dq + (b * Tq + t0 + r) * lddq + h * D;
                const T* x = dq_part.data() + r * D;
#pragma omp simd
                for (int64_t e = 0; e < D; ++e) d[e] += x[e];
              }
            }
          if (!touched) continue;
          for (int64_t c = 0; c < sn; ++c) {
            T* gk = dk + (b * Tk + s0 + c) * lddkv + kvh * D;
            T* gv = dv + (b * Tk + s0 + c) * lddkv + kvh * Dv;
            for (int64_t e = 0; e < D; ++e) gk[e] += dk_acc[size_t(c * D + e)];
            for (int64_t e = 0; e < Dv; ++e) gv[e] += dv_acc[size_t(c * Dv + e)];
          }
        }
  }
}

// The whole sequence as one block: q, k and v heads of qkv.
template <typename T>
AttentionBlock<T> self_block(const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D, int64_t Dv,
                             const int32_t* doc_start, int64_t window) {
  const int64_t W = attention_qkv_width(H, KV, D, Dv);
  AttentionBlock<T> a;
  a.B = B, a.Tq = a.Tk = T_, a.H = H, a.KV = KV, a.D = D, a.Dv = Dv;
  a.q = qkv, a.ldq = W, a.k = qkv + H * D, a.v = qkv + (H + KV) * D, a.ldkv = W;
  a.doc_start = doc_start, a.window = window;
  return a;
}

template <typename T>
void check_block(const AttentionBlock<T>& a) {
  TRIDENT_CHECK(a.KV > 0 && a.H % a.KV == 0, "attention block: {} heads over {} KV heads", a.H, a.KV);
  TRIDENT_CHECK(a.D > 0 && a.Dv > 0, "attention block: head sizes {} (query/key) and {} (value) must be set", a.D,
                a.Dv);
  TRIDENT_CHECK(a.window >= 0, "attention block: a window of {} keys (0: none)", a.window);
}

}  // namespace

int64_t attention_qkv_width(int64_t H, int64_t KV, int64_t D, int64_t Dv) { return (H + KV) * D + KV * Dv; }

int64_t attention_state_elements(int64_t B, int64_t T_, int64_t H) { return B * H * T_; }

namespace cpu {
template <typename T>
void attention_sink_forward(T* out, int64_t ldo, T* lse, const T* sinks, int64_t B, int64_t Tq, int64_t H, int64_t Dv);
template <typename T>
void attention_sink_backward(T* dsinks, const T* lse, const T* delta, const T* sinks, int64_t B, int64_t Tq, int64_t H);

template <typename T>
void attention_lse(T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D, int64_t Dv,
                   const int32_t* doc_start, int64_t window, const T* sinks) {
  block_forward<T>(nullptr, 0, lse, self_block(qkv, B, T_, H, KV, D, Dv, doc_start, window), false);
  if (sinks) attention_sink_forward<T>(nullptr, 0, lse, sinks, B, T_, H, Dv);
}

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                       int64_t Dv, const int32_t* doc_start, int64_t window, const T* sinks) {
  block_forward(out, H * Dv, lse, self_block(qkv, B, T_, H, KV, D, Dv, doc_start, window), false);
  if (sinks) attention_sink_forward(out, H * Dv, lse, sinks, B, T_, H, Dv);
}

template <typename T>
void attention_delta(T* delta, const T* dout, const T* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H, int64_t D) {
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tq; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const T* g = dout + (b * Tq + t) * ldo + h * D;
        const T* o = out + (b * Tq + t) * ldo + h * D;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t d = 0; d < D; ++d) s += g[d] * o[d];
        delta[(b * H + h) * Tq + t] = s;
      }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B, int64_t T_,
                        int64_t H, int64_t KV, int64_t D, int64_t Dv, const int32_t* doc_start, int64_t window,
                        const T* sinks, T* dsinks) {
  const int64_t W = attention_qkv_width(H, KV, D, Dv);
  std::memset(dqkv, 0, sizeof(T) * size_t(B * T_ * W));
  std::vector<T> delta(size_t(B * H * T_));
  attention_delta(delta.data(), dout, out, H * Dv, B, T_, H, Dv);
  block_backward(dqkv, W, dqkv + H * D, dqkv + (H + KV) * D, W, dout, H * Dv, lse, delta.data(),
                 self_block(qkv, B, T_, H, KV, D, Dv, doc_start, window));
  if (sinks) attention_sink_backward(dsinks, lse, delta.data(), sinks, B, T_, H);
}

template <typename T>
void attention_sink_forward(T* out, int64_t ldo, T* lse, const T* sinks, int64_t B, int64_t Tq, int64_t H, int64_t Dv) {
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tq; ++t)
      for (int64_t h = 0; h < H; ++h) {
        T& L = lse[(b * H + h) * Tq + t];
        const T s = sinks[h], top = std::max(L, s);
        const T folded = top + std::log(std::exp(L - top) + std::exp(s - top));
        const T keep = L == T(-INFINITY) ? T(0) : std::exp(L - folded);
        L = folded;
        if (!out) continue;
        T* o = out + (b * Tq + t) * ldo + h * Dv;
        for (int64_t d = 0; d < Dv; ++d) o[d] *= keep;
      }
}

template <typename T>
void attention_sink_backward(T* dsinks, const T* lse, const T* delta, const T* sinks, int64_t B, int64_t Tq,
                             int64_t H) {
#pragma omp parallel for
  for (int64_t h = 0; h < H; ++h) {
    T g = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tq; ++t) {
        const int64_t i = (b * H + h) * Tq + t;
        g += std::exp(sinks[h] - lse[i]) * delta[i];
      }
    dsinks[h] -= g;
  }
}

template <typename T>
void attention_block_forward(T* out, int64_t ldo, T* lse, const AttentionBlock<T>& a, bool merge) {
  check_block(a);
  block_forward(out, ldo, lse, a, merge);
}

template <typename T>
void attention_block_backward(T* dq, int64_t lddq, T* dk, T* dv, int64_t lddkv, const T* dout, int64_t lddo,
                              const T* lse, const T* delta, const AttentionBlock<T>& a) {
  check_block(a);
  block_backward(dq, lddq, dk, dv, lddkv, dout, lddo, lse, delta, a);
}
}  // namespace cpu

#define INSTANTIATE(T)                                                                                                \
  template void cpu::attention_lse<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,             \
                                      const int32_t*, int64_t, const T*);                                             \
  template void cpu::attention_block_forward<T>(T*, int64_t, T*, const AttentionBlock<T>&, bool);                     \
  template void cpu::attention_delta<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t);         \
  template void cpu::attention_sink_forward<T>(T*, int64_t, T*, const T*, int64_t, int64_t, int64_t, int64_t);        \
  template void cpu::attention_sink_backward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);         \
  template void cpu::attention_block_backward<T>(T*, int64_t, T*, T*, int64_t, const T*, int64_t, const T*, const T*, \
                                                 const AttentionBlock<T>&);                                           \
  template void cpu::attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,     \
                                          const int32_t*, int64_t, const T*);                                         \
  template void cpu::attention_backward<T>(T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,     \
                                           int64_t, int64_t, int64_t, const int32_t*, int64_t, const T*, T*);
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::kernels
