// Causal grouped-query attention on CUDA, flash-style (Dao et al.): tiles of
// 64 queries x 64 keys in shared memory, an online softmax, no T x T matrix.
// Forward keeps lse[B,H,T] (log-sum-exp of each row's scaled scores) for
// backward, which recomputes the probabilities tile by tile in two kernels
// without atomics (deterministic): one owns a key tile and accumulates its
// dK and dV over the query heads of its KV group and every query tile after
// it; the other owns a query tile and accumulates dQ. delta = rowsum(dO * O)
// comes first (attention_delta, attention_block_cuda.cu).
// The tiles and thread layout are attention_tiles.cuh's; these kernels add
// the causal mask and skip the tiles past the diagonal, and before a
// sliding window's start. Head sizes up to 256,
// values' (Dv) apart from queries' and keys' (D) (DMAX 64, 128, 192 or 256
// chosen at launch by the wider; tiles of 32 above 128). fp32 FMA throughout
// (no tensor cores: left for a later kernel).
#include "kernels/cuda/common.cuh"
// after common.cuh, which renames the namespace under the CPU emulation
#include "kernels/cuda/attention_tiles.cuh"

namespace trident::kernels::cuda {

namespace {

struct Dims {
  int64_t B, T, H, KV, W;  // W = (H + KV) D + KV Dv, the qkv row width
  TileShape t;
  const int32_t* doc_start;  // [B*T] document masking, or null
  int64_t window;            // > 0: sliding-window attention
};

// First key query row (b, q) may see (0 without document masking or window).
__device__ inline int64_t first_key(const Dims& d, int64_t b, int64_t q) {
  int64_t first = d.doc_start && q < d.T ? d.doc_start[b * d.T + q] : 0;
  if (d.window > 0 && q - d.window + 1 > first) first = q - d.window + 1;
  return first;
}
// The first key tile any of the query tile [q0, q0 + TILE) sees: the window's start, in whole tiles.
template <int TILE>
__device__ inline int64_t first_key_tile(const Dims& d, int64_t q0) {
  const int64_t first = d.window > 0 && q0 - d.window + 1 > 0 ? q0 - d.window + 1 : 0;
  return first / TILE * TILE;
}

template <int DMAX>
__global__ void __launch_bounds__(kThreadsFor<DMAX>) attn_fwd(float* out, float* lse, const float* qkv, Dims d) {
  DYNAMIC_SMEM(float, smem);
  constexpr int TILE = kTileFor<DMAX>;
  const TileShape t = d.t;
  const ForwardTiles<TILE> s = forward_tiles<TILE>(smem, t.SD);
  const int64_t q0 = int64_t(blockIdx.x) * TILE, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const float* base = qkv + b * d.T * d.W;
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  const int64_t k_first = first_key(d, b, q);
  constexpr int HD = DMAX / 2;
  load_rows<TILE>(s.Q, base, q0, d.T, t, t.D, h * t.D, d.W);
  float acc[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t last_key = min(q0 + TILE, d.T) - 1;  // causal: no tile past the diagonal
  for (int64_t k0 = first_key_tile<TILE>(d, q0); k0 <= last_key; k0 += TILE) {
    __syncthreads();  // the previous tile's K/V are no longer read
    load_rows<TILE>(s.K, base, k0, d.T, t, t.D, (d.H + kvh) * t.D, d.W);
    load_rows<TILE>(s.V, base, k0, d.T, t, t.Dv, (d.H + d.KV) * t.D + kvh * t.Dv, d.W);
    __syncthreads();
    softmax_tile<TILE, HD>(
        s.Q, s.K, s.V, s.P, t,
        [&](int c) {
          const int64_t key = k0 + c;
          return key <= q && key < d.T && key >= k_first;
        },
        m, l, acc);
  }
  if (q >= d.T) return;
  if (out) {
    float* o = out + (b * d.T + q) * d.H * t.Dv + h * t.Dv;
    const float inv = 1.f / l;
#pragma unroll
    for (int i = 0; i < HD; ++i) {
      const int e = half * HD + i;
      if (e < t.Dv) o[e] = acc[i] * inv;
    }
  }
  if (half == 0) lse[(b * d.H + h) * d.T + q] = m + logf(l);
}

// Block per (key tile, KV head, batch): dK, dV of its keys over the group's query heads.
template <int DMAX>
__global__ void __launch_bounds__(kThreadsFor<DMAX>)
    attn_bwd_kv(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta, Dims d) {
  DYNAMIC_SMEM(float, smem);
  constexpr int TILE = kTileFor<DMAX>;
  const TileShape t = d.t;
  const KvGradTiles<TILE> s = kv_grad_tiles<TILE>(smem, t.SD);
  const int64_t k0 = int64_t(blockIdx.x) * TILE, kvh = blockIdx.y, b = blockIdx.z;
  const int64_t group = d.H / d.KV;
  const float* base = qkv + b * d.T * d.W;
  const float* gbase = dout + b * d.T * d.H * t.Dv;
  const int c = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t key = k0 + c;
  constexpr int HD = DMAX / 2;
  load_rows<TILE>(s.K, base, k0, d.T, t, t.D, (d.H + kvh) * t.D, d.W);
  load_rows<TILE>(s.V, base, k0, d.T, t, t.Dv, (d.H + d.KV) * t.D + kvh * t.Dv, d.W);
  float dk[HD], dv[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) dk[i] = dv[i] = 0.f;
  // causal: from the diagonal on; a window: up to its last query of the tile's last key
  const int64_t q_end = d.window > 0 ? min(d.T, k0 + TILE - 1 + d.window) : d.T;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
    for (int64_t q0 = (k0 / TILE) * TILE; q0 < q_end; q0 += TILE) {
      __syncthreads();
      load_rows<TILE>(s.Q, base, q0, d.T, t, t.D, h * t.D, d.W);
      load_rows<TILE>(s.dO, gbase, q0, d.T, t, t.Dv, h * t.Dv, d.H * t.Dv);
      load_row_stats<TILE>(s.L, s.Dl, lse, delta, (b * d.H + h) * d.T, q0, d.T);
      __syncthreads();
      kv_grad_tile<TILE, HD>(
          s.K, s.V, s.Q, s.dO, s.L, s.Dl, s.P, s.dS, t,
          [&](int rq) {
            const int64_t q = q0 + rq;
            return key <= q && q < d.T && key < d.T && key >= first_key(d, b, q);
          },
          dk, dv);
    }
  if (key >= d.T) return;
  float* row = dqkv + (b * d.T + key) * d.W;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < t.D) row[(d.H + kvh) * t.D + e] = dk[i] * t.scale;
    if (e < t.Dv) row[(d.H + d.KV) * t.D + kvh * t.Dv + e] = dv[i];
  }
}

// Block per (query tile, head, batch): dQ of its queries.
template <int DMAX>
__global__ void __launch_bounds__(kThreadsFor<DMAX>)
    attn_bwd_q(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta, Dims d) {
  DYNAMIC_SMEM(float, smem);
  constexpr int TILE = kTileFor<DMAX>;
  const TileShape t = d.t;
  const QGradTiles<TILE> s = q_grad_tiles<TILE>(smem, t.SD);
  const int64_t q0 = int64_t(blockIdx.x) * TILE, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (d.H / d.KV);
  const float* base = qkv + b * d.T * d.W;
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t q = q0 + r;
  constexpr int HD = DMAX / 2;
  load_rows<TILE>(s.Q, base, q0, d.T, t, t.D, h * t.D, d.W);
  load_rows<TILE>(s.dO, dout + b * d.T * d.H * t.Dv, q0, d.T, t, t.Dv, h * t.Dv, d.H * t.Dv);
  const float L = q < d.T ? lse[(b * d.H + h) * d.T + q] : 0.f;
  const float Dq = q < d.T ? delta[(b * d.H + h) * d.T + q] : 0.f;
  const int64_t k_first = first_key(d, b, q);
  float dq[HD];
#pragma unroll
  for (int i = 0; i < HD; ++i) dq[i] = 0.f;
  const int64_t last_key = min(q0 + TILE, d.T) - 1;
  for (int64_t k0 = first_key_tile<TILE>(d, q0); k0 <= last_key; k0 += TILE) {
    __syncthreads();
    load_rows<TILE>(s.K, base, k0, d.T, t, t.D, (d.H + kvh) * t.D, d.W);
    load_rows<TILE>(s.V, base, k0, d.T, t, t.Dv, (d.H + d.KV) * t.D + kvh * t.Dv, d.W);
    __syncthreads();
    q_grad_tile<TILE, HD>(
        s.Q, s.dO, s.K, s.V, s.dS, t, L, Dq,
        [&](int c) {
          const int64_t key = k0 + c;
          return key <= q && q < d.T && key >= k_first;
        },
        dq);
  }
  if (q >= d.T) return;
  float* row = dqkv + (b * d.T + q) * d.W + h * t.D;
#pragma unroll
  for (int i = 0; i < HD; ++i) {
    const int e = half * HD + i;
    if (e < t.D) row[e] = dq[i] * t.scale;
  }
}

Dims make_dims(int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, int64_t Dv, const int32_t* doc_start,
               int64_t window) {
  const TileShape t = tile_shape(D, Dv);
  if (H % KV != 0) cuda_fail("CUDA", "attention", __FILE__, __LINE__, "heads must be a multiple of kv_heads");
  if (window < 0) cuda_fail("CUDA", "attention", __FILE__, __LINE__, "a sliding window must be >= 0 (0: none)");
  return {B, T, H, KV, (H + KV) * D + KV * Dv, t, doc_start, window};
}

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem_floats, const char* name, Dims d, float* a,
            const float* x, const float* y, const float* z, const float* w) {
  const size_t bytes = smem_floats * sizeof(float);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  KERNEL_LAUNCH(kernel, grid, threads, bytes)(a, x, y, z, w, d);
  CUDA_LAUNCHED(name);
}

void forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
             int64_t Dv, const int32_t* doc_start, int64_t window) {
  if (B * T == 0) return;
  const Dims d = make_dims(B, T, H, KV, D, Dv, doc_start, window);
  with_dmax(widest(d.t), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value, TILE = kTileFor<DMAX>;
    const dim3 grid(unsigned((T + TILE - 1) / TILE), unsigned(H), unsigned(B));
    const size_t bytes = ForwardTiles<TILE>::floats(d.t.SD) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    KERNEL_LAUNCH(attn_fwd<DMAX>, grid, kThreadsFor<DMAX>, bytes)(out, lse, qkv, d);
  });
  CUDA_LAUNCHED("attn_fwd");
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                       int64_t Dv, const int32_t* doc_start, int64_t window, const float* sinks) {
  forward(out, lse, qkv, B, T, H, KV, D, Dv, doc_start, window);
  if (sinks) attention_sink_forward(out, H * Dv, lse, sinks, B, T, H, Dv);  // attention_block_cuda.cu
}

void attention_lse(float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, int64_t Dv,
                   const int32_t* doc_start, int64_t window, const float* sinks) {
  forward(nullptr, lse, qkv, B, T, H, KV, D, Dv, doc_start, window);
  if (sinks) attention_sink_forward(nullptr, 0, lse, sinks, B, T, H, Dv);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B,
                        int64_t T, int64_t H, int64_t KV, int64_t D, int64_t Dv, const int32_t* doc_start,
                        int64_t window, const float* sinks, float* dsinks) {
  if (B * T == 0) return;
  const Dims d = make_dims(B, T, H, KV, D, Dv, doc_start, window);
  const size_t delta_bytes = size_t(B * H * T) * sizeof(float);
  auto* delta = static_cast<float*>(scratch_alloc(delta_bytes));
  attention_delta(delta, dout, out, H * Dv, B, T, H, Dv);  // attention_block_cuda.cu
  with_dmax(widest(d.t), [&](auto dmax) {
    constexpr int DMAX = decltype(dmax)::value, TILE = kTileFor<DMAX>;
    const unsigned tiles = unsigned((T + TILE - 1) / TILE);
    launch(attn_bwd_kv<DMAX>, dim3(tiles, unsigned(KV), unsigned(B)), kThreadsFor<DMAX>,
           KvGradTiles<TILE>::floats(d.t.SD), "attn_bwd_kv", d, dqkv, dout, qkv, lse, delta);
    launch(attn_bwd_q<DMAX>, dim3(tiles, unsigned(H), unsigned(B)), kThreadsFor<DMAX>, QGradTiles<TILE>::floats(d.t.SD),
           "attn_bwd_q", d, dqkv, dout, qkv, lse, delta);
  });
  if (sinks) attention_sink_backward(dsinks, lse, delta, sinks, B, T, H);
  scratch_free(delta, delta_bytes);
}

}  // namespace trident::kernels::cuda
