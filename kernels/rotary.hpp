// Rotary position embedding (RoPE), "rotate half" layout as in Hugging Face
// LLaMA: channel i pairs with channel i + D/2, frequency theta^(-2i/D).
// Applied in place to the q and k heads of qkv[B,T,(H+2KV)*D]; backward
// applies the inverse rotation in place to dqkv. table[T, D/2, 2] = (cos, sin).
// doc_start[B*T] (optional): row (b, t) takes position t - doc_start (positions
// restart at each document).
#pragma once
#include <cstdint>
#include <vector>

namespace trident::kernels {

std::vector<double> rope_table(int64_t T_, int64_t D, double theta);
// The table of the given frequencies inv_freq [D/2] (scaled rotary,
// model/rope.hpp), cos and sin times attention_factor.
std::vector<double> rope_table(int64_t T_, const std::vector<double>& inv_freq, double attention_factor = 1.0);

template <typename T>
void rope_forward(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start = nullptr);
template <typename T>
void rope_backward(T* dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start = nullptr);

// Interleaved rotary embedding (DeepSeek-V3's rope_interleave, the layout
// of its published weights): channel 2i pairs with 2i + 1, frequency
// theta^(-2i/Dr), table = rope_table(T, Dr, theta). Rotates, in place, `heads`
// vectors of Dr values in each row of x [B, T, ld]: vector h at column
// h * stride + offset (multi-head latent attention's query heads' rotary
// parts, or its one shared rotary key). Backward rotates by -angle.
// doc_start as above (row (b, t) at position t - doc_start[b*T + t]).
template <typename T>
void rope_pairs_forward(T* x, const double* table, int64_t B, int64_t T_, int64_t heads, int64_t ld, int64_t stride,
                        int64_t offset, int64_t Dr, const int32_t* doc_start = nullptr);
template <typename T>
void rope_pairs_backward(T* x, const double* table, int64_t B, int64_t T_, int64_t heads, int64_t ld, int64_t stride,
                         int64_t offset, int64_t Dr, const int32_t* doc_start = nullptr);

}  // namespace trident::kernels
