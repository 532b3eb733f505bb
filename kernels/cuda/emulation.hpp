// CUDA kernels on the CPU, for testing their logic where no GPU exists
// (tests/kernels/test_cuda_emulated.cpp): with TRIDENT_CUDA_EMULATION the kernel
// files compile as C++ against this header. A launch runs its blocks one
// after another; a block's threads are real threads, __syncthreads and
// __syncwarp are barriers, warp shuffles exchange through the block, shared
// memory is per launch (static __shared__ arrays, blocks being sequential)
// or per block (dynamic). What this cannot check: timing, the hardware's
// limits (registers, shared memory size) and races that need real
// concurrency between blocks. It is not a substitute for the GPU tests
// (test_cuda), which run the same kernels on a device.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/dtype.hpp"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

using std::max;
using std::min;
using cudaStream_t = void*;
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
inline const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
template <typename T>
cudaError_t cudaMalloc(T** p, size_t n) {
  *p = static_cast<T*>(std::malloc(n));
  return cudaSuccess;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <typename K>
cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) {
  return cudaSuccess;
}

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace trident::emu {

struct Block {
  std::unique_ptr<std::barrier<>> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<uint64_t> exchange;  // one 8-byte slot per thread (warp shuffles)
  std::vector<double> smem;        // dynamic shared memory
};
inline thread_local Block* tl_block = nullptr;
inline thread_local int tl_tid = 0;

template <typename T>
T* dynamic_smem() {
  return reinterpret_cast<T*>(tl_block->smem.data());
}

template <typename Kernel>
auto launch(Kernel kernel, dim3 grid, dim3 block, size_t smem_bytes) {
  return [=](auto... args) {
    const int threads = int(block.x * block.y * block.z);
    gridDim = grid, blockDim = block;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          Block b;
          b.all = std::make_unique<std::barrier<>>(threads);
          for (int w = 0; w < (threads + 31) / 32; ++w)
            b.warps.push_back(std::make_unique<std::barrier<>>(std::min(32, threads - 32 * w)));
          b.exchange.assign(size_t(threads), 0);
          b.smem.assign(smem_bytes / sizeof(double) + 1, 0.0);
          std::vector<std::thread> pool;
          for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
              tl_block = &b, tl_tid = t;
              threadIdx =
                  dim3(unsigned(t) % block.x, unsigned(t) / block.x % block.y, unsigned(t) / (block.x * block.y));
              blockIdx = dim3(bx, by, bz);
              kernel(args...);
              b.warps[size_t(t / 32)]->arrive_and_drop();  // an exited thread no longer counts
              b.all->arrive_and_drop();
            });
          for (auto& th : pool) th.join();
        }
  };
}

}  // namespace trident::emu

inline void __syncthreads() { trident::emu::tl_block->all->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  trident::emu::tl_block->warps[size_t(trident::emu::tl_tid / 32)]->arrive_and_wait();
}

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  using namespace trident::emu;
  static_assert(sizeof(T) <= 8);
  std::memcpy(&tl_block->exchange[size_t(tl_tid)], &v, sizeof(T));
  __syncwarp();
  T r;
  std::memcpy(&r, &tl_block->exchange[size_t(tl_tid ^ lane_mask)], sizeof(T));
  __syncwarp();  // everyone has read before a slot is written again
  return r;
}

inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __half {
  _Float16 h;
};
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {trident::f32_to_bf16(x)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return trident::bf16_to_f32(b.bits); }
inline __half __float2half_rn(float x) { return {static_cast<_Float16>(x)}; }
inline float __half2float(__half h) { return float(h.h); }
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t u) { return {u}; }
inline uint16_t __half_as_ushort(__half h) {
  uint16_t u;
  std::memcpy(&u, &h.h, 2);
  return u;
}
inline __half __ushort_as_half(uint16_t u) {
  __half h;
  std::memcpy(&h.h, &u, 2);
  return h;
}
using std::isfinite;
