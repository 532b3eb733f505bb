// Decoder-only transformer (GPT-2 and LLaMA styles) with explicit forward and
// backward, written as the single-device computation over this rank's share
// of the dimensions (model/parallel_plan.hpp). The only parallel code is the
// calls of the tensor-parallel region ops (parallel/tensor_parallel.hpp):
// enter before each column-parallel linear, exit after each row-parallel one
// and the embedding, the vocab-parallel loss; with one rank they are the
// identity. A pipeline rank holds one or more chunks (consecutive layers;
// the embedding on global chunk 0, norm, head and loss on the last) and runs
// them one micro-batch at a time: forward_chunk / backward_chunk. The
// schedule that orders them lives in parallel/schedule.hpp.
//
// Shapes: B micro-batch, T sequence, N = B x T token rows, R rows of the
// residual stream on this rank (N, or N / tensor with sequence parallelism),
// C hidden, H/KV query/key-value heads, D head size, F ffn hidden, V vocab,
// L layers; H, KV, F and V are this rank's share.
// Parameters and gradients are two flat buffers in ParamRegistry order.
// Gradients are accumulated (+=) across micro-batches; the first backward of a
// step (per chunk) passes accumulate = false and overwrites them (no zeroing).
// An Activations context holds what backward needs for one micro-batch of
// one chunk; `recompute` decides what it keeps:
//   none      every layer's intermediates
//   selective all but the attention log-sum-exp [B,H,T], rebuilt in backward
//   full      only each layer's input; its forward is rerun inside backward
// Loss: the head chunk's forward returns the sum of per-token losses; with
// dscale != 0 it also leaves dlogits = dscale * dloss/dlogits for backward.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "core/segment_storage.hpp"
#include "core/tensor.hpp"
#include "kernels/precision.hpp"
#include "model/activation_pool.hpp"
#include "model/activations.hpp"
#include "model/architecture.hpp"
#include "model/attention.hpp"
#include "model/fp8_gather.hpp"
#include "model/layer_ops.hpp"
#include "model/layer_params.hpp"
#include "model/mlp.hpp"
#include "model/moe.hpp"
#include "model/mtp.hpp"
#include "model/parallel_plan.hpp"
#include "model/params.hpp"
#include "model/workspace.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/tensor_parallel.hpp"

namespace trident::model {

// Model FLOPs per token, forward + backward (3x forward), attention included,
// recomputation excluded: 6 * (matmul weights incl. the LM head) + 12 L C T
// (6 L T H (Dq + Dv) with multi-head latent attention's head sizes); with
// model.mtp each depth adds its block, eh_proj and the LM head (at T tokens).
// An MoE layer counts its active weights: the router, top_k experts, the
// shared experts and their gate.
double flops_per_token(const ModelConfig& cfg);

// What a backward pass computes: everything, or (zero-bubble pipelines) the
// input gradients first and the weight gradients of the linears later.
enum class BackwardPart { all, input, weight };

// Where a model runs and what it holds, fixed when it is built (no setter
// can come too late): model/parallelize.cpp fills it from the recipe and the
// mesh; the defaults are one rank, the whole model, the CPU, fp32.
struct Placement {
  // false: no flat parameter/gradient buffers of the whole model (ZeRO 3
  // keeps shards): the data-parallel storage is bound with set_storage.
  bool full_buffers = true;
  parallel::TensorParallel* tp = nullptr;   // this rank's tensor-parallel region (null: one rank); outlives the model
  parallel::ContextParallel* cp = nullptr;  // this rank's rows of each sequence (null: all of them); outlives the model
  // this rank's experts of each MoE layer and their token exchange (null:
  // all experts here); outlives the model
  parallel::ExpertParallel* ep = nullptr;
  // expert_tensor 1 < tensor: each expert whole on its rank (model/moe.hpp)
  bool whole_experts = false;
  std::vector<ChunkSpec> chunks;  // the pipeline chunks held (empty: all)
  Device device;  // where every buffer lives and every kernel runs (cuda: the bound device, core/device_memory.hpp)
  // train.precision: activations stored rounded to it (see Transformer::precision)
  kernels::Precision precision = kernels::Precision::fp32;
  Fp8Config fp8;  // train.fp8: the linears' GEMMs in FP8 (model/fp8_linear.hpp; float models)
};

template <typename T>
class Transformer {
 public:
  Transformer(const ModelConfig& cfg, uint64_t seed, Placement where = {});

