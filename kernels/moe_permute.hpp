// The data movement of a mixture-of-experts layer around its experts'
// grouped GEMMs (model/moe.hpp): the routes put in expert order, the token
// rows gathered into that order, the weighted combine back to the tokens,
// and their backwards. Every output element is written by one thread, which
// adds its terms in a fixed order (a token's routes in increasing expert
// id), so each result is the same in every run; CPU and CUDA agree up to
// the order of moe_combine_backward's dot products. Host or device buffers
// (the choice by the first argument, kernels/device_choice.cpp).
#pragma once
#include <cstdint>

namespace trident::kernels {

// The N k routes (expert [N,k], ids in [0,E)) in expert-major order, tokens
// in increasing index within an expert (Megatron-Core's order, fixed by the
// routes alone): row [N,k] each route's permuted row, token [N k] each
// permuted row's token, offsets [E+1] expert e's rows [offsets[e],
// offsets[e+1]). offsets is host memory in either case (the grouped GEMM
// needs the counts on the host): with device routes they are copied back,
// one wait on the compute stream.
void moe_route_index(int32_t* row, int32_t* token, int64_t* offsets, const int32_t* expert, int64_t N, int64_t K,
                     int64_t E);

// x[r] = h[token[r]] for the M permuted rows of C values.
template <typename T>
void moe_permute(T* x, const T* h, const int32_t* token, int64_t M, int64_t C);

// out[n] = sum_j weight[n,j] y[row[n,j]], j = 0..K-1 in order (out [N,C] overwritten).
template <typename T>
void moe_combine(T* out, const T* y, const T* weight, const int32_t* row, int64_t N, int64_t K, int64_t C);

// The combine's backward: dweight[n,j] = dy[n] . y[row[n,j]] and
// dys[row[n,j]] = weight[n,j] dy[n] (every permuted row written).
template <typename T>
void moe_combine_backward(T* dys, T* dweight, const T* dy, const T* y, const T* weight, const int32_t* row, int64_t N,
                          int64_t K, int64_t C);

// The gather's backward: dh[n] = sum_j dx[row[n,j]], j in order (dh [N,C] overwritten).
template <typename T>
void moe_unpermute(T* dh, const T* dx, const int32_t* row, int64_t N, int64_t K, int64_t C);

}  // namespace trident::kernels
