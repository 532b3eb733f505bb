// Mixture-of-experts layers in the whole model: finite-difference gradients
// (double) of the language-model loss plus the balancing losses for each
// router kind, with shared experts, their gate, dense layers between MoE ones
// and a non-zero correction bias; the same bits on a second run; recompute
// modes, the split backward and pipeline chunks give the plain backward's
// gradients; experts that receive no token get zero, not stale, gradients.
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/router.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"
#include "tests/test_util.hpp"

namespace trident::model {
namespace {

ModelConfig tiny_moe() {
  ModelConfig m;
  m.arch = Arch::llama;
  m.layers = 3, m.hidden = 12, m.heads = 4, m.kv_heads = 2, m.ffn_hidden = 20, m.seq_len = 5, m.vocab = 11;
  m.init_std = 0.3, m.tie_embeddings = false;
  MoeConfig& e = m.moe;
  e.enabled = true, e.experts = 4, e.top_k = 2, e.ffn_hidden = 6;
  e.first_dense = 1;  // layer 0 dense, 1 and 2 MoE
  e.balance = Balance::aux_loss, e.balance_coef = 0.1, e.z_loss = 0.01;
  return m;
}

// Mixtral-like: softmax, renormalised. Qwen2-like: softmax without it, a gated
// shared expert, a dense layer listed. DeepSeek-like: sigmoid, groups, bias,
// scaling, two ungated shared experts, per-sequence balancing. hf: Mixtral-like
// with transformers' cross-layer balancing loss.
std::vector<std::pair<std::string, ModelConfig>> variants() {
  std::vector<std::pair<std::string, ModelConfig>> out;
  ModelConfig a = tiny_moe();
  out.push_back({"softmax", a});
  ModelConfig b = tiny_moe();
  b.moe.norm_topk = false, b.moe.shared_experts = 1, b.moe.shared_ffn_hidden = 8, b.moe.shared_expert_gate = true;
  b.moe.first_dense = 0, b.moe.dense_layers = {1};
  out.push_back({"qwen2", b});
  ModelConfig c = tiny_moe();
  c.moe.experts = 8, c.moe.score = RouterScore::sigmoid, c.moe.groups = 4, c.moe.group_topk = 2, c.moe.scaling = 2.5;
  c.moe.shared_experts = 2, c.moe.shared_ffn_hidden = 4, c.moe.balance = Balance::seq_aux_loss;
  out.push_back({"sigmoid", c});
  ModelConfig d = tiny_moe();  // transformers' cross-layer form: one product over both MoE layers
  d.moe.balance = Balance::hf;
  out.push_back({"hf", d});
  ModelConfig q = tiny_moe();  // Qwen3-MoE: QK-norm, no renormalisation
  q.qk_norm = true, q.moe.norm_topk = false;
  out.push_back({"qk_norm", q});
  return out;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
  Batch(int64_t n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < n; ++i) tokens.push_back(int32_t(rng() % vocab)), targets.push_back(int32_t(rng() % vocab));
  }
};

// A non-zero correction bias (it is loaded, never trained by gradient).
template <typename T>
void set_bias(Transformer<T>& net) {
  for (const auto& p : net.registry().params())
    if (p.name.find("e_score_correction_bias") != std::string::npos)
      for (int64_t i = 0; i < p.numel; ++i) net.params().template data<T>()[p.offset + i] = T(0.05 * double(i % 3));
}

// The smallest routing margin of the last forward over every MoE layer
// (kernels::router_margin): a route is a discrete decision downstream of a
// float, so tests that compare two roundings (float against double, a
// finite difference) first assert that no route sits near a tie.
double min_router_margin(Transformer<double>& net, const Activations<double>& ctx, int64_t N) {
  double margin = INFINITY;
  const MoeConfig& e = net.config().moe;
  const kernels::RouterSpec spec{e.experts, e.top_k, e.score, e.norm_topk, e.groups, e.group_topk, e.scaling};
  for (size_t l = 0; l < ctx.moe.size(); ++l) {
    if (!ctx.moe[l].logits) continue;
    const std::string bias_name = layer_prefix(net.config(), int64_t(l)) + "mlp.gate.e_score_correction_bias";
    const double* bias = nullptr;
    for (const auto& p : net.registry().params())
      if (p.name == bias_name) bias = net.param(p.name);
    margin = std::min(margin, kernels::router_margin(ctx.moe[l].logits, bias, N, spec));
  }
  return margin;
}

TEST(Moe, RegistryHoldsExpertsOnMoeLayersOnly) {
  const ModelConfig m = variants()[2].second;
  const ParamRegistry reg(m);
  EXPECT_EQ(reg.at("model.layers.0.mlp.gate_proj.weight").numel, m.ffn_hidden * m.hidden);
  EXPECT_THROW(reg.at("model.layers.0.mlp.gate.weight"), Error);
  EXPECT_EQ(reg.at("model.layers.1.mlp.gate.weight").shape, (Shape{8, 12}));
  EXPECT_EQ(reg.at("model.layers.1.mlp.gate.e_score_correction_bias").shape, (Shape{8}));
  EXPECT_EQ(reg.at("model.layers.1.mlp.experts.gate_up_proj").numel, 8 * 2 * 6 * 12);
  EXPECT_EQ(reg.at("model.layers.2.mlp.experts.down_proj").numel, 8 * 12 * 6);
  EXPECT_EQ(reg.at("model.layers.2.mlp.shared_experts.down_proj.weight").shape, (Shape{12, 8}));
  EXPECT_THROW(reg.at("model.layers.1.mlp.gate_proj.weight"), Error);
  // the expert split over two tensor ranks: each expert's gate and up rows halved
  const ParamRegistry r1(m, {1, 2});
  const auto& w = r1.at("model.layers.1.mlp.experts.gate_up_proj");
  ASSERT_EQ(w.row_ranges.size(), 16u);
  EXPECT_EQ(w.row_ranges[0], (std::pair<int64_t, int64_t>{3, 6}));    // expert 0's gate, second half
  EXPECT_EQ(w.row_ranges[1], (std::pair<int64_t, int64_t>{9, 12}));   // expert 0's up
  EXPECT_EQ(w.row_ranges[2], (std::pair<int64_t, int64_t>{15, 18}));  // expert 1's gate
  EXPECT_EQ(r1.at("model.layers.1.mlp.experts.down_proj").col_begin, 3);
}

// Expert parallelism's shard of the registry: each rank of an expert group
// holds its own experts' blocks of the expert-major weights (with the tensor
// split inside them), everything else in full; the shards of every (tensor,
// expert) rank, initialised on their own, consolidate to the single-rank
// model bit for bit, each global element held by exactly one of them.
TEST(Moe, ExpertShardsHoldTheirExpertsAndConsolidateToTheWholeModel) {
  const ModelConfig m = variants()[2].second;  // 8 experts, shared experts, a dense layer
  const ParamRegistry whole(m);
  std::vector<double> ref(size_t(consolidated_numel(m)));
  {
    std::vector<double> buf(size_t(whole.total()));
    whole.initialize(buf.data(), 7);
    consolidate(ref.data(), m, {{&whole, buf.data()}});
  }
  const ParamRegistry r(m, {0, 1}, {}, {1, 4});  // experts 2 and 3 of 8
  const auto& w = r.at("model.layers.1.mlp.experts.gate_up_proj");
  EXPECT_EQ(w.row_ranges,
            (std::vector<std::pair<int64_t, int64_t>>{{24, 30}, {30, 36}, {36, 42}, {42, 48}}));  // gate, up of 2 and 3
  EXPECT_EQ(w.shape, (Shape{2 * 2 * 6, 12}));
  EXPECT_EQ(r.at("model.layers.2.mlp.experts.down_proj").shape, (Shape{2 * 12, 6}));
  EXPECT_EQ(r.at("model.layers.1.mlp.gate.weight").shape, (Shape{8, 12}));  // the router sees every expert
  EXPECT_EQ(r.at("model.layers.2.mlp.shared_experts.down_proj.weight").shape, (Shape{12, 8}));
  for (int t : {1, 2})
    for (int ep : {2, 4, 8}) {
      std::vector<std::unique_ptr<ParamRegistry>> regs;
      std::vector<std::vector<double>> bufs;
      std::vector<std::pair<const ParamRegistry*, const double*>> parts;
      for (int tr = 0; tr < t; ++tr)
        for (int er = 0; er < ep; ++er) {
          regs.push_back(
              std::make_unique<ParamRegistry>(m, TensorShard{tr, t}, std::vector<ChunkSpec>{}, ExpertShard{er, ep}));
          bufs.emplace_back(size_t(regs.back()->total()));
          regs.back()->initialize(bufs.back().data(), 7);
        }
      for (size_t i = 0; i < regs.size(); ++i) parts.push_back({regs[i].get(), bufs[i].data()});
      std::vector<double> got(ref.size(), std::nan(""));
      consolidate(got.data(), m, parts);
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(double)), 0)
          << "tensor " << t << " x expert " << ep;
      // the routed experts' elements are split, not repeated: each rank holds 1/(t ep) of them
      const int64_t expert_elems = whole.at("model.layers.1.mlp.experts.gate_up_proj").numel;
      EXPECT_EQ(regs[0]->at("model.layers.1.mlp.experts.gate_up_proj").numel * t * ep, expert_elems);
    }
  EXPECT_THROW(ParamRegistry(m, {0, 1}, {}, {0, 3}), Error);  // 8 experts over 3 ranks
}

