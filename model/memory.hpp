// Activation memory of the transformer, as a formula: the elements that
// Transformer::make_activations and its scratch allocate, computed without
// allocating (the planner's memory model; test_model checks the two agree).
#pragma once
#include <cstdint>

#include "core/recipe.hpp"
#include "model/parallel_plan.hpp"
#include "model/transformer.hpp"

namespace trident::model {

struct ActivationShape {
  int64_t micro_batch = 1;
  int tensor = 1;
  bool sequence_parallel = false;  // with tensor > 1: rows of the residual stream are sharded
  Recompute recompute = Recompute::none;
  bool split_backward = false;     // zero-bubble schedules keep output gradients
};

// One Activations context of a chunk with `layers` layers (and the head).
int64_t activation_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers, bool head);
// What recomputation rebuilds before each use, one set per chunk shared by
// all its contexts: a layer's intermediates (full) or the attention
// probabilities (selective); 0 without recomputation.
int64_t shared_recompute_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers);
// The model's shared scratch (forward partial sums, backward gradients).
int64_t scratch_elements(const ModelConfig& cfg, const ActivationShape& s);

}  // namespace trident::model
