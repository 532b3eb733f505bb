// One training step on this rank, below the loop, and the evaluation pass.
// Every call goes down: the step's batch is read (core/data/batch.hpp),
// sharded over the context group (ContextParallel::shard), copied to the
// device, and the executor (parallel/pipeline.hpp) runs the schedule's
// actions through the model's chunk runner (model/chunk_runner.hpp), which
// calls the layers and tells the data-parallel state as gradients finish.
// What is not here: the gradient reduction (parallel/data_parallel.hpp), the
// optimizer, reporting.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/batch.hpp"
#include "core/data/batch.hpp"
#include "core/data/dataset.hpp"
#include "core/recipe/recipe.hpp"
#include "launch/train/run_report.hpp"
#include "model/chunk_runner.hpp"
#include "model/moe_stats.hpp"
#include "model/transformer.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/schedule.hpp"

namespace trident::launch {

struct StepShape {
  int64_t micro_batch = 1, seq_len = 1, micro_batches = 1, global_batch = 1;
  int stages = 1, virtual_stages = 1, stage_rank = 0, data_rank = 0;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  Recompute recompute = Recompute::none;
  double timeout_s = 600;
  int32_t eod = -1;            // the datasets' end-of-document token (-1: none)
  bool document_mask = false;  // attention and positions stay inside documents (ending at eod)
  bool mask_eod_loss = false;  // targets equal to eod take no loss
  bool pair_passes = false;    // dualpipev's pairs as paired passes (model::runs_paired_passes)
  bool split_backward() const { return parallel::splits_backward(schedule); }
  // Gradients are final only after the whole schedule: chunks exchange
  // activations, or the backward is split.
  bool pipelined() const { return stages > 1 || virtual_stages > 1 || split_backward(); }
};
StepShape step_shape(const Recipe& rc, int stage_rank, int data_rank);

class StepRunner {
 public:
  // The model's precision and context parallelism must be set before
  // (contexts decide their packing and rows when they are made). pipeline:
  // the pipeline group (nullptr: one stage); data: the data group; context:
  // the context group, whose ranks each hold their rows of every sequence
  // (model/transformer.hpp, parallel/context_parallel.hpp).
  StepRunner(model::Transformer<float>& net, parallel::DataParallelParts& dp, parallel::Communicator* pipeline,
             parallel::Communicator* data, parallel::Communicator* context, const data::TokenSampler& sampler,
             const StepShape& shape);
  ~StepRunner();

  // This data rank's slice of step `step`'s global batch.
  void load_batch(int64_t step);
  // Forward and backward of every micro-batch of the step, in schedule order;
  // the loss gradient is multiplied by loss_scale. Returns the sum of the
  // token losses this rank computed (the last stage's; 0 elsewhere).
  double forward_backward(double loss_scale);
  // An MoE model's statistics of the last forward_backward
  // (model::gather_moe_load: collective, every rank gets them).
  model::MoeLoad moe_load() const;
  // model.mtp: each depth's mean loss over the step's global batch (its
  // T - k positions of each sequence; collective over the pipeline and data
  // groups, every rank gets them).
  std::vector<double> mtp_loss() const;
  // train.fp8: the step's FP8 statistics of every layer of the model (the
  // layers, then multi-token prediction's), over every rank: a collective
  // of the pipeline group (the stage's are reduced already).
  Fp8StepStats fp8_stats() const;
  // Mean validation loss per token over `batches` micro-batches (every
  // stage gets it); NaN without a validation split or with batches = 0.
  double evaluate(int64_t batches);
  // The global number of targets the step's mean loss is over: global_batch
  // x seq_len, less the EOD targets with data.mask_eod_loss.
  double loss_tokens() const { return loss_tokens_; }
  // The same over each validation dataset of a blend alone (empty: one dataset).
  std::vector<double> evaluate_sources(int64_t batches);

  const parallel::PipelineExecutor& executor() const { return *executor_; }
  const std::vector<parallel::Action>& actions() const { return actions_; }

 private:
  // Reads micro-batch `micro` (sampler samples from first_index), shards it
  // and makes its device copies.
  void load(int64_t micro, uint64_t first_index, bool valid);
  double counted_targets(int64_t micro_batches) const;  // this rank's targets that take a loss

  model::Transformer<float>& net_;
  parallel::DataParallelParts& dp_;
  parallel::Communicator* pipeline_;
  parallel::Communicator* data_;
  parallel::Communicator* context_;
  const data::TokenSampler& sampler_;
  StepShape shape_;
  data::BatchSpec spec_;
  std::vector<parallel::Action> actions_;
  std::unique_ptr<parallel::PipelineExecutor> executor_;
  std::unique_ptr<model::ChunkRunner> runner_;
  bool reads_tokens_ = false, reads_targets_ = false, on_device_ = false;
  // per micro-batch of the step: its batch (this rank's rows under context
  // parallelism), the device copies, and what the chunk runner reads
  std::vector<Batch> batches_;
  std::vector<std::vector<Tensor>> device_;
  std::vector<model::MicroBatchInputs> inputs_;
  double loss_tokens_ = 1;  // the step's targets that count in the mean loss (global)
  int valid_source_ = -1;   // evaluation of one dataset of a validation blend
};

}  // namespace trident::launch
