// LayerNorm and RMSNorm over the last dimension.
// Shapes: N rows, C channels. Forward saves mean/rstd [N] for backward.
// Backward accumulates (+=) into dinp (the residual stream), and into dweight,
// dbias unless accumulate is false (then they are overwritten).
#pragma once
#include <cstdint>

namespace trident::kernels {

// out[N,C] = (inp - mean) * rstd * weight + bias; mean[N], rstd[N] saved
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                       double eps);
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t N, int64_t C, bool accumulate = true);

// out[N,C] = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps); rstd[N] saved
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, double eps);
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N,
                      int64_t C, bool accumulate = true);

}  // namespace trident::kernels
