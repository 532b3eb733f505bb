// REQUIRE_GPU() at the top of a test: the test skips, with the reason, where
// the build has no CUDA backend or the machine no GPU; else device 0 is bound.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/device_memory.hpp"
#include "kernels/backends.hpp"

namespace trident::test {

inline std::string gpu_skip_reason() {
  if (!kernels::cuda_built()) return "this build has no CUDA backend (configured without the CUDA toolkit)";
  if (device_count() == 0)
    return "no CUDA device on this machine (" + kernels::cuda_backend() + "): CUDA tests run where a GPU exists";
  return "";
}

}  // namespace trident::test

#define REQUIRE_GPU()                                                                     \
  do {                                                                                    \
    if (auto why = ::trident::test::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why; \
    ::trident::set_device(0);                                                             \
  } while (0)
