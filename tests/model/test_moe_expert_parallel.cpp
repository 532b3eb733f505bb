// An MoE model under expert parallelism against the same model with every
// expert on every rank, over real MPI processes (ctest: 2 and 4 ranks, the
// world as the expert group). Each rank trains on its own tokens, as data
// replicas do. With the experts split, each rank's loss, balancing losses and
// every non-expert gradient equal the unsplit model's on the same tokens;
// each of its experts' weight gradients equals the sum over the ranks of the
// unsplit model's (what the data reduction of the unsplit model would give),
// since the expert now sees every rank's tokens routed to it; also with
// selective and full recompute (the layer's exchange rerun in the backward).
// float64.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "model/transformer.hpp"
#include "parallel/expert_parallel.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/mpi_test_main.hpp"

namespace trident::model {

parallel::MpiCommunicator* g_world = nullptr;

namespace {

ModelConfig moe_model(bool sigmoid) {
  ModelConfig m;
  m.arch = Arch::llama;
  m.layers = 3, m.hidden = 12, m.heads = 4, m.kv_heads = 2, m.ffn_hidden = 20, m.seq_len = 6, m.vocab = 11;
  m.init_std = 0.3, m.tie_embeddings = false;
  MoeConfig& e = m.moe;
  e.enabled = true, e.experts = 8, e.top_k = 2, e.ffn_hidden = 6, e.first_dense = 1;
  e.balance = Balance::aux_loss, e.balance_coef = 0.1, e.z_loss = 0.01;
  if (sigmoid) {  // DeepSeek-like: groups, scaling, shared experts, per-sequence balancing
    e.score = RouterScore::sigmoid, e.groups = 4, e.group_topk = 2, e.scaling = 2.5;
    e.shared_experts = 1, e.shared_ffn_hidden = 4, e.balance = Balance::seq_aux_loss;
  }
  return m;
}

TEST(MoeExpertParallel, MatchesEveryExpertOnEveryRank) {
  const int n = g_world->size(), me = g_world->rank();
  for (bool sigmoid : {false, true})
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {  // of the split model
      const ModelConfig m = moe_model(sigmoid);
      const std::string what =
          std::string(sigmoid ? "sigmoid" : "softmax") + " recompute " + enum_name(rc) + " rank " + std::to_string(me);
      const int64_t B = 3, N = B * m.seq_len;
      std::mt19937 rng(uint32_t(11 + me));  // this rank's own tokens
      std::vector<int32_t> tokens, targets;
      for (int64_t i = 0; i < N; ++i) tokens.push_back(int32_t(rng() % 11)), targets.push_back(int32_t(rng() % 11));
      parallel::ExpertParallel ep(g_world, m.moe.experts);
      Transformer<double> split(m, 7, {.ep = &ep}), whole(m, 7);
      double loss[2], aux[2];
      for (int k = 0; k < 2; ++k) {
        Transformer<double>& net = k == 0 ? split : whole;
        const Recompute mode = k == 0 ? rc : Recompute::none;
        auto ctx = net.make_activations(B, mode);
        loss[k] = net.forward(*ctx, tokens.data(), targets.data(), 1.0 / double(N));
        aux[k] = net.balance_losses(*ctx).first + net.balance_losses(*ctx).second;
        net.backward(*ctx, mode, false);
      }
      EXPECT_NEAR(loss[0], loss[1], 1e-12 * std::abs(loss[1])) << what;
      EXPECT_NEAR(aux[0], aux[1], 1e-12) << what;
      // the unsplit model's gradients summed over the ranks, for the experts
      Tensor summed = Tensor::empty({whole.registry().total()}, DType::f64, MemCategory::other);
      std::copy_n(whole.grads().data<double>(), whole.registry().total(), summed.data<double>());
      g_world->all_reduce(summed)->wait();
      const double *gs = split.grads().data<double>(), *gw = whole.grads().data<double>(),
                   *ps = split.params().data<double>(), *pw = whole.params().data<double>();
      for (const auto& p : split.registry().params()) {
        const auto& q = whole.registry().at(p.name);
        const double* ref = p.expert_major ? summed.data<double>() : gw;
        double worst = 0, scale = 0;
        for (int64_t e = 0; e < p.numel; ++e) {
          const int64_t g = q.offset + p.global_index(e);
          ASSERT_EQ(ps[p.offset + e], pw[g]) << what << " " << p.name << ": the shard holds the same weights";
          worst = std::max(worst, std::abs(gs[p.offset + e] - ref[g]));
          scale = std::max(scale, std::abs(ref[g]));
        }
        EXPECT_LE(worst, 1e-12 * std::max(scale, 1.0)) << what << " " << p.name << (p.expert_major ? " (expert)" : "");
      }
      EXPECT_EQ(split.registry().at("model.layers.1.mlp.experts.gate_up_proj").numel * n,
                whole.registry().at("model.layers.1.mlp.experts.gate_up_proj").numel);
    }
}

// Expert parallelism inside tensor parallelism (expert_tensor = tensor): 4
// ranks as tensor 2 x expert 2, each expert's FFN split over the tensor
// group as without the expert axis. Against the tensor-parallel model with
// every expert: each rank's loss and non-expert gradients equal, its experts'
// gradients equal that model's summed over the expert group.
TEST(MoeExpertParallel, InsideTensorParallelism) {
  if (g_world->size() != 4) GTEST_SKIP() << "runs on 4 ranks";
  const int me = g_world->rank();
  auto tensor_group = g_world->split(me / 2, me, "tensor");  // {0,1} {2,3}
  auto expert_group = g_world->split(me % 2, me, "expert");  // {0,2} {1,3}: the same tensor rank
  for (bool sp : {false, true}) {
    const ModelConfig m = moe_model(true);
    const std::string what = std::string(sp ? "sequence parallel" : "tensor") + " rank " + std::to_string(me);
    const int64_t B = 2, N = B * m.seq_len;
    std::mt19937 rng(uint32_t(31 + me / 2));  // the tensor group shares its tokens
    std::vector<int32_t> tokens, targets;
    for (int64_t i = 0; i < N; ++i) tokens.push_back(int32_t(rng() % 11)), targets.push_back(int32_t(rng() % 11));
    parallel::TensorParallel tp(tensor_group.get(), sp);
    parallel::ExpertParallel ep(expert_group.get(), m.moe.experts);
    Transformer<double> split(m, 7, {.tp = &tp, .ep = &ep}), whole(m, 7, {.tp = &tp});
    double loss[2];
    for (int k = 0; k < 2; ++k) {
      Transformer<double>& net = k == 0 ? split : whole;
      auto ctx = net.make_activations(B, Recompute::none);
      loss[k] = net.forward(*ctx, tokens.data(), targets.data(), 1.0 / double(N));
      net.backward(*ctx, Recompute::none, false);
    }
    EXPECT_NEAR(loss[0], loss[1], 1e-12 * std::abs(loss[1])) << what;
    Tensor summed = Tensor::empty({whole.registry().total()}, DType::f64, MemCategory::other);
    std::copy_n(whole.grads().data<double>(), whole.registry().total(), summed.data<double>());
    expert_group->all_reduce(summed)->wait();
    const double *gs = split.grads().data<double>(), *gw = whole.grads().data<double>();
    for (const auto& p : split.registry().params()) {
      const auto& q = whole.registry().at(p.name);
      std::map<int64_t, int64_t> local;  // the tensor-parallel model's element of each global index
      for (int64_t e = 0; e < q.numel; ++e) local[q.global_index(e)] = e;
      const double* ref = p.expert_major ? summed.data<double>() : gw;
      double worst = 0, scale = 0;
      for (int64_t e = 0; e < p.numel; ++e) {
        const int64_t at = q.offset + local.at(p.global_index(e));
        worst = std::max(worst, std::abs(gs[p.offset + e] - ref[at]));
        scale = std::max(scale, std::abs(ref[at]));
      }
      EXPECT_LE(worst, 1e-12 * std::max(scale, 1.0)) << what << " " << p.name << (p.expert_major ? " (expert)" : "");
    }
  }
}

}  // namespace
}  // namespace trident::model

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv,
                                      [](trident::parallel::MpiCommunicator& w) { trident::model::g_world = &w; });
}