TEST(Moe, GradientsMatchFiniteDifferences) {
  for (auto [name, m] : variants()) {
    const int64_t B = 2, N = B * m.seq_len;
    Transformer<double> net(m, 7);
    set_bias(net);
    auto ctx = net.make_activations(B, Recompute::none);
    Batch batch(N, m.vocab, 3);
    // dscale 1/N: the balancing losses' scale is dscale x B x T = 1
    net.forward(*ctx, batch.tokens.data(), batch.targets.data(), 1.0 / double(N));
    net.backward(*ctx, Recompute::none);
    const auto [aux, z] = net.balance_losses(*ctx);
    ASSERT_GT(min_router_margin(net, *ctx, N), 1e-4) << name << ": a route near a tie (the differences step 1e-6)";
    EXPECT_GT(aux, 0) << name;
    EXPECT_GT(z, 0) << name;
    double* P = net.params().data<double>();
    const double* G = net.grads().data<double>();
    auto loss = [&] {
      const double lm = net.forward(*ctx, batch.tokens.data(), batch.targets.data(), 0.0) / double(N);
      const auto [a, zz] = net.balance_losses(*ctx);
      return lm + a + zz;
    };
    for (const auto& p : net.registry().params()) {
      std::vector<double> x(P + p.offset, P + p.offset + p.numel), g(G + p.offset, G + p.offset + p.numel);
      if (p.kind == ParamKind::buffer) {  // no gradient: the slot holds the tokens per expert
        double sum = 0;
        for (double v : g) {
          EXPECT_EQ(v, std::round(v)) << name << " " << p.name;
          sum += v;
        }
        EXPECT_EQ(sum, double(N * m.moe.top_k)) << name << " " << p.name;
        continue;
      }
      auto f = [&] {
        std::memcpy(P + p.offset, x.data(), sizeof(double) * size_t(p.numel));
        return loss();
      };
      test::expect_fd_gradient(name + " " + p.name, x, g, f, 1e-6, 8, 1e-5);
      std::memcpy(P + p.offset, x.data(), sizeof(double) * size_t(p.numel));
    }
  }
}

