// Row scaling, row dot products and head gathers on CUDA (kernels/rows.hpp):
// grid-stride loops, one output element a thread; the dot products are one
// warp's each (lanes sum strided columns, then the warp's tree), so they
// differ from the CPU's in-order sum by rounding only.
#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

__global__ void rows_scale_add_kernel(float* out, const float* x, const float* g, int64_t N, int64_t C) {
  GRID_STRIDE(i, N * C) out[i] += (g ? g[i / C] : 1.f) * x[i];
}

__global__ void rows_scale_kernel(float* out, const float* x, const float* g, int64_t N, int64_t C) {
  GRID_STRIDE(i, N * C) out[i] = g[i / C] * x[i];
}

__global__ void rows_dot_kernel(float* d, const float* x, const float* y, int64_t N, int64_t C) {
  const int64_t lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t n = blockIdx.x * warps + (threadIdx.x >> 5); n < N; n += int64_t(gridDim.x) * warps) {
    float s = 0.f;
    for (int64_t c = lane; c < C; c += 32) s += x[n * C + c] * y[n * C + c];
    s = warp_sum(s);
    if (lane == 0) d[n] = s;
  }
}

// Element i of the heads layout [N H + N KV, D] and its place in qkv [N, W].
__device__ inline int64_t qkv_index(int64_t i, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W) {
  const int64_t r = i / D, d = i % D;
  const int64_t n = r < N * H ? r / H : (r - N * H) / KV;
  const int64_t h = r < N * H ? r % H : H + (r - N * H) % KV;
  return n * W + h * D + d;
}

__global__ void heads_gather_kernel(float* heads, const float* qkv, int64_t N, int64_t H, int64_t KV, int64_t D,
                                    int64_t W) {
  GRID_STRIDE(i, N * (H + KV) * D) heads[i] = qkv[qkv_index(i, N, H, KV, D, W)];
}

__global__ void heads_scatter_kernel(float* qkv, const float* heads, int64_t N, int64_t H, int64_t KV, int64_t D,
                                     int64_t W) {
  GRID_STRIDE(i, N * (H + KV) * D) qkv[qkv_index(i, N, H, KV, D, W)] = heads[i];
}

// one thread per element of qkv [N, H (2 Dq + Dv)]
__global__ void mla_heads_kernel(float* qkv, const float* q, const float* kvb, const float* kr, int64_t N, int64_t H,
                                 int64_t Dn, int64_t Dr, int64_t Dv) {
  const int64_t Dq = Dn + Dr, W = H * (2 * Dq + Dv), Wkv = H * (Dn + Dv);
  GRID_STRIDE(i, N * W) {
    const int64_t n = i / W, c = i % W;
    float x;
    if (c < H * Dq) {
      x = q[n * H * Dq + c];
    } else if (c < 2 * H * Dq) {
      const int64_t h = (c - H * Dq) / Dq, d = (c - H * Dq) % Dq;
      x = d < Dn ? kvb[n * Wkv + h * (Dn + Dv) + d] : kr[n * Dr + d - Dn];
    } else {
      const int64_t h = (c - 2 * H * Dq) / Dv, d = (c - 2 * H * Dq) % Dv;
      x = kvb[n * Wkv + h * (Dn + Dv) + Dn + d];
    }
    qkv[i] = x;
  }
}

