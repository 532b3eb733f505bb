// Causal grouped-query attention on CUDA, flash-style (Dao et al.): tiles of
// 64 queries x 64 keys in shared memory, an online softmax, no T x T matrix.
// Forward keeps lse[B,H,T] (log-sum-exp of each row's scaled scores) for
// backward, which recomputes the probabilities tile by tile in two kernels
// without atomics (deterministic): one owns a key tile and accumulates its
// dK and dV over the query heads of its KV group and every query tile after
// it; the other owns a query tile and accumulates dQ. delta = rowsum(dO * O)
// comes from a small kernel first.
// Thread layout of every kernel: 128 threads, thread t owns tile row t / 2
// and half (t % 2) of the head dimension; the two threads of a row are
// neighbours in one warp and exchange through shared memory with
// __syncwarp. Head sizes up to 128 (DMAX 64 or 128 chosen at launch).
// fp32 FMA throughout (no tensor cores: left for a later kernel).
#include "kernels/cuda/common.cuh"
// after common.cuh, which renames the namespace under the CPU emulation
#include "kernels/cuda/attention_tiles.cuh"

namespace trident::kernels::cuda {

namespace {

struct Dims {
  int64_t B, T, H, KV, D, W;  // W = (H + 2 KV) D, the qkv row width
  int SD;                     // shared-memory row stride (odd: no bank conflicts)
  float scale;
  const int32_t* doc_start;  // [B*T] document masking, or null
};

// First key query row (b, q) may see (0 without document masking).
__device__ inline int64_t first_key(const Dims& d, int64_t b, int64_t q) {
  return d.doc_start && q < d.T ? d.doc_start[b * d.T + q] : 0;
}

__device__ inline void load_tile(float* dst, const float* src, int64_t row0, const Dims& d, int64_t col0,
                                 int64_t row_stride) {
  // dst[kTile][SD] <- rows row0.. of src (columns col0 .. col0 + D), zeros past T
  for (int idx = threadIdx.x; idx < kTile * d.D; idx += blockDim.x) {
    const int r = idx / int(d.D), c = idx % int(d.D);
    const int64_t row = row0 + r;
    dst[r * d.SD + c] = row < d.T ? src[row * row_stride + col0 + c] : 0.f;
  }
}

// Backward's recomputation for one (query row, key row) pair of the tiles in
// shared memory: the probability p = exp(scale q.k - lse) and its score
// gradient ds = p (dO.v - delta).
__device__ inline void prob_and_score_grad(const float* q, const float* k, const float* go, const float* v,
                                           const Dims& d, float lse, float delta, float& p, float& ds) {
  float dot = 0.f, dp = 0.f;
  for (int e = 0; e < d.D; ++e) {
    dot += q[e] * k[e];
    dp += go[e] * v[e];
  }
  p = expf(dot * d.scale - lse);
  ds = p * (dp - delta);
}

template <int DMAX>
__global__ void __launch_bounds__(kThreads) attn_fwd(float* out, float* lse, const float* qkv, Dims d) {
  DYNAMIC_SMEM(float, smem);
  float* Qs = smem;
  float* Ks = Qs + kTile * d.SD;
  float* Vs = Ks + kTile * d.SD;
  float* Ps = Vs + kTile * d.SD;  // [kTile][kTile + 1]
  const int64_t q0 = int64_t(blockIdx.x) * kTile, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const float* base = qkv + b * d.T * d.W;
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  const int64_t k_first = first_key(d, b, q);
  constexpr int HD = DMAX / 2;
  load_tile(Qs, base, q0, d, h * d.D, d.W);
  float acc[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t last_key = min(q0 + kTile, d.T) - 1;
  for (int64_t k0 = 0; k0 <= last_key; k0 += kTile) {
    __syncthreads();  // the previous tile's K/V are no longer read
    load_tile(Ks, base, k0, d, (d.H + kvh) * d.D, d.W);
    load_tile(Vs, base, k0, d, (d.H + d.KV + kvh) * d.D, d.W);
    __syncthreads();
    float s[kTile / 2];  // fully unrolled loops: s stays in registers
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile / 2; ++j) {
      const int c = half * (kTile / 2) + j;
      const int64_t key = k0 + c;
      float dot = 0.f;
      for (int e = 0; e < d.D; ++e) dot += Qs[r * d.SD + e] * Ks[c * d.SD + e];
      s[j] = (key <= q && key < d.T && key >= k_first) ? dot * d.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float base_m = m_new == -INFINITY ? 0.f : m_new;  // rows past T see only masked keys
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
        if (e < d.D) acc[i] += p * Vs[c * d.SD + e];
      }
    }
    __syncwarp();  // Ps row read by both threads before the next tile writes it
  }
  if (q >= d.T) return;
  if (out) {
    float* o = out + (b * d.T + q) * d.H * d.D + h * d.D;
    const float inv = 1.f / l;
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < d.D) o[e] = acc[i] * inv;
    }
  }
  if (half == 0) lse[(b * d.H + h) * d.T + q] = m + logf(l);
}

