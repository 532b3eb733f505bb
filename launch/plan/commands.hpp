// The planner's commands: `trident topology`, `schedule` and `plan`, with
// their typed options (`sweep` is sweep.hpp). The command line itself is
// launch/main.cpp's table; these run after it has checked the words. Each
// returns the exit code (0), or throws InputError (exit 2) or Error (1).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"

namespace trident::launch {

struct TopologyCommand {
  std::string recipe;
  std::vector<std::string> sets;
  int64_t world = 0, ranks_per_node = 0;
};
int run_topology(const TopologyCommand& c);

struct ScheduleCommand {
  int64_t pipeline = 0, micro_batches = 0, virtual_stages = 1, width = 120;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
};
int run_schedule(const ScheduleCommand& c);

struct PlanCommand {
  std::string recipe, cluster, mesh, out;
  std::vector<std::string> sets, cluster_sets;  // --set (recipe keys), --cluster-set (cluster file keys)
  int64_t gpus = 0, top = 10;
  int64_t max_context = 1;  // plan_all: context sizes up to this
  std::string precision;    // "" = the recipe's
  bool explain = false, json = false, calibrate = false;
};
int run_plan(const PlanCommand& c, int* argc, char*** argv);

// "D,T,P", "D,T,P,C" or "D,T,P,C,E" (or DxTxP[xC[xE]]): data, tensor,
// pipeline and context sizes (C defaults to 1) and the expert size (carved
// out of D x C; 0 when not given: the recipe's parallel.expert).
std::array<int64_t, 5> parse_mesh(const std::string& flag, const std::string& given);

}  // namespace trident::launch
