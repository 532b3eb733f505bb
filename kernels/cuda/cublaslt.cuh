// The cuBLASLt context the GEMM files share (gemm_cublaslt.cu,
// gemm_fp8_cuda.cu): one handle, one 32 MiB workspace, created on first use
// (defined in gemm_cublaslt.cu), and the status check.
#pragma once
#include <cublasLt.h>

#include <cstddef>

#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

#define CUBLAS_CHECK(stmt)                                                                   \
  do {                                                                                       \
    cublasStatus_t trident_s_ = (stmt);                                                      \
    if (trident_s_ != CUBLAS_STATUS_SUCCESS)                                                 \
      cuda_fail("cuBLASLt", #stmt, __FILE__, __LINE__, cublasLtGetStatusString(trident_s_)); \
  } while (0)

inline constexpr size_t kLtWorkspace = size_t(32) << 20;
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kLtWorkspace bytes
};
LtContext& lt_context();

}  // namespace trident::kernels::cuda
