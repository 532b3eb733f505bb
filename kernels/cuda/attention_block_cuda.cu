// Attention blocks on CUDA (context parallelism): queries of one part of a
// sequence against the keys and values of another, each row at its global
// position; the forward merges into (out, lse) by the log-sum-exp rule, the
// backward adds to dq, dk and dv (kernels/attention.hpp). The twins of the
// CPU block functions, on the tiles of attention_tiles.cuh.
#include "kernels/cuda/common.cuh"
// after common.cuh, which renames the namespace under the CPU emulation
#include "kernels/cuda/attention_tiles.cuh"

namespace trident::kernels::cuda {

namespace {

// Every key tile is visited (positions need not be monotonic), masked by
// position; a row that sees no key has lse = -inf and output 0.

struct BlockDims {
  int64_t B, Tq, Tk, H, KV;
  int64_t ldq, ldkv, ldo;  // row strides of q, k/v and out/dout
  TileShape t;
  const int32_t *q_pos, *k_pos, *doc_start;  // null positions: 0, 1, 2, ...
  int64_t window;                            // > 0: sliding-window attention
};

__device__ inline int64_t q_position(const BlockDims& d, int64_t i) { return d.q_pos ? d.q_pos[i] : i; }
__device__ inline int64_t k_position(const BlockDims& d, int64_t i) { return d.k_pos ? d.k_pos[i] : i; }
// Whether key row s is visible to query row q of batch b (both in range).
__device__ inline bool visible(const BlockDims& d, int64_t b, int64_t q, int64_t s) {
  if (q >= d.Tq || s >= d.Tk) return false;
  const int64_t kp = k_position(d, s), qp = q_position(d, q);
  return kp <= qp && (!d.doc_start || kp >= d.doc_start[b * d.Tq + q]) && (d.window <= 0 || qp - kp < d.window);
}

template <int DMAX>
__global__ void __launch_bounds__(kThreadsFor<DMAX>)
    blk_fwd(float* out, float* lse, const float* qb, const float* kb, const float* vb, BlockDims d, int merge) {
  DYNAMIC_SMEM(float, smem);
  constexpr int TILE = kTileFor<DMAX>;
  const TileShape t = d.t;
  const ForwardTiles<TILE> s = forward_tiles<TILE>(smem, t.SD);
  const int64_t q0 = int64_t(blockIdx.x) * TILE, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  constexpr int HD = DMAX / 2;
  load_rows<TILE>(s.Q, qb + b * d.Tq * d.ldq, q0, d.Tq, t, t.D, h * t.D, d.ldq);
  float acc[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int64_t k0 = 0; k0 < d.Tk; k0 += TILE) {
    __syncthreads();
    load_rows<TILE>(s.K, kb + b * d.Tk * d.ldkv, k0, d.Tk, t, t.D, kvh * t.D, d.ldkv);
    load_rows<TILE>(s.V, vb + b * d.Tk * d.ldkv, k0, d.Tk, t, t.Dv, kvh * t.Dv, d.ldkv);
    __syncthreads();
    softmax_tile<TILE, HD>(
        s.Q, s.K, s.V, s.P, t, [&](int c) { return visible(d, b, q, k0 + c); }, m, l, acc);
  }
  if (q >= d.Tq) return;
  // this block's row: its lse (-inf when it saw no key) and normalised output, merged into what is there
  const float row_lse = l > 0.f ? m + logf(l) : -INFINITY, inv = l > 0.f ? 1.f / l : 0.f;
  float* L = lse + (b * d.H + h) * d.Tq + q;
  float* o = out ? out + (b * d.Tq + q) * d.ldo + h * t.Dv : nullptr;
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
      if (e < t.Dv) o[e] = ((w_old > 0.f ? o[e] * w_old : 0.f) + acc[i] * inv * w_new) / total;
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
  const float* go = dout + bt * d.ldo + h * d.t.D;
  const float* o = out + bt * d.ldo + h * d.t.D;
  float s = 0.f;
  for (int e = lane; e < d.t.D; e += 32) s += go[e] * o[e];
  s = warp_sum(s);
  if (lane == 0) delta[(b * d.H + h) * d.Tq + t] = s;
}

// Block per (key tile, KV head, batch): adds dK, dV of its keys over the group's query heads.
template <int DMAX>
__global__ void __launch_bounds__(kThreadsFor<DMAX>)
    blk_bwd_kv(float* dk, float* dv, int64_t lddkv, const float* dout, const float* qb, const float* kb,
               const float* vb, const float* lse, const float* delta, BlockDims d) {
  DYNAMIC_SMEM(float, smem);
  constexpr int TILE = kTileFor<DMAX>;
  const TileShape t = d.t;
  const KvGradTiles<TILE> s = kv_grad_tiles<TILE>(smem, t.SD);
  const int64_t k0 = int64_t(blockIdx.x) * TILE, kvh = blockIdx.y, b = blockIdx.z;
  const int64_t group = d.H / d.KV;
  const int c = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t key = k0 + c;
  constexpr int HD = DMAX / 2;
  load_rows<TILE>(s.K, kb + b * d.Tk * d.ldkv, k0, d.Tk, t, t.D, kvh * t.D, d.ldkv);
  load_rows<TILE>(s.V, vb + b * d.Tk * d.ldkv, k0, d.Tk, t, t.Dv, kvh * t.Dv, d.ldkv);
  float gk[HD], gv[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) gk[i] = gv[i] = 0.f;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
    for (int64_t q0 = 0; q0 < d.Tq; q0 += TILE) {
      __syncthreads();
      load_rows<TILE>(s.Q, qb + b * d.Tq * d.ldq, q0, d.Tq, t, t.D, h * t.D, d.ldq);
      load_rows<TILE>(s.dO, dout + b * d.Tq * d.ldo, q0, d.Tq, t, t.Dv, h * t.Dv, d.ldo);
      load_row_stats<TILE>(s.L, s.Dl, lse, delta, (b * d.H + h) * d.Tq, q0, d.Tq);
      __syncthreads();
      kv_grad_tile<TILE, HD>(
          s.K, s.V, s.Q, s.dO, s.L, s.Dl, s.P, s.dS, t, [&](int rq) { return visible(d, b, q0 + rq, key); }, gk, gv);
    }
  if (key >= d.Tk) return;
  float* rk = dk + (b * d.Tk + key) * lddkv + kvh * t.D;
  float* rv = dv + (b * d.Tk + key) * lddkv + kvh * t.Dv;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < t.D) rk[e] += gk[i] * t.scale;
    if (e < t.Dv) rv[e] += gv[i];
  }
}

