// Error reporting for the CUDA kernel files (compiled by the C++ compiler,
// so the .cu files need not include fmt).
#include <string>

#include "core/error.hpp"
#include "kernels/cuda/cuda_kernels.hpp"

namespace trident::kernels::cuda {

[[noreturn]] void cuda_fail(const char* library, const char* stmt, const char* file, int line, const char* message) {
  ::trident::throw_library_failure(library, stmt, file, line, message);
}

}  // namespace trident::kernels::cuda
