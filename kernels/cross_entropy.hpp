// Softmax cross-entropy over the vocabulary, in place, whole or split.
// Shapes: N rows (tokens), V vocab columns held (row stride); only the first
// Vvalid are real, the rest are padding and never win nor take probability.
// losses[N] = -log softmax(logits)[target]; with grad.write the logits are
// overwritten by dlogits = grad.scale * (softmax - onehot(target)) (a scale of
// 0 writes a zero gradient); without, they are left as they are (forward
// only: evaluation, sampling).
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

// What the loss leaves in the logits: an explicit flag, never a magic scale.
template <typename T>
struct LossGrad {
  bool write = false;  // overwrite the logits with their gradient
  T scale = 0;         // dloss/dlogit's weight per token (may be 0)
  static LossGrad forward_only() { return {}; }
  static LossGrad scaled(T s) { return {true, s}; }
};

template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           LossGrad<T> grad);

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
                          int64_t V, int64_t Vvalid, int64_t vocab_begin, LossGrad<T> grad);

}  // namespace trident::kernels
