// Which compute backends this build has, for --version and start-up logs.
// Compiles without CUDA headers; the CUDA part answers "not built" when off.
#pragma once
#include <string>

namespace trident::kernels {

std::string cpu_gemm_backend();   // e.g. "oneDNN 2.6.3 (sgemm)"
std::string cuda_backend();       // device summary, or why there is none
bool cuda_built();

}  // namespace trident::kernels
