// Shared by the CUDA kernel files: the error check, the compute stream, block
// reductions. Includes no project header that needs fmt (nvcc compiles these
// files); errors are raised through cuda_fail (kernels/cuda/cuda_support.cpp).
#pragma once
#include <cstdint>

#ifdef TRIDENT_CUDA_EMULATION
#include "kernels/cuda/emulation.hpp"
// the emulated kernels live beside the real ones (tests link both)
#define cuda cuda_emu
#define KERNEL_LAUNCH(kernel, grid, block, smem) ::trident::emu::launch(kernel, grid, block, smem)
#define DYNAMIC_SMEM(type, name) type* name = ::trident::emu::dynamic_smem<type>()
#else
#include <cuda_runtime.h>
#define KERNEL_LAUNCH(kernel, grid, block, smem) kernel<<<grid, block, smem, stream()>>>
#define DYNAMIC_SMEM(type, name) extern __shared__ type name[]
#endif

#include "core/device_memory.hpp"
#include "kernels/cuda/cuda_kernels.hpp"

namespace trident::kernels::cuda {

[[noreturn]] void cuda_fail(const char* library, const char* stmt, const char* file, int line, const char* message);

#define CUDA_CHECK(stmt)                                                                                      \
  do {                                                                                                        \
    cudaError_t trident_e_ = (stmt);                                                                          \
    if (trident_e_ != cudaSuccess)                                                                            \
      ::trident::kernels::cuda::cuda_fail("CUDA", #stmt, __FILE__, __LINE__, cudaGetErrorString(trident_e_)); \
  } while (0)
#define CUDA_LAUNCHED(what) CUDA_CHECK(cudaGetLastError())

#ifdef TRIDENT_CUDA_EMULATION
inline cudaStream_t stream() { return nullptr; }
inline void* scratch_alloc(size_t bytes) { return std::malloc(bytes); }
inline void scratch_free(void* p, size_t) { std::free(p); }
#else
inline cudaStream_t stream() { return static_cast<cudaStream_t>(::trident::compute_stream()); }
// Short-lived device buffers of a kernel wrapper (the caching allocator's).
inline void* scratch_alloc(size_t bytes) { return ::trident::device_alloc(bytes, ::trident::current_device()); }
inline void scratch_free(void* p, size_t bytes) { ::trident::device_free(p, bytes, ::trident::current_device()); }
#endif

inline unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return unsigned(b < 65535LL * 64 ? b : 65535LL * 64);
}

// Elementwise kernels: a grid-stride loop over n elements, launched with
// kGridStrideThreads threads per block on the compute stream (nothing for n = 0).
inline constexpr int kGridStrideThreads = 256;
#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)
#define LAUNCH_GRID_STRIDE(kernel, n, ...)                                                            \
  do {                                                                                                \
    if ((n) > 0) {                                                                                    \
      KERNEL_LAUNCH(kernel, (grid_for((n), kGridStrideThreads)), kGridStrideThreads, 0)(__VA_ARGS__); \
      CUDA_LAUNCHED(#kernel);                                                                         \
    }                                                                                                 \
  } while (0)

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  T r = lane < warps ? part[lane] : T(0);
  return warp_sum(r);
}
__device__ inline float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = lane < warps ? part[lane] : -INFINITY;
  return warp_max(r);
}

}  // namespace trident::kernels::cuda
