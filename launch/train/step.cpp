// One step's batch, schedule and evaluation on this rank (see step.hpp).
#include "launch/train/step.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "kernels/buffer.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::launch {

StepShape step_shape(const Recipe& rc, int stage_rank, int data_rank) {
  StepShape s;
  s.micro_batch = rc.train.micro_batch, s.seq_len = rc.model.seq_len;
  s.micro_batches = rc.micro_batches_per_step(rc.parallel.data), s.global_batch = rc.train.global_batch;
  s.stages = int(rc.parallel.pipeline), s.virtual_stages = int(rc.parallel.virtual_stages);
  s.stage_rank = stage_rank, s.data_rank = data_rank;
  s.schedule = rc.parallel.schedule, s.recompute = rc.train.recompute, s.timeout_s = rc.parallel.timeout_s;
  s.document_mask = rc.data.document_mask, s.mask_eod_loss = rc.data.mask_eod_loss;
  s.pair_passes = model::runs_paired_passes(rc);
  return s;  // eod: set by the trainer from the datasets' records
}

StepRunner::StepRunner(model::Transformer<float>& net, parallel::DataParallelParts& dp,
                       parallel::Communicator* pipeline, parallel::Communicator* data, parallel::Communicator* context,
                       const trident::data::TokenSampler& sampler, const StepShape& shape)
    : net_(net), dp_(dp), pipeline_(pipeline), data_(data), context_(context), sampler_(sampler), shape_(shape) {
  const int64_t B = shape.micro_batch, M = shape.micro_batches;
  actions_ = parallel::make_schedule(shape.schedule, shape.stages, shape.virtual_stages, int(M), shape.stage_rank);
  const int64_t rows = net.tensor_parallel().rows(B * net.seq());  // net.seq(): this rank's rows
  executor_ = std::make_unique<parallel::PipelineExecutor>(pipeline, shape.schedule, shape.stages, shape.virtual_stages,
                                                           rows * net.config().hidden, shape.timeout_s,
                                                           /*lookahead=*/2, net.device());
  runner_ = std::make_unique<model::ChunkRunner>(net, actions_, B, M, shape.recompute, shape.split_backward(),
                                                 shape.pair_passes);
  for (int c = 0; c < net.num_chunks(); ++c)
    reads_tokens_ |= net.chunk(c).embedding, reads_targets_ |= net.chunk(c).head;
  // with document masking every stage's attention needs the boundaries: every rank reads the batch
  spec_ = {.micro_batch = B,
           .seq_len = shape.seq_len,
           .eod = shape.eod,
           .document_mask = shape.document_mask,
           .mask_eod_loss = shape.mask_eod_loss && reads_targets_,
           .read = reads_tokens_ || reads_targets_ || shape.document_mask};
  on_device_ = net.device().type == DeviceType::cuda;
  batches_.resize(size_t(M)), device_.resize(size_t(M)), inputs_.resize(size_t(M));
}

StepRunner::~StepRunner() = default;

void StepRunner::load(int64_t micro, uint64_t first_index, bool valid) {
  Batch& b = batches_[size_t(micro)];
  b = read_batch(sampler_, spec_, first_index, valid, valid_source_);
  net_.context_parallel().shard(b);  // this rank's rows of each sequence, their position origins
  model::MicroBatchInputs& in = inputs_[size_t(micro)];
  auto place = [&](const std::vector<int32_t>& host, size_t i) -> const int32_t* {
    if (host.empty()) return nullptr;
    if (!on_device_) return host.data();
    std::vector<Tensor>& dev = device_[size_t(micro)];
    if (dev.size() <= i) dev.resize(i + 1);
    if (!dev[i].defined() || dev[i].numel() != int64_t(host.size()))
      dev[i] = Tensor::empty({int64_t(host.size())}, DType::i32, MemCategory::other, net_.device());
    // queued on the compute stream, before the kernels that read it
    kernels::copy(dev[i].data<int32_t>(), host.data(), int64_t(host.size()));
    return dev[i].data<int32_t>();
  };
  // device copies of what this rank's chunks read only (a middle stage reads the batch for its documents alone)
  in.tokens = reads_tokens_ ? place(b.tokens, 0) : nullptr;
  in.targets = reads_targets_ ? place(b.targets, 1) : nullptr;
  in.doc_start = place(b.doc_start, 2);
  in.origin = b.origin.empty() ? nullptr : b.origin.data();  // read on the host (positions, rotary tables)
}