// The balancing losses' gradients carry the loss's scale (dscale x B x T):
// doubling dscale doubles every gradient, the router's included (an aux
// gradient without the scale would not move).
TEST(Moe, BalancingGradientFollowsTheLossScale) {
  const ModelConfig m = tiny_moe();
  const int64_t B = 2, N = B * m.seq_len;
  Batch batch(N, m.vocab, 5);
  std::vector<double> g[2];
  for (int run = 0; run < 2; ++run) {
    Transformer<double> net(m, 7);
    auto ctx = net.make_activations(B, Recompute::none);
    net.forward(*ctx, batch.tokens.data(), batch.targets.data(), (run + 1) * 0.01);
    net.backward(*ctx, Recompute::none, false);
    const auto& p = net.registry().at("model.layers.1.mlp.gate.weight");
    g[run].assign(net.grads().data<double>() + p.offset, net.grads().data<double>() + p.offset + p.numel);
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g[0].size(); ++i) diff += std::pow(g[1][i] - 2 * g[0][i], 2), norm += g[1][i] * g[1][i];
  EXPECT_LT(std::sqrt(diff / norm), 1e-12);
}

TEST(Moe, SameBitsOnASecondRunAndFloatNearDouble) {
  for (auto [name, m] : variants()) {
    m.hidden = 32, m.heads = 4, m.ffn_hidden = 48, m.seq_len = 16, m.vocab = 40, m.init_std = 0.02;
    m.moe.ffn_hidden = 24;
    const int64_t B = 3, N = B * m.seq_len;
    Batch batch(N, m.vocab, 5);
    std::vector<float> first;
    double loss[2];
    for (int run = 0; run < 2; ++run) {
      Transformer<float> f(m, 11);
      set_bias(f);
      auto cf = f.make_activations(B, Recompute::none);
      loss[run] = f.forward(*cf, batch.tokens.data(), batch.targets.data(), 1.0f / float(N));
      f.backward(*cf, Recompute::none, false);
      const float* g = f.grads().data<float>();
      if (run == 0)
        first.assign(g, g + f.registry().total());
      else
        EXPECT_EQ(0, std::memcmp(first.data(), g, first.size() * sizeof(float))) << name;
    }
    EXPECT_EQ(loss[0], loss[1]) << name;
    Transformer<double> d(m, 11);
    set_bias(d);
    auto cd = d.make_activations(B, Recompute::none);
    const double ld = d.forward(*cd, batch.tokens.data(), batch.targets.data(), 1.0 / double(N));
    ASSERT_GT(min_router_margin(d, *cd, N), 1e-4) << name << ": a route near a tie (float rounds it)";
    d.backward(*cd, Recompute::none, false);
    EXPECT_NEAR(loss[0] / ld, 1.0, 1e-6) << name;
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < d.registry().total(); ++i) {
      const double a = d.grads().data<double>()[i], b = first[size_t(i)];
      diff += (a - b) * (a - b), norm += a * a;
    }
    EXPECT_LT(std::sqrt(diff / norm), 1e-4) << name;
  }
}

