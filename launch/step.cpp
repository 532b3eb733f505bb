// One step's batch, schedule and evaluation on this rank (see step.hpp).
#include "launch/step.hpp"

#include <cmath>

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
  return s;  // eod: set by the trainer from the datasets' records
}

StepRunner::StepRunner(model::Transformer<float>& net, parallel::DataParallel& dp, parallel::Communicator* pipeline,
                       parallel::Communicator* data, parallel::Communicator* context, const TokenSampler& sampler,
                       const StepShape& shape)
    : net_(net), dp_(dp), pipeline_(pipeline), data_(data), context_(context), sampler_(sampler), shape_(shape) {
  const int64_t B = shape.micro_batch, T = net.seq(), M = shape.micro_batches;  // T: this rank's rows
  const int chunks = net.num_chunks();
  actions_ = parallel::make_schedule(shape.schedule, shape.stages, shape.virtual_stages, int(M), shape.stage_rank);
  const int64_t rows = net.tensor_parallel().rows(B * T);
  executor_ = std::make_unique<parallel::PipelineExecutor>(pipeline, shape.stages, shape.virtual_stages,
                                                           rows * net.config().hidden, shape.timeout_s,
                                                           /*lookahead=*/2, net.device());
  const std::vector<int> in_flight = parallel::in_flight_per_chunk(actions_, chunks);
  contexts_.resize(size_t(chunks));
  for (int c = 0; c < chunks; ++c) {
    for (int i = 0; i < std::max(in_flight[size_t(c)], 1); ++i)
      contexts_[size_t(c)].push_back(net.make_activations(B, shape.recompute, c, shape.split_backward()));
    reads_tokens_ |= net.chunk(c).embedding, reads_targets_ |= net.chunk(c).head;
  }
  free_.resize(size_t(chunks));
  slot_of_.assign(size_t(chunks), std::vector<int>(size_t(M), -1));
  input_started_.assign(size_t(chunks), 0), weight_started_.assign(size_t(chunks), 0);
  tokens_.assign(size_t(M), std::vector<int32_t>(size_t(B * T)));
  targets_ = tokens_;
  on_device_ = net.device().type == DeviceType::cuda;
  if (on_device_ && (reads_tokens_ || reads_targets_))
    for (int64_t i = 0; i < M; ++i) {
      tokens_dev_.push_back(Tensor::empty({B * T}, DType::i32, MemCategory::other, net.device()));
      targets_dev_.push_back(Tensor::empty({B * T}, DType::i32, MemCategory::other, net.device()));
    }
  if (net.context_parallel().size() > 1)  // positions shifted to the rows' global places, on every stage
    origin_.assign(size_t(M), std::vector<int32_t>(size_t(B * T)));
  if (shape.document_mask) {  // every stage's attention needs the boundaries: every rank reads the batch
    reads_tokens_ = true;
    doc_start_.assign(size_t(M), std::vector<int32_t>(size_t(B * T)));
    if (on_device_)
      for (int64_t i = 0; i < M; ++i)
        doc_start_dev_.push_back(Tensor::empty({B * T}, DType::i32, MemCategory::other, net.device()));
  }
}

StepRunner::~StepRunner() = default;

void StepRunner::load(int64_t micro, uint64_t first_index, bool valid) {
  const parallel::ContextParallel& cp = net_.context_parallel();
  if (!origin_.empty()) {  // without documents: the global position of every local row
    auto& o = origin_[size_t(micro)];
    const int64_t Tl = cp.local_len();
    for (int64_t b = 0; b < shape_.micro_batch; ++b)
      for (int64_t t = 0; t < Tl; ++t) o[size_t(b * Tl + t)] = int32_t(t - cp.positions()[size_t(t)]);
  }
  if (!reads_tokens_ && !reads_targets_) return;
  const int64_t B = shape_.micro_batch, T = shape_.seq_len;
  std::vector<int32_t> sample(size_t(T + 1));
  // whole sequences; under context parallelism this rank keeps its rows below
  std::vector<int32_t> whole_tok, whole_tgt;
  auto& tok = cp.size() > 1 ? whole_tok : tokens_[size_t(micro)];
  auto& tgt = cp.size() > 1 ? whole_tgt : targets_[size_t(micro)];
  tok.resize(size_t(B * T)), tgt.resize(size_t(B * T));
  for (int64_t b = 0; b < B; ++b) {
    if (valid && valid_source_ >= 0)
      sampler_.sample_valid_source(valid_source_, first_index + uint64_t(b), T + 1, sample.data());
    else
      sampler_.sample(first_index + uint64_t(b), valid, T + 1, sample.data());
    std::copy(sample.begin(), sample.begin() + T, tok.begin() + b * T);
    std::copy(sample.begin() + 1, sample.end(), tgt.begin() + b * T);
  }
  if (shape_.mask_eod_loss && reads_targets_)  // ignored by the loss kernels
    for (auto& t : tgt)
      if (t == shape_.eod) t = -1;
  std::vector<int32_t> whole_ds;
  if (!doc_start_.empty()) {  // a document starts at 0 and after each EOD token of the input
    auto& ds = cp.size() > 1 ? whole_ds : doc_start_[size_t(micro)];
    ds.resize(size_t(B * T));
    for (int64_t b = 0; b < B; ++b) {
      int32_t start = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (t > 0 && tok[size_t(b * T + t - 1)] == shape_.eod) start = int32_t(t);
        ds[size_t(b * T + t)] = start;
      }
    }
  }
  const int64_t Tl = cp.local_len();  // this rank's rows of each sequence
  if (cp.size() > 1) {
    cp.take_local(whole_tok.data(), tokens_[size_t(micro)].data(), B);
    cp.take_local(whole_tgt.data(), targets_[size_t(micro)].data(), B);
    if (!doc_start_.empty()) {
      cp.take_local(whole_ds.data(), doc_start_[size_t(micro)].data(), B);
      auto& o = origin_[size_t(micro)];  // row t sits at global position p: t - (t - p + start) = p - start
      for (int64_t i = 0; i < B * Tl; ++i) o[size_t(i)] += doc_start_[size_t(micro)][size_t(i)];
    }
  }
  if (on_device_ && !doc_start_.empty())
    kernels::copy(doc_start_dev_[size_t(micro)].data<int32_t>(), doc_start_[size_t(micro)].data(), B * Tl);
  if (on_device_ && !tokens_dev_.empty()) {  // queued on the compute stream, before the kernels that read them
    kernels::copy(tokens_dev_[size_t(micro)].data<int32_t>(), tokens_[size_t(micro)].data(), B * Tl);
    kernels::copy(targets_dev_[size_t(micro)].data<int32_t>(), targets_[size_t(micro)].data(), B * Tl);
  }
}

