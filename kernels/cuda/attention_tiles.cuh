// The tiles the CUDA attention kernels share (attention_cuda.cu: whole
// sequences; attention_block_cuda.cu: blocks at global positions), written
// once: TILE queries x TILE keys in shared memory (64 for heads up to 128,
// 32 above, to 256), 2 TILE threads per block, thread t
// owns tile row t / 2 and half (t % 2) of the head dimension; the two threads
// of a row are neighbours in one warp and exchange through shared memory
// with __syncwarp. Each kernel says which (query, key) pairs are visible
// through a functor of the tile column; masked pairs count as -inf scores.
// HD = DMAX / 2: the head-dimension elements a thread owns (registers).
// Queries and keys have heads of D, values (and the output and its
// gradient) heads of Dv; DMAX covers the larger.
#pragma once
#include <type_traits>

namespace trident::kernels::cuda {

// Queries and keys per tile for heads of up to DMAX values: 64, or 32 for
// heads above 128 (multi-head latent attention's 192), whose backward's four
// 32-row tiles of up to 257 floats take at most 140 KB of shared memory
// (64 rows would need 280 KB, more than any GPU has). 2 threads per tile row.
template <int DMAX>
constexpr int kTileFor = DMAX > 128 ? 32 : 64;
template <int DMAX>
constexpr int kThreadsFor = 2 * kTileFor<DMAX>;

// Head sizes D (queries, keys) and Dv (values), the shared-memory row
// stride SD (odd: no bank conflicts) and the score scale 1/sqrt(D).
struct TileShape {
  int D, Dv, SD;
  float scale;
};

// dst[TILE][SD] <- rows row0.. (of n) of src, columns col0 .. col0 + cols; zeros past n
template <int TILE>
__device__ __forceinline__ void load_rows(float* dst, const float* src, int64_t row0, int64_t n, TileShape t, int cols,
                                          int64_t col0, int64_t stride) {
  for (int idx = threadIdx.x; idx < TILE * cols; idx += blockDim.x) {
    const int r = idx / cols, c = idx % cols;
    const int64_t row = row0 + r;
    dst[r * t.SD + c] = row < n ? src[row * stride + col0 + c] : 0.f;
  }
}

// ls[i], dl[i] <- the lse and delta of query row q0 + i (of n; 0 past n); row_base indexes row 0.
template <int TILE>
__device__ __forceinline__ void load_row_stats(float* ls, float* dl, const float* lse, const float* delta,
                                               int64_t row_base, int64_t q0, int64_t n) {
  for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
    const int64_t q = q0 + i;
    ls[i] = q < n ? lse[row_base + q] : 0.f;
    dl[i] = q < n ? delta[row_base + q] : 0.f;
  }
}

// Forward: folds one key tile (Ks, Vs) into this thread's row of the online
// softmax (running max m, sum l, unnormalised output acc). visible(c): key
// column c is seen by the row. Ps: [TILE][TILE + 1] scratch.
template <int TILE, int HD, typename Visible>
__device__ __forceinline__ void softmax_tile(const float* Qs, const float* Ks, const float* Vs, float* Ps, TileShape t,
                                             Visible visible, float& m, float& l, float (&acc)[HD]) {
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  float s[TILE / 2];  // fully unrolled loops: s stays in registers
  float tile_max = -INFINITY;
#pragma unroll
  for (int j = 0; j < TILE / 2; ++j) {
    const int c = half * (TILE / 2) + j;
    float dot = 0.f;
    for (int e = 0; e < t.D; ++e) dot += Qs[r * t.SD + e] * Ks[c * t.SD + e];
    s[j] = visible(c) ? dot * t.scale : -INFINITY;
    tile_max = fmaxf(tile_max, s[j]);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  const float m_new = fmaxf(m, tile_max);
  const float base_m = m_new == -INFINITY ? 0.f : m_new;  // a row that saw only masked keys so far
  float tile_sum = 0.f;
#pragma unroll
  for (int j = 0; j < TILE / 2; ++j) {
    const float p = expf(s[j] - base_m);
    Ps[r * (TILE + 1) + half * (TILE / 2) + j] = p;
    tile_sum += p;
  }
  tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
  const float alpha = expf(m - base_m);
  l = l * alpha + tile_sum;
  m = m_new;
  __syncwarp();
#pragma unroll
  for (int i = 0; i < HD; ++i) acc[i] *= alpha;
  for (int c = 0; c < TILE; ++c) {
    const float p = Ps[r * (TILE + 1) + c];
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < t.Dv) acc[i] += p * Vs[c * t.SD + e];
    }
  }
  __syncwarp();  // Ps row read by both threads before the next tile writes it
}

