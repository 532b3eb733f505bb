// The two data-parallel implementations and their factory (see data_parallel.hpp).
#include "parallel/data_parallel.hpp"

#include <algorithm>
#include <tuple>

#include "core/error.hpp"
#include "kernels/buffer.hpp"
#include "parallel/gradient_sync.hpp"
#include "parallel/tensor_parallel.hpp"
#include "parallel/zero_storage.hpp"

namespace trident::parallel {
namespace {

// The part of each range inside [begin, end), relative to begin.
Ranges clip(const Ranges& ranges, int64_t begin, int64_t end) {
  Ranges out;
  for (auto [lo, hi] : ranges) {
    lo = std::max(lo, begin), hi = std::min(hi, end);
    if (hi > lo) out.push_back({lo - begin, hi - begin});
  }
  return out;
}

// ZeRO 0-1: buckets of the model's full gradient buffer, reduced as backward
// produces them.
class BucketedDataParallel final : public DataParallel {
 public:
  BucketedDataParallel(const DataParallelSpec& spec, std::unique_ptr<GradientSync> sync, Tensor* params, Tensor* grads)
      : DataParallel(spec, sync->shard_begin(), sync->shard_end(), sync->shard_counts()),
        sync_(std::move(sync)),
        params_(params),
        grads_(grads) {}
  bool sharded() const override { return spec_.zero >= 1; }
  float* param_shard() override { return params_->data<float>() + shard_begin_; }
  float* grad_shard() override { return grads_->data<float>() + shard_begin_; }
  std::function<void(int64_t)> begin_backward(int64_t micro) override {
    // unpiped: the last micro-batch's backward launches the buckets
    if (spec_.pipelined || micro + 1 != spec_.micro_batches) return {};
    return [this](int64_t frontier) { sync_->grads_ready(*grads_, frontier); };
  }
  void publish_params() override { sync_->gather_params(*params_); }
  double take_wait_seconds() override { return sync_->take_wait_seconds(); }

 private:
  float* local_grads() override { return grads_->data<float>(); }
  void reduce() override { sync_->finish(*grads_); }
  std::unique_ptr<GradientSync> sync_;
  Tensor *params_, *grads_;
};

// ZeRO 2-3: the shards live in ZeroStorage, which serves the model's segments.
class ShardedDataParallel final : public DataParallel {
 public:
  ShardedDataParallel(const DataParallelSpec& spec, std::unique_ptr<ZeroStorage> store, int64_t numel)
      : DataParallel(spec, store->shard_begin(), store->shard_end(), store->shard_counts()),
        store_(std::move(store)),
        numel_(numel) {}
  bool sharded() const override { return true; }
  float* param_shard() override { return store_->param_shard(); }
  float* grad_shard() override { return store_->grad_shard(); }
  SegmentStorage<float>* storage() override { return store_.get(); }
  void initialize(const std::function<void(float*, int64_t, int64_t)>& fill) override {
    if (spec_.zero == 2)
      fill(store_->full_params().data<float>(), 0, numel_);
    else
      fill(store_->param_shard(), shard_begin_, shard_end_);
  }
  std::function<void(int64_t)> begin_backward(int64_t micro) override {
    const bool last = micro + 1 == spec_.micro_batches;
    if (spec_.shard_accumulation && spec_.pipelined) {
      // every backward (a chunk's, or half of a split one) reduced into the shard and added: the step's
      // first zeroes the shard; the replicas' all-reduce waits for the end of the schedule
      if (!started_) kernels::fill_zero(store_->grad_shard(), shard_size());
      started_ = true;
      store_->begin_backward(false, false, true);
      return {};
    }
    if (spec_.shard_accumulation) {  // every micro-batch reduced into the shard, added
      store_->begin_backward(false, last, micro > 0);
      return {};
    }
    store_->begin_backward(spec_.pipelined || spec_.micro_batches > 1, !spec_.pipelined && last);
    return {};
  }
  void publish_params() override { store_->gather_params(); }
  double take_wait_seconds() override { return store_->take_wait_seconds(); }

