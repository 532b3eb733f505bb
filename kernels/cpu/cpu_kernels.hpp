// The CPU kernels behind the public entry points that have a CUDA twin
// (kernels/routing.cpp sends host buffers here, device buffers to
// kernels/cuda/cuda_kernels.hpp). Shapes and accumulate/overwrite rules are
// those of the public headers; instantiated for float and double.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>
#include "kernels/activation.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/buffer.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norm.hpp"
#include "kernels/precision.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"

namespace trident::kernels::cpu {

// kernels/activation.hpp
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F);
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F);

// kernels/adamw.hpp
template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& hp);
template <typename T>
void adamw_update_multi(T* param, T* m, T* v, const T* grad, const std::vector<AdamWRange>& ranges,
                        const AdamWParams& hp);

// kernels/attention.hpp
template <typename T>
void attention_lse(T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start);
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                       const int32_t* doc_start);
template <typename T>
void attention_delta(T* delta, const T* dout, const T* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H, int64_t D);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B, int64_t T_,
                        int64_t H, int64_t KV, int64_t D, const int32_t* doc_start);
template <typename T>
void attention_block_forward(T* out, int64_t ldo, T* lse, const AttentionBlock<T>& a, bool merge);
template <typename T>
void attention_block_backward(T* dq, int64_t lddq, T* dk, T* dv, int64_t lddkv, const T* dout, int64_t lddo,
                              const T* lse, const T* delta, const AttentionBlock<T>& a);

// kernels/buffer.hpp
template <typename T>
void fill_zero(T* x, int64_t n);
template <typename T>
double sum(const T* x, int64_t n);
template <typename T>
double sum_of_squares_ranges(const T* x, const std::vector<std::pair<int64_t, int64_t>>& ranges);

// kernels/cross_entropy.hpp
template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           T dscale);
template <typename T>
void cross_entropy_local_max(T* row_max, const T* logits, int64_t N, int64_t V, int64_t Vvalid);
template <typename T>
void cross_entropy_local_sums(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t N, int64_t V,
                              int64_t Vvalid, int64_t vocab_begin);
template <typename T>
void cross_entropy_finish(T* losses, T* logits, const T* row_max, const T* sums, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vvalid, int64_t vocab_begin, T dscale);

// kernels/embedding.hpp
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C, int64_t vocab_begin,
                       int64_t V);
template <typename T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C, int64_t vocab_begin,
                        int64_t V);
template <typename T>
void position_forward(T* out, const T* inp, const T* wpe, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                      const int32_t* doc_start);
template <typename T>
void position_backward(T* dwpe, const T* dout, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                       const int32_t* doc_start);

// kernels/gemm.hpp
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc);
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC);
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N, int64_t C,
                     int64_t OC, bool accumulate);

// kernels/norm.hpp
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                       double eps);
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t N, int64_t C, bool accumulate);
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, double eps);
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N,
                      int64_t C, bool accumulate);

// kernels/precision.hpp
template <typename T>
void round_to_storage(T* x, int64_t n, Precision p);
template <typename T>
int64_t count_nonfinite(const T* x, int64_t n);
template <typename T>
void pack_16(uint16_t* dst, const T* src, int64_t n, Precision p);
template <typename T>
void store_16(T* x, uint16_t* dst, int64_t n, Precision p);
template <typename T>
void unpack_16(T* dst, const uint16_t* src, int64_t n, Precision p);

// kernels/residual.hpp
template <typename T>
void residual_forward(T* out, const T* a, const T* b, const T* bias, int64_t N, int64_t C);
template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t C, bool accumulate);

// kernels/rotary.hpp
template <typename T>
void rope_forward(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start);
template <typename T>
void rope_backward(T* dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start);

}  // namespace trident::kernels::cpu
