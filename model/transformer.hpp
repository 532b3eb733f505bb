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
#include "model/architecture.hpp"
#include "model/moe.hpp"
#include "model/parallel_plan.hpp"
#include "model/params.hpp"
#include "model/workspace.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/tensor_parallel.hpp"

namespace trident::model {

using trident::Recompute;  // train.recompute (core/enums.hpp)

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

// [R,C]: x_in, ln1, x_mid, ln2 (means, rstds [R]); [N, ...]: the rest.
// ln1_full / ln2_full [N,C] are the inputs of the column-parallel linears
// (the same buffers as ln1 / ln2 unless the region gathers them).
// qk_pre [N (H + KV), D] / qk_rstd [N (H + KV)]: the query and key heads
// before QK-norm and their statistics (model.qk_norm; null without it).
// Multi-head latent attention (model.attention: mla) keeps its latents:
// q_lat [N, QL] (null without a query latent), kv_lat [N, KL] before their
// RMSNorm, their statistics [N], and the normalised ones q_norm / kv_norm
// (the up-projections' inputs). qkv [N, H (2 Dq + Dv)] holds the heads as
// the attention kernels take them (kernels::mla_heads), atty [N, H Dv] the
// output.
template <typename T>
struct MlaActs {
  T *q_lat = nullptr, *q_rstd = nullptr, *q_norm = nullptr, *kv_lat = nullptr, *kv_rstd = nullptr, *kv_norm = nullptr;
};
template <typename T>
struct LayerActs {
  T *x_in, *ln1, *ln1_full, *ln1_mean, *ln1_rstd, *qkv, *lse, *atty, *x_mid, *ln2, *ln2_full, *ln2_mean, *ln2_rstd, *fc,
      *act, *qk_pre = nullptr, *qk_rstd = nullptr;
  MlaActs<T> mla{};
};

// Output gradients of a layer's four linears, kept from the input pass for
// the weight pass (split backward only): [N, qkv], [N, C], [N, fc], [N, C].
template <typename T>
struct SavedGrads {
  T *d_qkv, *d_attn_out, *d_fc, *d_mlp_out;
};

// Multi-token prediction (model.mtp), one depth k of a head chunk's
// context: the shifted tokens t_{i+k} and targets t_{i+k+1} (-1 past the
// sequence) [N]; the embedding's rows of the tokens and their norm, the
// previous depth's hidden state's norm (and statistics) [R, C]; eh_proj's
// input [R, 2C]; the block's output x_out [R, C]; shared_head.norm's output
// o / o_full (local rows, and gathered as the LM head reads them) and its
// statistics; logits [N, V] (dlogits after a training forward), losses [N];
// d_emb [R, C]: the embedding rows' gradient, added to the token table's
// with the embedding's. The block's own buffers are the context's layer
// L + k - 1 (Activations::layers, ::moe).
template <typename T>
struct MtpActs {
  std::vector<int32_t> tokens, targets;
  T *emb = nullptr, *e_norm = nullptr, *e_rstd = nullptr, *h_norm = nullptr, *h_rstd = nullptr, *cat = nullptr;
  T *x_out = nullptr, *o = nullptr, *o_full = nullptr, *o_rstd = nullptr, *logits = nullptr, *losses = nullptr;
  T* d_emb = nullptr;
};

template <typename T>
struct Activations {
  int64_t B = 0;
  int chunk = 0;  // this rank's chunk index
  Recompute recompute = Recompute::none;
  // The workspace of the pass that runs on this context (model/workspace.hpp),
  // set by the caller before each forward_chunk / backward_chunk; null: the
  // model's own.
  Workspace<T>* workspace = nullptr;
  // 16-bit precision: each layer's saved activations as 2-byte values (pack
  // order x_in, ln1_full, qkv, atty, x_mid, ln2_full, fc, act; x_in alone
  // with full recompute). The layers' large buffers then point into the
  // chunk's fp32 working set, refilled from here before each use; norm
  // statistics and the attention log-sum-exp stay per layer in fp32.
  std::vector<uint16_t*> packed;
  bool is_packed() const { return !packed.empty(); }
  std::vector<Tensor> storage;  // owns the buffers the pointers below see
  std::vector<LayerActs<T>> layers;
  std::vector<SavedGrads<T>> saved;  // split backward only
  // MoE layers (model/moe.hpp): each local layer's buffers (empty for a dense
  // layer), and the scale of the balancing losses' gradients (the loss's of
  // the micro-batch's tokens, set by forward_chunk).
  std::vector<MoeActs<T>> moe;
  // the head chunk with model.mtp: each depth's (layers and moe then hold
  // the chunk's layers and, after them, each depth's block); mtp_ran: its
  // last forward ran them (a training forward), so its backward does
  std::vector<MtpActs<T>> mtp;
  bool mtp_ran = false;
  T aux_scale = 0;
  T* x_final = nullptr;                                                             // [R,C] the chunk's output
  T *lnf = nullptr, *lnf_full = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;  // head chunk
  T* logits = nullptr;  // [N, V]: this rank's vocabulary columns (head chunk)
  T* losses = nullptr;  // [N] (head chunk)
  const int32_t* tokens = nullptr;
  // Document masking: [B,T] the first (global) position of each row's
  // document (where the kernels can read it), set by the caller before
  // forward_chunk; null: plain causal attention.
  const int32_t* doc_start = nullptr;
  // [B,T]: local row (b, t) is at position t - position_origin[b*T + t]
  // (rotary and learned positions): the document's start with masking, the
  // shift to the global position with context parallelism. Null: doc_start.
  const int32_t* position_origin = nullptr;
};

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
                                                   bool split_backward = false) const;

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

  // This rank's MoE statistics since reset_moe_step(), over its training
  // forwards (dscale != 0; recomputation reruns are not counted): the
  // global ids of its MoE layers, the tokens routed to each expert of each
  // ([layers x E], this rank's rows), the balancing losses summed over
  // micro-batches and layers (this rank's share under context parallelism).
  struct MoeStep {
    std::vector<int64_t> layers;
    std::vector<double> counts;
    double aux_loss = 0, z_loss = 0;
  };
  // Called before each training step's schedule: resets the statistics
  // below (and starts the step's shared token-table gradient afresh).
  void reset_moe_step();
  const MoeStep& moe_step() const { return moe_step_; }
  // Multi-token prediction: this rank's summed token losses of each depth
  // since reset_moe_step() (training forwards of the head chunk; unweighted).
  const std::vector<double>& mtp_losses() const { return mtp_losses_; }

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
  // Both storage choices give bitwise the results of the plain path (the
  // values are rounded to the format before they are stored); the precision
  // tests turn them off through a subclass to prove it.
  bool pack_ = true;    // packed 2-byte activations
  bool copies_ = true;  // the CPU's bf16 GEMMs read 2-byte copies

 private:
  // A layer's parameters and gradients, one pointer per slot (Slot order,
  // model/architecture.hpp; null where the architecture has no such slot),
  // read through named accessors; an MoE layer's fcw / pw are its shared
  // experts' (null without them).
  struct LayerParams {
    std::array<T*, kLayerSlots> param{}, grad{};
    T* n1w() const { return param[size_t(Slot::norm1_weight)]; }
    T* dn1w() const { return grad[size_t(Slot::norm1_weight)]; }
    T* n1b() const { return param[size_t(Slot::norm1_bias)]; }
    T* dn1b() const { return grad[size_t(Slot::norm1_bias)]; }
    T* qkvw() const { return param[size_t(Slot::qkv_weight)]; }
    T* dqkvw() const { return grad[size_t(Slot::qkv_weight)]; }
    T* qkvb() const { return param[size_t(Slot::qkv_bias)]; }
    T* dqkvb() const { return grad[size_t(Slot::qkv_bias)]; }
    T* ow() const { return param[size_t(Slot::attn_out_weight)]; }
    T* dow() const { return grad[size_t(Slot::attn_out_weight)]; }
    T* ob() const { return param[size_t(Slot::attn_out_bias)]; }
    T* dob() const { return grad[size_t(Slot::attn_out_bias)]; }
    T* n2w() const { return param[size_t(Slot::norm2_weight)]; }
    T* dn2w() const { return grad[size_t(Slot::norm2_weight)]; }
    T* n2b() const { return param[size_t(Slot::norm2_bias)]; }
    T* dn2b() const { return grad[size_t(Slot::norm2_bias)]; }
    T* fcw() const { return param[size_t(Slot::mlp_in_weight)]; }
    T* dfcw() const { return grad[size_t(Slot::mlp_in_weight)]; }
    T* fcb() const { return param[size_t(Slot::mlp_in_bias)]; }
    T* dfcb() const { return grad[size_t(Slot::mlp_in_bias)]; }
    T* pw() const { return param[size_t(Slot::mlp_out_weight)]; }
    T* dpw() const { return grad[size_t(Slot::mlp_out_weight)]; }
    T* pb() const { return param[size_t(Slot::mlp_out_bias)]; }
    T* dpb() const { return grad[size_t(Slot::mlp_out_bias)]; }
    T* rw() const { return param[size_t(Slot::router_weight)]; }
    T* drw() const { return grad[size_t(Slot::router_weight)]; }
    T* rb() const { return param[size_t(Slot::router_bias)]; }
    T* drb() const { return grad[size_t(Slot::router_bias)]; }
    T* xw() const { return param[size_t(Slot::experts_in_weight)]; }
    T* dxw() const { return grad[size_t(Slot::experts_in_weight)]; }
    T* xpw() const { return param[size_t(Slot::experts_out_weight)]; }
    T* dxpw() const { return grad[size_t(Slot::experts_out_weight)]; }
    T* sgw() const { return param[size_t(Slot::shared_gate_weight)]; }
    T* dsgw() const { return grad[size_t(Slot::shared_gate_weight)]; }
    T* qnw() const { return param[size_t(Slot::q_norm_weight)]; }
    T* dqnw() const { return grad[size_t(Slot::q_norm_weight)]; }
    T* knw() const { return param[size_t(Slot::k_norm_weight)]; }
    T* dknw() const { return grad[size_t(Slot::k_norm_weight)]; }
    T* qaw() const { return param[size_t(Slot::q_down_weight)]; }
    T* dqaw() const { return grad[size_t(Slot::q_down_weight)]; }
    T* qan() const { return param[size_t(Slot::q_down_norm)]; }
    T* dqan() const { return grad[size_t(Slot::q_down_norm)]; }
    T* kvaw() const { return param[size_t(Slot::kv_down_weight)]; }
    T* dkvaw() const { return grad[size_t(Slot::kv_down_weight)]; }
    T* kvan() const { return param[size_t(Slot::kv_down_norm)]; }
    T* dkvan() const { return grad[size_t(Slot::kv_down_norm)]; }
    T* kvbw() const { return param[size_t(Slot::kv_up_weight)]; }
    T* dkvbw() const { return grad[size_t(Slot::kv_up_weight)]; }
    T* enw() const { return param[size_t(Slot::mtp_embed_norm)]; }
    T* denw() const { return grad[size_t(Slot::mtp_embed_norm)]; }
    T* hnw() const { return param[size_t(Slot::mtp_hidden_norm)]; }
    T* dhnw() const { return grad[size_t(Slot::mtp_hidden_norm)]; }
    T* ehw() const { return param[size_t(Slot::mtp_proj)]; }
    T* dehw() const { return grad[size_t(Slot::mtp_proj)]; }
    T* shnw() const { return param[size_t(Slot::mtp_head_norm)]; }
    T* dshnw() const { return grad[size_t(Slot::mtp_head_norm)]; }
    MoeWeights<T> moe() const { return {rw(), rb(), xw(), xpw(), fcw(), pw(), sgw()}; }
    MoeGrads<T> moe_grads() const { return {drw(), drb(), dxw(), dxpw(), dfcw(), dpw(), dsgw()}; }
  };
  // experts: one MoE layer's routed experts, split over an expert group
  enum class SegKind { embedding, layer, head, experts };
  struct SegInfo {
    SegKind kind;
    int64_t layer;                                // local layer index (SegKind::layer)
    int64_t global;                               // the layer's index in the whole model (SegKind::layer)
    std::vector<std::pair<Slot, int64_t>> slots;  // each bound parameter: its slot, offset in the segment
  };
  struct Chunk {
    ChunkSpec spec;
    int first_layer_seg = -1;  // segment of its first layer
    int64_t first_local = 0;   // index of its first layer in layers_
    int emb_seg = -1, head_seg = -1;
    int mtp_first_seg = -1;  // the head chunk: multi-token prediction's depth k is segment mtp_first_seg + k - 1
  };
  // rounds n elements at p to the storage format (a no-op in fp32)
  void store(T* p, int64_t n) const { kernels::round_to_storage(p, n, precision_); }
  // an output gradient the GEMMs read: rounded, and on the CPU's bf16 path
  // its 2-byte copy written in the same pass (copy16, n elements)
  void store_grad(T* p, uint16_t* copy16, int64_t n) const {
    if (gemm_reads_16bit())
      kernels::store_16(p, copy16, n, precision_);
    else
      store(p, n);
  }
  // The CPU's bf16 path (docs/precision.md): under bf16, in host memory, the
  // GEMMs read 2-byte operands where the model has them: the saved
  // activations' packed copy, the output gradients' copy (the weights are
  // converted by each GEMM: measured faster than a copy, docs/performance.md).
  // A GEMM input: its values, its 2-byte copy, or both (kernels::In16).
  struct GemmIn {
    const T* f32 = nullptr;
    const uint16_t* b16 = nullptr;
  };
  bool gemm_reads_16bit() const;
  void linear_fwd(T* out, GemmIn inp, GemmIn w, const T* bias, int64_t N, int64_t C, int64_t OC);
  void linear_bwd(T* dinp, T* dw, T* db, GemmIn dout, GemmIn inp, GemmIn w, int64_t N, int64_t C, int64_t OC, bool acc);
  // The dweight input i of layer l (saved_buffers order): fp32 and/or packed.
  GemmIn saved_in(const Activations<T>& ctx, int l, size_t i, const T* f32) const;
  // Whether saved buffer i is left packed in backward (only GEMMs read it).
  bool gemm_only(const Activations<T>& ctx, size_t i) const;
  // A layer's saved buffers in pack order: (buffer in the working set, elements).
  std::vector<std::pair<T*, int64_t>> saved_buffers(const LayerActs<T>& a, int64_t B, Recompute r) const;
  // Buffers [first, last) of layer l to its packed copy, and all of them back.
  void pack(Activations<T>& ctx, int l, size_t first, size_t last) const;
  void unpack(Activations<T>& ctx, int l) const;
  // local layer l's MoE buffers in ctx (null: a dense layer)
  static MoeActs<T>* moe_acts(Activations<T>& ctx, int l) {
    return size_t(l) < ctx.moe.size() && ctx.moe[size_t(l)].logits ? &ctx.moe[size_t(l)] : nullptr;
  }
  // m: the layer's MoE buffers (null: a dense layer)
  void layer_forward(const LayerActs<T>& a, T* x_out, const LayerParams& p, int64_t B, MoeActs<T>* m, Workspace<T>& w);
  void layer_weight_grads(const Activations<T>& ctx, int l, const LayerParams& p, bool acc);
  // backward_chunk's parts (model/transformer.cpp)
  void weight_pass(Activations<T>& ctx, bool acc);
  void head_backward(Activations<T>& ctx, Workspace<T>& w, Recompute recompute, bool acc, bool split,
                     const std::function<void(int)>& ready);
  void embedding_backward(Activations<T>& ctx, Workspace<T>& w, bool acc, bool split);
  // layer_backward's two parts, each from the gradient of its output in
  // w.d_res to that of its input (model/layer.cpp)
  void mlp_backward(Activations<T>& ctx, int l, const LayerParams& p, Workspace<T>& w, Recompute recompute, bool split,
                    bool acc);
  void attention_backward(Activations<T>& ctx, int l, const LayerParams& p, Workspace<T>& w, bool split, bool acc);
  // manage = false: the caller acquires and releases the layer's segments
  void layer_backward(Activations<T>& ctx, int l, int li, int s, int next_s, int next_es, Recompute recompute, bool acc,
                      bool split, const std::function<void(int)>& ready, bool manage = true);
  // Multi-token prediction (model/mtp.cpp): the depths after the head
  // chunk's loss (targets [B, T]; dscale the main loss's weight per token),
  // and their backward inside the head's, which adds the gradient of the
  // final norm's output to d_lnf [R, C] and writes every depth's weight
  // gradients (the LM head's accumulated: head_acc).
  void mtp_forward(Activations<T>& ctx, const int32_t* targets, T dscale);
  void mtp_backward(Activations<T>& ctx, T* d_lnf, Recompute recompute, bool acc, bool head_acc,
                    const std::function<void(int)>& ready);
  // the routes of an MoE layer's training forward, counted into moe_step_
  void count_routes(const MoeActs<T>& m, int64_t global);
  std::vector<double> mtp_losses_;
  T* mtp_lnf_grad(Workspace<T>& w, int64_t R);  // [R, C]: the final norm's output gradient, the depths' added
  void norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N);
  // QK-norm of the query and key heads in qkv [N, (H + 2 KV) D], in place
  // (pre: the heads before it, kept for backward), and its backward on dqkv.
  void qk_norm_forward(T* qkv, T* pre, T* rstd, const LayerParams& p, int64_t N, Workspace<T>& w);
  void qk_norm_backward(T* dqkv, const T* pre, const T* rstd, const LayerParams& p, int64_t N, bool acc,
                        Workspace<T>& w);
  T* qk_scratch(Workspace<T>& w, int64_t N) const;  // 2 N (H + KV) D: the heads and their gradients
  // Multi-head latent attention: the projections from h (the gathered norm1
  // output) to qkv [N, H (2 Dq + Dv)], and back from its gradient to w.d_ln (the
  // weight gradients included, in either backward part).
  void mla_forward(const LayerActs<T>& a, const T* h, const LayerParams& p, int64_t B, Workspace<T>& w);
  void mla_backward(const LayerActs<T>& a, GemmIn h, T* d_qkv, const LayerParams& p, int64_t B, bool acc,
                    Workspace<T>& w);
  struct MlaScratch {
    T *q, *kvb, *kr, *d_kv_norm, *d_kv_lat, *d_q_norm, *d_q_lat, *d_h;
  };
  MlaScratch mla_scratch(Workspace<T>& w, int64_t N) const;
  void norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean, const T* rstd,
                     int64_t N, bool accumulate);

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
  int64_t qkv_width_, fc_width_;
  int64_t dq_, dv_;  // a query (and key) head's size, a value head's (cfg.q_head_dim(), cfg.v_head_dim())
  Tensor params_, grads_;
  std::vector<Chunk> chunks_;
  std::vector<LayerParams> layers_;  // every local layer, in order
  std::unique_ptr<MoeMlp<T>> moe_;   // the MoE layers' MLP (null: a dense model)
  MoeStep moe_step_;
  std::vector<Segment> segments_;
  std::vector<SegInfo> seg_info_;
  std::vector<int> expert_seg_;  // each local layer's expert segment (-1: none, or the experts are in its own)
  int emb_seg_ = -1;             // this rank's embedding segment, if any
  bool tied_local_ = false;      // the head uses the embedding segment's table
  // Multi-token prediction on a rank that also holds the embedding, in
  // another chunk (pipeline 1 with virtual stages, dualpipev's rank 0): the
  // modules read the embedding's table and add to its gradient, which the
  // step's first writer of the two chunks zeroes (table_fresh_).
  bool mtp_shared_table_ = false;
  bool table_fresh_ = true;
  SegmentStorage<T>* store_ = nullptr;
  void bind(int s, T* pbase, T* gbase);
  void use_params(int s, int next);
  void done_params(int s);
  void use_grads(int s);
  void done_grads(int s);
  T *wte_ = nullptr, *wpe_ = nullptr, *nfw_ = nullptr, *nfb_ = nullptr, *head_ = nullptr;
  T *dwte_ = nullptr, *dwpe_ = nullptr, *dnfw_ = nullptr, *dnfb_ = nullptr, *dhead_ = nullptr;
  // the head chunk's copy of the token table, where multi-token prediction reads it (no embedding chunk here)
  T *mtp_wte_ = nullptr, *dmtp_wte_ = nullptr;
  std::vector<double> rope_;
  // Buffers that recomputation rebuilds before every use, shared by all the
  // contexts of a chunk (full: one layer's intermediates; selective: the
  // attention log-sum-exp): micro-batches in flight never use them at once.
  struct SharedRecompute {
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
  mutable std::vector<SharedRecompute> shared_recompute_;
  // The pass's workspace: the context's, else the model's own
  // (model/workspace.hpp); its layer buffers sized for B.
  Workspace<T> own_;
  Workspace<T>& workspace(Activations<T>& ctx) { return ctx.workspace ? *ctx.workspace : own_; }
  void ensure_scratch(Workspace<T>& w, int64_t B) const;
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
