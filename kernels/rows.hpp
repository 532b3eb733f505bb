// Row-wise operations of the mixture-of-experts layer and QK-norm: scaling
// rows by a per-row factor (the shared experts' gate), per-row dot products
// (the gate's gradient), and moving attention heads between the fused QKV
// rows and one row per head (QK-norm normalises each head's D values).
// Every output element is one thread's, its terms added in index order, so
// the CPU and CUDA results agree up to rows_dot's summation order. Host or
// device buffers (the choice by the first argument, kernels/device_choice.cpp).
// Shapes: N rows, C channels; qkv [N, W] with W >= (H + 2 KV) D, its heads
// in the order H query, KV key, KV value heads of D values each.
#pragma once
#include <cstdint>

namespace trident::kernels {

// out[n,:] += g[n] x[n,:]; g null: out += x.
template <typename T>
void rows_scale_add(T* out, const T* x, const T* g, int64_t N, int64_t C);
// out[n,:] = g[n] x[n,:] (out overwritten).
template <typename T>
void rows_scale(T* out, const T* x, const T* g, int64_t N, int64_t C);
// d[n] = x[n,:] . y[n,:], c in increasing order (d overwritten).
template <typename T>
void rows_dot(T* d, const T* x, const T* y, int64_t N, int64_t C);

// The query and key heads of qkv as rows: heads [N H + N KV, D], the query
// heads first (row n H + h), then the key heads (row N H + n KV + h).
template <typename T>
void heads_gather(T* heads, const T* qkv, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W);
// The reverse: the rows back into qkv's query and key heads (the value
// heads untouched).
template <typename T>
void heads_scatter(T* qkv, const T* heads, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W);

// out [N, A + B] = [a | b] row by row (a [N, A], b [N, B]); columns_split is
// its reverse (multi-token prediction's eh_proj input and its gradient).
template <typename T>
void columns_concat(T* out, const T* a, const T* b, int64_t N, int64_t A, int64_t B);
template <typename T>
void columns_split(T* a, T* b, const T* in, int64_t N, int64_t A, int64_t B);

// Multi-head latent attention's heads (model.attention: mla), for the
// attention kernels (queries and keys of Dq = Dn + Dr, values of Dv):
// qkv [N, H (2 Dq + Dv)] from the query heads q [N, H Dq] (each head's Dn
// part, then its Dr rotary part), the key/value up-projection kvb
// [N, H (Dn + Dv)] (each head's key part, then its value) and the rotary key
// kr [N, Dr] all heads share: query heads as they are, key head h
// [kvb's key part of h | kr], value head h kvb's value of h.
template <typename T>
void mla_heads(T* qkv, const T* q, const T* kvb, const T* kr, int64_t N, int64_t H, int64_t Dn, int64_t Dr, int64_t Dv);
// The reverse for gradients: dq and dkvb overwritten, dkr [N, Dr] the sum of
// the key heads' rotary parts (heads in increasing order).
template <typename T>
void mla_heads_backward(T* dq, T* dkvb, T* dkr, const T* dqkv, int64_t N, int64_t H, int64_t Dn, int64_t Dr,
                        int64_t Dv);

}  // namespace trident::kernels