// one thread per element of dq, of dkvb and of dkr (the sum over heads in increasing order)
__global__ void mla_heads_backward_kernel(float* dq, float* dkvb, float* dkr, const float* dqkv, int64_t N, int64_t H,
                                          int64_t Dn, int64_t Dr, int64_t Dv) {
  const int64_t Dq = Dn + Dr, W = H * (2 * Dq + Dv), Wkv = H * (Dn + Dv);
  const int64_t nq = N * H * Dq, nkv = N * Wkv;
  GRID_STRIDE(i, nq + nkv + N * Dr) {
    if (i < nq) {
      dq[i] = dqkv[i / (H * Dq) * W + i % (H * Dq)];
    } else if (i < nq + nkv) {
      const int64_t j = i - nq, n = j / Wkv, h = j % Wkv / (Dn + Dv), d = j % (Dn + Dv);
      dkvb[j] = d < Dn ? dqkv[n * W + (H + h) * Dq + d] : dqkv[n * W + 2 * H * Dq + h * Dv + d - Dn];
    } else {
      const int64_t j = i - nq - nkv, n = j / Dr, d = j % Dr;
      float sum = 0;
      for (int64_t h = 0; h < H; ++h) sum += dqkv[n * W + (H + h) * Dq + Dn + d];
      dkr[j] = sum;
    }
  }
}

__global__ void columns_concat_kernel(float* out, const float* a, const float* b, int64_t N, int64_t A, int64_t B) {
  GRID_STRIDE(i, N * (A + B)) {
    const int64_t n = i / (A + B), c = i % (A + B);
    out[i] = c < A ? a[n * A + c] : b[n * B + c - A];
  }
}

__global__ void columns_split_kernel(float* a, float* b, const float* in, int64_t N, int64_t A, int64_t B) {
  GRID_STRIDE(i, N * (A + B)) {
    const int64_t n = i / (A + B), c = i % (A + B);
    if (c < A)
      a[n * A + c] = in[i];
    else
      b[n * B + c - A] = in[i];
  }
}

}  // namespace

void mla_heads(float* qkv, const float* q, const float* kvb, const float* kr, int64_t N, int64_t H, int64_t Dn,
               int64_t Dr, int64_t Dv) {
  LAUNCH_GRID_STRIDE(mla_heads_kernel, N * H * (2 * (Dn + Dr) + Dv), qkv, q, kvb, kr, N, H, Dn, Dr, Dv);
}
void mla_heads_backward(float* dq, float* dkvb, float* dkr, const float* dqkv, int64_t N, int64_t H, int64_t Dn,
                        int64_t Dr, int64_t Dv) {
  LAUNCH_GRID_STRIDE(mla_heads_backward_kernel, N * H * (Dn + Dr) + N * H * (Dn + Dv) + N * Dr, dq, dkvb, dkr, dqkv, N,
                     H, Dn, Dr, Dv);
}
void columns_concat(float* out, const float* a, const float* b, int64_t N, int64_t A, int64_t B) {
  LAUNCH_GRID_STRIDE(columns_concat_kernel, N * (A + B), out, a, b, N, A, B);
}
void columns_split(float* a, float* b, const float* in, int64_t N, int64_t A, int64_t B) {
  LAUNCH_GRID_STRIDE(columns_split_kernel, N * (A + B), a, b, in, N, A, B);
}

void rows_scale_add(float* out, const float* x, const float* g, int64_t N, int64_t C) {
  LAUNCH_GRID_STRIDE(rows_scale_add_kernel, N * C, out, x, g, N, C);
}
void rows_scale(float* out, const float* x, const float* g, int64_t N, int64_t C) {
  LAUNCH_GRID_STRIDE(rows_scale_kernel, N * C, out, x, g, N, C);
}
void rows_dot(float* d, const float* x, const float* y, int64_t N, int64_t C) {
  if (N == 0) return;
  constexpr int threads = 256;
  KERNEL_LAUNCH(rows_dot_kernel, grid_for(N * 32, threads), threads, 0)(d, x, y, N, C);
  CUDA_LAUNCHED("rows_dot_kernel");
}
void heads_gather(float* heads, const float* qkv, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W) {
  LAUNCH_GRID_STRIDE(heads_gather_kernel, N * (H + KV) * D, heads, qkv, N, H, KV, D, W);
}
void heads_scatter(float* qkv, const float* heads, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W) {
  LAUNCH_GRID_STRIDE(heads_scatter_kernel, N * (H + KV) * D, qkv, heads, N, H, KV, D, W);
}

}  // namespace trident::kernels::cuda
