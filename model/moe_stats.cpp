// The step's MoE statistics (see moe_stats.hpp).
#include "model/moe_stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "parallel/rank_reductions.hpp"

namespace trident::model {

namespace {

// The correction bias's range of global layer `layer` where this rank holds
// it whole (NaN otherwise: none, on the device, or sharded by ZeRO 3).
std::pair<double, double> bias_range(Transformer<float>& net, int64_t layer) {
  if (!net.params().defined() || net.device().type != DeviceType::cpu) return {NAN, NAN};
  const std::string bias = layer_prefix(net.config(), layer) + "mlp.gate.e_score_correction_bias";
  for (const auto& p : net.registry().params())
    if (p.name == bias) {
      const float* b = net.params().data<float>() + p.offset;
      return {*std::min_element(b, b + p.numel), *std::max_element(b, b + p.numel)};
    }
  return {NAN, NAN};
}

}  // namespace

MoeLoad gather_moe_load(Transformer<float>& net, parallel::Communicator* pipeline, parallel::Communicator* data,
                        parallel::Communicator* context, double micro_batches) {
  const auto& mine = net.moe_step();
  const int64_t E = net.config().moe.experts;
  // [layer, counts..., bias min, bias max] per local MoE layer, counts over the data and context groups
  std::vector<double> counts = parallel::sum_over(data, parallel::sum_over(context, mine.counts));
  // whole experts: each tensor rank routed its slice of the rows
  if (net.registry().experts().whole) counts = parallel::sum_over(net.tensor_parallel().group(), counts);
  std::vector<double> packed;
  for (size_t i = 0; i < mine.layers.size(); ++i) {
    packed.push_back(double(mine.layers[i]));
    packed.insert(packed.end(), counts.begin() + int64_t(i) * E, counts.begin() + int64_t(i + 1) * E);
    const auto [lo, hi] = bias_range(net, mine.layers[i]);
    packed.push_back(lo), packed.push_back(hi);
  }
  const std::vector<double> all = parallel::gather_varying(pipeline, packed);
  MoeLoad out;
  std::vector<std::pair<int64_t, size_t>> order;  // layer, where its counts start
  for (size_t at = 0; at < all.size(); at += size_t(E) + 3) order.push_back({int64_t(all[at]), at + 1});
  std::sort(order.begin(), order.end());
  const int64_t ranks = net.registry().experts().size, per = E / ranks;  // rank r: experts [r per, (r+1) per)
  for (auto [layer, at] : order) {
    const auto first = all.begin() + int64_t(at), last = first + E;
    const double total = std::accumulate(first, last, 0.0);
    out.layers.push_back(layer);
    out.min.push_back(*std::min_element(first, last));
    out.max.push_back(*std::max_element(first, last));
    out.imbalance.push_back(total > 0 ? out.max.back() / (total / double(E)) : 0);
    out.tokens.push_back(total);
    out.counts.insert(out.counts.end(), first, last);
    out.bias_min.push_back(all[at + size_t(E)]), out.bias_max.push_back(all[at + size_t(E) + 1]);
    for (int64_t r = 0; ranks > 1 && r < ranks; ++r)
      out.rank_tokens.push_back(std::accumulate(first + r * per, first + (r + 1) * per, 0.0));
  }
  out.expert_ranks = ranks;
  auto mean = [&](double x) {
    return parallel::sum_over(pipeline, parallel::sum_over(data, parallel::sum_over(context, x))) / micro_batches;
  };
  out.aux_loss = mean(mine.aux_loss), out.z_loss = mean(mine.z_loss);
  return out;
}

}  // namespace trident::model
