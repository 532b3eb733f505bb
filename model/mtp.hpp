// Multi-token prediction (model.mtp, docs/mtp.md): DeepSeek-V3's modules on
// the head chunk, after the main loss. Depth k (1..D) of token i:
//   x    = eh_proj [enorm(Emb(t_{i+k})) | hnorm(h^{k-1}_i)]      [R, 2C] -> [R, C]
//   h^k  = shared_head.norm(Block_k(x))                          (h^0: the final norm's output)
//   L_k  = cross-entropy(head(h^k_i), t_{i+k+1}), i < T - k
// with the model's embedding table and LM head; the training loss adds
// loss_weight / D x sum_k L_k, L_k the mean over each sequence's T - k
// positions. Block_k is a layer of the model (its attention and MLP parts:
// layer L + k - 1 of the head chunk's context, Activations::layers, ::moe);
// the model runs it between this part's input and output halves, and holds
// the segments (Transformer::mtp_forward / mtp_backward, model/mtp.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "model/activations.hpp"
#include "model/layer_ops.hpp"

namespace trident::model {

template <typename T>
class Mtp {
 public:
  explicit Mtp(const LayerOps<T>& ops) : ops_(ops) {}

  // The token table the modules read when this rank holds no embedding
  // (the head segment's copy; bound by the model like every parameter).
  T *table = nullptr, *dtable = nullptr;
  // The embedding is on this rank, in another chunk (pipeline 1 with
  // virtual stages, dualpipev's rank 0): the modules read its table and add
  // to its gradient, which the step's first writer of the two chunks zeroes
  // (first_table_write).
  bool shares_table = false;
  // true once per step for the first writer of the shared table's gradient
  bool first_table_write() {
    const bool first = table_fresh_;
    table_fresh_ = false;
    return first;
  }

  // Forward of depth kd before its block: the shifted tokens and targets of
  // targets [B, T]; x_in [R, C] the block's input from the embedding rows of
  // table and prev [R, C], the previous depth's output (the final norm's for kd = 1).
  void input_forward(MtpActs<T>& a, int kd, const int32_t* targets, const T* table, const T* prev,
                     const LayerParams<T>& p, T* x_in, int64_t B, Workspace<T>& w) const;
  // After the block: its output's norm, the logits with head [V, C] and the
  // loss of depth kd, whose token losses add to losses() (dscale: the main
  // loss's weight per token); dlogits stay in a.logits.
  void output_forward(MtpActs<T>& a, int kd, const LayerParams<T>& p, const T* head, int64_t B, T dscale);
  // Backward of the output half: the LM head's gradient into dhead (added
  // to: head_acc), d_next [R, C] (depth kd + 1's gradient of this output,
  // null at the last depth) added; w.d_res becomes the gradient of the
  // block's output.
  void output_backward(const MtpActs<T>& a, const LayerParams<T>& p, const T* head, T* dhead, bool head_acc,
                       const T* d_next, int64_t B, bool acc, Workspace<T>& w) const;
  // Backward of the input half from w.d_res (the block's input gradient):
  // a.d_emb, the embedding rows' gradient; d_prev [R, C] (overwritten:
  // fresh, else added to) the gradient of prev.
  void input_backward(MtpActs<T>& a, const LayerParams<T>& p, const T* prev, T* d_prev, bool fresh, int64_t B, bool acc,
                      Workspace<T>& w) const;
  // Adds depth a's lookups to the table gradient dtable [V, C].
  void table_backward(const MtpActs<T>& a, T* dtable, int64_t B, Workspace<T>& w) const;
  // The backward's scratch (Workspace::mtp): d_next [R, C], the gradient of
  // h^k from depth k + 1, then dcat [R, 2C], d_e and d_h [R, C]; and the
  // final norm's output gradient the depths add to (Workspace::mtp_lnf_grad,
  // [R, C]): scratch_elements in all, which the memory formulas count.
  T* d_next(Workspace<T>& w, int64_t R) const;
  static int64_t scratch_elements(int64_t R, int64_t C) { return 5 * R * C + R * C; }

  // This rank's summed token losses of each depth since reset_step()
  // (training forwards of the head chunk; unweighted).
  const std::vector<double>& losses() const { return losses_; }
  void reset_step();

 private:
  const LayerOps<T>& ops_;
  std::vector<double> losses_;
  bool table_fresh_ = true;
};

}  // namespace trident::model
