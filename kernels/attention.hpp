// Causal multi-head attention with grouped-query heads (H query heads share
// KV key/value heads, H % KV == 0; KV == H is plain multi-head attention).
// Shapes: B batch, T sequence, H query heads, KV key/value heads, D head size.
// qkv[B,T,(H+2KV)*D] holds per token [q heads | k heads | v heads].
// probs is the state forward saves for backward (selective recompute reruns
// attention_probs to refill it), attention_state_elements() floats:
//   CPU:  [B,H,T,T], the softmax (row t, columns <= t);
//   CUDA: [B,H,T], each row's log-sum-exp (a flash-style kernel: no T x T
//         matrix; backward recomputes the probabilities tile by tile).
// Backward reads out (the forward's output) and overwrites dqkv. Scale is 1/sqrt(D).
// doc_start[B*T] (optional, document masking): the first position of the
// document holding row (b, t); query t then sees keys [doc_start, t] only.
#pragma once
#include <cstdint>

namespace trident::kernels {

int64_t attention_state_elements(int64_t B, int64_t T_, int64_t H, bool on_cuda);

template <typename T>
void attention_probs(T* probs, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                     const int32_t* doc_start = nullptr);

// out[B,T,H*D]; fills probs then applies them to v
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                       const int32_t* doc_start = nullptr);

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* probs, int64_t B, int64_t T_,
                        int64_t H, int64_t KV, int64_t D, const int32_t* doc_start = nullptr);

}  // namespace trident::kernels
