// Checkpoints (docs/checkpoint.md): a directory per step under
// checkpoint.dir, one safetensors file per distinct rank state and an
// index.json written last; the directory is renamed into place and the
// `latest` pointer updated only then; checkpoint.keep complete checkpoints
// are kept.
//
// Each writing rank saves its shard [shard_begin, shard_end) of its flat
// buffer: fp32 parameters and AdamW's exp_avg and exp_avg_sq ("params",
// "exp_avg", "exp_avg_sq"). Data-parallel replicas with ZeRO 0 hold the same
// state, so only data rank 0 writes it. The index records the step, the
// consumed samples (the data order and the LR schedule are functions of the
// step), the mesh and model, every file's coordinates, shard, size and
// CRC-32C checksum, and for every parameter the pieces of it each file holds
// (global name, shape, file, offset and slice).
//
// Loading works on any mesh: on the one it was saved under each rank reads
// its own file; on another, each rank maps every element of its new shard
// (by parameter name, global row and column) to the saved piece holding it
// and reads only those ranges. Every file read is checked (size, checksum,
// tensor names and shapes) on every rank before any state changes.
#pragma once
#include <cstdint>
#include <string>

#include "core/recipe.hpp"
#include "model/params.hpp"
#include "parallel/communicator.hpp"

namespace trident::launch {

// What one rank contributes to (or takes from) a checkpoint.
struct RankState {
  const model::ParamRegistry* registry;  // this rank's slices
  int dp = 0, pp = 0, tp = 0;
  int64_t shard_begin = 0, shard_end = 0;  // elements of the flat buffer
  float *params = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;  // shard_end - shard_begin each
};

// Collective over `world` (nullptr: one rank). `steps_done` optimizer steps.
// Returns the checkpoint directory, or "" when a rank could not write its
// file (disk full): then the error is logged, the temporary directory is
// removed, the previous checkpoint and `latest` are untouched, and training
// goes on (the next save tries again).
std::string save_checkpoint(const Recipe& rc, int64_t steps_done, const RankState& s, parallel::Communicator* world);

// "auto": checkpoint.dir/latest, or "" when there is none (start fresh);
// otherwise the given directory (InputError if it is not a checkpoint).
std::string resolve_resume(const Recipe& rc, const std::string& arg);

// Collective. Fills the shard from checkpoint `dir`; returns its step.
int64_t load_checkpoint(const Recipe& rc, const std::string& dir, const RankState& s, parallel::Communicator* world);

}  // namespace trident::launch