// Backward's recomputation for one (query row, key row) pair: the
// probability p = exp(scale q.k - lse) (0 for a row that saw no key) and
// its score gradient ds = p (dO.v - delta).
__device__ __forceinline__ void prob_and_score_grad(const float* q, const float* k, const float* go, const float* v,
                                                    TileShape t, float lse, float delta, float& p, float& ds) {
  float dot = 0.f, dp = 0.f;
  for (int e = 0; e < t.D; ++e) dot += q[e] * k[e];
  for (int e = 0; e < t.Dv; ++e) dp += go[e] * v[e];
  p = lse == -INFINITY ? 0.f : expf(dot * t.scale - lse);
  ds = p * (dp - delta);
}

// dK, dV: this thread's key row (tile row c) against one query tile (Qs,
// dOs, their lse Ls and delta Dl); adds into dk (unscaled) and dv.
// visible(rq): query column rq sees the key. Ps, dSs: [TILE][TILE + 1].
template <int TILE, int HD, typename Visible>
__device__ __forceinline__ void kv_grad_tile(const float* Ks, const float* Vs, const float* Qs, const float* dOs,
                                             const float* Ls, const float* Dl, float* Ps, float* dSs, TileShape t,
                                             Visible visible, float (&dk)[HD], float (&dv)[HD]) {
  const int c = threadIdx.x >> 1, half = threadIdx.x & 1;
  for (int j = 0; j < TILE / 2; ++j) {
    const int rq = half * (TILE / 2) + j;
    float p = 0.f, ds = 0.f;
    if (visible(rq))
      prob_and_score_grad(Qs + rq * t.SD, Ks + c * t.SD, dOs + rq * t.SD, Vs + c * t.SD, t, Ls[rq], Dl[rq], p, ds);
    Ps[c * (TILE + 1) + rq] = p;
    dSs[c * (TILE + 1) + rq] = ds;
  }
  __syncwarp();
  for (int rq = 0; rq < TILE; ++rq) {
    const float p = Ps[c * (TILE + 1) + rq], ds = dSs[c * (TILE + 1) + rq];
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < t.Dv) dv[i] += p * dOs[rq * t.SD + e];
      if (e < t.D) dk[i] += ds * Qs[rq * t.SD + e];
    }
  }
  __syncwarp();
}

// dQ: this thread's query row (tile row r, its lse L and delta Dq) against
// one key tile; adds into dq (unscaled). visible(c): key column c is seen.
// dSs: [TILE][TILE + 1].
template <int TILE, int HD, typename Visible>
__device__ __forceinline__ void q_grad_tile(const float* Qs, const float* dOs, const float* Ks, const float* Vs,
                                            float* dSs, TileShape t, float L, float Dq, Visible visible,
                                            float (&dq)[HD]) {
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  for (int j = 0; j < TILE / 2; ++j) {
    const int c = half * (TILE / 2) + j;
    float p = 0.f, ds = 0.f;
    if (visible(c)) prob_and_score_grad(Qs + r * t.SD, Ks + c * t.SD, dOs + r * t.SD, Vs + c * t.SD, t, L, Dq, p, ds);
    dSs[r * (TILE + 1) + c] = ds;
  }
  __syncwarp();
  for (int c = 0; c < TILE; ++c) {
    const float ds = dSs[r * (TILE + 1) + c];
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < t.D) dq[i] += ds * Ks[c * t.SD + e];
    }
  }
  __syncwarp();
}

