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

}  // namespace

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