  // Segments of the flat buffer, in order: per chunk its embedding, each
  // layer, its head (final norm, untied or copied LM head); with experts
  // split over ranks, then each MoE layer's routed experts (the expert
  // part, ParamRegistry::expert_begin). See core/segment_storage.hpp.
  const std::vector<Segment>& segments() const { return segments_; }
  // The data-parallel storage (ZeRO 3 shards and their gathers), made from
  // these segments after the model, so bound afterwards, before the first
  // forward; nullptr: the model's own full buffers.
  void set_storage(SegmentStorage<T>* store) { store_ = store; }

  const ModelConfig& config() const { return cfg_; }
  Device device() const { return device_; }
  const LocalDims& dims() const { return dims_; }
  int num_chunks() const { return int(chunks_.size()); }
  const ChunkSpec& chunk(int c) const { return chunks_[size_t(c)].spec; }
  parallel::TensorParallel& tensor_parallel() { return *tp_; }
  // Context parallelism: each micro-batch holds this rank's rows of every
  // sequence (cp->local_len() of them; Placement::cp).
  parallel::ContextParallel& context_parallel() { return *cp_; }
  int64_t seq() const { return cp_->local_len(); }  // rows of each sequence on this rank
  const ParamRegistry& registry() const { return reg_; }
  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  T* param(const std::string& name) { return params_.data<T>() + reg_.at(name).offset; }
  T* grad(const std::string& name) { return grads_.data<T>() + reg_.at(name).offset; }

  // split_backward: keep what a later BackwardPart::weight pass needs.
  std::unique_ptr<Activations<T>> make_activations(int64_t B, Recompute recompute, int chunk = 0,
                                                   bool split_backward = false) const {
    return pool_->make(B, recompute, chunk, chunks_[size_t(chunk)].spec, split_backward);
  }

  // One chunk, one micro-batch. tokens [B,T] (the embedding chunk) or x_in
  // [R,C] (the previous chunk's output); targets [B,T] (the head chunk; may
  // be null for no loss). Returns the summed loss over B*T targets on the
  // head chunk, else 0; the output is ctx.x_final.
  double forward_chunk(Activations<T>& ctx, const int32_t* tokens, const T* x_in, const int32_t* targets, T dscale);
  // Needs forward_chunk() with dscale != 0 on the same context. d_out [R,C]
  // is the gradient of the chunk's output (null on the head chunk). With
  // accumulate = false the gradients are overwritten instead of added to.
  // on_ready(F), when given, is called as soon as gradients [F, numel) are
  // final (single-chunk models): after the head and final norm, after each
  // layer, after the embeddings. Data parallelism launches its buckets from it.
  // With split experts each part has its frontier: F below
  // registry().expert_begin() says [F, expert_begin) is final, F at or
  // above it [F, numel) (after each MoE layer, its experts').
  // After it, input_grad(ctx) [R,C] is the gradient of the chunk's input (in
  // the context's workspace, until that workspace's next pass), except on
  // the embedding chunk.
  void backward_chunk(Activations<T>& ctx, const T* d_out, Recompute recompute, bool accumulate = true,
                      BackwardPart part = BackwardPart::all, const std::function<void(int64_t)>& on_ready = {});
  const T* input_grad(const Activations<T>& ctx) const { return (ctx.workspace ? *ctx.workspace : own_).d_res; }

  // The balancing losses of the context's last forward (coefficients
  // applied, summed over its MoE layers): the aux loss, the z-loss.
  std::pair<double, double> balance_losses(const Activations<T>& ctx) const;

  // This rank's MoE statistics since reset_moe_step() (model/mlp.hpp).
  using MoeStep = model::MoeStep;
  // Called before each training step's schedule: resets the statistics
  // below (and starts the step's shared token-table gradient afresh).
  void reset_moe_step();
  const MoeStep& moe_step() const;
  // Multi-token prediction: this rank's summed token losses of each depth
  // since reset_moe_step() (training forwards of the head chunk; unweighted).
  const std::vector<double>& mtp_losses() const;
  // QK-clip (optim.muon.qk_clip, docs/optim.md#qk-clip): once tracked, each
  // training forward max's every local layer's per-head largest attention
  // logit (this rank's heads of the tensor split) into max_logits()[l x
  // heads + h], reset to -inf by reset_moe_step(); global_layer(l): local
  // layer l's index in the model (multi-token prediction's after the layers).
  void track_max_logits();
  const std::vector<T>& max_logits() const { return max_logits_; }
  int local_layers() const { return int(layers_.size()); }
  // train.fp8 (model/fp8_linear.hpp): null without it. end_fp8_step after
  // each training step's backward (collective over the tensor, context and
  // data groups): delayed scaling's next scales and the step's statistics.
  Fp8Linears* fp8() const { return ops_.fp8.get(); }
  void end_fp8_step(parallel::Communicator* data) {
    if (ops_.fp8) ops_.fp8->end_step(data);
  }
  int64_t global_layer(int l) const { return global_[size_t(l)]; }
  // train.fp8.param_gather: ZeRO 3's gathers of this model's segments with
  // the FP8 GEMMs' weights cast (model/fp8_gather.hpp); null without FP8.
  parallel::GatherCast* fp8_param_gather();

