// Build/backends report.
#include <oneapi/dnnl/dnnl.h>

#include <fmt/format.h>

#include "kernels/backends.hpp"

#ifdef TRIDENT_HAVE_CUDA
namespace trident::kernels::cuda {
std::string device_summary();
}
#endif

namespace trident::kernels {

std::string cpu_gemm_backend() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{} (sgemm, cpu runtime {})", v->major, v->minor, v->patch,
                     v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
}

bool cuda_built() {
#ifdef TRIDENT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string cuda_backend() {
#ifdef TRIDENT_HAVE_CUDA
  return cuda::device_summary();
#else
  return "not built (TRIDENT_CUDA=OFF or no toolkit)";
#endif
}

}  // namespace trident::kernels
