// Activation memory of the transformer. One layout: activation_sizes() gives
// the elements of every buffer of one micro-batch's activations, and both
// the allocator (Transformer::make_activations) and the formulas below (the
// planner's memory model) are written in its terms; test_model checks the
// formulas against what the allocator allocates, and test_planner the
// planner's activation bytes against a run's measured peak.
// Attention state: the tiled (flash-style) kernels, CPU and CUDA, keep one
// log-sum-exp per row [B, H, T].
#pragma once
#include <array>
#include <cstdint>

#include "core/enums.hpp"
#include "core/recipe/recipe.hpp"
#include "model/parallel_plan.hpp"

namespace trident::model {

struct ActivationShape {
  int64_t micro_batch = 1;
  int tensor = 1;
  bool sequence_parallel = false;  // with tensor > 1: rows of the residual stream are sharded
  Recompute recompute = Recompute::none;
  bool split_backward = false;  // zero-bubble schedules keep output gradients
  int context = 1;              // the sequence split over this many ranks
  // each MoE layer's experts split over this many ranks: the layer keeps the
  // rows its experts received (the balanced load: as many as it routed)
  int expert = 1;
  // dualpipev's paired passes (parallel/paired_passes.hpp): two pass
  // workspaces (model/workspace.hpp), one per pass
  bool paired_passes = false;
};

// Elements of each buffer, on this rank (its share of heads, ffn, vocabulary).
struct ActivationSizes {
  int64_t N, R, C;          // token rows of the micro-batch, rows of the residual stream here, hidden
  int64_t norm_full;        // a norm's output as the next (column-parallel) linear reads it: [N,C] or [R,C]
  int64_t stats;            // a norm's mean or rstd [R]
  int64_t qkv, atty;        // [N, (H + 2 KV) D], [N, H D]
  int64_t fc, act;          // the MLP's input projection [N, F or 2F] and activation [N, F]
  int64_t attention_state;  // the log-sum-exp [B, H, T]
  int64_t logits, losses;   // [N, V], [N]
};
ActivationSizes activation_sizes(const ModelConfig& cfg, const ActivationShape& s);

// train.fp8.saved_inputs: the values of one context of the chunk with
// layers [first, first + layers) (and, on the head chunk, model.mtp's
// blocks) kept as FP8 codes, a byte each, in place of the 2-byte copies
// activation_elements counts (model/fp8_linear.hpp's fp8_kept_inputs).
int64_t fp8_kept_values(const ModelConfig& cfg, const Fp8Config& f, const ActivationShape& s, int64_t first,
                        int64_t layers, bool head);
// One Activations context of a chunk with `layers` layers, `moe_layers` of
// them MoE layers (and the head, with model.mtp's blocks and buffers).
int64_t activation_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers, bool head,
                            int64_t moe_layers = 0);
// What one MoE layer keeps of a micro-batch (model/moe.hpp's MoeActs: router
// logits and scores, routes, the permuted rows' gate|up, activation and
// output, the shared experts'), in elements of 4 bytes (routes are int32).
int64_t moe_layer_elements(const ModelConfig& cfg, const ActivationShape& s);
// MoE layers of the chunk with layers [first, first + layers).
int64_t moe_layers_in(const ModelConfig& cfg, int64_t first, int64_t layers);
// What recomputation rebuilds before each use, one set per chunk shared by
// all its contexts: a layer's intermediates (full) or the attention
// log-sum-exp (selective); 0 without recomputation.
// Full recompute: with the MoE layers' buffers (moe_layers of the chunk's
// layers), whose routes and counts each context keeps.
int64_t shared_recompute_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers,
                                  int64_t moe_layers = 0);
// A pass's layer buffers (Workspace::buffers, in its order: partial,
// reduced, d_res, d_full, d_ln, d_local, d_qkv, d_atty, d_fc, d_act): the
// allocator (Transformer::ensure_scratch) and scratch_elements read it.
std::array<int64_t, 10> workspace_sizes(const ActivationSizes& z);
// A pass's workspace (model/workspace.hpp: forward partial sums, backward
// gradients), twice with paired passes.
int64_t scratch_elements(const ModelConfig& cfg, const ActivationShape& s);

}  // namespace trident::model