void StepRunner::load_batch(int64_t step) {
  // samples [data_rank * rank_batch, ...) of the step's global batch
  const int64_t rank_batch = shape_.micro_batches * shape_.micro_batch;
  for (int64_t micro = 0; micro < shape_.micro_batches; ++micro)
    load(micro, uint64_t(step * shape_.global_batch + shape_.data_rank * rank_batch + micro * shape_.micro_batch),
         false);
  loss_tokens_ = double(shape_.global_batch * shape_.seq_len);
  if (shape_.mask_eod_loss)  // the targets that count, over the whole global batch (the head stage's ranks)
    loss_tokens_ = parallel::sum_over(
        pipeline_, parallel::sum_over(data_, parallel::sum_over(context_, counted_targets(shape_.micro_batches))));
}

double StepRunner::counted_targets(int64_t micro_batches) const {
  if (!reads_targets_) return 0;
  int64_t n = 0;
  for (int64_t m = 0; m < micro_batches; ++m)
    for (int32_t t : batches_[size_t(m)].targets) n += t >= 0;
  return double(n);
}

double StepRunner::forward_backward(double loss_scale) {
  const float dscale = float(loss_scale / std::max(loss_tokens_, 1.0));  // of the mean loss over the counted targets
  net_.reset_moe_step();
  executor_->run(actions_, runner_->hooks(inputs_, &dp_, dscale));
  net_.end_fp8_step(data_);
  return runner_->loss_sum();
}

model::MoeLoad StepRunner::moe_load() const {
  return model::gather_moe_load(net_, pipeline_, data_, context_,
                                double(shape_.micro_batches) * double(data_ ? data_->size() : 1));
}

std::vector<double> StepRunner::mtp_loss() const {
  const int64_t depth = net_.config().mtp.depth;
  std::vector<double> sums(size_t(depth), 0.0);
  const auto& mine = net_.mtp_losses();  // the head stage's; empty elsewhere
  for (size_t k = 0; k < std::min(sums.size(), mine.size()); ++k) sums[k] = mine[k];
  sums = parallel::sum_over(pipeline_, parallel::sum_over(data_, sums));
  for (int64_t k = 1; k <= depth; ++k) sums[size_t(k - 1)] /= double(shape_.global_batch) * double(shape_.seq_len - k);
  return sums;
}

Fp8StepStats StepRunner::fp8_stats() const {
  const int64_t L = net_.config().layers + net_.config().mtp.depth;
  std::vector<double> amax(size_t(L), 0.0), scale(size_t(L), 0.0), saturated(size_t(L), 0.0);
  if (const model::Fp8Linears* f = net_.fp8())
    for (int l = 0; l < net_.local_layers(); ++l) {  // each layer on one stage: the others hold zeros
      const model::Fp8LayerStats& s = f->stats()[size_t(l)];
      const auto g = size_t(net_.global_layer(l));
      amax[g] = s.amax, scale[g] = s.scale, saturated[g] = double(s.saturated);
    }
  Fp8StepStats out{parallel::max_over(pipeline_, amax), parallel::max_over(pipeline_, scale), {}};
  for (double n : parallel::max_over(pipeline_, saturated)) out.saturated.push_back(int64_t(n));
  return out;
}

double StepRunner::evaluate(int64_t batches) {
  if (batches == 0 || !sampler_.has_valid()) return double(NAN);
  const int64_t M = shape_.micro_batches, B = shape_.micro_batch;
  double sum = 0, counted = 0;
  for (int64_t i = 0; i < batches; i += M) {
    const int64_t n = std::min(M, batches - i);
    for (int64_t mb = 0; mb < n; ++mb) load(mb, uint64_t((i + mb) * B), true);
    executor_->run(parallel::make_forward_schedule(shape_.schedule, shape_.stages, shape_.virtual_stages, int(n),
                                                   shape_.stage_rank),
                   runner_->hooks(inputs_, nullptr, 0));
    sum += runner_->loss_sum();
    counted += shape_.mask_eod_loss ? counted_targets(n) : double(n * B * shape_.seq_len);
  }
  // the head stage's loss sums, each context rank's over its rows
  sum = parallel::sum_over(pipeline_, parallel::sum_over(context_, sum));
  if (shape_.mask_eod_loss)
    return sum / std::max(parallel::sum_over(pipeline_, parallel::sum_over(context_, counted)), 1.0);
  return sum / counted;
}

std::vector<double> StepRunner::evaluate_sources(int64_t batches) {
  std::vector<double> out;
  const size_t n = sampler_.valid_sources().size();
  if (n < 2 || batches == 0) return out;
  for (size_t i = 0; i < n; ++i) {
    valid_source_ = int(i);
    out.push_back(evaluate(batches));
  }
  valid_source_ = -1;
  return out;
}

}  // namespace trident::launch