const int32_t* StepRunner::doc_start(int64_t micro) const {
  if (doc_start_.empty()) return nullptr;
  return on_device_ ? doc_start_dev_[size_t(micro)].data<int32_t>() : doc_start_[size_t(micro)].data();
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
    for (int32_t t : targets_[size_t(m)]) n += t >= 0;
  return double(n);
}

const int32_t* StepRunner::tokens(int64_t micro) const {
  return on_device_ ? tokens_dev_[size_t(micro)].data<int32_t>() : tokens_[size_t(micro)].data();
}
const int32_t* StepRunner::targets(int64_t micro) const {
  return on_device_ ? targets_dev_[size_t(micro)].data<int32_t>() : targets_[size_t(micro)].data();
}

void StepRunner::reset() {
  for (size_t c = 0; c < contexts_.size(); ++c) {
    free_[c].clear();
    for (int i = int(contexts_[c].size()) - 1; i >= 0; --i) free_[c].push_back(i);
    input_started_[c] = weight_started_[c] = 0;
  }
  loss_sum_ = 0;
}

parallel::PipelineHooks StepRunner::hooks() {
  parallel::PipelineHooks h;
  h.forward = [this](int c, int micro, const float* input) {
    int slot = 0;  // evaluation: each micro-batch's forward finishes before the next
    if (!evaluating_) {
      auto& fs = free_[size_t(c)];
      TRIDENT_CHECK(!fs.empty(), "no free activation context for chunk {}", c);
      slot = fs.back();
      fs.pop_back();
    }
    slot_of_[size_t(c)][size_t(micro)] = slot;
    const auto& spec = net_.chunk(c);
    contexts_[size_t(c)][size_t(slot)]->doc_start = doc_start(micro);
    contexts_[size_t(c)][size_t(slot)]->position_origin = origin(micro);
    loss_sum_ += net_.forward_chunk(*contexts_[size_t(c)][size_t(slot)], spec.embedding ? tokens(micro) : nullptr,
                                    input, spec.head ? targets(micro) : nullptr, dscale_);
  };
  h.output = [this](int c, int micro) {
    return contexts_[size_t(c)][size_t(slot_of_[size_t(c)][size_t(micro)])]->x_final;
  };
  h.input_grad = [this](int, int) { return net_.input_grad(); };
  h.backward = [this](int c, int micro, const float* d_out, parallel::ActionType type) {
    const int slot = slot_of_[size_t(c)][size_t(micro)];
    const bool weight = type == parallel::ActionType::backward_weight;
    char& started = weight ? weight_started_[size_t(c)] : input_started_[size_t(c)];
    const bool accumulate = started != 0;  // the step's first backward of a chunk overwrites
    started = 1;
    const model::BackwardPart part = type == parallel::ActionType::backward ? model::BackwardPart::all
                                     : weight                               ? model::BackwardPart::weight
                                                                            : model::BackwardPart::input;
    const auto on_ready = dp_.begin_backward(micro);
    net_.backward_chunk(*contexts_[size_t(c)][size_t(slot)], d_out, shape_.recompute, accumulate, part, on_ready);
    if (type != parallel::ActionType::backward_input) free_[size_t(c)].push_back(slot);
  };
  return h;
}

double StepRunner::forward_backward(double loss_scale) {
  reset();
  dscale_ = float(loss_scale / std::max(loss_tokens_, 1.0));  // of the mean loss over the counted targets
  evaluating_ = false;
  executor_->run(actions_, hooks());
  return loss_sum_;
}

double StepRunner::evaluate(int64_t batches) {
  if (batches == 0 || !sampler_.has_valid()) return double(NAN);
  const int64_t M = shape_.micro_batches, B = shape_.micro_batch;
  double sum = 0, counted = 0;
  dscale_ = 0, evaluating_ = true;
  const auto h = hooks();
  for (int64_t i = 0; i < batches; i += M) {
    const int64_t n = std::min(M, batches - i);
    for (int64_t mb = 0; mb < n; ++mb) load(mb, uint64_t((i + mb) * B), true);
    reset();
    executor_->run(parallel::make_forward_schedule(shape_.stages, shape_.virtual_stages, int(n), shape_.stage_rank), h);
    sum += loss_sum_;
    counted += shape_.mask_eod_loss ? counted_targets(n) : double(n * B * shape_.seq_len);
  }
  evaluating_ = false;
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
