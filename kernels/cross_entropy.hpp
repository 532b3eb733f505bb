// Fused softmax cross-entropy over the vocabulary, in place.
// Shapes: N rows (tokens), V vocab (row stride; the last V - Vvalid columns
// are padding and never take probability).
// losses[N] = -log softmax(logits)[target]; when `dscale` is non-zero the
// logits are overwritten by dlogits = dscale * (softmax - onehot(target)).
#pragma once
#include <cstdint>

namespace trident::kernels {

template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           T dscale);

}  // namespace trident::kernels
