// The tiles the CUDA attention kernels share (attention_cuda.cu: whole
// sequences; attention_block_cuda.cu: blocks at global positions), written
// once: 64 queries x 64 keys in shared memory, 128 threads per block, thread t
// owns tile row t / 2 and half (t % 2) of the head dimension; the two threads
// of a row are neighbours in one warp and exchange through shared memory
// with __syncwarp. Each kernel says which (query, key) pairs are visible
// through a functor of the tile column; masked pairs count as -inf scores.
// HD = DMAX / 2: the head-dimension elements a thread owns (registers).
#pragma once

namespace trident::kernels::cuda {

constexpr int kTile = 64;      // queries and keys per tile
constexpr int kThreads = 128;  // 2 per tile row

// Head size D, the shared-memory row stride SD (odd: no bank conflicts) and
// the score scale 1/sqrt(D).
struct TileShape {
  int D, SD;
  float scale;
};

// dst[kTile][SD] <- rows row0.. (of n) of src, columns col0 .. col0 + D; zeros past n
__device__ __forceinline__ void load_rows(float* dst, const float* src, int64_t row0, int64_t n, TileShape t,
                                          int64_t col0, int64_t stride) {
  for (int idx = threadIdx.x; idx < kTile * t.D; idx += blockDim.x) {
    const int r = idx / t.D, c = idx % t.D;
    const int64_t row = row0 + r;
    dst[r * t.SD + c] = row < n ? src[row * stride + col0 + c] : 0.f;
  }
}

// ls[i], dl[i] <- the lse and delta of query row q0 + i (of n; 0 past n); row_base indexes row 0.
__device__ __forceinline__ void load_row_stats(float* ls, float* dl, const float* lse, const float* delta,
                                               int64_t row_base, int64_t q0, int64_t n) {
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
    const int64_t q = q0 + i;
    ls[i] = q < n ? lse[row_base + q] : 0.f;
    dl[i] = q < n ? delta[row_base + q] : 0.f;
  }
}

// Forward: folds one key tile (Ks, Vs) into this thread's row of the online
// softmax (running max m, sum l, unnormalised output acc). visible(c): key
// column c is seen by the row. Ps: [kTile][kTile + 1] scratch.
template <int HD, typename Visible>
__device__ __forceinline__ void softmax_tile(const float* Qs, const float* Ks, const float* Vs, float* Ps, TileShape t,
                                             Visible visible, float& m, float& l, float (&acc)[HD]) {
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  float s[kTile / 2];  // fully unrolled loops: s stays in registers
  float tile_max = -INFINITY;
#pragma unroll
  for (int j = 0; j < kTile / 2; ++j) {
    const int c = half * (kTile / 2) + j;
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
  for (int j = 0; j < kTile / 2; ++j) {
    const float p = expf(s[j] - base_m);
    Ps[r * (kTile + 1) + half * (kTile / 2) + j] = p;
    tile_sum += p;
  }
  tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
  const float alpha = expf(m - base_m);
  l = l * alpha + tile_sum;
  m = m_new;
  __syncwarp();
#pragma unroll
  for (int i = 0; i < HD; ++i) acc[i] *= alpha;
  for (int c = 0; c < kTile; ++c) {
    const float p = Ps[r * (kTile + 1) + c];
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < t.D) acc[i] += p * Vs[c * t.SD + e];
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
  for (int e = 0; e < t.D; ++e) {
    dot += q[e] * k[e];
    dp += go[e] * v[e];
  }
  p = lse == -INFINITY ? 0.f : expf(dot * t.scale - lse);
  ds = p * (dp - delta);
}

// dK, dV: this thread's key row (tile row c) against one query tile (Qs,
// dOs, their lse Ls and delta Dl); adds into dk (unscaled) and dv.
// visible(rq): query column rq sees the key. Ps, dSs: [kTile][kTile + 1].
template <int HD, typename Visible>
__device__ __forceinline__ void kv_grad_tile(const float* Ks, const float* Vs, const float* Qs, const float* dOs,
                                             const float* Ls, const float* Dl, float* Ps, float* dSs, TileShape t,
                                             Visible visible, float (&dk)[HD], float (&dv)[HD]) {
  const int c = threadIdx.x >> 1, half = threadIdx.x & 1;
  for (int j = 0; j < kTile / 2; ++j) {
    const int rq = half * (kTile / 2) + j;
    float p = 0.f, ds = 0.f;
    if (visible(rq))
      prob_and_score_grad(Qs + rq * t.SD, Ks + c * t.SD, dOs + rq * t.SD, Vs + c * t.SD, t, Ls[rq], Dl[rq], p, ds);
    Ps[c * (kTile + 1) + rq] = p;
    dSs[c * (kTile + 1) + rq] = ds;
  }
  __syncwarp();
  for (int rq = 0; rq < kTile; ++rq) {
    const float p = Ps[c * (kTile + 1) + rq], ds = dSs[c * (kTile + 1) + rq];
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < t.D) {
        dv[i] += p * dOs[rq * t.SD + e];
        dk[i] += ds * Qs[rq * t.SD + e];
      }
    }
  }
  __syncwarp();
}

