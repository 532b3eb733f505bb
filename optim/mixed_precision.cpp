// fp32 master weights and fp16 loss scaling (see mixed_precision.hpp).
#include "optim/mixed_precision.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/buffer.hpp"
#include "kernels/precision.hpp"

namespace trident::optim {

MasterWeights::MasterWeights(float* model_shard, int64_t n, Precision precision, Device device)
    : model_(model_shard), n_(n), precision_(precision) {
  if (precision == Precision::fp32) return;
  master_ = Tensor::empty({n}, DType::f32, MemCategory::optimizer, device);
  kernels::copy(master_.data<float>(), model_shard, n);
}

void MasterWeights::publish() {
  if (!master_.defined()) return;
  kernels::copy(model_, master_.data<float>(), n_);
  kernels::round_to_storage(model_, n_, precision_);
}

LossScaler::LossScaler(const TrainConfig& train)
    : precision_(train.precision), min_scale_(train.min_loss_scale), window_(train.loss_scale_window) {
  state_.loss_scale = dynamic() ? train.loss_scale : 1.0;
}

bool LossScaler::skips(double grad_norm) const { return dynamic() && !std::isfinite(grad_norm); }

void LossScaler::update(bool skipped) {
  if (!skipped) ++state_.optimizer_steps;
  if (!dynamic()) return;
  if (skipped) {  // halve on overflow
    state_.loss_scale = std::max(state_.loss_scale / 2, min_scale_);
    state_.good_steps = 0, ++state_.skipped_steps;
  } else if (++state_.good_steps >= window_) {  // double after a window of clean steps
    state_.loss_scale *= 2, state_.good_steps = 0;
  }
}

}  // namespace trident::optim