// delta[b, h, t] = sum_e dout[b, t, h, e] * out[b, t, h, e]; a warp per row
__global__ void attn_delta(float* delta, const float* dout, const float* out, Dims d) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // over B * T * H
  const int lane = threadIdx.x & 31;
  if (row >= d.B * d.T * d.H) return;
  const int64_t h = row % d.H, bt = row / d.H, b = bt / d.T, t = bt % d.T;
  const float* go = dout + bt * d.H * d.D + h * d.D;
  const float* o = out + bt * d.H * d.D + h * d.D;
  float s = 0.f;
  for (int e = lane; e < d.D; e += 32) s += go[e] * o[e];
  s = warp_sum(s);
  if (lane == 0) delta[(b * d.H + h) * d.T + t] = s;
}

// Block per (key tile, KV head, batch): dK, dV of its keys over the group's query heads.
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_kv(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta, Dims d) {
  DYNAMIC_SMEM(float, smem);
  float* Ks = smem;
  float* Vs = Ks + kTile * d.SD;
  float* Qs = Vs + kTile * d.SD;
  float* dOs = Qs + kTile * d.SD;
  float* Ps = dOs + kTile * d.SD;  // [key][query], stride kTile + 1
  float* dSs = Ps + kTile * (kTile + 1);
  float* Ls = dSs + kTile * (kTile + 1);  // lse of the query tile
  float* Dl = Ls + kTile;                 // delta of the query tile
  const int64_t k0 = int64_t(blockIdx.x) * kTile, kvh = blockIdx.y, b = blockIdx.z;
  const int64_t group = d.H / d.KV;
  const float* base = qkv + b * d.T * d.W;
  const float* gbase = dout + b * d.T * d.H * d.D;
  const int c = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t key = k0 + c;
  constexpr int HD = DMAX / 2;
  load_tile(Ks, base, k0, d, (d.H + kvh) * d.D, d.W);
  load_tile(Vs, base, k0, d, (d.H + d.KV + kvh) * d.D, d.W);
  float dk[HD], dv[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) dk[i] = dv[i] = 0.f;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
    for (int64_t q0 = (k0 / kTile) * kTile; q0 < d.T; q0 += kTile) {
      __syncthreads();
      load_tile(Qs, base, q0, d, h * d.D, d.W);
      load_tile(dOs, gbase, q0, d, h * d.D, d.H * d.D);
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        const int64_t q = q0 + i;
        Ls[i] = q < d.T ? lse[(b * d.H + h) * d.T + q] : 0.f;
        Dl[i] = q < d.T ? delta[(b * d.H + h) * d.T + q] : 0.f;
      }
      __syncthreads();
      for (int j = 0; j < kTile / 2; ++j) {
        const int rq = half * (kTile / 2) + j;
        const int64_t q = q0 + rq;
        float p = 0.f, ds = 0.f;
        if (key <= q && q < d.T && key < d.T && key >= first_key(d, b, q))
          prob_and_score_grad(Qs + rq * d.SD, Ks + c * d.SD, dOs + rq * d.SD, Vs + c * d.SD, d, Ls[rq], Dl[rq], p, ds);
        Ps[c * (kTile + 1) + rq] = p;
        dSs[c * (kTile + 1) + rq] = ds;
      }
      __syncwarp();
      for (int rq = 0; rq < kTile; ++rq) {
        const float p = Ps[c * (kTile + 1) + rq], ds = dSs[c * (kTile + 1) + rq];
#pragma unroll
        for (int i = 0; i < HD; ++i) {
          const int e = half * HD + i;
          if (e < d.D) {
            dv[i] += p * dOs[rq * d.SD + e];
            dk[i] += ds * Qs[rq * d.SD + e];
          }
        }
      }
      __syncwarp();
    }
  if (key >= d.T) return;
  float* row = dqkv + (b * d.T + key) * d.W;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < d.D) {
      row[(d.H + kvh) * d.D + e] = dk[i] * d.scale;
      row[(d.H + d.KV + kvh) * d.D + e] = dv[i];
    }
  }
}

