// The optimizer's side of a step (see part_optimizer.hpp).
#include "launch/train/part_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/tensor.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::launch {

namespace {

// The Muon matrices of a part (optim.name muon): sliced over the tensor
// group, but for experts each whole on its rank.
std::vector<kernels::MuonMatrix> muon_matrices_in(const Recipe& rc, const model::ParamRegistry& reg,
                                                  const parallel::DataParallelPart& part, bool sliced) {
  if (rc.optim.name != OptimizerKind::muon) return {};
  return model::muon_matrices(reg, rc.model, part.base, part.base + part.numel, sliced);
}

// How a part's Muon matrices are spread, and the collectives that join them (optim::MuonGroup).
optim::MuonGroup<float> muon_group(parallel::DataParallelPart& part, parallel::Communicator* slices, int rounds) {
  optim::MuonGroup<float> g;
  g.rounds = rounds;
  if (slices && slices->size() > 1) {
    g.slice = slices->rank(), g.slices = slices->size();
    g.exchange = [slices](const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) {
      const int64_t out = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t(0));
      const int64_t in = std::accumulate(send_counts.begin(), send_counts.end(), int64_t(0));
      std::shared_ptr<parallel::Work> w = slices->all_to_all(
          Tensor::borrow(recv, out), Tensor::borrow(const_cast<float*>(send), in), {send_counts, recv_counts});
      return optim::MuonTransfer<float>{[w] { return w->is_completed(); }, [w] { w->wait(); }};
    };
  }
  if (part.shard_group && part.shard_group->size() > 1) {
    g.replica = part.shard_group->rank(), g.replicas = part.shard_group->size();
    parallel::DataParallel& dp = *part.dp;
    const int64_t numel = part.numel;
    if (dp.sharded()) {
      g.gather = [&part, numel](float* u) {
        part.shard_group->all_gather(Tensor::borrow(u, numel), {part.dp->shard_counts()})->wait();
      };
      g.combine = [&part, numel](float* u) {  // the sum into this rank's shard of u
        std::vector<float> shard(size_t(part.dp->shard_size()));
        part.shard_group
            ->reduce_scatter(Tensor::borrow(shard.data(), int64_t(shard.size())), Tensor::borrow(u, numel),
                             {parallel::ReduceOp::sum, part.dp->shard_counts()})
            ->wait();
        std::copy(shard.begin(), shard.end(), u + part.dp->shard_begin());
      };
    } else {
      g.combine = [&part, numel](float* u) { part.shard_group->all_reduce(Tensor::borrow(u, numel))->wait(); };
    }
  }
  return g;
}

}  // namespace

PartOptimizer::PartOptimizer(const Recipe& rc, const model::ParamRegistry& reg, parallel::DataParallelPart& part,
                             parallel::Mesh& mesh)
    : part(part),
      slices(reg.experts().whole && part.base >= reg.expert_begin() && reg.expert_begin() < reg.total()
                 ? nullptr
                 : mesh.tensor()),
      matrices(muon_matrices_in(rc, reg, part, slices != nullptr)),
      opt(model::without_matrices(model::decay_ranges(reg, rc.optim), matrices, slices ? slices->rank() : 0), rc.optim,
          part.shard_begin(), part.shard_end(), mesh.device(), model::bias_ranges(reg, rc),
          /*packed=*/rc.optim.name == OptimizerKind::muon),
      muon(matrices, rc.optim.muon, part.base, part.numel, part.shard_begin(), part.shard_end(),
           matrices.empty() ? optim::MuonGroup<float>{} : muon_group(part, slices, int(rc.optim.muon.rounds))),
      master(part.dp->param_shard(), part.dp->shard_size(), rc.train.precision, mesh.device()) {}

void PartOptimizer::step(double lr, int64_t step, double grad_scale) {
  opt.step(master.params(), part.dp->grad_shard(), lr, step, grad_scale);
  muon.step(master.params(), part.dp->grad_shard(), opt.exp_avg(), lr, grad_scale);
}

std::vector<double> step_max_logits(const model::Transformer<float>& net, parallel::Mesh& mesh) {
  const ModelConfig& m = net.config();
  const int64_t H = m.heads, Hl = net.dims().heads, first = int64_t(mesh.tensor() ? mesh.tensor()->rank() : 0) * Hl;
  std::vector<double> all(size_t((m.layers + m.mtp.depth) * H), -INFINITY);
  for (int l = 0; l < net.local_layers(); ++l)
    for (int64_t j = 0; j < Hl; ++j)
      all[size_t(net.global_layer(l) * H + first + j)] = double(net.max_logits()[size_t(l * Hl + j)]);
  return parallel::max_over(mesh.world(), std::move(all));
}

double qk_margin(const std::vector<double>& max_logit, double threshold) {
  double m = INFINITY;
  for (double x : max_logit)
    if (std::isfinite(x)) m = std::min(m, std::abs(x / threshold - 1));
  return m;
}

std::vector<double> layer_max(const std::vector<double>& max_logit, int64_t heads) {
  std::vector<double> out;
  for (size_t i = 0; i < max_logit.size(); i += size_t(heads))
    out.push_back(*std::max_element(max_logit.begin() + int64_t(i), max_logit.begin() + int64_t(i) + heads));
  return out;
}

}  // namespace trident::launch
