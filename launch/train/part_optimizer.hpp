// The optimizer's side of a training step, one part of the flat buffer at a
// time: AdamW and Muon over a part's shard (Muon's matrices, their owners
// and the collectives that join them: optim/muon.hpp), and QK-clip's
// largest logits over the mesh. The trainer (trainer.cpp) drives them.
#pragma once
#include <cstdint>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "kernels/adamw.hpp"
#include "model/params.hpp"
#include "model/transformer.hpp"
#include "optim/adamw.hpp"
#include "optim/mixed_precision.hpp"
#include "optim/muon.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/mesh.hpp"

namespace trident::launch {

// The optimizer of one part of the flat buffer: AdamW over its shard (with
// Muon: AdamW over what is not a Muon matrix, Muon over the matrices, its
// momentum in AdamW's exp_avg slots and AdamW's second moment packed over
// its own elements), with the fp32 master weights of 16-bit runs. The
// expert part's matrices are sliced over the tensor group unless each
// expert is whole on its rank (expert_tensor 1).
struct PartOptimizer {
  PartOptimizer(const Recipe& rc, const model::ParamRegistry& reg, parallel::DataParallelPart& part,
                parallel::Mesh& mesh);
  void step(double lr, int64_t step, double grad_scale);
  parallel::DataParallelPart& part;
  parallel::Communicator* slices;  // the tensor group the part's matrices are sliced over, or none
  std::vector<kernels::MuonMatrix> matrices;
  optim::AdamW<float> opt;
  optim::Muon<float> muon;
  optim::MasterWeights master;
};

// QK-clip (optim.muon.qk_clip): every layer's heads' largest logit of the
// step, [layers + mtp depth, heads], the max over every rank (each holds
// its pipeline stage's layers and its tensor rank's heads, -inf elsewhere).
std::vector<double> step_max_logits(const model::Transformer<float>& net, parallel::Mesh& mesh);
// How near a head's largest logit came to the threshold: min |S_h / tau - 1|
// (the clip's decision, which rounding could flip within about 1e-6 of it).
double qk_margin(const std::vector<double>& max_logit, double threshold);
// Each layer's largest logit (over its heads), for the metrics.
std::vector<double> layer_max(const std::vector<double>& max_logit, int64_t heads);

}  // namespace trident::launch
