// Attention blocks on CUDA (context parallelism): queries of one part of a
// sequence against the keys and values of another, each row at its global
// position; the forward merges into (out, lse) by the log-sum-exp rule, the
// backward adds to dq, dk and dv (kernels/attention.hpp). The twins of the
// CPU block functions, same tiles and thread layout as attention_cuda.cu.
#include "kernels/cuda/common.cuh"
// after common.cuh, which renames the namespace under the CPU emulation
#include "kernels/cuda/attention_tiles.cuh"

namespace trident::kernels::cuda {

namespace {

// Every key tile is visited (positions need not be monotonic), masked by
// position; a row that sees no key has lse = -inf and output 0.

struct BlockDims {
  int64_t B, Tq, Tk, H, KV, D;
  int64_t ldq, ldkv, ldo;  // row strides of q, k/v and out/dout
  int SD;
  float scale;
  const int32_t *q_pos, *k_pos, *doc_start;  // null positions: 0, 1, 2, ...
};

__device__ inline int64_t q_position(const BlockDims& d, int64_t i) { return d.q_pos ? d.q_pos[i] : i; }
__device__ inline int64_t k_position(const BlockDims& d, int64_t i) { return d.k_pos ? d.k_pos[i] : i; }
// Whether key row s is visible to query row q of batch b (both in range).
__device__ inline bool visible(const BlockDims& d, int64_t b, int64_t q, int64_t s) {
  if (q >= d.Tq || s >= d.Tk) return false;
  const int64_t kp = k_position(d, s);
  return kp <= q_position(d, q) && (!d.doc_start || kp >= d.doc_start[b * d.Tq + q]);
}

// dst[kTile][SD] <- rows row0.. (of n) of src, columns col0 .. col0 + D; zeros past n
__device__ inline void load_rows(float* dst, const float* src, int64_t row0, int64_t n, const BlockDims& d,
                                 int64_t col0, int64_t stride) {
  for (int idx = threadIdx.x; idx < kTile * d.D; idx += blockDim.x) {
    const int r = idx / int(d.D), c = idx % int(d.D);
    const int64_t row = row0 + r;
    dst[r * d.SD + c] = row < n ? src[row * stride + col0 + c] : 0.f;
  }
}

template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    blk_fwd(float* out, float* lse, const float* qb, const float* kb, const float* vb, BlockDims d, int merge) {
  DYNAMIC_SMEM(float, smem);
  float* Qs = smem;
  float* Ks = Qs + kTile * d.SD;
  float* Vs = Ks + kTile * d.SD;
  float* Ps = Vs + kTile * d.SD;  // [kTile][kTile + 1]
  const int64_t q0 = int64_t(blockIdx.x) * kTile, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  constexpr int HD = DMAX / 2;
  load_rows(Qs, qb + b * d.Tq * d.ldq, q0, d.Tq, d, h * d.D, d.ldq);
  float acc[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int64_t k0 = 0; k0 < d.Tk; k0 += kTile) {
    __syncthreads();
    load_rows(Ks, kb + b * d.Tk * d.ldkv, k0, d.Tk, d, kvh * d.D, d.ldkv);
    load_rows(Vs, vb + b * d.Tk * d.ldkv, k0, d.Tk, d, kvh * d.D, d.ldkv);
    __syncthreads();
    float s[kTile / 2];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile / 2; ++j) {
      const int c = half * (kTile / 2) + j;
      float dot = 0.f;
      for (int e = 0; e < d.D; ++e) dot += Qs[r * d.SD + e] * Ks[c * d.SD + e];
      s[j] = visible(d, b, q, k0 + c) ? dot * d.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float base_m = m_new == -INFINITY ? 0.f : m_new;
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
    __syncwarp();
  }
  if (q >= d.Tq) return;
  // this block's row: its lse (-inf when it saw no key) and normalised output, merged into what is there
  const float row_lse = l > 0.f ? m + logf(l) : -INFINITY, inv = l > 0.f ? 1.f / l : 0.f;
  float* L = lse + (b * d.H + h) * d.Tq + q;
  float* o = out ? out + (b * d.Tq + q) * d.ldo + h * d.D : nullptr;
  const float old = merge ? *L : -INFINITY;
  float w_old = 0.f, w_new = 1.f, total = 1.f;
  if (old != -INFINITY && row_lse != -INFINITY) {
    const float top = fmaxf(old, row_lse);
    w_old = expf(old - top), w_new = expf(row_lse - top), total = w_old + w_new;
  } else if (old != -INFINITY) {
    w_old = 1.f, w_new = 0.f;  // nothing new for this row
  }
  if (o) {
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < d.D) o[e] = ((w_old > 0.f ? o[e] * w_old : 0.f) + acc[i] * inv * w_new) / total;
    }
  }
  __syncwarp();  // both halves read the old lse before it is written
  if (half == 0) *L = w_old == 0.f ? row_lse : w_new == 0.f ? old : fmaxf(old, row_lse) + logf(total);
}

