// What a micro-batch keeps between a chunk's forward and its backward
// (an Activations context, made by Transformer::make_activations) and the
// layout of one layer's saved buffers. The parts of a layer
// (model/attention.hpp, model/mlp.hpp, model/mtp.hpp) read and write them;
// what a pass writes and drops is its Workspace (model/workspace.hpp).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/enums.hpp"
#include "core/tensor.hpp"
#include "kernels/fp8.hpp"
#include "model/moe.hpp"
#include "model/workspace.hpp"

namespace trident::model {

using trident::Recompute;  // train.recompute (core/enums.hpp)

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
// train.fp8.saved_inputs: a linear's input kept, for its weight gradient,
// as the FP8 codes its forward GEMM read (one byte a value, in place of the
// packed 2-byte copy): q the context's buffer, op the last forward's codes
// and scale.
struct Fp8Input {
  uint8_t* q = nullptr;
  kernels::fp8::Operand8 op{};
};
template <typename T>
struct LayerActs {
  T *x_in, *ln1, *ln1_full, *ln1_mean, *ln1_rstd, *qkv, *lse, *atty, *x_mid, *ln2, *ln2_full, *ln2_mean, *ln2_rstd, *fc,
      *act, *qk_pre = nullptr, *qk_rstd = nullptr;
  MlaActs<T> mla{};
  // [3]: ln1_full's (the qkv linear's input), ln2_full's (a dense MLP's fc), act's (fc2) kept in FP8 where
  // their q is set (Activations::fp8_inputs); null: none
  Fp8Input* fp8_inputs = nullptr;
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
  // train.fp8.saved_inputs: each layer's three (LayerActs::fp8_inputs points here; empty: off)
  std::vector<std::array<Fp8Input, 3>> fp8_inputs;
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

}  // namespace trident::model
