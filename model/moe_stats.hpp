// An MoE model's statistics of a training step, gathered over the mesh: the
// tokens routed to each expert of every MoE layer, the load of each expert
// rank, the correction bias's range and the balancing losses. The model
// counts its routes (Transformer::moe_step); this turns one rank's counts
// into the step's, for the metrics (docs/metrics.md, `expert_load`).
#pragma once
#include <cstdint>
#include <vector>

#include "model/transformer.hpp"
#include "parallel/communicator.hpp"

namespace trident::model {

// Every MoE layer of the model in order: its global index, its routed
// tokens (batch x seq x top_k) and those of its least- and most-loaded
// expert, `imbalance` (max over the mean), the correction bias's range (NaN:
// none, or sharded by ZeRO 3), the tokens of each expert ([layers x E]) and,
// with experts split, of each expert rank ([layers x expert]); the
// balancing losses, each the mean over the step's micro-batches of their sum
// over the layers (coefficients applied).
struct MoeLoad {
  std::vector<int64_t> layers;
  std::vector<double> min, max, imbalance, tokens;
  std::vector<double> bias_min, bias_max;
  std::vector<double> counts;
  std::vector<double> rank_tokens;
  int64_t expert_ranks = 1;
  double aux_loss = 0, z_loss = 0;
};

// The step's statistics from this rank's (collective over the pipeline,
// data and context groups, and with whole experts the tensor group; every
// rank gets them): counts summed over the data and context groups (the
// tensor group's ranks route the same rows), layers gathered from the
// pipeline stages. `micro_batches`: the step's over every data rank.
MoeLoad gather_moe_load(Transformer<float>& net, parallel::Communicator* pipeline, parallel::Communicator* data,
                        parallel::Communicator* context, double micro_batches);

}  // namespace trident::model
