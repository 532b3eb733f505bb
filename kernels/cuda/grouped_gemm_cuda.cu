// The grouped linear on CUDA (see kernels/grouped_gemm.hpp): every expert
// with rows is one group of cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx:
// problems of different sizes in one call, no plan per token count), the
// backward's input and weight gradients in one call together. Column-major
// underneath, as gemm_cublaslt.cu: a row-major y = x W^T is y^T = W x^T.
// The offsets are host memory; the operand pointer arrays are copied to the
// device for each call. An expert without rows gets a zeroed weight gradient
// (accumulate = false) and no GEMM.
#include <cublas_v2.h>

#include <mutex>
#include <vector>

#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

#define CUBLAS_GROUPED_CHECK(stmt)                                                       \
  do {                                                                                   \
    cublasStatus_t trident_s_ = (stmt);                                                  \
    if (trident_s_ != CUBLAS_STATUS_SUCCESS)                                             \
      cuda_fail("cuBLAS", #stmt, __FILE__, __LINE__, cublasGetStatusString(trident_s_)); \
  } while (0)

namespace {

struct Handle {
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
};

Handle& blas() {
  static Handle h;
  std::lock_guard<std::mutex> lock(h.mutex);
  if (!h.handle) CUBLAS_GROUPED_CHECK(cublasCreate(&h.handle));
  return h;
}

cublasComputeType_t compute_type(int mode) {
  return mode == 1 ? CUBLAS_COMPUTE_32F_FAST_16BF : mode == 2 ? CUBLAS_COMPUTE_32F_FAST_16F : CUBLAS_COMPUTE_32F;
}

int dim(int64_t v) {
  if (v > int64_t(0x7fffffff)) cuda_fail("cuBLAS", "grouped GEMM", __FILE__, __LINE__, "a dimension exceeds 2^31 - 1");
  return int(v);
}

// Column-major problems C = alpha op(A) op(B) + beta C, one a group.
struct Problems {
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  std::vector<const void*> a, b;
  std::vector<void*> c;

  void add(bool trans_a, bool trans_b, int64_t m_, int64_t n_, int64_t k_, const float* A, int64_t lda_, const float* B,
           int64_t ldb_, float beta_, float* C, int64_t ldc_) {
    ta.push_back(trans_a ? CUBLAS_OP_T : CUBLAS_OP_N), tb.push_back(trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    m.push_back(dim(m_)), n.push_back(dim(n_)), k.push_back(dim(k_));
    lda.push_back(dim(lda_)), ldb.push_back(dim(ldb_)), ldc.push_back(dim(ldc_)), size.push_back(1);
    alpha.push_back(1.f), beta.push_back(beta_);
    a.push_back(A), b.push_back(B), c.push_back(C);
  }

  void run(int mode) const {
    const size_t G = m.size();
    if (G == 0) return;
    const size_t bytes = 3 * G * sizeof(void*);
    std::vector<const void*> host(3 * G);
    for (size_t g = 0; g < G; ++g) host[g] = a[g], host[G + g] = b[g], host[2 * G + g] = c[g];
    auto** d = static_cast<void**>(scratch_alloc(bytes));
    CUDA_CHECK(cudaMemcpyAsync(d, host.data(), bytes, cudaMemcpyHostToDevice, stream()));
    Handle& h = blas();
    {
      std::lock_guard<std::mutex> lock(h.mutex);
      CUBLAS_GROUPED_CHECK(cublasSetStream(h.handle, stream()));
      CUBLAS_GROUPED_CHECK(cublasGemmGroupedBatchedEx(h.handle, ta.data(), tb.data(), m.data(), n.data(), k.data(),
                                                      alpha.data(), d, CUDA_R_32F, lda.data(), d + G, CUDA_R_32F,
                                                      ldb.data(), beta.data(), d + 2 * G, CUDA_R_32F, ldc.data(),
                                                      int(G), size.data(), compute_type(mode)));
    }
    // (a copy from pageable memory has read the host array when it returns;
    // the block is reused in stream order)
    scratch_free(d, bytes);
  }
};

}  // namespace

void grouped_linear_forward(float* y, const float* x, const float* w, const int64_t* offsets, int64_t G, int64_t C,
                            int64_t OC, int mode) {
  Problems p;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    // y_g^T[OC,rows] = W_g[OC,C] x_g^T[C,rows]; W row-major is W^T column-major (ld C)
    if (rows > 0) p.add(true, false, OC, rows, C, w + g * OC * C, C, x + r0 * C, C, 0.f, y + r0 * OC, OC);
  }
  p.run(mode);
}

void grouped_linear_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                             const int64_t* offsets, int64_t G, int64_t C, int64_t OC, bool accumulate, int mode) {
  Problems p;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    float* dwg = dw + g * OC * C;
    if (rows == 0) {
      if (!accumulate) CUDA_CHECK(cudaMemsetAsync(dwg, 0, size_t(OC * C) * sizeof(float), stream()));
      continue;
    }
    if (dx)  // dx_g^T[C,rows] = W_g^T[C,OC] dy_g^T[OC,rows]
      p.add(false, false, C, rows, OC, w + g * OC * C, C, dy + r0 * OC, OC, 0.f, dx + r0 * C, C);
    // dW_g^T[C,OC] (+)= x_g^T[C,rows] dy_g[rows,OC]
    p.add(false, true, C, OC, rows, x + r0 * C, C, dy + r0 * OC, OC, accumulate ? 1.f : 0.f, dwg, C);
  }
  p.run(mode);
}

}  // namespace trident::kernels::cuda
