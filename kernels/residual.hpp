// Residual add, with the bias of the linear layer that feeds it.
// Shapes: N rows, C channels. A row-parallel linear adds its bias after the
// reduction of its partial outputs (once, not once per rank), so its bias
// is applied here rather than inside the GEMM.
// bias_backward overwrites dbias, or accumulates (+=) when accumulate is true.
#pragma once
#include <cstdint>

namespace trident::kernels {

// out[N,C] = a[N,C] + b[N,C] + bias[C] (bias may be null; out may alias a)
template <typename T>
void residual_forward(T* out, const T* a, const T* b, const T* bias, int64_t N, int64_t C);
// dbias[C] (+)= sum_n dout[n,:]; dbias null (no bias): nothing to do
template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t C, bool accumulate);

}  // namespace trident::kernels
