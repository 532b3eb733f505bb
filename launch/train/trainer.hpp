// The trainer: one loop that reads top to bottom (docs/architecture.md,
// "one training step"). train() builds the run — process groups, model
// chunks, data parallelism, optimizer, data, schedule — and then, each step:
// load the batch, run the schedule (forward and backward of every
// micro-batch), finish the data-parallel gradients, clip, optimizer step,
// report, checkpoint, evaluate. Every piece lives in the folder that owns it;
// this file only calls them in order.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"

namespace trident::parallel {
class Mesh;
class DataParallelParts;
}  // namespace trident::parallel
namespace trident::model {
class ParamRegistry;
}  // namespace trident::model

namespace trident::launch {

struct TrainSummary {
  std::vector<double> losses;  // per step
  std::vector<double> grad_norms;
  std::vector<double> loss_scales;   // the scale each step ran at (1 unless fp16)
  std::vector<bool> skipped;         // fp16: steps skipped for inf/NaN gradients
  std::vector<double> step_seconds;  // per step, wall time
  double final_val_loss = 0;
  double entropy_floor = 0;  // synthetic source only, else 0
  double tokens_per_s = 0;   // mean over steps after the first
  double mfu = 0;
  double comm_wait_s = 0;                    // total time blocked on data-parallel communication
  std::vector<std::vector<double>> bubbles;  // per step: measured bubble fraction of each pipeline stage
  double predicted_bubble = 0;               // the simulator's, unit costs
  int stopped_by_signal = 0;                 // SIGTERM / SIGUSR1 stopped the run early (after saving)
  // MoE models, per step: the tokens routed to each expert of each MoE layer
  // (layers in order, E each), over every rank
  std::vector<std::vector<double>> expert_tokens;
  // QK-clip (optim.muon.qk_clip), per step: the heads it scaled, and how near
  // a head's largest logit came to the threshold (min |S_h / tau - 1|)
  std::vector<int64_t> qk_clipped;
  // train.fp8, per step: the values clamped at FP8's largest (all layers),
  // and each layer's smallest scale (launch/train/run_report.hpp's Fp8StepStats)
  std::vector<int64_t> fp8_saturated;
  std::vector<std::vector<double>> fp8_scale;
  std::vector<double> qk_margin;
  int64_t peak_params = 0, peak_grads = 0, peak_optimizer = 0;  // this rank's allocator peaks
  int64_t peak_activations = 0, peak_comm = 0, peak_other = 0, peak_total = 0;
};

// A step's reduced gradients, seen before the optimizer uses them (the
// equivalence tests consolidate step 1's).
struct StepGradients {
  int64_t step;  // 0-based
  const Recipe& recipe;
  parallel::Mesh& mesh;
  const model::ParamRegistry& registry;
  parallel::DataParallelParts& data_parallel;
  // Collective over the world: the whole model's reduced gradient in the
  // Hugging Face layout (model::consolidate), the same on every rank.
  std::vector<float> consolidated() const;
};

struct TrainOptions {
  bool quiet = false;           // no per-step stdout lines (tests)
  bool single_process = false;  // ignore MPI even when initialised (reference runs in tests)
  std::string resume;           // "", "auto" or a checkpoint directory (trident train --resume)
  std::function<void(const StepGradients&)> on_gradients = {};  // called every step when set
  // called every step after the update reached every replica (the parameter shards are the new ones)
  std::function<void(const StepGradients&)> on_updated = {};
};

TrainSummary train(const Recipe& recipe, const TrainOptions& opts = {});

}  // namespace trident::launch
