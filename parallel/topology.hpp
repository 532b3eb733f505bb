// Topology: rank <-> (data, context, pipeline, tensor) coordinates of the
// device mesh and the members of every process group. Pure arithmetic: no
// MPI here (the communicators are built from these member lists in
// parallel/mpi).
//
// The mesh is data x context x pipeline x tensor = world. `order` lists the
// axes from innermost (adjacent ranks) to outermost; the default
// [tensor, context, data, pipeline] gives rank = tp + T * (cp + C * (dp + D
// * pp)), so a tensor group is a run of adjacent ranks (one node) and the
// context ranks, which exchange keys and values every layer, come next. An
// order that does not name `context` gets it just inside `data` (a 3-axis
// order of a recipe written before the axis existed).
// Groups: tensor (same dp, cp, pp), context (same dp, pp, tp), pipeline
// (same dp, cp, tp), data (same cp, pp, tp), data_context (same pp, tp: the
// replicas of a model shard, over which gradients are reduced and ZeRO
// shards), model_parallel (same dp, cp: tensor x pipeline), embedding (first
// and last pipeline stage of each (dp, cp, tp) slice; one member when
// pipeline = 1; a middle stage's group is itself alone).
// The expert grid is folded over the same ranks (Megatron-Core's folding):
// each data_context group, its members in ascending rank, is cut into runs
// of `expert` ranks (with expert_tensor 1 < tensor, whole experts: the ranks
// of each pipeline stage, data x context x tensor, are cut instead, so the
// tensor ranks of a run hold different experts). expert: this rank's run (the ranks that exchange
// tokens, each holding experts / expert of a layer's experts; adjacent ranks
// under the default order); expert_data: the members at this rank's place
// in every run (the replicas of its experts, over which their gradients are
// reduced). expert = 1: each rank alone, and expert_data = data_context.
// HSDP (data_shard S < data x context): each data_context group, members in
// ascending rank, is cut into runs of S consecutive members: data_shard is
// this rank's run (ZeRO shards, reduce-scatters and gathers inside it),
// data_replicate the members at this rank's place in every run (R = data x
// context / S of them: the replicas of its shard, all-reduced). The expert
// part splits its expert_data group (E_d members, ascending) the same way
// into R_e = gcd(R, E_d) replicas of E_d / R_e consecutive members:
// expert_shard and expert_replicate (R_e = R whenever R divides E_d, as in
// Megatron-Core's distributed-optimizer instances). Without HSDP, data_shard
// = data_context, expert_shard = expert_data and the replicate groups are
// each rank alone.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "core/enums.hpp"

namespace trident::parallel {

using Dim = MeshAxis;  // core/enums.hpp
enum class GroupKind {
  tensor,
  pipeline,
  data,
  model_parallel,
  embedding,
  context,
  data_context,
  expert,
  expert_data,
  data_shard,
  data_replicate,
  expert_shard,
  expert_replicate
};
inline constexpr std::array<GroupKind, 13> kAllGroupKinds = {
    GroupKind::tensor,          GroupKind::pipeline,   GroupKind::data,           GroupKind::model_parallel,
    GroupKind::embedding,       GroupKind::context,    GroupKind::data_context,   GroupKind::expert,
    GroupKind::expert_data,     GroupKind::data_shard, GroupKind::data_replicate, GroupKind::expert_shard,
    GroupKind::expert_replicate};

struct Coords {
  int dp = 0, pp = 0, tp = 0, cp = 0;
  int& at(Dim d) { return d == Dim::data ? dp : d == Dim::pipeline ? pp : d == Dim::tensor ? tp : cp; }
  int at(Dim d) const { return const_cast<Coords*>(this)->at(d); }
  bool operator==(const Coords&) const = default;
};

class Topology {
 public:
  // Sizes must be >= 1 and order a permutation of the axes (context may be
  // left out); the recipe loader validates both with messages, here it is a
  // check.
  // expert must divide data x context (the recipe loader says so with the
  // arithmetic); with whole_experts (expert_tensor 1 < tensor) it is carved
  // out of data x context x tensor instead and must divide that.
  // data_shard: the HSDP shard group's size, dividing data x context (0: all of it).
  Topology(int data, int pipeline, int tensor, const std::vector<MeshAxis>& order, int context = 1, int expert = 1,
           bool whole_experts = false, int data_shard = 0);

  int world() const { return size(Dim::data) * size(Dim::context) * size(Dim::pipeline) * size(Dim::tensor); }
  int size(Dim d) const { return size_[size_t(d)]; }
  int expert() const { return expert_; }
  int data_shard() const { return shard_; }  // the ZeRO shard group's size (HSDP), data x context without it
  int data_replicate() const { return size(Dim::data) * size(Dim::context) / shard_; }
  // expert_tensor 1 < tensor: each expert whole on one rank, the expert grid
  // over data x context x tensor (the tensor ranks hold different experts).
  bool whole_experts() const { return whole_; }
  Coords coords(int rank) const;
  int rank_of(const Coords& c) const;
  // Members (ascending ranks) of `rank`'s group of this kind.
  std::vector<int> members(GroupKind kind, int rank) const;
  // Every group of this kind, each once, ordered by its smallest rank.
  std::vector<std::vector<int>> groups(GroupKind kind) const;
  // The layout table `trident topology` prints (context columns when context > 1).
  std::string describe(int ranks_per_node) const;

 private:
  std::array<int, 4> size_{};  // by Dim
  std::array<Dim, 4> order_;   // innermost first
  int expert_ = 1;
  bool whole_ = false;
  int shard_ = 1;
  // rank's place in the ranks the expert grid is folded over (its
  // data_context group; with whole experts, its pipeline stage) and those ranks
  std::pair<int, std::vector<int>> replica_place(int rank) const;
  // HSDP: the expert_shard group's size for an expert_data group of this many members
  int expert_shard_size(int expert_data) const;
};

// A recipe's order with `context` inserted just inside `data` when it is not named.
std::vector<MeshAxis> full_order(const std::vector<MeshAxis>& order);

}  // namespace trident::parallel

namespace trident {
TRIDENT_ENUM_NAMES(parallel::GroupKind, {parallel::GroupKind::tensor, "tensor"},
                   {parallel::GroupKind::pipeline, "pipeline"}, {parallel::GroupKind::data, "data"},
                   {parallel::GroupKind::model_parallel, "model_parallel"},
                   {parallel::GroupKind::embedding, "embedding"}, {parallel::GroupKind::context, "context"},
                   {parallel::GroupKind::data_context, "data_context"}, {parallel::GroupKind::expert, "expert"},
                   {parallel::GroupKind::expert_data, "expert_data"}, {parallel::GroupKind::data_shard, "data_shard"},
                   {parallel::GroupKind::data_replicate, "data_replicate"},
                   {parallel::GroupKind::expert_shard, "expert_shard"},
                   {parallel::GroupKind::expert_replicate, "expert_replicate"});
}  // namespace trident