 private:
  float* local_grads() override { return store_->accumulated_grads(); }
  void reduce() override {
    const bool added = spec_.shard_accumulation && spec_.pipelined;
    if (spec_.pipelined && !added) store_->reduce_accumulated();
    store_->finish_step(added);
    started_ = false;
  }
  std::unique_ptr<ZeroStorage> store_;
  int64_t numel_;
  bool started_ = false;  // pipelined shard accumulation: a backward of this step has begun
};

}  // namespace

DataParallel::DataParallel(const DataParallelSpec& spec, int64_t begin, int64_t end, std::vector<int64_t> counts)
    : spec_(spec), shard_begin_(begin), shard_end_(end), counts_(std::move(counts)) {
  tensor_in_shard_ = clip(spec.shared.tensor_replicated, begin, end);
  kv_in_shard_ = clip(spec.shared.kv_replicated, begin, end);
}

void DataParallel::finish_gradients() {
  if (!spec_.shared.tied.empty()) all_reduce_ranges(spec_.shared.embedding, local_grads(), spec_.shared.tied);
  reduce();
  all_reduce_ranges(spec_.shared.tensor, grad_shard(), tensor_in_shard_);
  all_reduce_ranges(spec_.shared.kv, grad_shard(), kv_in_shard_);
}

ZeroStateBytes zero_state_bytes(int zero, double params, int64_t data, double param_bytes) {
  const double d = double(std::max<int64_t>(data, 1));
  const double moments = 8 + (param_bytes < 4 ? 4 : 0);  // m, v (+ fp32 master weights)
  return {param_bytes * params / (zero >= 3 ? d : 1), 4 * params / (zero >= 2 ? d : 1),
          moments * params / (zero >= 1 ? d : 1)};
}

std::string describe_zero_memory(int zero, int64_t params, int64_t data) {
  const ZeroStateBytes b = zero_state_bytes(zero, double(params), data);
  auto part = [&](const char* name, int from_stage, int bytes, double value) {
    return fmt::format("{} {}P{} = {:.1f} MiB", name, bytes, zero >= from_stage ? "/d" : "", value / (1 << 20));
  };
  return part("params", 3, 4, b.params) + ", " + part("grads", 2, 4, b.grads) + ", " +
         part("optimizer", 1, 8, b.optimizer);
}

std::unique_ptr<DataParallel> make_data_parallel(const DataParallelSpec& spec, const std::vector<Segment>& segments,
                                                 int64_t numel, Tensor* params, Tensor* grads) {
  TRIDENT_CHECK(spec.zero >= 0 && spec.zero <= 3, "ZeRO stage {} is not implemented", spec.zero);
  if (model_owns_buffers(spec.zero)) {
    TRIDENT_CHECK(params && grads, "ZeRO {} reduces the model's own buffers: pass them", spec.zero);
    return std::make_unique<BucketedDataParallel>(
        spec,
        std::make_unique<GradientSync>(spec.data, numel, DType::f32, spec.zero, spec.bucket_bytes, spec.device,
                                       spec.replicas),
        params, grads);
  }
  return std::make_unique<ShardedDataParallel>(
      spec,
      std::make_unique<ZeroStorage>(spec.data, segments, numel, spec.zero, spec.device, spec.replicas, spec.cast,
                                    spec.cast_first),
      numel);
}

// ZeRO 2-3 over parts: segment s of the model is segment s - first of the
// part it lies in (the parts' segments are consecutive runs).
class DataParallelParts::Router final : public SegmentStorage<float> {
 public:
  struct Place {
    SegmentStorage<float>* store;
    int index;
  };
  explicit Router(std::vector<Place> places) : places_(std::move(places)) {}
  float* acquire_params(int s, int next) override {
    const Place& p = places_[size_t(s)];
    const bool same = next >= 0 && places_[size_t(next)].store == p.store;  // prefetch inside the part only
    return p.store->acquire_params(p.index, same ? places_[size_t(next)].index : -1);
  }
  void release_params(int s) override { places_[size_t(s)].store->release_params(places_[size_t(s)].index); }
  float* acquire_grads(int s) override { return places_[size_t(s)].store->acquire_grads(places_[size_t(s)].index); }
  void grads_done(int s) override { places_[size_t(s)].store->grads_done(places_[size_t(s)].index); }