// Block per (query tile, head, batch): dQ of its queries.
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_q(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta, Dims d) {
  DYNAMIC_SMEM(float, smem);
  float* Qs = smem;
  float* dOs = Qs + kTile * d.SD;
  float* Ks = dOs + kTile * d.SD;
  float* Vs = Ks + kTile * d.SD;
  float* dSs = Vs + kTile * d.SD;  // [query][key], stride kTile + 1
  const int64_t q0 = int64_t(blockIdx.x) * kTile, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const float* base = qkv + b * d.T * d.W;
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  constexpr int HD = DMAX / 2;
  load_tile(Qs, base, q0, d, h * d.D, d.W);
  load_tile(dOs, dout + b * d.T * d.H * d.D, q0, d, h * d.D, d.H * d.D);
  const float L = q < d.T ? lse[(b * d.H + h) * d.T + q] : 0.f;
  const float Dq = q < d.T ? delta[(b * d.H + h) * d.T + q] : 0.f;
  const int64_t k_first = first_key(d, b, q);
  float dq[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) dq[i] = 0.f;
  const int64_t last_key = min(q0 + kTile, d.T) - 1;
  for (int64_t k0 = 0; k0 <= last_key; k0 += kTile) {
    __syncthreads();
    load_tile(Ks, base, k0, d, (d.H + kvh) * d.D, d.W);
    load_tile(Vs, base, k0, d, (d.H + d.KV + kvh) * d.D, d.W);
    __syncthreads();
    for (int j = 0; j < kTile / 2; ++j) {
      const int c = half * (kTile / 2) + j;
      const int64_t key = k0 + c;
      float p = 0.f, ds = 0.f;
      if (key <= q && q < d.T && key >= k_first)
        prob_and_score_grad(Qs + r * d.SD, Ks + c * d.SD, dOs + r * d.SD, Vs + c * d.SD, d, L, Dq, p, ds);
      dSs[r * (kTile + 1) + c] = ds;
    }
    __syncwarp();
    for (int c = 0; c < kTile; ++c) {
      const float ds = dSs[r * (kTile + 1) + c];
#pragma unroll
      for (int i = 0; i < HD; ++i) {
        const int e = half * HD + i;
        if (e < d.D) dq[i] += ds * Ks[c * d.SD + e];
      }
    }
    __syncwarp();
  }
  if (q >= d.T) return;
  float* row = dqkv + (b * d.T + q) * d.W + h * d.D;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < d.D) row[e] = dq[i] * d.scale;
  }
}

Dims make_dims(int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, const int32_t* doc_start) {
  if (D > 128 || D < 1)
    cuda_fail("CUDA", "attention", __FILE__, __LINE__, "head size must be 1..128 for the CUDA attention kernels");
  if (H % KV != 0) cuda_fail("CUDA", "attention", __FILE__, __LINE__, "heads must be a multiple of kv_heads");
  Dims d{B, T, H, KV, D, (H + 2 * KV) * D, int(D % 2 == 0 ? D + 1 : D), 1.f / sqrtf(float(D)), doc_start};
  return d;
}

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem_floats, const char* name, Dims d, float* a, const float* x,
            const float* y, const float* z, const float* w) {
  const size_t bytes = smem_floats * sizeof(float);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  KERNEL_LAUNCH(kernel, grid, kThreads, bytes)(a, x, y, z, w, d);
  CUDA_LAUNCHED(name);
}

void forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
             const int32_t* doc_start) {
  if (B * T == 0) return;
  const Dims d = make_dims(B, T, H, KV, D, doc_start);
  const dim3 grid(unsigned((T + kTile - 1) / kTile), unsigned(H), unsigned(B));
  const size_t bytes = (3 * size_t(kTile) * size_t(d.SD) + size_t(kTile) * (kTile + 1)) * sizeof(float);
  if (D <= 64) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    KERNEL_LAUNCH(attn_fwd<64>, grid, kThreads, bytes)(out, lse, qkv, d);
  } else {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    KERNEL_LAUNCH(attn_fwd<128>, grid, kThreads, bytes)(out, lse, qkv, d);
  }
  CUDA_LAUNCHED("attn_fwd");
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                       const int32_t* doc_start) {
  forward(out, lse, qkv, B, T, H, KV, D, doc_start);
}

void attention_lse(float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start) {
  forward(nullptr, lse, qkv, B, T, H, KV, D, doc_start);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B,
                        int64_t T, int64_t H, int64_t KV, int64_t D, const int32_t* doc_start) {
  if (B * T == 0) return;
  const Dims d = make_dims(B, T, H, KV, D, doc_start);
  const size_t delta_bytes = size_t(B * H * T) * sizeof(float);
  auto* delta = static_cast<float*>(scratch_alloc(delta_bytes));
  const int64_t rows = B * T * H;
  KERNEL_LAUNCH(attn_delta, unsigned((rows * 32 + 255) / 256), 256, 0)(delta, dout, out, d);
  CUDA_LAUNCHED("attn_delta");
  const unsigned tiles = unsigned((T + kTile - 1) / kTile);
  const size_t kv_floats = 4 * size_t(kTile) * size_t(d.SD) + 2 * size_t(kTile) * (kTile + 1) + 2 * size_t(kTile);
  const size_t q_floats = 4 * size_t(kTile) * size_t(d.SD) + size_t(kTile) * (kTile + 1);
  if (D <= 64) {
    launch(attn_bwd_kv<64>, dim3(tiles, unsigned(KV), unsigned(B)), kv_floats, "attn_bwd_kv", d, dqkv, dout, qkv, lse,
           delta);
    launch(attn_bwd_q<64>, dim3(tiles, unsigned(H), unsigned(B)), q_floats, "attn_bwd_q", d, dqkv, dout, qkv, lse,
           delta);
  } else {
    launch(attn_bwd_kv<128>, dim3(tiles, unsigned(KV), unsigned(B)), kv_floats, "attn_bwd_kv", d, dqkv, dout, qkv, lse,
           delta);
    launch(attn_bwd_q<128>, dim3(tiles, unsigned(H), unsigned(B)), q_floats, "attn_bwd_q", d, dqkv, dout, qkv, lse,
           delta);
  }
  scratch_free(delta, delta_bytes);
}

}  // namespace trident::kernels::cuda
