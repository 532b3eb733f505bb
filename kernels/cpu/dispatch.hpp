// Dispatch from the public kernel entry points to the CUDA twins: a float
// kernel whose first buffer lies in device memory runs on the GPU
// (kernels/cuda/cuda_kernels.hpp); everything else runs on the CPU. Builds
// without CUDA compile the check away. `return` leaves the CPU body.
#pragma once
#include <type_traits>

#ifdef TRIDENT_HAVE_CUDA
#include "core/device_memory.hpp"
#include "kernels/cuda/cuda_kernels.hpp"
#define TRIDENT_ON_CUDA(T, ptr, ...)                                    \
  do {                                                                  \
    if constexpr (std::is_same_v<T, float>) {                           \
      if (::trident::is_device_pointer(ptr)) {                          \
        ::trident::kernels::cuda::KernelTimer trident_timer_(__func__); \
        __VA_ARGS__;                                                    \
        return;                                                         \
      }                                                                 \
    }                                                                   \
  } while (0)
#else
#define TRIDENT_ON_CUDA(T, ptr, ...) \
  do {                               \
  } while (0)
#endif
