// Learning-rate schedules. Step s counts optimizer steps from 0 to steps-1.
//   warmup   lr * (s + 1) / warmup for s < warmup (all schedules)
//   constant lr
//   cosine   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * progress))
//   linear   min_lr + (lr - min_lr) * (1 - progress)
//   wsd      lr until the last wsd_decay_fraction of the steps, then linear to min_lr
// progress = (s - warmup) / (steps - warmup) in [0, 1).
#pragma once
#include <cstdint>

#include "core/recipe/recipe.hpp"

namespace trident::optim {

double learning_rate(const OptimConfig& o, int64_t step, int64_t total_steps);

}  // namespace trident::optim
