// GELU (tanh approximation, as GPT-2), SwiGLU (as LLaMA) and gpt-oss's clamped SwiGLU.
// Backward overwrites dinp.
#pragma once
#include <cstdint>

namespace trident::kernels {

// out[n] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

// inp[N, 2F] holds [gate | up] per row; out[N,F] = silu(gate) * up
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F);
// dinp[N, 2F] = [dgate | dup]
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F);

// gpt-oss's clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit,
// limit), out = g sigmoid(alpha g) (u + 1). The clamps pass the gradient
// inside their bounds, the bounds included (torch.clamp's).
template <typename T>
void clamped_swiglu_forward(T* out, const T* inp, int64_t N, int64_t F, double alpha, double limit);
template <typename T>
void clamped_swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F, double alpha, double limit);

}  // namespace trident::kernels
