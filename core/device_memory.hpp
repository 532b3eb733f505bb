// Device (GPU) memory for Tensor storage, behind a plain C++ interface so
// core/ compiles without CUDA headers. Builds with the CUDA backend define
// these with cudaMalloc/cudaFree (core/cuda/device_memory_cuda.cpp); builds
// without it refuse with a clear error (core/device_memory_none.cpp).
#pragma once
#include <cstddef>

namespace trident {

bool device_memory_available();
void* device_alloc(size_t bytes, int device);
void device_free(void* p, int device);
void device_memset_zero(void* p, size_t bytes, int device);
void copy_to_device(void* dst, const void* src, size_t bytes, int device);
void copy_to_host(void* dst, const void* src, size_t bytes, int device);
int device_count();

}  // namespace trident
