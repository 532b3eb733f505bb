// Mixture-of-experts permutation, gather, combine and their backwards on
// CUDA (kernels/moe_permute.hpp). The permutation is a stable counting sort
// with one block per expert: the block counts the routes to lower experts
// (its first row) and numbers its own routes in route order with a block
// scan, so no atomics and the same rows on every run. The rest are
// grid-stride loops, one output element a thread, terms added in the CPU's
// order; the combine's weight gradients are one warp's dot product each.
#include <cstring>

#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

constexpr int kRouteThreads = 256;

__global__ void route_index_kernel(int32_t* row, int32_t* token, int64_t* offsets, const int32_t* expert, int64_t M,
                                   int64_t K, int64_t E) {
  __shared__ int64_t scan[kRouteThreads];
  const int64_t e = blockIdx.x, tid = threadIdx.x, threads = blockDim.x;
  int64_t lower = 0;
  for (int64_t i = tid; i < M; i += threads) lower += expert[i] < e ? 1 : 0;
  const int64_t first = block_sum(lower);
  int64_t before = 0;  // this expert's routes in earlier chunks
  for (int64_t s = 0; s < M; s += threads) {
    const int64_t i = s + tid;
    const bool mine = i < M && expert[i] == e;
    scan[tid] = mine ? 1 : 0;
    __syncthreads();
    for (int64_t o = 1; o < threads; o <<= 1) {  // inclusive Hillis-Steele scan
      const int64_t add = tid >= o ? scan[tid - o] : 0;
      __syncthreads();
      scan[tid] += add;
      __syncthreads();
    }
    if (mine) {
      const int64_t r = first + before + scan[tid] - 1;
      row[i] = int32_t(r);
      token[r] = int32_t(i / K);
    }
    before += scan[threads - 1];
    __syncthreads();  // scan[] is written again by the next chunk
  }
  if (tid == 0) {
    offsets[e] = first;
    if (e == E - 1) offsets[E] = first + before;
  }
}

__global__ void permute_kernel(float* x, const float* h, const int32_t* token, int64_t M, int64_t C) {
  GRID_STRIDE(idx, M * C) x[idx] = h[int64_t(token[idx / C]) * C + idx % C];
}

__global__ void combine_kernel(float* out, const float* y, const float* weight, const int32_t* row, int64_t N,
                               int64_t K, int64_t C) {
  GRID_STRIDE(idx, N * C) {
    const int64_t n = idx / C, c = idx % C;
    float s = 0.f;
    for (int64_t j = 0; j < K; ++j) s += weight[n * K + j] * y[int64_t(row[n * K + j]) * C + c];
    out[idx] = s;
  }
}

__global__ void scatter_weighted_kernel(float* dys, const float* dy, const float* weight, const int32_t* row, int64_t N,
                                        int64_t K, int64_t C) {
  GRID_STRIDE(idx, N * K * C) {
    const int64_t nj = idx / C, c = idx % C;
    dys[int64_t(row[nj]) * C + c] = weight[nj] * dy[nj / K * C + c];
  }
}

// One warp per route: dweight[n,j] = dy[n] . y[row[n,j]].
__global__ void route_dot_kernel(float* dweight, const float* dy, const float* y, const int32_t* row, int64_t NK,
                                 int64_t K, int64_t C) {
  const int64_t lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t nj = blockIdx.x * warps + (threadIdx.x >> 5); nj < NK; nj += int64_t(gridDim.x) * warps) {
    const float *d = dy + nj / K * C, *yr = y + int64_t(row[nj]) * C;
    float s = 0.f;
    for (int64_t c = lane; c < C; c += 32) s += d[c] * yr[c];
    s = warp_sum(s);
    if (lane == 0) dweight[nj] = s;
  }
}

__global__ void unpermute_kernel(float* dh, const float* dx, const int32_t* row, int64_t N, int64_t K, int64_t C) {
  GRID_STRIDE(idx, N * C) {
    const int64_t n = idx / C, c = idx % C;
    float s = 0.f;
    for (int64_t j = 0; j < K; ++j) s += dx[int64_t(row[n * K + j]) * C + c];
    dh[idx] = s;
  }
}

}  // namespace

void moe_route_index(int32_t* row, int32_t* token, int64_t* offsets, const int32_t* expert, int64_t N, int64_t K,
                     int64_t E) {
  const int64_t M = N * K;
  if (M == 0) {
    std::memset(offsets, 0, size_t(E + 1) * sizeof(int64_t));
    return;
  }
  const size_t bytes = size_t(E + 1) * sizeof(int64_t);
  auto* d = static_cast<int64_t*>(scratch_alloc(bytes));
  KERNEL_LAUNCH(route_index_kernel, unsigned(E), kRouteThreads, 0)(row, token, d, expert, M, K, E);
  CUDA_LAUNCHED("route_index_kernel");
  CUDA_CHECK(cudaMemcpyAsync(offsets, d, bytes, cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  scratch_free(d, bytes);
}

void moe_permute(float* x, const float* h, const int32_t* token, int64_t M, int64_t C) {
  LAUNCH_GRID_STRIDE(permute_kernel, M * C, x, h, token, M, C);
}

void moe_combine(float* out, const float* y, const float* weight, const int32_t* row, int64_t N, int64_t K, int64_t C) {
  LAUNCH_GRID_STRIDE(combine_kernel, N * C, out, y, weight, row, N, K, C);
}

void moe_combine_backward(float* dys, float* dweight, const float* dy, const float* y, const float* weight,
                          const int32_t* row, int64_t N, int64_t K, int64_t C) {
  LAUNCH_GRID_STRIDE(scatter_weighted_kernel, N * K * C, dys, dy, weight, row, N, K, C);
  if (N * K > 0) {
    constexpr int threads = 256;
    KERNEL_LAUNCH(route_dot_kernel, grid_for(N * K * 32, threads), threads, 0)(dweight, dy, y, row, N * K, K, C);
    CUDA_LAUNCHED("route_dot_kernel");
  }
}

void moe_unpermute(float* dh, const float* dx, const int32_t* row, int64_t N, int64_t K, int64_t C) {
  LAUNCH_GRID_STRIDE(unpermute_kernel, N * C, dh, dx, row, N, K, C);
}

}  // namespace trident::kernels::cuda
