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
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "kernels/adamw.hpp"

namespace trident::optim {

// How a part [base, base + numel) of the flat buffer's matrices are spread
// over ranks, and the collectives that join them (the trainer's, over its
// groups). Every matrix has one owner among the slices x replicas ranks,
// chosen so that each orthogonalises about the same Newton-Schulz FLOPs:
//   1. each rank updates the momentum of its elements (its ZeRO shard) and
//      writes their u into a part-sized buffer; `gather` all-gathers the
//      shards over the replicas (ZeRO >= 1), so each rank has its slices' u;
//   2. `exchange` (all-to-all over the slices, the tensor group) sends each
//      owner the blocks of its matrices (a block several ranks hold, once);
//      the owner orthogonalises the whole matrix and sends every holder its
//      blocks back; in rounds of matrices, the next round's blocks and the
//      last round's results in flight while a round is orthogonalised;
//   3. `combine` sums the buffer over the replicas, each matrix's result
//      coming from its owner's replica (the others add zeros: exact), so a
//      rank's shard holds the update of every element it keeps.
// A transfer in flight: poll() drives it and says whether it is done; wait() waits for it.
template <typename T>
struct MuonTransfer {
  std::function<bool()> poll;
  std::function<void()> wait;
};

template <typename T>
struct MuonGroup {
  int slice = 0, slices = 1;       // this rank in the tensor group the matrices are sliced over (MuonMatrix::held)
  int replica = 0, replicas = 1;   // this rank among the ranks holding the same slices (data x context)
  std::function<void(T*)> gather;  // ZeRO >= 1: all-gathers the buffer's shards over the replicas
  // starts an all-to-all over the slices: send_counts[r] elements of send go to slice r, recv_counts[r] come
  // from it (the buffers stay alive until it is waited for)
  std::function<MuonTransfer<T>(const T*, const std::vector<int64_t>&, T*, const std::vector<int64_t>&)> exchange;
  // the matrices' exchanges go in this many rounds, each overlapping the iterations of the round before
  int rounds = 4;
  // replicas > 1: the buffer summed over the replicas, into this rank's shard of it at least
  std::function<void(T*)> combine;
};

template <typename T>
class Muon {
 public:
  // matrices: the part's (absolute offsets); the shard [begin, end) of the part [base, base + numel).
  Muon(std::vector<kernels::MuonMatrix> matrices, const MuonConfig& cfg, int64_t base, int64_t numel, int64_t begin,
       int64_t end, MuonGroup<T> group = {});
  // params, grads and momentum point at element `begin`; gradients are read as grad_scale * grads.
  void step(T* params, const T* grads, T* momentum, double lr, double grad_scale);
  bool empty() const { return matrices_.empty(); }
  // The Newton-Schulz FLOPs this rank spends per step (its matrices), and the largest any rank of the group does.
  double flops() const { return flops_[size_t(group_.slice + group_.slices * group_.replica)]; }
  double max_flops() const { return *std::max_element(flops_.begin(), flops_.end()); }

 private:
  struct Owned {
    int slice, replica;                                   // the owner
    std::vector<std::vector<kernels::MatrixBlock>> sent;  // by slice: the blocks each sends the owner
  };
  std::vector<kernels::MuonMatrix> matrices_;
  std::vector<Owned> owner_;
  std::vector<double> flops_;   // by slot slice + slices x replica
  std::vector<size_t> rounds_;  // round r: matrices [rounds_[r], rounds_[r + 1])
  MuonConfig cfg_;
  int64_t base_, numel_, begin_, end_;
  MuonGroup<T> group_;
  std::vector<T> u_;  // the part's u, then the update
};

// Newton-Schulz orthogonalisation of x [rows, cols] in place, as above.
template <typename T>
void newton_schulz(T* x, int64_t rows, int64_t cols, const MuonConfig& cfg);
// Its FLOPs: ns_steps x (4 m^2 n + 2 m^3), m = min(rows, cols), n = max (X X^T, the m x m product, B X).
double newton_schulz_flops(int64_t rows, int64_t cols, int64_t ns_steps);
// The update's scale for a rows x cols matrix (torch's _adjust_lr ratio).
double muon_lr_ratio(MuonAdjustLr adjust, int64_t rows, int64_t cols);

}  // namespace trident::optim
