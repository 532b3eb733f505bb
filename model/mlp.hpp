// A layer's MLP, one part of a layer (model/layer.cpp composes it with the
// norm pair and an attention): from h [N,C], the norm's output as the
// column-parallel linears read it, to the output projection's partial sums
// [N,C] (the region's exit, the output bias and the residual are the
// layer's), and back.
//   DenseMlp  GELU (GPT-2) or SwiGLU (LLaMA): fc, act, proj
//   MoeLayer  the mixture of experts (model/moe.hpp's MoeMlp: router,
//             permute, exchange, experts, shared experts, combine, losses)
//             and the step's MoE statistics
// Which layers take which: model.moe (MoeConfig::is_moe).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/activations.hpp"
#include "model/layer_ops.hpp"
#include "model/moe.hpp"

namespace trident::model {

// Why a layer's forward runs: it decides what the step's statistics count
// and what a full recomputation keeps.
enum class Run {
  eval,       // no gradient will follow
  training,   // its backward follows: its routes count
  recompute,  // full recomputation's rerun, inside the backward
};

template <typename T>
class Mlp {
 public:
  virtual ~Mlp() = default;
  // out [N,C] (overwritten) from h, for local layer l of ctx (global: its
  // index in the whole model)
  virtual void forward(T* out, Activations<T>& ctx, int l, const T* h, const LayerParams<T>& p, int64_t global, Run run,
                       Workspace<T>& w) = 0;
  // dy [N,C], the gradient of out, becomes w.d_ln [N,C], that of h. split
  // (zero-bubble): the linears' weight gradients that the variant defers
  // are left to weight_grads, their output gradients kept in ctx.saved.
  virtual void backward(Activations<T>& ctx, int l, const T* dy, const LayerParams<T>& p, Workspace<T>& w,
                        Recompute recompute, bool split, bool acc) = 0;
  virtual void weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const = 0;
  // The part of h's gradient complete on every rank (the MoE router's and
  // gate's), added to this rank's rows d [R,C] of the rest after the
  // region's enter_backward: d, or the sum in w.d_local.
  virtual const T* add_replicated_grad(const T* d, Workspace<T>& w, int64_t N) const { return d; }
};

template <typename T>
class DenseMlp final : public Mlp<T> {
 public:
  explicit DenseMlp(const LayerOps<T>& ops) : ops_(ops) {}
  void forward(T* out, Activations<T>& ctx, int l, const T* h, const LayerParams<T>& p, int64_t global, Run run,
               Workspace<T>& w) override;
  void backward(Activations<T>& ctx, int l, const T* dy, const LayerParams<T>& p, Workspace<T>& w, Recompute recompute,
                bool split, bool acc) override;
  void weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const override;

 private:
  const LayerOps<T>& ops_;
};

// This rank's MoE statistics since MoeLayer::reset_step, over its training
// forwards (recomputation reruns are not counted): the global ids of its MoE
// layers, the tokens routed to each expert of each ([layers x E], this
// rank's rows), the balancing losses summed over micro-batches and layers
// (this rank's share under context parallelism).
struct MoeStep {
  std::vector<int64_t> layers;
  std::vector<double> counts;
  double aux_loss = 0, z_loss = 0;
};

template <typename T>
class MoeLayer final : public Mlp<T> {
 public:
  // ep, whole_experts: Placement's (model/transformer.hpp)
  MoeLayer(const LayerOps<T>& ops, parallel::ExpertParallel* ep, bool whole_experts);
  void forward(T* out, Activations<T>& ctx, int l, const T* h, const LayerParams<T>& p, int64_t global, Run run,
               Workspace<T>& w) override;
  void backward(Activations<T>& ctx, int l, const T* dy, const LayerParams<T>& p, Workspace<T>& w, Recompute recompute,
                bool split, bool acc) override;
  void weight_grads(const Activations<T>&, int, const LayerParams<T>&, bool) const override {}
  const T* add_replicated_grad(const T* d, Workspace<T>& w, int64_t N) const override;

  MoeMlp<T>& experts() { return moe_; }
  const MoeMlp<T>& experts() const { return moe_; }
  MoeStep& step() { return step_; }
  void reset_step();

 private:
  void count_routes(const MoeActs<T>& m, int64_t global);
  const LayerOps<T>& ops_;
  MoeMlp<T> moe_;
  MoeStep step_;
};

}  // namespace trident::model
