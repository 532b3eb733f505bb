// Causal multi-head attention with grouped-query heads (H query heads share
// KV key/value heads, H % KV == 0; KV == H is plain multi-head attention).
// Shapes: B batch, T sequence, H query heads, KV key/value heads, D head size.
// qkv[B,T,(H+2KV)*D] holds per token [q heads | k heads | v heads].
// probs[B,H,T,T] is the softmax (row t, columns <= t); forward writes it,
// backward reads it (selective recompute reruns attention_probs to refill it).
// Backward overwrites dqkv. Scale is 1/sqrt(D).
#pragma once
#include <cstdint>

namespace trident::kernels {

template <typename T>
void attention_probs(T* probs, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D);

// out[B,T,H*D]; fills probs then applies them to v
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D);

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int64_t B, int64_t T_, int64_t H,
                        int64_t KV, int64_t D);

}  // namespace trident::kernels
