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

template <typename T>
void rope_forward(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start = nullptr);
template <typename T>
void rope_backward(T* dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start = nullptr);

}  // namespace trident::kernels
