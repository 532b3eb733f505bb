// CPU GEMM: oneDNN sgemm for float, a reference loop nest for double.
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "core/error.hpp"
#include "kernels/gemm.hpp"
#include "kernels/cpu/dispatch.hpp"

namespace trident::kernels {

static std::string dnnl_status_string(dnnl_status_t s) { return fmt::format("dnnl_status_t {}", int(s)); }
#define DNNL_CHECK(stmt) TRIDENT_LIBRARY_CHECK("oneDNN", stmt, dnnl_success, dnnl_status_string)

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  TRIDENT_ON_CUDA(float, C, cuda::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
  DNNL_CHECK(dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                  const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
#pragma omp parallel for collapse(2)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = alpha * s + (beta == 0 ? 0 : beta * C[i * ldc + j]);
    }
}

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC) {
  TRIDENT_ON_CUDA(T, out, cuda::linear_forward(out, inp, weight, bias, N, C, OC));
  if (bias) {
#pragma omp parallel for
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) out[n * OC + o] = bias[o];
  }
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, bias ? T(1) : T(0), out, OC);
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t C, int64_t OC, bool accumulate) {
  TRIDENT_ON_CUDA(T, dout, cuda::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate));
  if (dinp) gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
  if (dweight) gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, accumulate ? T(1) : T(0), dweight, C);
  if (dbias) {
#pragma omp parallel for
    for (int64_t o = 0; o < OC; ++o) {
      T s = 0;
      for (int64_t n = 0; n < N; ++n) s += dout[n * OC + o];
      dbias[o] = accumulate ? dbias[o] + s : s;
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                     int64_t, int64_t, bool);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int64_t, int64_t, int64_t, bool);

void set_num_threads(int n) { omp_set_num_threads(n); }
int num_threads() { return omp_get_max_threads(); }

}  // namespace trident::kernels
