// Muon (docs/optim.md#muon) over whole matrices of a flat parameter buffer,
// exactly torch.optim.Muon's step for each (torch 2.x, torch/optim/_muon.py):
//   buf <- buf + (1 - mu) (g - buf)                 (lerp: the EMA of gradients)
//   u   <- g + mu (buf - g) with nesterov, else buf
//   O   <- NewtonSchulz(u): X = u (transposed when rows > cols), X /= max(|X|_F,
//          1e-7), then ns_steps of A = X X^T, B = b A + c A A, X = a X + B X
//   p   <- p (1 - lr weight_decay) - lr adjust(rows, cols) O
// adjust: original sqrt(max(1, rows / cols)); match_rms_adamw 0.2
// sqrt(max(rows, cols)); spectral sqrt(rows / cols). ns_precision bf16 rounds
// the iteration's operands and each result to bf16 (float32 accumulation),
// as torch does; fp32 keeps float32 throughout.
// The momentum buffer is the caller's (AdamW's exp_avg slots of the same
// elements: one state layout for checkpoints). Knows nothing of the model.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "kernels/adamw.hpp"

namespace trident::optim {

// Under ZeRO 1-3 a rank holds the shard [begin, end) of a part [base, base
// + numel) of the flat buffer, and a shard may cut a matrix: each rank
// updates the momentum of its elements and writes their u into a
// part-sized buffer, `gather` all-gathers it over the replicas, and every
// rank holding elements of a matrix orthogonalises the whole matrix and
// updates its elements (a matrix is orthogonalised by the one or two ranks
// holding it; the others skip it).
template <typename T>
class Muon {
 public:
  // matrices: the part's (absolute offsets); the shard [begin, end) of the part [base, base + numel).
  Muon(std::vector<kernels::MatrixRange> matrices, const MuonConfig& cfg, int64_t base, int64_t numel, int64_t begin,
       int64_t end);
  // params, grads and momentum point at element `begin`; gradients are read
  // as grad_scale * grads. gather: all-gathers a part-sized buffer over the
  // replicas (each rank's shard in place); null when the shard is the part.
  void step(T* params, const T* grads, T* momentum, double lr, double grad_scale,
            const std::function<void(T*)>& gather = nullptr);
  bool empty() const { return matrices_.empty(); }

 private:
  std::vector<kernels::MatrixRange> matrices_;  // those with elements in the shard
  MuonConfig cfg_;
  int64_t base_, numel_, begin_, end_;
  std::vector<T> u_;  // the part's u, gathered (ZeRO >= 1)
};

// Newton-Schulz orthogonalisation of x [rows, cols] in place, as above.
template <typename T>
void newton_schulz(T* x, int64_t rows, int64_t cols, const MuonConfig& cfg);
// The update's scale for a rows x cols matrix (torch's _adjust_lr ratio).
double muon_lr_ratio(MuonAdjustLr adjust, int64_t rows, int64_t cols);

}  // namespace trident::optim
