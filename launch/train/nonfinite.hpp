// The non-finite guard of the training loop (train.nonfinite): a step whose
// loss (on any rank) or gradient norm is not finite never reaches the
// parameters or a checkpoint. `stop` ends the run at that step; `skip`
// skips its update and ends the run after train.nonfinite_limit such steps
// in a row. With fp16's dynamic loss scaler a non-finite gradient norm is
// the scaler's business (it skips and lowers the scale), not this guard's.
// What is not here: finding the non-finite value (the caller names it).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/recipe/recipe.hpp"

namespace trident::launch {

class NonFiniteGuard {
 public:
  NonFiniteGuard(const TrainConfig& train, bool dynamic_loss_scale)
      : train_(train), dynamic_loss_scale_(dynamic_loss_scale) {}

  // Step `step` (0-based) had this loss (NaN here, or on another rank:
  // loss_bad_anywhere) and this gradient norm. Returns whether the step is
  // non-finite (its update must be skipped). When the run must stop,
  // calls before_stop (the earlier, finite state's save completes) and
  // throws Error saying why; first_bad_gradient names the first non-finite
  // gradient of this rank when the norm is the culprit.
  bool check(int64_t step, double loss, bool loss_bad_anywhere, double grad_norm,
             const std::function<std::string()>& first_bad_gradient, const std::function<void()>& before_stop);

 private:
  TrainConfig train_;
  bool dynamic_loss_scale_;
  int64_t in_a_row_ = 0;
};

}  // namespace trident::launch