// Gradients as a whole: relative L2 distance.
double distance(const Tensor& a, const Tensor& b, int64_t n) {
  double d = 0, s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = a.data<double>()[i], y = b.data<double>()[i];
    d += (x - y) * (x - y), s += x * x;
  }
  return std::sqrt(d / std::max(s, 1e-300));
}

TEST(Moe, RecomputeAndSplitBackwardGiveThePlainGradients) {
  for (auto [name, m] : variants()) {
    const int64_t B = 2, N = B * m.seq_len;
    Batch b1(N, m.vocab, 31), b2(N, m.vocab, 32);
    Transformer<double> plain(m, 5);
    set_bias(plain);
    auto cp = plain.make_activations(B, Recompute::none);
    int micro = 0;
    for (Batch* b : {&b1, &b2}) {
      plain.forward(*cp, b->tokens.data(), b->targets.data(), 0.5);
      plain.backward(*cp, Recompute::none, micro++ > 0);
    }
    for (Recompute r : {Recompute::selective, Recompute::full}) {
      Transformer<double> net(m, 5);
      set_bias(net);
      auto c = net.make_activations(B, r);
      micro = 0;
      for (Batch* b : {&b1, &b2}) {
        net.forward(*c, b->tokens.data(), b->targets.data(), 0.5);
        net.backward(*c, r, micro++ > 0);
      }
      EXPECT_EQ(0, std::memcmp(plain.grads().raw(), net.grads().raw(), net.grads().nbytes()))
          << name << " recompute " << enum_name(r);
    }
    Transformer<double> split(m, 5);
    set_bias(split);
    auto s1 = split.make_activations(B, Recompute::selective, 0, true);
    auto s2 = split.make_activations(B, Recompute::selective, 0, true);
    split.forward(*s1, b1.tokens.data(), b1.targets.data(), 0.5);
    split.backward_chunk(*s1, nullptr, Recompute::selective, false, BackwardPart::input);
    split.forward(*s2, b2.tokens.data(), b2.targets.data(), 0.5);
    split.backward_chunk(*s2, nullptr, Recompute::selective, true, BackwardPart::input);
    split.backward_chunk(*s1, nullptr, Recompute::selective, false, BackwardPart::weight);
    split.backward_chunk(*s2, nullptr, Recompute::selective, true, BackwardPart::weight);
    EXPECT_LE(distance(plain.grads(), split.grads(), plain.registry().total()), 1e-12) << name << " split";
  }
}