// dQ: this thread's query row (tile row r, its lse L and delta Dq) against
// one key tile; adds into dq (unscaled). visible(c): key column c is seen.
// dSs: [kTile][kTile + 1].
template <int HD, typename Visible>
__device__ __forceinline__ void q_grad_tile(const float* Qs, const float* dOs, const float* Ks, const float* Vs,
                                            float* dSs, TileShape t, float L, float Dq, Visible visible,
                                            float (&dq)[HD]) {
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  for (int j = 0; j < kTile / 2; ++j) {
    const int c = half * (kTile / 2) + j;
    float p = 0.f, ds = 0.f;
    if (visible(c)) prob_and_score_grad(Qs + r * t.SD, Ks + c * t.SD, dOs + r * t.SD, Vs + c * t.SD, t, L, Dq, p, ds);
    dSs[r * (kTile + 1) + c] = ds;
  }
  __syncwarp();
  for (int c = 0; c < kTile; ++c) {
    const float ds = dSs[r * (kTile + 1) + c];
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < t.D) dq[i] += ds * Ks[c * t.SD + e];
    }
  }
  __syncwarp();
}

// Each kernel's shared memory: its tiles carved from the dynamic buffer
// (rows of stride SD; P and dS [kTile][kTile + 1]), and the size to launch with.
struct ForwardTiles {  // the forward: Q, K, V and the probabilities P
  float *Q, *K, *V, *P;
  static size_t floats(int SD) { return 3 * size_t(kTile) * size_t(SD) + size_t(kTile) * (kTile + 1); }
};
__device__ __forceinline__ ForwardTiles forward_tiles(float* smem, int SD) {
  float* q = smem;
  return {q, q + kTile * SD, q + 2 * kTile * SD, q + 3 * kTile * SD};
}
struct KvGradTiles {  // the key-side backward: K, V, Q, dO, P and dS ([key][query]), the query tile's lse and delta
  float *K, *V, *Q, *dO, *P, *dS, *L, *Dl;
  static size_t floats(int SD) {
    return 4 * size_t(kTile) * size_t(SD) + 2 * size_t(kTile) * (kTile + 1) + 2 * size_t(kTile);
  }
};
__device__ __forceinline__ KvGradTiles kv_grad_tiles(float* smem, int SD) {
  KvGradTiles s;
  s.K = smem, s.V = s.K + kTile * SD, s.Q = s.V + kTile * SD, s.dO = s.Q + kTile * SD;
  s.P = s.dO + kTile * SD, s.dS = s.P + kTile * (kTile + 1), s.L = s.dS + kTile * (kTile + 1), s.Dl = s.L + kTile;
  return s;
}
struct QGradTiles {  // the query-side backward: Q, dO, K, V and dS ([query][key])
  float *Q, *dO, *K, *V, *dS;
  static size_t floats(int SD) { return 4 * size_t(kTile) * size_t(SD) + size_t(kTile) * (kTile + 1); }
};
__device__ __forceinline__ QGradTiles q_grad_tiles(float* smem, int SD) {
  float* q = smem;
  return {q, q + kTile * SD, q + 2 * kTile * SD, q + 3 * kTile * SD, q + 4 * kTile * SD};
}

// The shape of D-wide heads, or a failure naming the limit (1..128).
inline TileShape tile_shape(int64_t D) {
  if (D > 128 || D < 1)
    cuda_fail("CUDA", "attention", __FILE__, __LINE__, "head size must be 1..128 for the CUDA attention kernels");
  return {int(D), int(D % 2 == 0 ? D + 1 : D), 1.f / sqrtf(float(D))};
}

}  // namespace trident::kernels::cuda
