// Which compute backends this build has, for --version and start-up logs.
// Compiles without CUDA headers; the CUDA part answers "not built" when off.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kernels/precision.hpp"

namespace trident::kernels {

std::string cpu_gemm_backend();  // e.g. "oneDNN 2.6.3 (sgemm)"
std::string cuda_backend();      // device summary, or why there is none
// This CPU has bf16 dot-product instructions (AVX512-BF16 or AMX-BF16, by
// CPUID): without them a bf16 GEMM is emulated and slower than sgemm.
bool cpu_has_bf16_instructions();
bool cuda_built();

// The bound GPU's dense peak for that math, FLOP/s (the MFU reference); 0
// without a CUDA backend.
double cuda_peak_flops(Precision p);
// GPU seconds per kernel since the last call, when kernel timing is on
// (environment TRIDENT_KERNEL_TIMES=1, CUDA builds); empty otherwise.
std::vector<std::pair<std::string, double>> take_kernel_times();

}  // namespace trident::kernels
