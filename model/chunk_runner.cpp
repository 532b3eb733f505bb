// The executor's hooks over the model's chunks (see chunk_runner.hpp).
#include "model/chunk_runner.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "parallel/paired_passes.hpp"

namespace trident::model {

bool runs_paired_passes(const Recipe& rc) {
  return rc.parallel.overlap_paired && rc.parallel.schedule == ScheduleKind::dualpipev && rc.model.moe.enabled &&
         rc.parallel.expert > 1;
}

ChunkRunner::ChunkRunner(Transformer<float>& net, const std::vector<parallel::Action>& actions, int64_t micro_batch,
                         int64_t micro_batches, Recompute recompute, bool split_backward, bool pair_passes)
    : net_(net), recompute_(recompute), pair_passes_(pair_passes) {
  const int chunks = net.num_chunks();
  const std::vector<int> in_flight = parallel::in_flight_per_chunk(actions, chunks);
  contexts_.resize(size_t(chunks));
  for (int c = 0; c < chunks; ++c)
    for (int i = 0; i < std::max(in_flight[size_t(c)], 1); ++i)
      contexts_[size_t(c)].push_back(net.make_activations(micro_batch, recompute, c, split_backward));
  free_.resize(size_t(chunks));
  slot_of_.assign(size_t(chunks), std::vector<int>(size_t(micro_batches), -1));
  input_grads_.assign(size_t(chunks), std::vector<const float*>(size_t(micro_batches), nullptr));
  input_started_.assign(size_t(chunks), 0), weight_started_.assign(size_t(chunks), 0);
}

ChunkRunner::~ChunkRunner() = default;

parallel::PipelineHooks ChunkRunner::hooks(const std::vector<MicroBatchInputs>& inputs, parallel::DataParallelParts* dp,
                                           float dscale) {
  for (size_t c = 0; c < contexts_.size(); ++c) {
    free_[c].clear();
    for (int i = int(contexts_[c].size()) - 1; i >= 0; --i) free_[c].push_back(i);
    input_started_[c] = weight_started_[c] = 0;
  }
  loss_sum_ = 0;
  const bool forward_only = dp == nullptr;
  parallel::PipelineHooks h;
  h.forward = [this, &inputs, dscale, forward_only](int c, int micro, const float* input) {
    int slot = 0;  // forward only: each micro-batch's forward finishes before the next
    if (!forward_only) {
      auto& fs = free_[size_t(c)];
      TRIDENT_CHECK(!fs.empty(), "no free activation context for chunk {}", c);
      slot = fs.back();
      fs.pop_back();
    }
    slot_of_[size_t(c)][size_t(micro)] = slot;
    const auto& spec = net_.chunk(c);
    const MicroBatchInputs& in = inputs[size_t(micro)];
    Activations<float>& ctx = *contexts_[size_t(c)][size_t(slot)];
    ctx.workspace = &workspaces_[0];
    ctx.doc_start = in.doc_start;
    ctx.position_origin = in.origin;
    loss_sum_ +=
        net_.forward_chunk(ctx, spec.embedding ? in.tokens : nullptr, input, spec.head ? in.targets : nullptr, dscale);
  };
  h.output = [this](int c, int micro) {
    return contexts_[size_t(c)][size_t(slot_of_[size_t(c)][size_t(micro)])]->x_final;
  };
  h.input_grad = [this](int c, int micro) { return input_grads_[size_t(c)][size_t(micro)]; };
  h.backward = [this, dp](int c, int micro, const float* d_out, parallel::ActionType type) {
    backward(dp, c, micro, d_out, type, workspaces_[0]);
  };
  if (pair_passes_ && !forward_only)
    h.paired = [this, forward = h.forward, dp](const parallel::Action& f, const float* input, const parallel::Action& b,
                                               const float* d_out) {
      // the backward's workspace is its own: the passes share no scratch; dualpipev pairs the V's two arms,
      // whose recomputation buffers are their chunks' own (ActivationPool's shared sets)
      TRIDENT_CHECK(f.chunk != b.chunk, "paired passes of one chunk (micro-batches {} and {} of chunk {})", f.micro,
                    b.micro, f.chunk);
      parallel::run_paired([&] { forward(f.chunk, f.micro, input); },
                           [&] { backward(dp, b.chunk, b.micro, d_out, b.type, workspaces_[1]); });
    };
  return h;
}

void ChunkRunner::backward(parallel::DataParallelParts* dp, int c, int micro, const float* d_out,
                           parallel::ActionType type, Workspace<float>& workspace) {
  TRIDENT_CHECK(dp, "a backward in a forward-only run");
  const int slot = slot_of_[size_t(c)][size_t(micro)];
  const bool weight = type == parallel::ActionType::backward_weight;
  char& started = weight ? weight_started_[size_t(c)] : input_started_[size_t(c)];
  const bool accumulate = started != 0;  // the step's first backward of a chunk overwrites
  started = 1;
  if (type == parallel::ActionType::backward) {  // both parts' gradients (dualpipev mixes whole and split)
    TRIDENT_CHECK(input_started_[size_t(c)] == weight_started_[size_t(c)] || !accumulate,
                  "a whole backward of chunk {} while the step's first weight pass is pending", c);
    weight_started_[size_t(c)] = 1;
  }
  const BackwardPart part = type == parallel::ActionType::backward ? BackwardPart::all
                            : weight                               ? BackwardPart::weight
                                                                   : BackwardPart::input;
  const auto on_ready = dp->begin_backward(micro);
  Activations<float>& ctx = *contexts_[size_t(c)][size_t(slot)];
  ctx.workspace = &workspace;
  net_.backward_chunk(ctx, d_out, recompute_, accumulate, part, on_ready);
  if (type != parallel::ActionType::backward_weight) input_grads_[size_t(c)][size_t(micro)] = net_.input_grad(ctx);
  if (type != parallel::ActionType::backward_input) free_[size_t(c)].push_back(slot);
}

}  // namespace trident::model
