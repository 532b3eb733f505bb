// Delayed FP8 scaling's state in a checkpoint (train.fp8.recipe delayed,
// docs/checkpoint.md#fp8-state): every tensor's scale and amax history, by
// the model's layer, linear and operand (any mesh reads it back), in
// fp8_state.json beside the shards; the index records its checksum.
#pragma once
#include <string>
#include <vector>

#include "model/fp8_linear.hpp"
#include "parallel/communicator.hpp"

namespace trident::launch::checkpoint {

using Fp8State = std::vector<model::Fp8Linears::TensorState>;

// Every rank's entries (those of the ranks that hold a stage's state; the
// others pass none), on every rank of the world: a collective.
Fp8State gather_fp8_state(parallel::Communicator* world, const Fp8State& mine);
// The file's text (exact: floats as the shortest decimal that reads back the same bits).
std::string fp8_state_json(const Fp8State& s);
// InputError naming the file and the key on anything malformed.
Fp8State read_fp8_state(const std::string& path);

}  // namespace trident::launch::checkpoint
