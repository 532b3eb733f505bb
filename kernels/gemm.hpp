// GEMM and the linear layer built on it (row-major throughout).
// float goes to oneDNN's dnnl_sgemm (chosen by measurement, docs/performance.md);
// double is a plain loop nest, used only as the finite-difference reference.
// Shapes: N rows (tokens), C input channels, OC output channels.
// linear_backward: dinp is overwritten; dweight and dbias are accumulated (+=),
// or overwritten when accumulate is false (the first micro-batch of a step).
#pragma once
#include <cstdint>

namespace trident::kernels {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc);

// out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC] (bias may be null)
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC);

// dinp[N,C] = dout[N,OC] * weight[OC,C]; dweight[OC,C] += dout^T * inp; dbias[OC] += sum_n dout
// dinp, dweight or dbias may be null (not needed now / no bias): zero-bubble
// pipelines compute dinp first and dweight later.
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N, int64_t C,
                     int64_t OC, bool accumulate = true);

// Number of threads the CPU kernels use (OpenMP and oneDNN).
void set_num_threads(int n);
// This process's best fp32 GEMM rate (FLOP/s) over `seconds` of 1024^3
// products: the MFU reference on CPU when log.peak_flops is not set.
double measure_gemm_peak(double seconds = 0.3);
int num_threads();

}  // namespace trident::kernels
