// The CUDA kernels of kernels/cuda/fp8_cuda.cu compiled for the CPU emulation
// (kernels/cuda/emulation.hpp), for tests/kernels/test_cuda_emulated.cpp.
#include "kernels/cuda/fp8_cuda.cu"