// delta[b, h, t] = sum_e dout[b, t, h, e] * out[b, t, h, e] (rows of stride ldo); a warp per row
__global__ void blk_delta(float* delta, const float* dout, const float* out, BlockDims d) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // over B * Tq * H
  const int lane = threadIdx.x & 31;
  if (row >= d.B * d.Tq * d.H) return;
  const int64_t h = row % d.H, bt = row / d.H, b = bt / d.Tq, t = bt % d.Tq;
  const float* go = dout + bt * d.ldo + h * d.D;
  const float* o = out + bt * d.ldo + h * d.D;
  float s = 0.f;
  for (int e = lane; e < d.D; e += 32) s += go[e] * o[e];
  s = warp_sum(s);
  if (lane == 0) delta[(b * d.H + h) * d.Tq + t] = s;
}

// p = exp(scale q.k - lse) (0 for a row that saw no key) and ds = p (dO.v - delta)
__device__ inline void block_prob(const float* q, const float* k, const float* go, const float* v, const BlockDims& d,
                                  float lse, float delta, float& p, float& ds) {
  float dot = 0.f, dp = 0.f;
  for (int e = 0; e < d.D; ++e) {
    dot += q[e] * k[e];
    dp += go[e] * v[e];
  }
  p = lse == -INFINITY ? 0.f : expf(dot * d.scale - lse);
  ds = p * (dp - delta);
}

// Block per (key tile, KV head, batch): adds dK, dV of its keys over the group's query heads.
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    blk_bwd_kv(float* dk, float* dv, int64_t lddkv, const float* dout, const float* qb, const float* kb,
               const float* vb, const float* lse, const float* delta, BlockDims d) {
  DYNAMIC_SMEM(float, smem);
  float* Ks = smem;
  float* Vs = Ks + kTile * d.SD;
  float* Qs = Vs + kTile * d.SD;
  float* dOs = Qs + kTile * d.SD;
  float* Ps = dOs + kTile * d.SD;  // [key][query], stride kTile + 1
  float* dSs = Ps + kTile * (kTile + 1);
  float* Ls = dSs + kTile * (kTile + 1);
  float* Dl = Ls + kTile;
  const int64_t k0 = int64_t(blockIdx.x) * kTile, kvh = blockIdx.y, b = blockIdx.z;
  const int64_t group = d.H / d.KV;
  const int c = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t key = k0 + c;
  constexpr int HD = DMAX / 2;
  load_rows(Ks, kb + b * d.Tk * d.ldkv, k0, d.Tk, d, kvh * d.D, d.ldkv);
  load_rows(Vs, vb + b * d.Tk * d.ldkv, k0, d.Tk, d, kvh * d.D, d.ldkv);
  float gk[HD], gv[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) gk[i] = gv[i] = 0.f;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
    for (int64_t q0 = 0; q0 < d.Tq; q0 += kTile) {
      __syncthreads();
      load_rows(Qs, qb + b * d.Tq * d.ldq, q0, d.Tq, d, h * d.D, d.ldq);
      load_rows(dOs, dout + b * d.Tq * d.ldo, q0, d.Tq, d, h * d.D, d.ldo);
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        const int64_t q = q0 + i;
        Ls[i] = q < d.Tq ? lse[(b * d.H + h) * d.Tq + q] : 0.f;
        Dl[i] = q < d.Tq ? delta[(b * d.H + h) * d.Tq + q] : 0.f;
      }
      __syncthreads();
      for (int j = 0; j < kTile / 2; ++j) {
        const int rq = half * (kTile / 2) + j;
        float p = 0.f, ds = 0.f;
        if (visible(d, b, q0 + rq, key))
          block_prob(Qs + rq * d.SD, Ks + c * d.SD, dOs + rq * d.SD, Vs + c * d.SD, d, Ls[rq], Dl[rq], p, ds);
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
            gv[i] += p * dOs[rq * d.SD + e];
            gk[i] += ds * Qs[rq * d.SD + e];
          }
        }
      }
      __syncwarp();
    }
  if (key >= d.Tk) return;
  float* rk = dk + (b * d.Tk + key) * lddkv + kvh * d.D;
  float* rv = dv + (b * d.Tk + key) * lddkv + kvh * d.D;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < d.D) rk[e] += gk[i] * d.scale, rv[e] += gv[i];
  }
}

