// Topology: rank <-> (data, pipeline, tensor) coordinates of the device mesh
// and the members of every process group. Pure arithmetic: no MPI here (the
// communicators are built from these member lists in parallel/mpi).
//
// The mesh is data x pipeline x tensor = world. `order` lists the dimensions
// from innermost (adjacent ranks) to outermost; the default
// [tensor, data, pipeline] gives rank = tp + T * (dp + D * pp), so a tensor
// group is a run of adjacent ranks (one node).
// Groups: tensor (same dp, pp), pipeline (same dp, tp), data (same pp, tp),
// model_parallel (same dp: tensor x pipeline), embedding (first and last
// pipeline stage of each (dp, tp) slice; one member when pipeline = 1; a
// middle stage's group is itself alone).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "core/enums.hpp"

namespace trident::parallel {

using Dim = MeshAxis;  // core/enums.hpp
enum class GroupKind { tensor, pipeline, data, model_parallel, embedding };
inline constexpr std::array<GroupKind, 5> kAllGroupKinds = {GroupKind::tensor, GroupKind::pipeline, GroupKind::data,
                                                            GroupKind::model_parallel, GroupKind::embedding};
const char* group_name(GroupKind k);

struct Coords {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const Coords&) const = default;
};

class Topology {
 public:
  // Sizes must be >= 1 and order a permutation of data, pipeline, tensor
  // (the recipe loader validates both with messages; here it is a check).
  Topology(int data, int pipeline, int tensor, const std::vector<MeshAxis>& order);

  int world() const { return data_ * pipeline_ * tensor_; }
  int size(Dim d) const;
  Coords coords(int rank) const;
  int rank_of(const Coords& c) const;
  // Members (ascending ranks) of `rank`'s group of this kind.
  std::vector<int> members(GroupKind kind, int rank) const;
  // Every group of this kind, each once, ordered by its smallest rank.
  std::vector<std::vector<int>> groups(GroupKind kind) const;
  // The layout table `trident topology` prints.
  std::string describe(int ranks_per_node) const;

 private:
  int data_, pipeline_, tensor_;
  std::array<Dim, 3> order_;  // innermost first
};

}  // namespace trident::parallel