// Block per (query tile, head, batch): adds dQ of its queries.
template <int DMAX>
__global__ void __launch_bounds__(kThreadsFor<DMAX>)
    blk_bwd_q(float* dq, int64_t lddq, const float* dout, const float* qb, const float* kb, const float* vb,
              const float* lse, const float* delta, BlockDims d) {
  DYNAMIC_SMEM(float, smem);
  constexpr int TILE = kTileFor<DMAX>;
  const TileShape t = d.t;
  const QGradTiles<TILE> s = q_grad_tiles<TILE>(smem, t.SD);
  const int64_t q0 = int64_t(blockIdx.x) * TILE, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  constexpr int HD = DMAX / 2;
  load_rows<TILE>(s.Q, qb + b * d.Tq * d.ldq, q0, d.Tq, t, t.D, h * t.D, d.ldq);
  load_rows<TILE>(s.dO, dout + b * d.Tq * d.ldo, q0, d.Tq, t, t.Dv, h * t.Dv, d.ldo);
  const float L = q < d.Tq ? lse[(b * d.H + h) * d.Tq + q] : 0.f;
  const float Dq = q < d.Tq ? delta[(b * d.H + h) * d.Tq + q] : 0.f;
  float g[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) g[i] = 0.f;
  for (int64_t k0 = 0; k0 < d.Tk; k0 += TILE) {
    __syncthreads();
    load_rows<TILE>(s.K, kb + b * d.Tk * d.ldkv, k0, d.Tk, t, t.D, kvh * t.D, d.ldkv);
    load_rows<TILE>(s.V, vb + b * d.Tk * d.ldkv, k0, d.Tk, t, t.Dv, kvh * t.Dv, d.ldkv);
    __syncthreads();
    q_grad_tile<TILE, HD>(
        s.Q, s.dO, s.K, s.V, s.dS, t, L, Dq, [&](int c) { return visible(d, b, q, k0 + c); }, g);
  }
  if (q >= d.Tq) return;
  float* row = dq + (b * d.Tq + q) * lddq + h * t.D;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < t.D) row[e] += g[i] * t.scale;
  }
}

BlockDims block_dims(const AttentionBlock<float>& a, int64_t ldo) {
  const TileShape t = tile_shape(a.D, a.Dv);
  if (a.KV < 1 || a.H % a.KV != 0)
    cuda_fail("CUDA", "attention", __FILE__, __LINE__, "heads must be a multiple of kv_heads");
  return {a.B, a.Tq, a.Tk, a.H, a.KV, a.ldq, a.ldkv, ldo, t, a.q_pos, a.k_pos, a.doc_start, a.window};
}

// Attention sinks: thread per row (b, t, h) folds the head's sink into lse and scales the output.
__global__ void sink_fwd(float* out, int64_t ldo, float* lse, const float* sinks, int64_t B, int64_t Tq, int64_t H,
                         int64_t Dv) {
  GRID_STRIDE(i, B * Tq * H) {
    const int64_t h = i % H, bt = i / H, b = bt / Tq, t = bt % Tq;
    float& L = lse[(b * H + h) * Tq + t];
    const float s = sinks[h], top = fmaxf(L, s);
    const float folded = top + logf(expf(L - top) + expf(s - top));
    const float keep = L == -INFINITY ? 0.f : expf(L - folded);
    L = folded;
    if (!out) continue;
    float* o = out + bt * ldo + h * Dv;
    for (int64_t e = 0; e < Dv; ++e) o[e] *= keep;
  }
}