// Block per (query tile, head, batch): adds dQ of its queries.
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    blk_bwd_q(float* dq, int64_t lddq, const float* dout, const float* qb, const float* kb, const float* vb,
              const float* lse, const float* delta, BlockDims d) {
  DYNAMIC_SMEM(float, smem);
  float* Qs = smem;
  float* dOs = Qs + kTile * d.SD;
  float* Ks = dOs + kTile * d.SD;
  float* Vs = Ks + kTile * d.SD;
  float* dSs = Vs + kTile * d.SD;  // [query][key], stride kTile + 1
  const int64_t q0 = int64_t(blockIdx.x) * kTile, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  constexpr int HD = DMAX / 2;
  load_rows(Qs, qb + b * d.Tq * d.ldq, q0, d.Tq, d, h * d.D, d.ldq);
  load_rows(dOs, dout + b * d.Tq * d.ldo, q0, d.Tq, d, h * d.D, d.ldo);
  const float L = q < d.Tq ? lse[(b * d.H + h) * d.Tq + q] : 0.f;
  const float Dq = q < d.Tq ? delta[(b * d.H + h) * d.Tq + q] : 0.f;
  float g[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) g[i] = 0.f;
  for (int64_t k0 = 0; k0 < d.Tk; k0 += kTile) {
    __syncthreads();
    load_rows(Ks, kb + b * d.Tk * d.ldkv, k0, d.Tk, d, kvh * d.D, d.ldkv);
    load_rows(Vs, vb + b * d.Tk * d.ldkv, k0, d.Tk, d, kvh * d.D, d.ldkv);
    __syncthreads();
    for (int j = 0; j < kTile / 2; ++j) {
      const int c = half * (kTile / 2) + j;
      float p = 0.f, ds = 0.f;
      if (visible(d, b, q, k0 + c))
        block_prob(Qs + r * d.SD, Ks + c * d.SD, dOs + r * d.SD, Vs + c * d.SD, d, L, Dq, p, ds);
      dSs[r * (kTile + 1) + c] = ds;
    }
    __syncwarp();
    for (int c = 0; c < kTile; ++c) {
      const float ds = dSs[r * (kTile + 1) + c];
#pragma unroll
      for (int i = 0; i < HD; ++i) {
        const int e = half * HD + i;
        if (e < d.D) g[i] += ds * Ks[c * d.SD + e];
      }
    }
    __syncwarp();
  }
  if (q >= d.Tq) return;
  float* row = dq + (b * d.Tq + q) * lddq + h * d.D;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < d.D) row[e] += g[i] * d.scale;
  }
}

