// AdamW (Loshchilov & Hutter) with decoupled weight decay, one fused pass:
// g = grad_scale * grad (gradient clipping folded into the same pass)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p)
// `step` counts from 1. Updates param, m, v in place.
#pragma once
#include <cstdint>
#include <vector>

namespace trident::kernels {

struct AdamWParams {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  double grad_scale = 1.0;
};

template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& hp);

// Several ranges of one flat buffer, each with its own weight decay
// (hp.weight_decay is ignored): on CUDA one launch for all of them
// (multi-tensor apply), on the CPU adamw_update per range.
struct AdamWRange {
  int64_t offset, size;
  double weight_decay;
};
// Where a logical matrix's elements lie on one rank: the rank's flat
// elements offset + i cols + j (i < rows, j < cols) are the matrix's
// element (row + i, col + j).
struct MatrixBlock {
  int64_t offset, row, col, rows, cols;
  bool operator==(const MatrixBlock&) const = default;
};
// A rows x cols matrix Muon orthogonalises whole (optim/muon.hpp,
// model::muon_matrices): held[r], its blocks on rank r of the group its
// slices are spread over (the tensor group; one entry when each rank holds
// it whole). Ranks may hold equal blocks (replicated KV heads, a weight
// every tensor rank keeps whole), or none.
struct MuonMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<std::vector<MatrixBlock>> held;
};
// Aux-loss-free balancing (DeepSeek-V3; docs/moe.md): an MoE layer's
// correction bias [offset, offset + size) of the flat buffer, whose gradient
// slot holds the step's tokens per expert summed over the data and context
// groups; after the step each bias moves by rate x sign(mean - count), mean
// the tokens an expert would get under a perfect balance. Not AdamW: no
// moments, no decay, no clipping; each element needs only its own count, so
// any ZeRO shard steps its part (optim::AdamW applies it).
struct BiasRange {
  int64_t offset, size;
  double rate, mean;
};

template <typename T>
void adamw_update_multi(T* param, T* m, T* v, const T* grad, const std::vector<AdamWRange>& ranges,
                        const AdamWParams& hp);

// One BiasRange's step: param[i] += rate x sign(mean - count[i]) for the n
// elements (sign(0) = 0: a balanced expert's bias stays).
template <typename T>
void bias_sign_update(T* param, const T* count, int64_t n, double rate, double mean);

}  // namespace trident::kernels