// Each kernel's shared memory: its tiles carved from the dynamic buffer
// (rows of stride SD; P and dS [TILE][TILE + 1]), and the size to launch with.
template <int TILE>
struct ForwardTiles {  // the forward: Q, K, V and the probabilities P
  float *Q, *K, *V, *P;
  static size_t floats(int SD) { return 3 * size_t(TILE) * size_t(SD) + size_t(TILE) * (TILE + 1); }
};
template <int TILE>
__device__ __forceinline__ ForwardTiles<TILE> forward_tiles(float* smem, int SD) {
  float* q = smem;
  return {q, q + TILE * SD, q + 2 * TILE * SD, q + 3 * TILE * SD};
}
template <int TILE>
struct KvGradTiles {  // the key-side backward: K, V, Q, dO, P and dS ([key][query]), the query tile's lse and delta
  float *K, *V, *Q, *dO, *P, *dS, *L, *Dl;
  static size_t floats(int SD) {
    return 4 * size_t(TILE) * size_t(SD) + 2 * size_t(TILE) * (TILE + 1) + 2 * size_t(TILE);
  }
};
template <int TILE>
__device__ __forceinline__ KvGradTiles<TILE> kv_grad_tiles(float* smem, int SD) {
  KvGradTiles<TILE> s;
  s.K = smem, s.V = s.K + TILE * SD, s.Q = s.V + TILE * SD, s.dO = s.Q + TILE * SD;
  s.P = s.dO + TILE * SD, s.dS = s.P + TILE * (TILE + 1), s.L = s.dS + TILE * (TILE + 1), s.Dl = s.L + TILE;
  return s;
}
template <int TILE>
struct QGradTiles {  // the query-side backward: Q, dO, K, V and dS ([query][key])
  float *Q, *dO, *K, *V, *dS;
  static size_t floats(int SD) { return 4 * size_t(TILE) * size_t(SD) + size_t(TILE) * (TILE + 1); }
};
template <int TILE>
__device__ __forceinline__ QGradTiles<TILE> q_grad_tiles(float* smem, int SD) {
  float* q = smem;
  return {q, q + TILE * SD, q + 2 * TILE * SD, q + 3 * TILE * SD, q + 4 * TILE * SD};
}

// Calls f(std::integral_constant<int, DMAX>) with the kernels' instance for
// heads of up to D values: DMAX 64, 128, 192 or 256.
template <typename F>
void with_dmax(int64_t D, F f) {
  if (D <= 64)
    f(std::integral_constant<int, 64>{});
  else if (D <= 128)
    f(std::integral_constant<int, 128>{});
  else if (D <= 192)
    f(std::integral_constant<int, 192>{});
  else
    f(std::integral_constant<int, 256>{});
}

// The shape of heads of D (queries, keys) and Dv (values), or a failure
// naming the limit (1..256 each).
inline TileShape tile_shape(int64_t D, int64_t Dv) {
  if (D > 256 || D < 1 || Dv > 256 || Dv < 1)
    cuda_fail("CUDA", "attention", __FILE__, __LINE__, "head sizes must be 1..256 for the CUDA attention kernels");
  const int64_t wide = D > Dv ? D : Dv;
  return {int(D), int(Dv), int(wide % 2 == 0 ? wide + 1 : wide), 1.f / sqrtf(float(D))};
}
// The widest head (DMAX's choice)
inline int64_t widest(const TileShape& t) { return t.D > t.Dv ? t.D : t.Dv; }

}  // namespace trident::kernels::cuda
