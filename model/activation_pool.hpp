// Where a model's activation memory comes from: the Activations contexts of
// its chunks (Transformer::make_activations), what a chunk's contexts share
// (what recomputation rebuilds before every use, and the fp32 working set of
// packed contexts: micro-batches in flight never use it at once), and a
// pass's workspace buffers (model/workspace.hpp). Every size is read from the
// one layout the memory formulas use (model/memory.hpp) and from the parts'
// own (model/attention.hpp, model/moe.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/activations.hpp"
#include "model/attention.hpp"
#include "model/layer_ops.hpp"
#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/parallel_plan.hpp"

namespace trident::model {

template <typename T>
class ActivationPool {
 public:
  // moe: the MoE layers' (null: a dense model)
  ActivationPool(const LayerOps<T>& ops, const Attention<T>& attention, const MoeMlp<T>* moe)
      : ops_(ops), attention_(attention), moe_(moe) {}

  // 16-bit precision: each layer's saved activations kept as 2-byte values
  // (Activations::packed). Bitwise the plain path's results; the precision
  // tests turn it off to prove it.
  bool pack = true;

  // A context for micro-batches of B sequences of chunk `chunk` (spec);
  // split_backward: keep what a later weight pass needs.
  std::unique_ptr<Activations<T>> make(int64_t B, Recompute recompute, int chunk, const ChunkSpec& spec,
                                       bool split_backward);
  // w's layer buffers sized for B (head: with the 2-byte copy of dlogits)
  void size_workspace(Workspace<T>& w, int64_t B, bool head) const;

 private:
  // What the contexts of one chunk share, made with its first context.
  struct Shared {
    int chunk;
    int64_t B;
    Recompute recompute;
    bool packed;  // the working set of packed contexts
    std::vector<Tensor> storage;
    LayerActs<T> acts{};
    T* lse = nullptr;
    // full recompute: each MoE layer's buffers (empty for a dense layer);
    // a context's MoeActs shares them and keeps its own routes and counts
    std::vector<MoeActs<T>> moe;
  };
  // Buffers of a context (or a shared set) appended to one storage list.
  struct Alloc {
    const ActivationPool& pool;
    const ActivationSizes& z;
    std::vector<Tensor>& storage;
    T* operator()(int64_t n) const;
    // a norm's output [R,C] and the full input [N,C] of the linear after it:
    // when the region gathers, the local rows are this rank's part of the full
    void norm_out(T*& local, T*& full) const;
    // one layer's worth of buffers (per layer, or shared)
    void layer_set(LayerActs<T>& a, bool with_lse) const;
  };
  const Shared& shared(int chunk, const ChunkSpec& spec, int64_t L, const ActivationSizes& z, Recompute recompute,
                       bool packed);
  void make_layers(Activations<T>& ctx, const ChunkSpec& spec, const ActivationSizes& z, bool packed);
  void make_head(Activations<T>& ctx, int64_t depth, const ActivationSizes& z, const Alloc& alloc) const;
  void keep_fp8_inputs(Activations<T>& ctx, const ChunkSpec& spec) const;

  const LayerOps<T>& ops_;
  const Attention<T>& attention_;
  const MoeMlp<T>* moe_;
  std::vector<Shared> shared_;
};

}  // namespace trident::model
