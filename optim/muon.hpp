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
#include <vector>

#include "core/recipe/recipe.hpp"
#include "kernels/adamw.hpp"

namespace trident::optim {

template <typename T>
class Muon {
 public:
  // matrices: whole ones within [begin, end) of the flat buffer (absolute offsets).
  Muon(std::vector<kernels::MatrixRange> matrices, const MuonConfig& cfg, int64_t begin);
  // params, grads and momentum point at element `begin`; gradients are read
  // as grad_scale * grads.
  void step(T* params, const T* grads, T* momentum, double lr, double grad_scale) const;
  const std::vector<kernels::MatrixRange>& matrices() const { return matrices_; }

 private:
  std::vector<kernels::MatrixRange> matrices_;
  MuonConfig cfg_;
  int64_t begin_;
};

// Newton-Schulz orthogonalisation of x [rows, cols] in place, as above.
template <typename T>
void newton_schulz(T* x, int64_t rows, int64_t cols, const MuonConfig& cfg);
// The update's scale for a rows x cols matrix (torch's _adjust_lr ratio).
double muon_lr_ratio(MuonAdjustLr adjust, int64_t rows, int64_t cols);

}  // namespace trident::optim
