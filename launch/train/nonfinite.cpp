// The training loop's non-finite guard (see nonfinite.hpp).
#include "launch/train/nonfinite.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::launch {

bool NonFiniteGuard::check(int64_t step, double loss, bool loss_bad_anywhere, double grad_norm,
                           const std::function<std::string()>& first_bad_gradient,
                           const std::function<void()>& before_stop) {
  const bool nonfinite = loss_bad_anywhere || (!dynamic_loss_scale_ && !std::isfinite(grad_norm));
  in_a_row_ = nonfinite ? in_a_row_ + 1 : 0;
  if (!nonfinite) return false;
  const std::string first = std::isfinite(grad_norm) ? "" : first_bad_gradient();
  const std::string what =
      fmt::format("{} at step {}{}",
                  !loss_bad_anywhere    ? fmt::format("gradient norm is {}", grad_norm)
                  : std::isfinite(loss) ? std::string("loss is not finite on another rank")
                                        : fmt::format("loss is {}", loss),
                  step + 1, first.empty() ? "" : fmt::format(" (first non-finite gradient on this rank: {})", first));
  if (train_.nonfinite == NonFinite::stop || in_a_row_ >= train_.nonfinite_limit) {
    before_stop();
    throw Error(fmt::format(
        "{}: stopped before the optimizer step{}; nothing was saved from this state (the last checkpoint, if "
        "any, is untouched)",
        what,
        train_.nonfinite == NonFinite::skip
            ? fmt::format(" after {} non-finite steps in a row (train.nonfinite_limit)", in_a_row_)
            : ""));
  }
  log::warn("{}: update skipped (train.nonfinite: skip; {} in a row, the run stops at {})", what, in_a_row_,
            train_.nonfinite_limit);
  return true;
}

}  // namespace trident::launch
