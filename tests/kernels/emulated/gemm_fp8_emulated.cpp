// The FP8 GEMM wrappers of kernels/cuda/gemm_fp8_cuda.cu compiled for the CPU
// emulation (kernels/cuda/emulation.hpp): their transposes, operand order and
// scales around cuBLASLt's FP8 matmul, which the emulation replaces by its
// definition, for tests/kernels/test_cuda_emulated.cpp.
#include "kernels/cuda/gemm_fp8_cuda.cu"