  // The whole model on one pipeline rank (one chunk with embedding and head).
  double forward(Activations<T>& ctx, const int32_t* tokens, const int32_t* targets, T dscale) {
    return forward_chunk(ctx, tokens, nullptr, targets, dscale);
  }
  void backward(Activations<T>& ctx, Recompute recompute, bool accumulate = true,
                const std::function<void(int64_t)>& on_ready = {}) {
    backward_chunk(ctx, nullptr, recompute, accumulate, BackwardPart::all, on_ready);
  }

  // Mixed precision (train.precision): every activation and activation
  // gradient the model stores is rounded to the storage format (kept: norm
  // statistics, the attention log-sum-exp, losses, parameter gradients, which
  // accumulate in fp32). Parameters are the caller's: it keeps fp32 master
  // weights and hands the model their rounded copy.
  // Under bf16 / fp16 the activations saved for backward are kept as 2-byte
  // values (Activations::packed), and under bf16 in host memory the GEMMs
  // read 2-byte copies (the saved activations', the output gradients')
  // instead of converting those fp32 inputs at every call (Placement::precision).
  kernels::Precision precision() const { return precision_; }

 protected:
  ModelConfig cfg_;
  Device device_;
  kernels::Precision precision_ = kernels::Precision::fp32;
  parallel::TensorParallel single_;  // the region of a one-rank model
  parallel::TensorParallel* tp_;
  parallel::ContextParallel single_cp_;  // the whole sequence
  parallel::ContextParallel* cp_ = &single_cp_;
  ParamRegistry reg_;
  LocalDims dims_;
  const Architecture& arch_;
  LayerOps<T> ops_;  // what the layers' parts call (ops_.copies: the CPU's bf16 GEMMs read 2-byte copies)
  // Where activation memory comes from (model/activation_pool.hpp;
  // pool_->pack: saved activations as 2-byte values under bf16/fp16). Both
  // storage choices (pack, ops_.copies) give bitwise the results of the
  // plain path; the precision tests turn them off through a subclass to prove it.
  std::unique_ptr<ActivationPool<T>> pool_;

