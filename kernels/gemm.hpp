// GEMM and the linear layer built on it (row-major throughout).
// float goes to oneDNN's dnnl_sgemm (chosen by measurement, docs/performance.md);
// double is a plain loop nest, used only as the finite-difference reference.
// Shapes: N rows (tokens), C input channels, OC output channels.
// linear_backward: dinp is overwritten; dweight and dbias are accumulated (+=),
// or overwritten when accumulate is false (the first micro-batch of a step).
//
// math: the products' precision, chosen by the caller (the model passes its
// placement's train.precision; no process-wide setting): fp32; bf16 (the
// CPU's oneDNN bf16 matmul on operands that hold bf16 values, exact
// products with fp32 accumulation, or sgemm where the CPU has none; cuBLAS's
// fast-bf16 compute type on CUDA); fp16 (sgemm on the CPU, fast-fp16 on
// CUDA). double is always the plain loop.
#pragma once
#include <cstdint>

#include "kernels/precision.hpp"

namespace trident::kernels {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc, Precision math = Precision::fp32);

// out[N,OC] = inp[N,C] * weight[OC,C]^T + bias[OC] (bias may be null)
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC,
                    Precision math = Precision::fp32);

// dinp[N,C] = dout[N,OC] * weight[OC,C]; dweight[OC,C] += dout^T * inp; dbias[OC] += sum_n dout
// dinp, dweight or dbias may be null (not needed now / no bias): zero-bubble
// pipelines compute dinp first and dweight later.
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N, int64_t C,
                     int64_t OC, bool accumulate = true, Precision math = Precision::fp32);

// The 16-bit operands of the CPU's bf16 path (train.precision bf16,
// docs/precision.md): a GEMM input given as fp32 values, as their 2-byte
// bf16 copy (bits, the same numbers: the values are already rounded), or
// both. The bf16 GEMM reads a copy as is and converts an fp32-only input;
// when the GEMM math is not bf16 (math, or a CPU without a bf16 matmul),
// sgemm reads the fp32 values and widens a copy-only input.
// Inputs are contiguous (row stride = columns). Host memory only.
struct In16 {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};
void gemm16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, In16 A, In16 B, float beta,
            float* C, int64_t ldc, Precision math);
void linear_forward16(float* out, In16 inp, In16 weight, const float* bias, int64_t N, int64_t C, int64_t OC,
                      Precision math);
void linear_backward16(float* dinp, float* dweight, float* dbias, In16 dout, In16 inp, In16 weight, int64_t N,
                       int64_t C, int64_t OC, bool accumulate, Precision math);

// The float GEMMs run on the CPU with this math since the process started
// (gemm, linear_*, grouped_linear_*, their 16-bit-operand forms): a count,
// for tests and benchmarks that check which math a model asked for.
int64_t cpu_gemm_calls(Precision math);

// Number of threads the CPU kernels use (OpenMP and oneDNN).
void set_num_threads(int n);
// This process's best fp32 GEMM rate (FLOP/s) over `seconds` of 1024^3
// products: the MFU reference on CPU when log.peak_flops is not set.
// math: bf16 measures the bf16 GEMM's rate instead.
double measure_gemm_peak(double seconds = 0.3, Precision math = Precision::fp32);
int num_threads();

}  // namespace trident::kernels