 private:
  std::vector<Place> places_;
};

DataParallelParts::DataParallelParts(const DataParallelSpec& dense, const DataParallelSpec& experts,
                                     Communicator* peers, int64_t expert_begin, const std::vector<Segment>& segments,
                                     int64_t numel, Tensor* params, Tensor* grads) {
  if (expert_begin >= numel) {  // one part: the buffers as they are
    parts_.push_back({0, numel, make_data_parallel(dense, segments, numel, params, grads), dense.data, dense.replicas,
                      nullptr, Tensor(), Tensor()});
    return;
  }
  std::vector<Router::Place> places;
  parts_.reserve(2);  // the parts' views stay where their DataParallel sees them
  for (const auto& [spec, lo, hi, group] : {std::tuple{&dense, int64_t(0), expert_begin, (Communicator*)nullptr},
                                            std::tuple{&experts, expert_begin, numel, peers}}) {
    DataParallelPart part{lo, hi - lo, nullptr, spec->data, spec->replicas, group, Tensor(), Tensor()};
    DataParallelSpec s = *spec;  // the shared ranges inside the part, in its coordinates
    s.shared.tied = clip(spec->shared.tied, lo, hi);
    s.shared.tensor_replicated = clip(spec->shared.tensor_replicated, lo, hi);
    s.shared.kv_replicated = clip(spec->shared.kv_replicated, lo, hi);
    std::vector<Segment> mine;
    for (const Segment& g : segments)
      if (g.begin >= lo && g.end <= hi) {
        if (mine.empty()) s.cast_first = int(&g - segments.data());  // the part's segments are one run
        mine.push_back({g.begin - lo, g.end - lo});
      } else
        TRIDENT_CHECK(g.end <= lo || g.begin >= hi, "segment [{}, {}) straddles parts at {}", g.begin, g.end, lo);
    if (model_owns_buffers(s.zero)) {
      part.params_view = Tensor::borrow(params->data<float>() + lo, hi - lo, params->device());
      part.grads_view = Tensor::borrow(grads->data<float>() + lo, hi - lo, grads->device());
    }
    parts_.push_back(std::move(part));
    DataParallelPart& p = parts_.back();
    p.dp = make_data_parallel(s, mine, hi - lo, &p.params_view, &p.grads_view);
    for (int i = 0; i < int(mine.size()); ++i) places.push_back({p.dp->storage(), i});
  }
  if (!model_owns_buffers(dense.zero)) router_ = std::make_unique<Router>(std::move(places));
}

DataParallelParts::~DataParallelParts() = default;

SegmentStorage<float>* DataParallelParts::storage() { return router_ ? router_.get() : parts_[0].dp->storage(); }

void DataParallelParts::initialize(const std::function<void(float*, int64_t, int64_t)>& fill) {
  for (DataParallelPart& p : parts_)
    p.dp->initialize([&](float* dst, int64_t b, int64_t e) { fill(dst, p.base + b, p.base + e); });
}

std::function<void(int64_t)> DataParallelParts::begin_backward(int64_t micro) {
  if (parts_.size() == 1) return parts_[0].dp->begin_backward(micro);
  std::vector<std::function<void(int64_t)>> each;
  bool any = false;
  for (DataParallelPart& p : parts_) each.push_back(p.dp->begin_backward(micro)), any = any || bool(each.back());
  if (!any) return {};
  return [this, each = std::move(each)](int64_t frontier) {  // the last part that begins at or before it
    size_t i = parts_.size() - 1;
    while (i > 0 && frontier < parts_[i].base) --i;
    if (each[i]) each[i](frontier - parts_[i].base);
  };
}

void DataParallelParts::finish_gradients() {
  for (DataParallelPart& p : parts_) p.dp->finish_gradients();
}

void DataParallelParts::publish_params() {
  for (DataParallelPart& p : parts_) p.dp->publish_params();
}

double DataParallelParts::take_wait_seconds() {
  double s = 0;
  for (DataParallelPart& p : parts_) s += p.dp->take_wait_seconds();
  return s;
}

}  // namespace trident::parallel