 private:
  // experts: one MoE layer's routed experts, split over an expert group
  enum class SegKind { embedding, layer, head, experts };
  struct SegInfo {
    SegKind kind;
    int64_t layer;                                // local layer index (SegKind::layer)
    int64_t global;                               // the layer's index in the whole model (SegKind::layer)
    std::vector<std::pair<Slot, int64_t>> slots;  // each bound parameter: its slot, offset in the segment
    std::vector<int64_t> numel;                   // each bound parameter's values (with the rows fused to it)
  };
  struct Chunk {
    ChunkSpec spec;
    int first_layer_seg = -1;  // segment of its first layer
    int64_t first_local = 0;   // index of its first layer in layers_
    int emb_seg = -1, head_seg = -1;
    int mtp_first_seg = -1;  // the head chunk: multi-token prediction's depth k is segment mtp_first_seg + k - 1
  };
  void store(T* p, int64_t n) const { ops_.store(p, n); }
  // local layer l's MoE buffers in ctx (null: a dense layer)
  static MoeActs<T>* moe_acts(Activations<T>& ctx, int l) {
    return size_t(l) < ctx.moe.size() && ctx.moe[size_t(l)].logits ? &ctx.moe[size_t(l)] : nullptr;
  }
  // Local layer l of ctx (layers_[li]): x_out = x_mid + exit(MLP(norm2(x_mid))),
  // x_mid = x_in + exit(attention(norm1(x_in))) (model/layer.cpp)
  void layer_forward(Activations<T>& ctx, int l, int li, T* x_out, Run run, Workspace<T>& w);
  void layer_weight_grads(const Activations<T>& ctx, int l, int li, bool acc);
  double head_forward(Activations<T>& ctx, const int32_t* targets, T dscale);
  // backward_chunk's parts (model/transformer.cpp)
  void weight_pass(Activations<T>& ctx, bool acc);
  void head_backward(Activations<T>& ctx, Workspace<T>& w, Recompute recompute, bool acc, bool split,
                     const std::function<void(int)>& ready);
  void embedding_backward(Activations<T>& ctx, Workspace<T>& w, bool acc, bool split);
  // layer_backward's two parts, each from the gradient of its output in
  // w.d_res to that of its input (model/layer.cpp)
  void mlp_backward(Activations<T>& ctx, int l, int li, Workspace<T>& w, Recompute recompute, bool split, bool acc);
  void attention_backward(Activations<T>& ctx, int l, int li, Workspace<T>& w, bool split, bool acc);
  // manage = false: the caller acquires and releases the layer's segments
  void layer_backward(Activations<T>& ctx, int l, int li, int s, int next_s, int next_es, Recompute recompute, bool acc,
                      bool split, const std::function<void(int)>& ready, bool manage = true);
  // Multi-token prediction (model/mtp.hpp): the depths after the head
  // chunk's loss (targets [B, T]; dscale the main loss's weight per token),
  // and their backward inside the head's, which adds the gradient of the
  // final norm's output to d_lnf [R, C] and writes every depth's weight
  // gradients (the LM head's accumulated: head_acc); each depth's segments
  // held here, its block run as a layer.
  void mtp_forward(Activations<T>& ctx, const int32_t* targets, T dscale);
  void mtp_backward(Activations<T>& ctx, T* d_lnf, Recompute recompute, bool acc, bool head_acc,
                    const std::function<void(int)>& ready);
  T* mtp_lnf_grad(Workspace<T>& w, int64_t R);  // [R, C]: the final norm's output gradient, the depths' added
  std::unique_ptr<Attention<T>> attention_;     // every layer's (model/attention.hpp)
  std::unique_ptr<DenseMlp<T>> dense_;          // the dense layers' MLP (model/mlp.hpp)
  std::unique_ptr<MoeLayer<T>> moe_;            // the MoE layers' (null: a dense model)
  std::vector<Mlp<T>*> mlp_;                    // each local layer's
  std::unique_ptr<Mtp<T>> mtp_;                 // multi-token prediction's modules (null without model.mtp)
  std::vector<int64_t> global_;                 // each local layer's index in the whole model
  std::vector<T> max_logits_;                   // QK-clip: [local layers, heads] (track_max_logits)
  Tensor params_, grads_;
  std::unique_ptr<Fp8ParamGather> fp8_gather_;
  std::vector<Chunk> chunks_;
  std::vector<LayerParams<T>> layers_;  // every local layer, in order
  std::vector<Segment> segments_;
  std::vector<SegInfo> seg_info_;
  std::vector<int> expert_seg_;  // each local layer's expert segment (-1: none, or the experts are in its own)
  int emb_seg_ = -1;             // this rank's embedding segment, if any
  bool tied_local_ = false;      // the head uses the embedding segment's table
  SegmentStorage<T>* store_ = nullptr;
  void make_segments();
  void allocate(uint64_t seed);
  void bind(int s, T* pbase, T* gbase);
  void use_params(int s, int next);
  void done_params(int s);
  void use_grads(int s);
  void done_grads(int s);
  T *wte_ = nullptr, *wpe_ = nullptr, *nfw_ = nullptr, *nfb_ = nullptr, *head_ = nullptr;
  T *dwte_ = nullptr, *dwpe_ = nullptr, *dnfw_ = nullptr, *dnfb_ = nullptr, *dhead_ = nullptr;
  // The pass's workspace: the context's, else the model's own
  // (model/workspace.hpp); its layer buffers sized for B.
  Workspace<T> own_;
  Workspace<T>& workspace(Activations<T>& ctx) { return ctx.workspace ? *ctx.workspace : own_; }
  void ensure_scratch(Workspace<T>& w, int64_t B) const { pool_->size_workspace(w, B, head_here_); }
  bool head_here_ = false;  // this rank holds the head (a workspace keeps dlogits' 2-byte copy)
  // A chunk's pass starts: its workspace sized for the context and given
  // the context's document starts and position origins.
  Workspace<T>& begin_pass(Activations<T>& ctx) {
    Workspace<T>& w = workspace(ctx);
    ensure_scratch(w, ctx.B);
    w.doc_start = ctx.doc_start;
    w.origin = ctx.position_origin ? ctx.position_origin : ctx.doc_start;
    return w;
  }
};

}  // namespace trident::model
