// A pass's workspace: everything a forward or backward of a chunk writes
// that is neither a parameter, a gradient nor a saved activation (those live
// in the flat buffers and the micro-batch's Activations). The model sizes
// its buffers on first use, for the largest micro-batch seen, and never
// keeps scratch of its own: two passes with workspaces of their own share
// no written memory, so they can interleave (dualpipev's paired passes,
// parallel/paired_passes.hpp) with nothing to swap at a switch.
//
// Who owns them: the chunk runner (model/chunk_runner.hpp), one for the
// passes run one after the other and one more for the second pass of a
// pair; it hands each pass its own through Activations::workspace. A model
// run without one (tests, tools) uses the model's own.
#pragma once
#include <cstdint>

#include "core/tensor.hpp"
#include "model/moe.hpp"

namespace trident::model {

template <typename T>
struct Workspace {
  // the pass's micro-batch: its document starts [B,T] (null: plain causal
  // attention) and position origins [B,T] (Activations::position_origin,
  // else the document starts)
  const int32_t* doc_start = nullptr;
  const int32_t* origin = nullptr;

  // The layers' buffers (Transformer::ensure_scratch, model/memory.cpp's
  // scratch_elements): forward partial sums [N,C] and their reduction
  // [R,C]; backward: d_res [R,C] the residual stream's gradient (after a
  // chunk's backward, its input's: Transformer::input_grad), d_full / d_ln
  // [N,C], d_local [R,C], and the attention's and MLP's [N, ...].
  int64_t B = 0;  // the micro-batch they are sized for
  Tensor buffers;
  T *partial = nullptr, *reduced = nullptr, *d_res = nullptr, *d_full = nullptr, *d_ln = nullptr, *d_local = nullptr,
    *d_qkv = nullptr, *d_atty = nullptr, *d_fc = nullptr, *d_act = nullptr;
  // The CPU's bf16 path: 2-byte copies of the linears' output gradients
  // (dy [N,C], d_fc, d_qkv, dlogits [N,V] with a head).
  int64_t B16 = 0;
  Tensor buffers16;
  uint16_t *dy16 = nullptr, *dfc16 = nullptr, *dqkv16 = nullptr, *dlogits16 = nullptr;
  // The attention variant's scratch (model/attention.hpp: QK-norm's heads
  // and their gradients, or multi-head latent attention's projections);
  // multi-token prediction's backward, and the final norm's output gradient
  // its depths add to
  Tensor attention, mtp, mtp_lnf_grad;

  MoeScratch<T> moe;  // the MoE layers' (their exchange's staging included)
};

}  // namespace trident::model
