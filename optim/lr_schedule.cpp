// Learning-rate schedules (formulas in lr_schedule.hpp).
#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace trident::optim {

double learning_rate(const OptimConfig& o, int64_t s, int64_t total) {
  if (s < o.warmup) return o.lr * double(s + 1) / double(o.warmup);
  const double span = double(std::max<int64_t>(total - o.warmup, 1));
  const double progress = std::clamp(double(s - o.warmup) / span, 0.0, 1.0);
  if (o.decay == LrDecay::constant) return o.lr;
  if (o.decay == LrDecay::cosine) return o.min_lr + (o.lr - o.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  if (o.decay == LrDecay::linear) return o.min_lr + (o.lr - o.min_lr) * (1.0 - progress);
  // wsd: warmup, stable, then a linear decay over the last fraction of all steps
  const double decay_steps = std::max(1.0, std::round(o.wsd_decay_fraction * double(total)));
  const double start = double(total) - decay_steps;
  if (double(s) < start) return o.lr;
  return o.min_lr + (o.lr - o.min_lr) * (1.0 - (double(s) - start) / decay_steps);
}

}  // namespace trident::optim
