// The GPU side of a rank, behind a plain C++ interface so core/ compiles
// without CUDA headers: the device it is bound to, its compute stream, and a
// caching allocator for Tensor storage on cuda:N with the same per-category
// accounting and peaks as the HostAllocator. Builds with the CUDA backend
// define these in core/cuda/device_memory_cuda.cpp; builds without it refuse
// with a clear error (core/device_memory_none.cpp).
//
// Device storage is plain device memory (cudaMalloc): the host never
// dereferences it; whatever crosses (tokens in, losses and norms out,
// checkpoints, MPI host staging) goes through copy_bytes or the kernels'
// reductions. Freed blocks are cached by rounded size (512 B below 1 MiB,
// 2 MiB above) and reused in the order of the compute stream, as PyTorch's
// caching allocator does; the cache is returned to CUDA when an allocation
// would otherwise fail.
//
// Streams: every kernel of the rank runs on its compute stream (returned as
// an opaque cudaStream_t). Communicators run on their own streams and order
// themselves after the compute stream with events (parallel/nccl).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/allocator.hpp"

namespace trident {

bool device_memory_available();
int device_count();

// Binds this process to `device` (cudaSetDevice) and creates its compute
// stream. Once per process, before any device allocation (the trainer binds
// local_rank % device_count()).
void set_device(int device);
int current_device();
void* compute_stream();     // cudaStream_t
void device_synchronize();  // waits for everything queued on the compute stream

void* device_alloc(size_t bytes, int device, MemCategory cat = MemCategory::other);
void device_free(void* p, size_t bytes, int device, MemCategory cat = MemCategory::other);
MemStats device_memory_stats();  // bytes requested, per category, and peaks
void device_reset_peaks();
int64_t device_reserved_bytes();  // held from CUDA: in use + cached
int64_t device_total_bytes();     // the bound device's memory (0 without one)
void device_empty_cache();

// True when p lies in a block of this allocator (false at once when none
// was ever allocated: a CPU run never asks CUDA).
bool is_device_pointer(const void* p);

// On the compute stream, in its order.
void device_memset_zero(void* p, size_t bytes, int device);
// Any direction (host or device on either side). Stream-ordered; when dst
// is host memory it also waits, so the host may read dst on return.
void copy_bytes(void* dst, const void* src, size_t bytes);
// Synchronous host <-> device copies (tests, start-up).
void copy_to_device(void* dst, const void* src, size_t bytes, int device);
void copy_to_host(void* dst, const void* src, size_t bytes, int device);

}  // namespace trident
