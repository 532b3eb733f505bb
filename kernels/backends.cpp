// Build/backends report.
#include <oneapi/dnnl/dnnl.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <fmt/format.h>

#include "kernels/backends.hpp"

#ifdef TRIDENT_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.hpp"
#endif

namespace trident::kernels {

std::string cpu_gemm_backend() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{} (sgemm, cpu runtime {})", v->major, v->minor, v->patch,
                     v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
}

bool cpu_has_bf16_instructions() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1;  // CPUID.(7,0):EDX[22]
  const unsigned max_sub = a;
  bool avx512_bf16 = false;  // CPUID.(7,1):EAX[5]
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512_bf16 = (a >> 5) & 1;
  return amx_bf16 || avx512_bf16;
#else
  return true;  // other architectures: not judged here
#endif
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

[[maybe_unused]] static int cuda_mode(Precision p) { return p == Precision::bf16 ? 1 : p == Precision::fp16 ? 2 : 0; }

std::vector<std::pair<std::string, double>> take_kernel_times() {
#ifdef TRIDENT_HAVE_CUDA
  if (cuda::kernel_timing_enabled()) return cuda::take_kernel_times();
#endif
  return {};
}

double cuda_peak_flops(Precision p) {
#ifdef TRIDENT_HAVE_CUDA
  return cuda::dense_peak_flops(cuda_mode(p));
#else
  (void)p;
  return 0;
#endif
}

}  // namespace trident::kernels
