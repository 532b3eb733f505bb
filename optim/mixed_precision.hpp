// Mixed precision's optimizer side (train.precision bf16 / fp16,
// docs/precision.md): fp32 master weights and fp16's dynamic loss scaling.
//
// MasterWeights: the optimizer updates an fp32 copy of this rank's shard;
// the model computes with its rounded copy, which publish() writes into the
// model's shard (before the data-parallel gather). In fp32 there is no copy:
// the optimizer updates the model's shard itself.
//
// LossScaler: fp16 only (the scale stays 1 otherwise). The loss gradient is
// multiplied by the scale and the optimizer divides it out again. A step
// whose gradient norm is inf/NaN (the norm is global, so every rank sees
// it) is skipped and the scale halves, never below min_loss_scale; after
// loss_scale_window clean steps it doubles. AdamW's step count counts
// applied updates only. The state goes into checkpoints.
#pragma once
#include <cstdint>

#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"

namespace trident::optim {

class MasterWeights {
 public:
  // model_shard: n elements the model reads, where the model lives.
  MasterWeights(float* model_shard, int64_t n, Precision precision, Device device);
  float* params() { return master_.defined() ? master_.data<float>() : model_; }
  void publish();

 private:
  float* model_;
  int64_t n_;
  Precision precision_;
  Tensor master_;  // fp32 copy (optimizer memory); empty in fp32
};

// The optimizer's progress and the scaler's state (the same on every rank).
// optimizer_steps: updates applied (AdamW's bias-correction count), which
// trails the training step by the steps skipped for inf/NaN gradients.
struct ScalerState {
  int64_t optimizer_steps = 0;
  double loss_scale = 1.0;
  int64_t good_steps = 0;     // clean steps since the scale last changed
  int64_t skipped_steps = 0;  // in all
};

class LossScaler {
 public:
  explicit LossScaler(const TrainConfig& train);
  double scale() const { return state_.loss_scale; }
  bool dynamic() const { return precision_ == Precision::fp16; }
  // Whether a step with this (unscaled) global gradient norm is skipped.
  bool skips(double grad_norm) const;
  // After the step: the count of applied updates and the scale move on.
  void update(bool skipped);
  // The update count AdamW's bias correction uses for the next applied update.
  int64_t next_update() const { return state_.optimizer_steps + 1; }
  ScalerState& state() { return state_; }

 private:
  Precision precision_;
  double min_scale_;
  int64_t window_;
  ScalerState state_;
};

}  // namespace trident::optim
