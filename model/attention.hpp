// A layer's attention, one part of a layer (model/layer.cpp composes it with
// the norm pair and an MLP): from h [N,C], the norm's output as the
// column-parallel linears read it, to the output projection's partial sums
// [N,C] (the tensor-parallel region's exit, the output bias and the residual
// are the layer's), and back. Its variants differ only in how they make the
// heads the attention kernels take, and back (as Megatron-Core's Attention
// with SelfAttention and MLASelfAttention):
//   GqaAttention  fused q|k|v projection, QK-norm (model.qk_norm), rotary
//   MlaAttention  multi-head latent attention (model.attention: mla,
//                 docs/mla.md), model/mla.cpp
// Adding a variant means adding a class here and a case to make_attention,
// attention_layout and attention_weights (model/attention.cpp), the one
// place that chooses.
//
// Sizes: each variant lists the buffers it keeps per layer (in every
// recompute mode: LayerActs::qk_pre/qk_rstd, LayerActs::mla) and the scratch
// its passes write (Workspace::attention), one number per buffer, in its
// layout(); make_activations allocates from that list, the passes carve
// their scratch from it, and the memory formulas (model/memory.cpp) sum it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/activations.hpp"
#include "model/layer_ops.hpp"

namespace trident::model {

// One variant's buffers for N token rows: per layer (saved) and per pass (scratch), in elements.
struct AttentionLayout {
  std::vector<int64_t> saved, scratch;
  int64_t saved_total() const;
  int64_t scratch_total() const;
};
// The layout of the model's attention (the one choice of variant for sizes).
AttentionLayout attention_layout(const ModelConfig& cfg, const LocalDims& d, int64_t N);
// The weights one layer's attention multiplies each token by (the whole
// model's projections, for flops_per_token).
double attention_weights(const ModelConfig& cfg);

template <typename T>
class Attention {
 public:
  virtual ~Attention() = default;
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  // a.qkv, a.lse, a.atty from h; out [N,C] the output projection's partial
  // sums. window: the layer's sliding window (ModelConfig::window; 0: none).
  void forward(T* out, const LayerActs<T>& a, const T* h, const LayerParams<T>& p, int64_t B, int64_t window,
               Workspace<T>& w) const;
  // Local layer l of ctx: dy [N,C], the gradient of out, becomes w.d_ln
  // [N,C], that of h. split (zero-bubble): the GEMMs' weight gradients that
  // the variant defers are left to weight_grads, their output gradients kept
  // in ctx.saved.
  void backward(const Activations<T>& ctx, int l, const T* dy, const LayerParams<T>& p, int64_t window, Workspace<T>& w,
                bool split, bool acc) const;
  void weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const;
  // Selective recomputation: the attention's log-sum-exp again, from the saved heads.
  void rebuild_state(const LayerActs<T>& a, const LayerParams<T>& p, int64_t B, int64_t window, Workspace<T>& w) const;
  // Points a's buffers of this variant at storage from alloc, in layout() order.
  virtual void make_saved(LayerActs<T>& a, int64_t N, const std::function<T*(int64_t)>& alloc) const = 0;

 protected:
  explicit Attention(const LayerOps<T>& ops) : ops_(ops) {}
  // h -> a.qkv, the heads as the attention kernels take them
  virtual void project(const LayerActs<T>& a, const T* h, const LayerParams<T>& p, int64_t B,
                       Workspace<T>& w) const = 0;
  // d_qkv -> w.d_ln, with the projections' weight gradients (those not deferred)
  virtual void project_backward(const Activations<T>& ctx, int l, T* d_qkv, const LayerParams<T>& p, Workspace<T>& w,
                                bool split, bool acc) const = 0;
  // Whether a split backward leaves the weight gradients to its weight pass
  // (else they all come with the input pass: MLA, docs/mla.md).
  virtual bool defers_weight_grads() const = 0;
  virtual void project_weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const = 0;
  // This variant's scratch in w, carved in layout() order.
  std::vector<T*> scratch(Workspace<T>& w, int64_t N) const;
  // The attention kernels' call: this rank's heads, the masks, the sinks
  // (and their gradient, when grads).
  parallel::AttentionArgs<T> kernel_args(const LayerParams<T>& p, int64_t B, int64_t window, const Workspace<T>& w,
                                         bool grads) const;

  const LayerOps<T>& ops_;
};

// q|k|v = h Wqkv^T (+ bias), QK-norm on the query and key heads, rotary.
template <typename T>
class GqaAttention final : public Attention<T> {
 public:
  explicit GqaAttention(const LayerOps<T>& ops);
  // per layer with QK-norm: the heads before it [N (H + KV), D] and their
  // statistics [N (H + KV)]; scratch: the heads as rows and their gradients
  static AttentionLayout layout(const ModelConfig& cfg, const LocalDims& d, int64_t N);
  static double weights(const ModelConfig& cfg);  // C (H + 2 KV) D + H D C
  void make_saved(LayerActs<T>& a, int64_t N, const std::function<T*(int64_t)>& alloc) const override;

 private:
  void project(const LayerActs<T>& a, const T* h, const LayerParams<T>& p, int64_t B, Workspace<T>& w) const override;
  void project_backward(const Activations<T>& ctx, int l, T* d_qkv, const LayerParams<T>& p, Workspace<T>& w,
                        bool split, bool acc) const override;
  bool defers_weight_grads() const override { return true; }
  void project_weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const override;
  void qk_norm_forward(T* qkv, T* pre, T* rstd, const LayerParams<T>& p, int64_t N, Workspace<T>& w) const;
  void qk_norm_backward(T* dqkv, const T* pre, const T* rstd, const LayerParams<T>& p, int64_t N, bool acc,
                        Workspace<T>& w) const;
  std::vector<double> rope_;  // the rotary table (LLaMA); empty for learned positions
};

// Multi-head latent attention (model/mla.cpp, docs/mla.md).
template <typename T>
class MlaAttention final : public Attention<T> {
 public:
  explicit MlaAttention(const LayerOps<T>& ops);
  // per layer: the latents before and after their norms and the statistics
  // (q_lat, q_rstd, q_norm without a query latent: none; kv_lat, kv_rstd,
  // kv_norm); scratch: q, kvb, kr, d_kv_norm, d_kv_lat, d_q_norm, d_q_lat, d_h
  static AttentionLayout layout(const ModelConfig& cfg, const LocalDims& d, int64_t N);
  static double weights(const ModelConfig& cfg);  // the latents' down and up projections, o_proj
  void make_saved(LayerActs<T>& a, int64_t N, const std::function<T*(int64_t)>& alloc) const override;

 private:
  void project(const LayerActs<T>& a, const T* h, const LayerParams<T>& p, int64_t B, Workspace<T>& w) const override;
  void project_backward(const Activations<T>& ctx, int l, T* d_qkv, const LayerParams<T>& p, Workspace<T>& w,
                        bool split, bool acc) const override;
  bool defers_weight_grads() const override { return false; }
  void project_weight_grads(const Activations<T>&, int, const LayerParams<T>&, bool) const override {}
  std::vector<double> rope_;     // the rotary table of the rope parts (qk_rope_head_dim)
  std::vector<double> q_scale_;  // YaRN's softmax-scale correction on the query heads (empty: none)
};

// The model's attention (model.attention).
template <typename T>
std::unique_ptr<Attention<T>> make_attention(const LayerOps<T>& ops);

}  // namespace trident::model
