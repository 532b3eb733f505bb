// The model's side of the pipeline executor: the hooks that bind the
// executor's actions (parallel/pipeline.hpp) to this rank's chunks'
// forward_chunk / backward_chunk, and the activation contexts they run in.
// Each chunk has as many contexts as the schedule holds micro-batches in
// flight on it; a context is taken at a forward and given back after the
// backward (with a split backward, after the weight pass). The data-parallel
// state observes the backward: begin_backward(micro) before each, its
// frontier callback as the layers finish (parallel/data_parallel.hpp).
// What is not here: the batch (core/data), the schedule (parallel/schedule),
// the optimizer.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "model/transformer.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/schedule.hpp"

namespace trident::model {

// One micro-batch's inputs where the model runs (device pointers on cuda);
// null where this rank reads none.
struct MicroBatchInputs {
  const int32_t* tokens = nullptr;     // [B,T], the chunk with the embedding
  const int32_t* targets = nullptr;    // [B,T], the chunk with the head
  const int32_t* doc_start = nullptr;  // [B,T], document masking
  const int32_t* origin = nullptr;     // [B,T], context parallelism
};

// Whether this run's dualpipev pairs run as paired passes: with MoE layers
// whose experts are split (parallel.expert > 1) and parallel.overlap_paired
// (docs/parallelism.md#dualpipev). Every ZeRO stage and both recompute
// modes dualpipev takes (none, selective) take them: each pass has its own
// workspace, gathers its own segments (ZeRO 3 counts a segment's users) and
// rebuilds its attention state in its own chunk's buffers.
bool runs_paired_passes(const Recipe& rc);

class ChunkRunner {
 public:
  // The contexts for `actions` (this rank's schedule of `micro_batches`).
  // The model's precision and context parallelism must be set before
  // (contexts decide their packing and rows when they are made).
  // pair_passes: dualpipev's paired forward and backward run as paired
  // passes (PipelineHooks::paired; the model's expert exchanges overlap the
  // other pass's compute), the backward in a workspace of its own.
  ChunkRunner(Transformer<float>& net, const std::vector<parallel::Action>& actions, int64_t micro_batch,
              int64_t micro_batches, Recompute recompute, bool split_backward, bool pair_passes = false);
  ~ChunkRunner();

  // Hooks for one run of the executor over `inputs` (one per micro-batch,
  // kept alive by the caller). dp: the gradients' observer; dscale:
  // dloss/dlogit of the (scaled) mean loss; dp null and dscale 0: forward
  // only (evaluation: one context per chunk, each forward finishes before
  // the next).
  parallel::PipelineHooks hooks(const std::vector<MicroBatchInputs>& inputs, parallel::DataParallelParts* dp,
                                float dscale);
  // The sum of the token losses of the last run (the head chunk's; 0 elsewhere).
  double loss_sum() const { return loss_sum_; }

 private:
  Transformer<float>& net_;
  Recompute recompute_;
  bool pair_passes_;
  // The passes' workspaces (model/workspace.hpp): [0] every pass's but a
  // pair's backward, [1] a pair's backward (sized at its first use).
  Workspace<float> workspaces_[2];
  // [chunk][micro]: the last backward's input gradient (in its workspace)
  std::vector<std::vector<const float*>> input_grads_;
  // one backward (a hook's), in the given workspace
  void backward(parallel::DataParallelParts* dp, int c, int micro, const float* d_out, parallel::ActionType type,
                Workspace<float>& workspace);
  // per chunk: its contexts, which are free, which micro-batch holds which
  std::vector<std::vector<std::unique_ptr<Activations<float>>>> contexts_;
  std::vector<std::vector<int>> free_, slot_of_;
  std::vector<char> input_started_, weight_started_;
  double loss_sum_ = 0;
};

}  // namespace trident::model
