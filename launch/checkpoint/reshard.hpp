// Loading a checkpoint onto another mesh: for every element of this rank's
// new shard, the saved piece holding the same global element (by parameter
// name, global row and column; no Philox needed), as a list of range reads
// from the saved files. Replicated parameters saved by several ranks are
// read once; vocabulary padding, which nothing saved, is zero.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launch/checkpoint/checkpoint.hpp"
#include "launch/checkpoint/index.hpp"

namespace trident::launch::checkpoint {

// One read: `count` elements at element `src` of a file's flat tensors into
// element `dst` of this rank's shard.
struct Copy {
  std::string file;
  int64_t src, dst, count;
};

struct ReshardPlan {
  std::vector<std::string> files;  // files read (checked first)
  std::vector<Copy> copies;
  std::vector<std::pair<int64_t, int64_t>> zeros;  // shard ranges with no saved values: vocabulary padding
};

// InputError naming the index when the checkpoint lacks a parameter or
// elements of it.
ReshardPlan plan_reshard(const CheckpointIndex& index, const std::string& index_path, const RankState& s);
// The reads, into s.params (and the moments when s has them).
void run_reshard(const ReshardPlan& plan, const std::string& dir, const RankState& s);

}  // namespace trident::launch::checkpoint
