// CUDA device query: the only CUDA source until the CUDA backend lands.
// Reports the visible devices for `trident --version` and start-up logs.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

namespace trident::kernels::cuda {

std::string device_summary() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no usable CUDA device (") + cudaGetErrorString(err) + ")";
  std::string out = std::to_string(count) + " CUDA device(s)";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    char line[256];
    std::snprintf(line, sizeof(line), "; %d: %s sm_%d%d %.1f GiB", i, prop.name, prop.major, prop.minor,
                  double(prop.totalGlobalMem) / (1 << 30));
    out += line;
  }
  return out;
}

}  // namespace trident::kernels::cuda
