// Decoder-only transformer (GPT-2 and LLaMA styles) with explicit forward and
// backward, written as the single-device computation over this rank's share
// of the dimensions (model/parallel_plan.hpp). The only parallel code is the
// calls of the tensor-parallel region ops (parallel/tensor_parallel.hpp):
// enter before each column-parallel linear, exit after each row-parallel one
// and the embedding, the vocab-parallel loss; with one rank they are the
// identity.
//
// Shapes: B micro-batch, T sequence, N = B x T token rows, R rows of the
// residual stream on this rank (N, or N / tensor with sequence parallelism),
// C hidden, H/KV query/key-value heads, D head size, F ffn hidden, V vocab,
// L layers; H, KV, F and V are this rank's share.
// Parameters and gradients are two flat buffers in ParamRegistry order.
// Gradients are accumulated (+=) across micro-batches; the first backward of a
// step passes accumulate = false and overwrites them (no zeroing pass).
// An Activations context holds what backward needs for one micro-batch;
// `recompute` decides what it keeps:
//   none      every layer's intermediates
//   selective all but the attention probabilities [B,H,T,T], rebuilt in backward
//   full      only each layer's input; its forward is rerun inside backward
// Loss: forward() returns the sum of per-token losses; with dscale != 0 it
// also leaves dlogits = dscale * dloss/dlogits ready for backward().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/recipe.hpp"
#include "core/segment_storage.hpp"
#include "core/tensor.hpp"
#include "model/parallel_plan.hpp"
#include "model/params.hpp"
#include "parallel/tensor_parallel.hpp"

namespace trident::model {

enum class Recompute { none, selective, full };
Recompute parse_recompute(const std::string& s);

// Model FLOPs per token, forward + backward (3x forward), attention included,
// recomputation excluded: 6 * (matmul weights incl. the LM head) + 12 L C T.
double flops_per_token(const ModelConfig& cfg);

// [R,C]: x_in, ln1, x_mid, ln2 (means, rstds [R]); [N, ...]: the rest.
// ln1_full / ln2_full [N,C] are the inputs of the column-parallel linears
// (the same buffers as ln1 / ln2 unless the region gathers them).
template <typename T>
struct LayerActs {
  T *x_in, *ln1, *ln1_full, *ln1_mean, *ln1_rstd, *qkv, *probs, *atty, *x_mid, *ln2, *ln2_full, *ln2_mean,
      *ln2_rstd, *fc, *act;
};

template <typename T>
struct Activations {
  int64_t B = 0;
  std::vector<Tensor> storage;  // owns the buffers the pointers below see
  std::vector<LayerActs<T>> layers;
  T *x_final, *lnf, *lnf_full, *lnf_mean, *lnf_rstd;
  T* logits;  // [N, V]: this rank's vocabulary columns
  T* losses;  // [N]
  const int32_t* tokens = nullptr;
};

template <typename T>
class Transformer {
 public:
  // full_buffers = false: no flat parameter/gradient buffers of the whole
  // model (ZeRO 3 keeps shards); a SegmentStorage must then be set.
  // tp: this rank's tensor-parallel region (nullptr: one rank); it must
  // outlive the model.
  Transformer(const ModelConfig& cfg, uint64_t seed, bool full_buffers = true,
              parallel::TensorParallel* tp = nullptr);

  // Segments of the flat buffer: 0 embeddings, 1 + l layer l, layers + 1 the
  // final norm and (untied) head. See core/segment_storage.hpp.
  const std::vector<Segment>& segments() const { return segments_; }
  // nullptr: use the model's own full buffers.
  void set_storage(SegmentStorage<T>* store) { store_ = store; }

  const ModelConfig& config() const { return cfg_; }
  const LocalDims& dims() const { return dims_; }
  parallel::TensorParallel& tensor_parallel() { return *tp_; }
  const ParamRegistry& registry() const { return reg_; }
  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  T* param(const std::string& name) { return params_.data<T>() + reg_.at(name).offset; }
  T* grad(const std::string& name) { return grads_.data<T>() + reg_.at(name).offset; }

  std::unique_ptr<Activations<T>> make_activations(int64_t B, Recompute recompute) const;

  // tokens, targets [B,T] (the whole micro-batch on every tensor rank).
  // Returns the summed loss over B*T targets.
  double forward(Activations<T>& ctx, const int32_t* tokens, const int32_t* targets, T dscale);
  // Needs a forward() with dscale != 0 on the same context. With
  // accumulate = false the parameter gradients are overwritten instead of
  // added to (the first micro-batch of a step: no zeroing pass needed).
  // on_ready(F), when given, is called as soon as gradients [F, numel) are
  // final: after the head and final norm, after each layer, after the
  // embeddings (F = 0). Data parallelism launches its buckets from it.
  void backward(Activations<T>& ctx, Recompute recompute, bool accumulate = true,
                const std::function<void(int64_t)>& on_ready = {});
  void zero_grads() { grads_.zero_(); }

 private:
  struct LayerParams {
    T *n1w, *n1b, *qkvw, *qkvb, *ow, *ob, *n2w, *n2b, *fcw, *fcb, *pw, *pb;
    T *dn1w, *dn1b, *dqkvw, *dqkvb, *dow, *dob, *dn2w, *dn2b, *dfcw, *dfcb, *dpw, *dpb;
  };
  void layer_forward(const LayerActs<T>& a, T* x_out, const LayerParams& p, int64_t B);
  void norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N);
  void norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean, const T* rstd,
                     int64_t N, bool accumulate);

  ModelConfig cfg_;
  parallel::TensorParallel single_;  // the region of a one-rank model
  parallel::TensorParallel* tp_;
  ParamRegistry reg_;
  LocalDims dims_;
  bool llama_;
  int64_t qkv_width_, fc_width_;
  Tensor params_, grads_;
  std::vector<LayerParams> layers_;
  std::vector<int64_t> layer_offset_;  // flat offset of each layer's first parameter
  int64_t head_frontier_ = 0;          // first offset after the layers (final norm, untied head)
  std::vector<Segment> segments_;
  SegmentStorage<T>* store_ = nullptr;
  // Points the parameter (pbase) and/or gradient (gbase) pointers of segment
  // s at storage whose first element is the segment's first element.
  void bind(int s, T* pbase, T* gbase);
  void use_params(int s, int next);
  void done_params(int s);
  void use_grads(int s);
  void done_grads(int s);
  T *wte_, *wpe_, *nfw_, *nfb_, *head_;
  T *dwte_, *dwpe_, *dnfw_, *dnfb_, *dhead_;
  std::vector<double> rope_;
  // scratch shared by all layers, sized for the largest context seen:
  // forward [N,C] partial sums and [R,C] their reduction; backward d_res_
  // [R,C] (the residual stream's gradient), d_full_ / d_ln_ [N,C], d_local_ [R,C]
  int64_t scratch_B_ = 0;
  Tensor scratch_;
  T *partial_, *reduced_;
  T *d_res_, *d_full_, *d_ln_, *d_local_, *d_qkv_, *d_atty_, *d_fc_, *d_act_;
  void ensure_scratch(int64_t B);
};

}  // namespace trident::model
