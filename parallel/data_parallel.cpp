// The two data-parallel implementations and their factory (see data_parallel.hpp).
#include "parallel/data_parallel.hpp"

#include <algorithm>

#include "core/error.hpp"
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
    store_->begin_backward(spec_.pipelined || spec_.micro_batches > 1, !spec_.pipelined && last);
    return {};
  }
  void publish_params() override { store_->gather_params(); }
  double take_wait_seconds() override { return store_->take_wait_seconds(); }

 private:
  float* local_grads() override { return store_->accumulated_grads(); }
  void reduce() override {
    if (spec_.pipelined) store_->reduce_accumulated();
    store_->finish_step();
  }
  std::unique_ptr<ZeroStorage> store_;
  int64_t numel_;
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
        spec, std::make_unique<GradientSync>(spec.data, numel, DType::f32, spec.zero, spec.bucket_bytes, spec.device),
        params, grads);
  }
  return std::make_unique<ShardedDataParallel>(
      spec, std::make_unique<ZeroStorage>(spec.data, segments, numel, spec.zero, spec.device), numel);
}

}  // namespace trident::parallel
