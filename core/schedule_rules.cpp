// The pipeline schedules' rules (schedule_rules.hpp).
#include "core/schedule_rules.hpp"

#include <fmt/format.h>

namespace trident {

std::optional<ScheduleRuleBroken> broken_schedule_rule(ScheduleKind kind, int64_t P, int64_t V, int64_t M) {
  using Of = ScheduleRuleBroken::Of;
  if (kind == ScheduleKind::interleaved_1f1b) {
    if (V < 2)
      return ScheduleRuleBroken{Of::virtual_stages,
                                fmt::format("schedule interleaved_1f1b needs virtual_stages >= 2, found {}", V)};
    if (M > 0 && M % P != 0)
      return ScheduleRuleBroken{Of::micro_batches,
                                fmt::format("schedule interleaved_1f1b takes one micro-batch per stage in each round: "
                                            "micro-batches({}) % pipeline({}) = {} != 0",
                                            M, P, M % P)};
  } else if (kind == ScheduleKind::dualpipev) {
    if (V != 2)
      return ScheduleRuleBroken{Of::virtual_stages,
                                fmt::format("schedule dualpipev holds two chunks per pipeline rank (the arms of its "
                                            "V): needs virtual_stages 2, found {}",
                                            V)};
    if (M > 0 && M < 2 * P)
      return ScheduleRuleBroken{Of::micro_batches,
                                fmt::format("schedule dualpipev's warm-up fills both arms of its V: micro-batches({}) "
                                            "must be >= 2 x pipeline({}) = {}",
                                            M, P, 2 * P)};
  } else if (V != 1) {
    return ScheduleRuleBroken{Of::virtual_stages,
                              fmt::format("schedule {} runs one chunk per pipeline rank: needs virtual_stages 1, "
                                          "found {} (several chunks: interleaved_1f1b or dualpipev)",
                                          enum_name(kind), V)};
  }
  return std::nullopt;
}

}  // namespace trident
