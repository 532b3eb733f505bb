// The bound device: a summary for `trident --version` and start-up logs, and
// its dense peak FLOP/s (the MFU reference on CUDA).
#include <cstdio>
#include <string>

#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

std::string device_summary() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no usable CUDA device (") + cudaGetErrorString(err) + ")";
  std::string out = std::to_string(count) + " CUDA device(s)";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    char line[512];
    std::snprintf(line, sizeof(line), "; %d: %s sm_%d%d %.1f GiB", i, prop.name, prop.major, prop.minor,
                  double(prop.totalGlobalMem) / (1 << 30));
    out += line;
  }
  return out;
}

// FLOP per clock per SM, dense: tensor cores (bf16/fp16) and CUDA cores
// (fp32 FMA = 2 FLOP). sm_90 (H100/H200): 4096 and 256 (989 TFLOP/s bf16 at
// 132 SMs x 1.83 GHz); sm_80 (A100): 2048 and 128 (312 TFLOP/s); sm_89:
// 1024 and 256; others: sm_80's.
double dense_peak_flops(int mode) {
  int dev = ::trident::current_device();
  if (dev < 0) CUDA_CHECK(cudaGetDevice(&dev));
  int sms = 0, clock_khz = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  double tensor = 2048, fp32 = 128;
  if (major == 9)
    tensor = 4096, fp32 = 256;
  else if (major == 8 && minor == 9)
    tensor = 1024, fp32 = 256;
  else if (major >= 10)
    tensor = 8192, fp32 = 256;
  return double(sms) * double(clock_khz) * 1e3 * (mode == 0 ? fp32 : tensor);
}

}  // namespace trident::kernels::cuda
