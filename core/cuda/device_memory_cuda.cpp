// Device memory through the CUDA runtime (see core/device_memory.hpp).
#include <cuda_runtime.h>

#include "core/device_memory.hpp"
#include "core/error.hpp"

#define CUDA_CHECK(stmt) TRIDENT_LIBRARY_CHECK("CUDA", stmt, cudaSuccess, cudaGetErrorString)

namespace trident {

bool device_memory_available() { return device_count() > 0; }

void* device_alloc(size_t bytes, int device) {
  CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  if (bytes) CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void device_free(void* p, int device) {
  if (!p) return;
  cudaSetDevice(device);
  cudaFree(p);
}
void device_memset_zero(void* p, size_t bytes, int device) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemset(p, 0, bytes));
}
void copy_to_device(void* dst, const void* src, size_t bytes, int device) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, size_t bytes, int device) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace trident