BlockDims block_dims(const AttentionBlock<float>& a, int64_t ldo) {
  if (a.D > 128 || a.D < 1)
    cuda_fail("CUDA", "attention", __FILE__, __LINE__, "head size must be 1..128 for the CUDA attention kernels");
  if (a.KV < 1 || a.H % a.KV != 0)
    cuda_fail("CUDA", "attention", __FILE__, __LINE__, "heads must be a multiple of kv_heads");
  return {a.B,
          a.Tq,
          a.Tk,
          a.H,
          a.KV,
          a.D,
          a.ldq,
          a.ldkv,
          ldo,
          int(a.D % 2 == 0 ? a.D + 1 : a.D),
          1.f / sqrtf(float(a.D)),
          a.q_pos,
          a.k_pos,
          a.doc_start};
}

}  // namespace

void attention_block_forward(float* out, int64_t ldo, float* lse, const AttentionBlock<float>& a, bool merge) {
  if (a.B * a.Tq == 0) return;
  const BlockDims d = block_dims(a, ldo);
  const dim3 grid(unsigned((a.Tq + kTile - 1) / kTile), unsigned(a.H), unsigned(a.B));
  const size_t bytes = (3 * size_t(kTile) * size_t(d.SD) + size_t(kTile) * (kTile + 1)) * sizeof(float);
  auto run = [&](auto kernel) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    KERNEL_LAUNCH(kernel, grid, kThreads, bytes)(out, lse, a.q, a.k, a.v, d, merge ? 1 : 0);
    CUDA_LAUNCHED("blk_fwd");
  };
  if (a.D <= 64)
    run(blk_fwd<64>);
  else
    run(blk_fwd<128>);
}

void attention_delta(float* delta, const float* dout, const float* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H,
                     int64_t D) {
  if (B * Tq == 0) return;
  AttentionBlock<float> a;
  a.B = B, a.Tq = Tq, a.Tk = 0, a.H = H, a.KV = H, a.D = D;
  const BlockDims d = block_dims(a, ldo);
  const int64_t rows = B * Tq * H;
  KERNEL_LAUNCH(blk_delta, unsigned((rows * 32 + 255) / 256), 256, 0)(delta, dout, out, d);
  CUDA_LAUNCHED("blk_delta");
}

void attention_block_backward(float* dq, int64_t lddq, float* dk, float* dv, int64_t lddkv, const float* dout,
                              int64_t lddo, const float* lse, const float* delta, const AttentionBlock<float>& a) {
  if (a.B * a.Tq == 0 || a.Tk == 0) return;
  const BlockDims d = block_dims(a, lddo);
  const size_t kv_bytes =
      (4 * size_t(kTile) * size_t(d.SD) + 2 * size_t(kTile) * (kTile + 1) + 2 * size_t(kTile)) * sizeof(float);
  const size_t q_bytes = (4 * size_t(kTile) * size_t(d.SD) + size_t(kTile) * (kTile + 1)) * sizeof(float);
  const dim3 kv_grid(unsigned((a.Tk + kTile - 1) / kTile), unsigned(a.KV), unsigned(a.B));
  const dim3 q_grid(unsigned((a.Tq + kTile - 1) / kTile), unsigned(a.H), unsigned(a.B));
  auto run = [&](auto kv_kernel, auto q_kernel) {
    CUDA_CHECK(cudaFuncSetAttribute(kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kv_bytes)));
    KERNEL_LAUNCH(kv_kernel, kv_grid, kThreads, kv_bytes)(dk, dv, lddkv, dout, a.q, a.k, a.v, lse, delta, d);
    CUDA_LAUNCHED("blk_bwd_kv");
    CUDA_CHECK(cudaFuncSetAttribute(q_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(q_bytes)));
    KERNEL_LAUNCH(q_kernel, q_grid, kThreads, q_bytes)(dq, lddq, dout, a.q, a.k, a.v, lse, delta, d);
    CUDA_LAUNCHED("blk_bwd_q");
  };
  if (a.D <= 64)
    run(blk_bwd_kv<64>, blk_bwd_q<64>);
  else
    run(blk_bwd_kv<128>, blk_bwd_q<128>);
}

}  // namespace trident::kernels::cuda
