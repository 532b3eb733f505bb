// Token (and optional learned position) embedding lookup.
// Shapes: B batch, T sequence, C channels, V vocab.
// Backward accumulates (+=) into dwte and dwpe.
#pragma once
#include <cstdint>

namespace trident::kernels {

// out[B,T,C] = wte[tokens[b,t]] + wpe[t] (wpe may be null)
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_, int64_t C);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_, int64_t C);

}  // namespace trident::kernels