TEST(Moe, ExpertsWithoutTokensGetZeroGradients) {
  ModelConfig m = tiny_moe();
  m.moe.experts = 16, m.moe.top_k = 1;  // 10 tokens, 16 experts: some receive none
  const int64_t B = 2, N = B * m.seq_len;
  Batch batch(N, m.vocab, 8);
  Transformer<double> ref(m, 3), net(m, 3);
  auto c1 = ref.make_activations(B, Recompute::none), c2 = net.make_activations(B, Recompute::none);
  ref.forward(*c1, batch.tokens.data(), batch.targets.data(), 0.5);
  ref.backward(*c1, Recompute::none, false);
  std::fill(net.grads().data<double>(), net.grads().data<double>() + net.registry().total(), 123.0);
  net.forward(*c2, batch.tokens.data(), batch.targets.data(), 0.5);
  net.backward(*c2, Recompute::none, false);
  EXPECT_EQ(0, std::memcmp(ref.grads().raw(), net.grads().raw(), net.grads().nbytes()));
  int64_t idle = 0;
  for (int64_t e = 0; e < 16; ++e) idle += c2->moe[1].offsets[size_t(e + 1)] == c2->moe[1].offsets[size_t(e)];
  EXPECT_GT(idle, 0);
  const auto& p = net.registry().at("model.layers.1.mlp.experts.down_proj");
  for (int64_t i = 0; i < p.numel; ++i) ASSERT_NE(net.grads().data<double>()[p.offset + i], 123.0);
}

TEST(Moe, PipelineChunksMatchWholeModel) {
  ModelConfig m = variants()[1].second;
  m.layers = 4;
  const int64_t B = 2, N = B * m.seq_len, C = m.hidden;
  Batch batch(N, m.vocab, 41);
  Transformer<double> whole(m, 9);
  auto cw = whole.make_activations(B, Recompute::none);
  const double want = whole.forward(*cw, batch.tokens.data(), batch.targets.data(), 1.0);
  whole.backward(*cw, Recompute::none, false);
  Transformer<double> r0(m, 9, {.chunks = pipeline_chunks(m, 2, 1, {}, 0, ScheduleKind::one_f_one_b)});
  Transformer<double> r1(m, 9, {.chunks = pipeline_chunks(m, 2, 1, {}, 1, ScheduleKind::one_f_one_b)});
  auto c0 = r0.make_activations(B, Recompute::none), c1 = r1.make_activations(B, Recompute::none);
  double loss = r0.forward_chunk(*c0, batch.tokens.data(), nullptr, nullptr, 1.0);
  loss += r1.forward_chunk(*c1, nullptr, c0->x_final, batch.targets.data(), 1.0);
  EXPECT_NEAR(loss, want, 1e-12 * std::abs(want));
  r1.backward_chunk(*c1, nullptr, Recompute::none, false);
  std::vector<double> d(r1.input_grad(*c1), r1.input_grad(*c1) + N * C);
  r0.backward_chunk(*c0, d.data(), Recompute::none, false);
  std::vector<double> got(size_t(consolidated_numel(m))), ref(got.size());
  consolidate(got.data(), m,
              {{&r0.registry(), r0.grads().data<double>()}, {&r1.registry(), r1.grads().data<double>()}});
  consolidate(ref.data(), m, {whole.grads().data<double>()});
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff += (got[i] - ref[i]) * (got[i] - ref[i]), norm += ref[i] * ref[i];
  EXPECT_LE(std::sqrt(diff / norm), 1e-12);
}

// The planner's activation formula counts what an MoE model allocates.
TEST(Moe, ActivationFormulaMatchesTheAllocation) {
  for (auto [name, m] : variants())
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
      Transformer<float> net(m, 1);
      auto ctx = net.make_activations(3, r);
      int64_t got = 0;
      for (const auto& t : ctx->storage) got += t.numel();
      const ActivationShape shape{3, 1, false, r, false};
      EXPECT_EQ(got, activation_elements(m, shape, m.layers, true, moe_layers_in(m, 0, m.layers)))
          << name << " recompute " << enum_name(r);
    }
}

TEST(Moe, FlopsCountActiveParameters) {
  ModelConfig m = tiny_moe();
  ModelConfig dense = m;
  dense.moe.enabled = false;
  // layers 1 and 2 swap the dense MLP (3 C F) for router E C + k experts (3 C I each)
  const double C = 12, diff = 2 * (C * 4 + 3 * C * 2 * 6 - 3 * C * 20);
  EXPECT_NEAR(flops_per_token(m) - flops_per_token(dense), 6 * diff, 1e-6);
}

}  // namespace
}  // namespace trident::model
