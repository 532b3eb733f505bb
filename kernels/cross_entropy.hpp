// Softmax cross-entropy over the vocabulary, in place, whole or split.
// Shapes: N rows (tokens), V vocab columns held (row stride); only the first
// Vvalid are real, the rest are padding and never win nor take probability.
// losses[N] = -log softmax(logits)[target]; when `dscale` is non-zero the
// logits are overwritten by dlogits = dscale * (softmax - onehot(target)).
// A negative target is ignored: loss 0 and a zero dlogits row
// (data.mask_eod_loss).
//
// Vocab-parallel form (Megatron's): a rank holds the columns [vocab_begin,
// vocab_begin + V) of the full vocabulary. Three passes with two reductions
// between them, so the full logits are never gathered:
//   1. cross_entropy_local_max          -> all-reduce max  (N values)
//   2. cross_entropy_local_sums         -> all-reduce sum  (2N values)
//   3. cross_entropy_finish             (losses on every rank, local dlogits)
#pragma once
#include <cstdint>

namespace trident::kernels {

template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           T dscale);

// row_max[N] = max over the valid local columns (-inf when there are none)
template <typename T>
void cross_entropy_local_max(T* row_max, const T* logits, int64_t N, int64_t V, int64_t Vvalid);
// sums[2N] = [sum_v exp(logit - max) | target logit if the target is local, else 0]
template <typename T>
void cross_entropy_local_sums(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t N, int64_t V,
                              int64_t Vvalid, int64_t vocab_begin);
// losses[N] = log(sum) + max - target logit; dlogits as above, local columns
template <typename T>
void cross_entropy_finish(T* losses, T* logits, const T* row_max, const T* sums, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vvalid, int64_t vocab_begin, T dscale);

}  // namespace trident::kernels
