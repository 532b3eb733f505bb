// The parts of one plan, each in its room (planner.cpp's plan_one puts them
// together): plan_memory.cpp, the bytes per device by category as the
// trainer allocates them; plan_time.cpp, the step time by category (compute
// from the step cost model, the bubble from the simulator, each group's
// collectives over the link its placement gives). Internal to launch/plan.
#pragma once
#include <array>
#include <map>
#include <tuple>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "launch/plan/planner.hpp"

namespace trident::launch {

// A schedule's facts for P stages x V virtual stages x M micro-batches:
// the activation contexts each pipeline rank holds per chunk (as the
// trainer sizes its pool) and the simulated bubble. Memoised per
// (schedule, P, V, M) by the caller that plans many configurations.
struct ScheduleFacts {
  std::vector<std::vector<int>> in_flight;  // [pipeline rank][chunk]
  double bubble = 0;
  // dualpipev: the fewest of any rank's compute passes (forwards and
  // backwards of all its chunks) that run inside a paired step, as a
  // fraction of them; 0 for the other schedules
  double paired = 0;
};
// Where the groups of one kind sit: all inside a node, or across nodes with
// `per_node` members on each (the first group's count; groups are alike).
struct GroupPlacement {
  bool intra = true;
  int per_node = 1;
};
// The tensor, data x context, pipeline, context, expert and expert-data
// groups of a mesh, and HSDP's shard and replica groups (the dense part's,
// the experts').
enum PlacedGroup {
  kTensor,
  kDataContext,
  kPipeline,
  kContext,
  kExpert,
  kExpertData,
  kDataShard,
  kDataReplicate,
  kExpertShard,
  kExpertReplicate
};
using MeshPlacement = std::array<GroupPlacement, 10>;
MeshPlacement place_groups(int D, int T, int P, int CP, int EP, const std::vector<MeshAxis>& order,
                           int devices_per_node, bool whole_experts = false, int data_shard = 0);

// The whole model's parameters, the largest pipeline stage's on one tensor
// rank, and the largest unit ZeRO 3 gathers (a layer or the embeddings).
// largest_experts: the routed experts' part of that stage (all experts; an
// expert rank holds 1 / expert of it).
struct StageSizes {
  int64_t whole = 0, largest_stage = 0, segment = 0, largest_experts = 0;
};
StageSizes stage_sizes(const ModelConfig& m, int T, int P, int V, const std::vector<int64_t>& stage_layers,
                       ScheduleKind schedule);

// What many configurations of one plan share, worked out once each: a
// schedule's facts per (schedule, P, V, M) and a mesh's group placement per
// (D, T, P, C), the stage sizes per (T, P, V, stage layers). Owned by the
// caller, one per recipe and cluster (plan_all keeps one for its run).
class PlanMemo {
 public:
  // InputError when the schedule refuses the shape (its own rules).
  const ScheduleFacts& schedule(ScheduleKind kind, int P, int V, int M);
  const MeshPlacement& placement(int D, int T, int P, int CP, int EP, const std::vector<MeshAxis>& order,
                                 int devices_per_node, bool whole_experts = false, int data_shard = 0);
  const StageSizes& sizes(const ModelConfig& m, int T, int P, int V, const std::vector<int64_t>& stage_layers,
                          ScheduleKind schedule);

 private:
  std::map<std::tuple<int, int, int, int>, ScheduleFacts> schedules_;
  std::map<std::tuple<int, int, int, int, int, std::vector<MeshAxis>, int, bool, int>, MeshPlacement> placements_;
  std::map<std::tuple<int, int, int, std::vector<int64_t>, ScheduleKind>, StageSizes> sizes_;
};

// What the parts share: the recipe on the configuration's mesh and the sizes
// plan_one worked out.
struct PlanContext {
  const Recipe& q;  // the recipe on the configuration's mesh (on_mesh)
  const Cluster& cl;
  const PlanConfig& c;
  int D, T, P, V, CP, DC;  // DC: replicas of a model shard (data x context)
  int EP, EDC;             // the expert group and the expert-data group (replicas of an expert shard: DC / EP)
  int S, R, ES, ER;        // HSDP: the shard groups and their replicas (S x R = DC), the experts' (ES x ER = EDC)
  bool whole_experts;      // expert_tensor 1 < tensor: the expert grid over data x context x tensor
  double pb;               // bytes of a parameter / activation value
  // this rank's parameters of the largest stage: dense (replicated over DC), its experts' (over EDC)
  double dense_params, expert_params;
  const StageSizes& sizes;
  const ScheduleFacts& schedule;
  const MeshPlacement& where;
};

// dualpipev's paired passes overlap the expert exchanges of this configuration
// (as launch/train/step.cpp decides for the trainer)
bool pairs_overlap(const PlanContext& x);

void plan_memory(const PlanContext& x, PlanResult& r);
void plan_time(const PlanContext& x, PlanResult& r);

}  // namespace trident::launch
