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

// The split model's gradients against the unsplit one's: every non-expert
// gradient equal, each expert's equal to the unsplit model's summed over the
// ranks (what its data reduction would give); the shards hold the same weights.
void expect_split_matches_whole(Transformer<double>& split, Transformer<double>& whole, const std::string& what) {
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
      expect_split_matches_whole(split, whole, what);
      EXPECT_EQ(split.registry().at("model.layers.1.mlp.experts.gate_up_proj").numel * n,
                whole.registry().at("model.layers.1.mlp.experts.gate_up_proj").numel);
    }
}

// Degenerate routes, forward and backward (both exchange directions each
// way), with and without the exchange rerun by full recompute: experts and
// whole ranks that receive no rows in the very first exchange (64 experts,
// top-1, two tokens a rank), and every route to one rank (a zero router: its
// scores tie, and ties go to the lowest ids, experts 0 and 1 on rank 0). A
// rank whose experts receive nothing allocates nothing for them: the
// all-to-one case's exchange memory on the other ranks stays at its floor.
TEST(MoeExpertParallel, EmptyExpertsEmptyRanksAndAllToOne) {
  const int me = g_world->rank();
  for (const bool all_to_one : {false, true})
    for (const Recompute rc : {Recompute::none, Recompute::full}) {
      ModelConfig m = moe_model(all_to_one);
      int64_t B = 3;
      if (!all_to_one) m.moe.experts = 64, m.moe.top_k = 1, m.seq_len = 2, B = 1;
      const std::string what = std::string(all_to_one ? "all to one" : "empty experts") + " recompute " +
                               enum_name(rc) + " rank " + std::to_string(me);
      const int64_t N = B * m.seq_len;
      std::mt19937 rng(uint32_t(5 + me));
      std::vector<int32_t> tokens, targets;
      for (int64_t i = 0; i < N; ++i) tokens.push_back(int32_t(rng() % 11)), targets.push_back(int32_t(rng() % 11));
      parallel::ExpertParallel ep(g_world, m.moe.experts);
      Transformer<double> split(m, 7, {.ep = &ep}), whole(m, 7);
      if (all_to_one)
        for (Transformer<double>* net : {&split, &whole})
          for (const auto& p : net->registry().params())
            if (p.name.ends_with("mlp.gate.weight")) std::fill_n(net->param(p.name), p.numel, 0.0);
      double loss[2];
      std::vector<double> counts[2];
      int64_t received = 0, received_elements = 0;  // layer 1's on this rank (split model)
      for (int k = 0; k < 2; ++k) {
        Transformer<double>& net = k == 0 ? split : whole;
        const Recompute mode = k == 0 ? rc : Recompute::none;
        auto ctx = net.make_activations(B, mode);
        loss[k] = net.forward(*ctx, tokens.data(), targets.data(), 1.0 / double(N));
        for (const auto& a : ctx->moe) counts[k].insert(counts[k].end(), a.counts.begin(), a.counts.end());
        if (k == 0) received = ctx->moe[1].plan.received, received_elements = ctx->moe[1].received.numel();
        net.backward(*ctx, mode, false);
      }
      EXPECT_NEAR(loss[0], loss[1], 1e-12 * std::abs(loss[1])) << what;
      EXPECT_EQ(counts[0], counts[1]) << what << ": tokens per expert";
      if (all_to_one) {  // every route on rank 0's experts 0 and 1: the others receive and hold nothing
        const int64_t rows = N * m.moe.top_k * g_world->size();
        EXPECT_EQ(received, me == 0 ? rows : 0) << what << ": rows received";
        if (rc == Recompute::none)  // (full recompute keeps none of them after the forward)
          EXPECT_EQ(received_elements, me == 0 ? rows * (m.hidden + 3 * m.moe.ffn_hidden) : 1) << what;
      }
      expect_split_matches_whole(split, whole, what);
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
