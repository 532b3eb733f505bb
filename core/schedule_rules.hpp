// The pipeline schedules' rules on a mesh, written once: the recipe loader
// applies them before any rank starts (naming the recipe key) and
// parallel::validate_schedule again where the action lists are built.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/enums.hpp"

namespace trident {

// A rule a schedule's shape breaks: which number is wrong (the chunks per
// rank, or the micro-batches per step) and why, with the arithmetic.
struct ScheduleRuleBroken {
  enum class Of { virtual_stages, micro_batches } of;
  std::string message;
};

// P pipeline ranks, V chunks per rank, M micro-batches per step (P, V >= 1;
// M <= 0: not known, its rules are left out): interleaved_1f1b needs V >= 2
// and M % P == 0, dualpipev V == 2 and M >= 2 P, the others V == 1.
// nullopt: none broken.
std::optional<ScheduleRuleBroken> broken_schedule_rule(ScheduleKind kind, int64_t P, int64_t V, int64_t M);

}  // namespace trident