// Block per head: dsinks[h] -= sum over rows of exp(sink - lse) delta.
__global__ void sink_bwd(float* dsinks, const float* lse, const float* delta, const float* sinks, int64_t B, int64_t Tq,
                         int64_t H) {
  const int64_t h = blockIdx.x;
  float g = 0.f;
  for (int64_t bt = threadIdx.x; bt < B * Tq; bt += blockDim.x) {
    const int64_t i = (bt / Tq * H + h) * Tq + bt % Tq;
    g += expf(sinks[h] - lse[i]) * delta[i];
  }
  g = block_sum(g);
  if (threadIdx.x == 0) dsinks[h] -= g;
}

}  // namespace

void attention_block_forward(float* out, int64_t ldo, float* lse, const AttentionBlock<float>& a, bool merge) {
  if (a.B * a.Tq == 0) return;
  const BlockDims d = block_dims(a, ldo);
  with_dmax(widest(d.t), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value, TILE = kTileFor<DMAX>;
    const dim3 grid(unsigned((a.Tq + TILE - 1) / TILE), unsigned(a.H), unsigned(a.B));
    const size_t bytes = ForwardTiles<TILE>::floats(d.t.SD) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(blk_fwd<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    KERNEL_LAUNCH(blk_fwd<DMAX>, grid, kThreadsFor<DMAX>, bytes)(out, lse, a.q, a.k, a.v, d, merge ? 1 : 0);
    CUDA_LAUNCHED("blk_fwd");
  });
}

void attention_sink_forward(float* out, int64_t ldo, float* lse, const float* sinks, int64_t B, int64_t Tq, int64_t H,
                            int64_t Dv) {
  LAUNCH_GRID_STRIDE(sink_fwd, B * Tq * H, out, ldo, lse, sinks, B, Tq, H, Dv);
}

void attention_sink_backward(float* dsinks, const float* lse, const float* delta, const float* sinks, int64_t B,
                             int64_t Tq, int64_t H) {
  if (B * Tq * H == 0) return;
  KERNEL_LAUNCH(sink_bwd, unsigned(H), 256, 0)(dsinks, lse, delta, sinks, B, Tq, H);
  CUDA_LAUNCHED("sink_bwd");
}

void attention_delta(float* delta, const float* dout, const float* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H,
                     int64_t D) {
  if (B * Tq == 0) return;
  AttentionBlock<float> a;
  a.B = B, a.Tq = Tq, a.Tk = 0, a.H = H, a.KV = H, a.D = a.Dv = D;
  const BlockDims d = block_dims(a, ldo);
  const int64_t rows = B * Tq * H;
  KERNEL_LAUNCH(blk_delta, unsigned((rows * 32 + 255) / 256), 256, 0)(delta, dout, out, d);
  CUDA_LAUNCHED("blk_delta");
}

void attention_block_backward(float* dq, int64_t lddq, float* dk, float* dv, int64_t lddkv, const float* dout,
                              int64_t lddo, const float* lse, const float* delta, const AttentionBlock<float>& a) {
  if (a.B * a.Tq == 0 || a.Tk == 0) return;
  const BlockDims d = block_dims(a, lddo);
  with_dmax(widest(d.t), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value, TILE = kTileFor<DMAX>;
    const size_t kv_bytes = KvGradTiles<TILE>::floats(d.t.SD) * sizeof(float);
    const size_t q_bytes = QGradTiles<TILE>::floats(d.t.SD) * sizeof(float);
    const dim3 kv_grid(unsigned((a.Tk + TILE - 1) / TILE), unsigned(a.KV), unsigned(a.B));
    const dim3 q_grid(unsigned((a.Tq + TILE - 1) / TILE), unsigned(a.H), unsigned(a.B));
    CUDA_CHECK(cudaFuncSetAttribute(blk_bwd_kv<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kv_bytes)));
    KERNEL_LAUNCH(blk_bwd_kv<DMAX>, kv_grid, kThreadsFor<DMAX>, kv_bytes)
    (dk, dv, lddkv, dout, a.q, a.k, a.v, lse, delta, d);
    CUDA_LAUNCHED("blk_bwd_kv");
    CUDA_CHECK(cudaFuncSetAttribute(blk_bwd_q<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(q_bytes)));
    KERNEL_LAUNCH(blk_bwd_q<DMAX>, q_grid, kThreadsFor<DMAX>, q_bytes)(dq, lddq, dout, a.q, a.k, a.v, lse, delta, d);
    CUDA_LAUNCHED("blk_bwd_q");
  });
}

}  // namespace trident::kernels::cuda
