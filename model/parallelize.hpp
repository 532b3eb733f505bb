// The model on this rank's place in the mesh, built in the one documented
// order (torchtitan's parallelize_llama): tensor parallelism (this rank's
// tensor group and its slice of every parameter), context parallelism (this
// rank's rows of each sequence), the pipeline split (this pipeline rank's
// chunks), the model of those chunks with its Placement (the regions,
// device and precision, fixed at construction), data parallelism (ZeRO 0-3
// over data x context; split experts over the expert-data group, a part of
// their own; from stage 2 it owns the parameter and gradient
// storage, bound to the model with set_storage, the one late binding: it is
// made from the model's segments), the initial values (Philox by global
// index: a shard makes only its own elements). The trainer asks for it and
// gets it whole: no setters to call in the right order. What is not here: the optimizer (optim/), the schedule.
#pragma once
#include <memory>

#include "core/recipe/recipe.hpp"
#include "model/transformer.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/expert_parallel.hpp"
#include "parallel/mesh.hpp"
#include "parallel/tensor_parallel.hpp"

namespace trident::model {

struct ParallelModel {
  std::unique_ptr<parallel::TensorParallel> tp;
  std::unique_ptr<parallel::ContextParallel> cp;
  std::unique_ptr<parallel::ExpertParallel> ep;  // parallel.expert > 1 on an MoE model, else none
  std::unique_ptr<Transformer<float>> net;
  std::unique_ptr<parallel::DataParallelParts> dp;
};

ParallelModel parallelize(const Recipe& rc, parallel::Mesh& mesh);

}  // namespace trident::model
