// Whole-model checks: finite-difference gradients of a tiny GPT-2 and LLaMA
// in double precision, float against double, recompute modes give identical
// gradients and smaller activation memory, mesh-independent Philox
// initialisation, the model-FLOPs formula against hand-computed values.
#include <cstring>

#include "core/allocator.hpp"
#include "core/philox.hpp"
#include "model/memory.hpp"
#include "model/qk_clip.hpp"
#include "model/transformer.hpp"
#include "tests/test_util.hpp"

namespace trident::model {

ModelConfig tiny(const std::string& arch) {
  ModelConfig m;
  m.arch = *parse_enum<Arch>(arch);
  m.layers = 2, m.hidden = 12, m.heads = arch == "gpt2" ? 3 : 4, m.kv_heads = arch == "gpt2" ? 3 : 2;
  m.ffn_hidden = 20, m.seq_len = 5, m.vocab = 11, m.init_std = 0.3;
  m.tie_embeddings = arch == "gpt2";
  return m;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
  Batch(int64_t n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < n; ++i) tokens.push_back(int32_t(rng() % vocab)), targets.push_back(int32_t(rng() % vocab));
  }
};

void check_model_fd(const std::string& arch, bool qk_norm = false) {
  ModelConfig m = tiny(arch);
  m.qk_norm = qk_norm;
  const int64_t B = 2, N = B * m.seq_len;
  Transformer<double> net(m, 7);
  auto ctx = net.make_activations(B, Recompute::none);
  Batch batch(N, m.vocab, 3);
  net.forward(*ctx, batch.tokens.data(), batch.targets.data(), 1.0 / double(N));
  net.backward(*ctx, Recompute::none);
  double* P = net.params().data<double>();
  const double* G = net.grads().data<double>();
  auto loss = [&] { return net.forward(*ctx, batch.tokens.data(), batch.targets.data(), 0.0) / double(N); };
  // every parameter tensor, a few elements each
  for (const auto& p : net.registry().params()) {
    std::vector<double> x(P + p.offset, P + p.offset + p.numel), g(G + p.offset, G + p.offset + p.numel);
    auto f = [&] {
      std::memcpy(P + p.offset, x.data(), sizeof(double) * size_t(p.numel));
      return loss();
    };
    test::expect_fd_gradient(arch + " " + p.name, x, g, f, 1e-6, 6, 1e-5);
    std::memcpy(P + p.offset, x.data(), sizeof(double) * size_t(p.numel));
  }
}

TEST(Model, Gpt2GradientsMatchFiniteDifferences) { check_model_fd("gpt2"); }
TEST(Model, LlamaGradientsMatchFiniteDifferences) { check_model_fd("llama"); }
TEST(Model, QkNormGradientsMatchFiniteDifferences) { check_model_fd("llama", true); }

TEST(Model, FloatMatchesDouble) {
  for (std::string arch : {"gpt2", "llama"}) {
    ModelConfig m = tiny(arch);
    m.hidden = 32, m.heads = 4, m.kv_heads = arch == "gpt2" ? 4 : 2, m.ffn_hidden = 48, m.seq_len = 16, m.vocab = 40;
    m.init_std = 0.02;
    const int64_t B = 3, N = B * m.seq_len;
    Transformer<double> d(m, 11);
    Transformer<float> f(m, 11);
    Batch batch(N, m.vocab, 5);
    auto cd = d.make_activations(B, Recompute::none);
    auto cf = f.make_activations(B, Recompute::none);
    double ld = d.forward(*cd, batch.tokens.data(), batch.targets.data(), 1.0 / double(N));
    double lf = f.forward(*cf, batch.tokens.data(), batch.targets.data(), 1.0f / float(N));
    d.backward(*cd, Recompute::none);
    f.backward(*cf, Recompute::none);
    EXPECT_NEAR(lf / ld, 1.0, 1e-6) << arch;
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < d.registry().total(); ++i) {
      double a = d.grads().data<double>()[i], b = f.grads().data<float>()[i];
      diff += (a - b) * (a - b), norm += a * a;
    }
    EXPECT_LT(std::sqrt(diff / norm), 1e-4) << arch << " relative gradient difference";
  }
}

TEST(Model, RecomputeGivesIdenticalGradientsAndLessMemory) {
  for (std::string arch : {"gpt2", "llama"}) {
    ModelConfig m = tiny(arch);
    m.layers = 3, m.hidden = 32, m.heads = 4, m.kv_heads = arch == "gpt2" ? 4 : 2, m.ffn_hidden = 64;
    m.seq_len = 32, m.vocab = 50;
    const int64_t B = 4, N = B * m.seq_len;
    Batch batch(N, m.vocab, 9);
    std::vector<float> ref;
    int64_t act_bytes[3];
    Recompute modes[3] = {Recompute::none, Recompute::selective, Recompute::full};
    for (int i = 0; i < 3; ++i) {
      Transformer<float> net(m, 1);
      int64_t before = HostAllocator::instance().stats().current[int(MemCategory::activations)];
      auto ctx = net.make_activations(B, modes[i]);
      act_bytes[i] = HostAllocator::instance().stats().current[int(MemCategory::activations)] - before;
      for (int micro = 0; micro < 2; ++micro) {  // accumulation too
        net.forward(*ctx, batch.tokens.data(), batch.targets.data(), 1.0f / float(N));
        net.backward(*ctx, modes[i]);
      }
      const float* g = net.grads().data<float>();
      if (i == 0)
        ref.assign(g, g + net.registry().total());
      else
        EXPECT_EQ(0, std::memcmp(ref.data(), g, ref.size() * sizeof(float))) << arch << " recompute mode " << i;
    }
    EXPECT_LT(act_bytes[1], act_bytes[0]) << arch;
    EXPECT_LT(act_bytes[2], act_bytes[1]) << arch;
    // selective saves exactly the attention log-sum-exp of all layers but one
    EXPECT_EQ(act_bytes[0] - act_bytes[1], int64_t(sizeof(float)) * (m.layers - 1) * B * m.heads * m.seq_len);
  }
}

TEST(Model, FirstMicroBatchOverwritesGradients) {
  for (std::string arch : {"gpt2", "llama"}) {
    ModelConfig m = tiny(arch);
    const int64_t B = 2, N = B * m.seq_len;
    Batch b1(N, m.vocab, 21), b2(N, m.vocab, 22);
    Transformer<float> ref(m, 3), net(m, 3);
    auto c1 = ref.make_activations(B, Recompute::none), c2 = net.make_activations(B, Recompute::none);
    for (Batch* b : {&b1, &b2}) {  // reference: zeroed, then accumulate both
      ref.forward(*c1, b->tokens.data(), b->targets.data(), 0.5f);
      ref.backward(*c1, Recompute::none);
    }
    float* g = net.grads().data<float>();
    std::fill(g, g + net.registry().total(), 123.0f);  // stale gradients from an earlier step
    net.forward(*c2, b1.tokens.data(), b1.targets.data(), 0.5f);
    net.backward(*c2, Recompute::none, /*accumulate=*/false);
    net.forward(*c2, b2.tokens.data(), b2.targets.data(), 0.5f);
    net.backward(*c2, Recompute::none, /*accumulate=*/true);
    const float* r = ref.grads().data<float>();
    for (const auto& p : net.registry().params())  // bitwise: 0 + x == x
      EXPECT_EQ(0, std::memcmp(g + p.offset, r + p.offset, sizeof(float) * size_t(p.numel))) << arch << " " << p.name;
  }
}

// model.mtp.loss_weight 0 (in range) trains the main model exactly as
// without multi-token prediction: the depths' loss gradients are zero, not
// the logits left where the gradients belong.
TEST(Model, MtpWeightZeroGivesTheModelWithoutMtpGradients) {
  ModelConfig m = tiny("llama"), with = m;
  with.mtp = {1, 0.0};
  const int64_t B = 2, N = B * m.seq_len;
  Batch b(N, m.vocab, 31);
  Transformer<double> plain(m, 5), net(with, 5);
  auto c1 = plain.make_activations(B, Recompute::none), c2 = net.make_activations(B, Recompute::none);
  const double l1 = plain.forward(*c1, b.tokens.data(), b.targets.data(), 1.0 / double(N));
  const double l2 = net.forward(*c2, b.tokens.data(), b.targets.data(), 1.0 / double(N));
  EXPECT_EQ(l1, l2);
  plain.backward(*c1, Recompute::none);
  net.backward(*c2, Recompute::none);
  const double *g1 = plain.grads().data<double>(), *g2 = net.grads().data<double>();
  int matched = 0;
  for (const auto& p : net.registry().params()) {
    const ParamSpec* q = nullptr;
    for (const auto& r : plain.registry().params()) q = r.name == p.name ? &r : q;
    for (int64_t i = 0; i < p.numel; ++i) {
      const double want = q ? g1[q->offset + i] : 0.0;  // the prediction module's own: zero
      ASSERT_NEAR(g2[p.offset + i], want, 1e-12 * (1 + std::abs(want))) << p.name << " element " << i;
    }
    matched += q != nullptr;
  }
  EXPECT_EQ(matched, int(plain.registry().params().size()));
}

// Split backward (zero-bubble pipelines): the input pass, then the weight
// pass, give the full backward's gradients, over two accumulated micro-batches.
TEST(Model, SplitBackwardMatchesFullBackward) {
  for (std::string arch : {"gpt2", "llama"}) {
    ModelConfig m = tiny(arch);
    const int64_t B = 2, N = B * m.seq_len;
    Batch b1(N, m.vocab, 31), b2(N, m.vocab, 32);
    Transformer<double> full(m, 5), split(m, 5);
    auto cf = full.make_activations(B, Recompute::selective);
    auto cs1 = split.make_activations(B, Recompute::selective, 0, true);
    auto cs2 = split.make_activations(B, Recompute::selective, 0, true);
    int micro = 0;
    for (Batch* b : {&b1, &b2}) {
      full.forward(*cf, b->tokens.data(), b->targets.data(), 0.5);
      full.backward(*cf, Recompute::selective, micro > 0);
      ++micro;
    }
    // both input passes first, then both weight passes (as a zero-bubble schedule may)
    split.forward(*cs1, b1.tokens.data(), b1.targets.data(), 0.5);
    split.backward_chunk(*cs1, nullptr, Recompute::selective, false, BackwardPart::input);
    split.forward(*cs2, b2.tokens.data(), b2.targets.data(), 0.5);
    split.backward_chunk(*cs2, nullptr, Recompute::selective, true, BackwardPart::input);
    split.backward_chunk(*cs1, nullptr, Recompute::selective, false, BackwardPart::weight);
    split.backward_chunk(*cs2, nullptr, Recompute::selective, true, BackwardPart::weight);
    for (const auto& p : full.registry().params()) {
      double d = 0, n = 0;
      for (int64_t i = 0; i < p.numel; ++i) {
        double a = full.grads().data<double>()[p.offset + i], b = split.grads().data<double>()[p.offset + i];
        d += (a - b) * (a - b), n += a * a;
      }
      EXPECT_LE(std::sqrt(d / std::max(n, 1e-300)), 1e-12) << arch << " " << p.name;
    }
  }
}

// The model cut into pipeline chunks (2 stages x 2 virtual stages, two
// objects standing for the two ranks, activations handed over by hand) gives
// the whole model's loss and gradients; the last stage's copy of a tied
// embedding starts equal and its gradient, added to the first stage's, is
// the whole model's.
TEST(Model, PipelineChunksMatchWholeModel) {
  for (std::string arch : {"gpt2", "llama"}) {
    ModelConfig m = tiny(arch);
    m.layers = 4;
    const int64_t B = 2, N = B * m.seq_len, C = m.hidden;
    Batch batch(N, m.vocab, 41);
    Transformer<double> whole(m, 9);
    auto cw = whole.make_activations(B, Recompute::none);
    const double want = whole.forward(*cw, batch.tokens.data(), batch.targets.data(), 1.0);
    whole.backward(*cw, Recompute::none, false);
    Transformer<double> r0(m, 9, {.chunks = pipeline_chunks(m, 2, 2, {}, 0, ScheduleKind::interleaved_1f1b)});
    Transformer<double> r1(m, 9, {.chunks = pipeline_chunks(m, 2, 2, {}, 1, ScheduleKind::interleaved_1f1b)});
    ASSERT_EQ(r0.num_chunks(), 2);
    EXPECT_TRUE(r0.chunk(0).embedding && !r0.chunk(0).head && r1.chunk(1).head && !r1.chunk(1).embedding);
    Transformer<double>* owner[4] = {&r0, &r1, &r0, &r1};  // global chunk c = v * 2 + rank
    std::vector<std::unique_ptr<Activations<double>>> ctx;
    for (int c = 0; c < 4; ++c) ctx.push_back(owner[c]->make_activations(B, Recompute::none, c / 2));
    double loss = 0;
    for (int c = 0; c < 4; ++c)
      loss += owner[c]->forward_chunk(*ctx[size_t(c)], batch.tokens.data(),
                                      c > 0 ? ctx[size_t(c - 1)]->x_final : nullptr, batch.targets.data(), 1.0);
    EXPECT_NEAR(loss, want, 1e-12 * std::abs(want)) << arch;
    std::vector<double> d(static_cast<size_t>(N * C));
    for (int c = 3; c >= 0; --c) {
      owner[c]->backward_chunk(*ctx[size_t(c)], c < 3 ? d.data() : nullptr, Recompute::none, false);
      if (c > 0)
        std::copy(owner[c]->input_grad(*ctx[size_t(c)]), owner[c]->input_grad(*ctx[size_t(c)]) + N * C, d.begin());
    }
    if (m.tie_embeddings) {  // the embedding group's all-reduce, by hand
      const auto& copy = r1.registry().params().back();
      ASSERT_TRUE(copy.tied_copy);
      const auto& table = r0.registry().at(copy.name);
      EXPECT_EQ(0, std::memcmp(r0.params().data<double>() + table.offset, r1.params().data<double>() + copy.offset,
                               sizeof(double) * size_t(copy.numel)));
      for (int64_t i = 0; i < copy.numel; ++i)
        r0.grads().data<double>()[table.offset + i] += r1.grads().data<double>()[copy.offset + i];
    }
    std::vector<double> got(size_t(consolidated_numel(m))), ref(got.size());
    consolidate(got.data(), m,
                {{&r0.registry(), r0.grads().data<double>()}, {&r1.registry(), r1.grads().data<double>()}});
    consolidate(ref.data(), m, {whole.grads().data<double>()});
    double diff = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff += (got[i] - ref[i]) * (got[i] - ref[i]), norm += ref[i] * ref[i];
    EXPECT_LE(std::sqrt(diff / norm), 1e-12) << arch;
  }
}

TEST(Model, RegistryFollowsHuggingFaceNames) {
  ModelConfig g = tiny("gpt2");
  ParamRegistry rg(g);
  EXPECT_EQ(rg.params().front().name, "transformer.wte.weight");
  EXPECT_EQ(rg.at("transformer.h.1.attn.c_attn.weight").shape, (Shape{3 * g.hidden, g.hidden}));
  EXPECT_EQ(rg.at("transformer.h.0.mlp.c_proj.weight").shape, (Shape{g.hidden, g.ffn_hidden}));
  EXPECT_THROW(rg.at("lm_head.weight"), Error);  // tied
  ModelConfig l = tiny("llama");
  ParamRegistry rl(l);
  EXPECT_EQ(rl.at("model.layers.1.self_attn.k_proj.weight").shape, (Shape{l.kv_heads * l.head_dim(), l.hidden}));
  // q, k, v adjacent (the fused QKV weight); gate, up adjacent
  auto& q = rl.at("model.layers.0.self_attn.q_proj.weight");
  auto& k = rl.at("model.layers.0.self_attn.k_proj.weight");
  auto& v = rl.at("model.layers.0.self_attn.v_proj.weight");
  EXPECT_EQ(q.offset + q.numel, k.offset);
  EXPECT_EQ(k.offset + k.numel, v.offset);
  auto& gate = rl.at("model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(gate.offset + gate.numel, rl.at("model.layers.0.mlp.up_proj.weight").offset);
  EXPECT_EQ(rl.params().back().name, "lm_head.weight");
}

TEST(Model, PhiloxInitIsShardIndependent) {
  const PhiloxKey key = philox_key(1234, "transformer.h.0.attn.c_attn.weight");
  std::vector<float> full(1000), shard(300);
  philox_fill_normal(full.data(), 0, 1000, key, 0.0, 0.02);
  philox_fill_normal(shard.data(), 517, 300, key, 0.0, 0.02);
  EXPECT_EQ(0, std::memcmp(full.data() + 517, shard.data(), 300 * sizeof(float)));
  double mean = 0, var = 0;
  for (float x : full) mean += x;
  mean /= 1000;
  for (float x : full) var += (x - mean) * (x - mean);
  EXPECT_NEAR(std::sqrt(var / 1000), 0.02, 0.002);
  // a different name gives a different stream
  std::vector<float> other(1000);
  philox_fill_normal(other.data(), 0, 1000, philox_key(1234, "transformer.h.1.attn.c_attn.weight"), 0.0, 0.02);
  EXPECT_NE(0, std::memcmp(full.data(), other.data(), 1000 * sizeof(float)));
  // Philox4x32-10 known-answer test (Random123 kat_vectors: counter 0, key 0)
  PhiloxBlock b = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(b[0], 0x6627e8d5u);
  EXPECT_EQ(b[1], 0xe169c58du);
  EXPECT_EQ(b[2], 0xbc57ac4cu);
  EXPECT_EQ(b[3], 0x9b00dbd8u);
}

TEST(Model, FlopsPerTokenMatchesHandComputedValues) {
  ModelConfig g;
  g.arch = Arch::gpt2, g.layers = 12, g.hidden = 768, g.heads = 12, g.kv_heads = 12, g.ffn_hidden = 3072;
  g.seq_len = 1024, g.vocab = 50257;
  // 6 * (12 * 12 * 768^2 + 50257 * 768) + 12 * 12 * 768 * 1024
  EXPECT_DOUBLE_EQ(flops_per_token(g), 854438400.0);
  ModelConfig l;
  l.arch = Arch::llama, l.layers = 32, l.hidden = 4096, l.heads = 32, l.kv_heads = 8, l.ffn_hidden = 14336;
  l.seq_len = 8192, l.vocab = 128256;
  // 6 * (32 * (4096 * 48 * 128 + 4096 * 4096 + 3 * 4096 * 14336) + 128256 * 4096) + 12 * 32 * 4096 * 8192
  EXPECT_DOUBLE_EQ(flops_per_token(l), 57912852480.0);
  // heads of their own size (model.head_dim 160): the projections [48 x 160, 4096] and [4096, 32 x 160], and
  // 6 L T H (D + D) for the scores and values
  l.head_size = 160;
  EXPECT_DOUBLE_EQ(flops_per_token(l), 63147343872.0);
}

}  // namespace trident::model

namespace trident::model {
// The planner's activation formula equals the model's allocation (one rank;
// the tensor-parallel forms are checked in test_tensor_parallel).
TEST(Memory, ActivationFormulaOneRank) {
  for (const char* arch : {"gpt2", "llama", "llama-head-dim"}) {
    ModelConfig m = tiny(std::string(arch).substr(0, 5));
    if (std::string(arch) == "llama-head-dim") m.head_size = 6, m.qk_norm = true;  // Qwen3's: not hidden / heads
    model::Transformer<float> net(m, 1);
    for (auto rc : {model::Recompute::none, model::Recompute::selective, model::Recompute::full})
      for (bool split : {false, true}) {
        const MemStats before = HostAllocator::instance().stats();
        auto ctx = net.make_activations(3, rc, 0, split);
        int64_t got = 0;
        for (const auto& t : ctx->storage) got += t.numel();
        const model::ActivationShape shape{3, 1, false, rc, split};
        EXPECT_EQ(got, model::activation_elements(m, shape, m.layers, true)) << arch;
        // a second context of the chunk allocates only its own part: recomputation's set is shared
        const int64_t grew = HostAllocator::instance().stats().current[size_t(MemCategory::activations)] -
                             before.current[size_t(MemCategory::activations)];
        auto ctx2 = net.make_activations(3, rc, 0, split);
        const int64_t grew2 = HostAllocator::instance().stats().current[size_t(MemCategory::activations)] -
                              before.current[size_t(MemCategory::activations)] - grew;
        EXPECT_EQ(grew2, int64_t(sizeof(float)) * got) << arch;
        if (rc != model::Recompute::none && !split) {
          EXPECT_EQ(ctx->layers[0].lse, ctx2->layers[0].lse) << arch;
          EXPECT_GE(grew, int64_t(sizeof(float)) * (got + model::shared_recompute_elements(m, shape, m.layers)));
        }
      }
  }
}
// Multi-head latent attention: the formula counts its latents and the padded
// value heads (with and without a query latent, every recompute mode, split
// backward), and its FLOPs are the projections' and 6 L T H (Dq + Dv).
TEST(Memory, ActivationFormulaMla) {
  for (int64_t q_lora : {0, 7}) {
    ModelConfig m = tiny("llama");
    m.kv_heads = m.heads, m.attention = AttentionKind::mla, m.mla = {q_lora, 5, 4, 2, 3};
    model::Transformer<float> net(m, 1);
    for (auto rc : {model::Recompute::none, model::Recompute::selective, model::Recompute::full})
      for (bool split : {false, true}) {
        auto ctx = net.make_activations(3, rc, 0, split);
        int64_t got = 0;
        for (const auto& t : ctx->storage) got += t.numel();
        EXPECT_EQ(got, model::activation_elements(m, {3, 1, false, rc, split}, m.layers, true)) << "q_lora " << q_lora;
      }
  }
}

// Sliding-window layers: their queries span min(T, window) keys, the full
// layers and the multi-token prediction blocks T.
TEST(Model, SlidingWindowFlopsPerToken) {
  ModelConfig m = tiny("llama");
  m.layers = 4, m.seq_len = 64;
  const double full = flops_per_token(m), per_layer_key = 6.0 * double(m.heads) * 2 * double(m.head_dim());
  m.sliding_window = 16,
  m.layer_types = {LayerAttention::sliding, LayerAttention::full, LayerAttention::sliding, LayerAttention::full};
  EXPECT_DOUBLE_EQ(flops_per_token(m), full - 2 * (64 - 16) * per_layer_key);
  m.layer_types.clear();  // every layer sliding
  EXPECT_DOUBLE_EQ(flops_per_token(m), full - 4 * (64 - 16) * per_layer_key);
  m.sliding_window = 1000;  // wider than the sequence: nothing changes
  EXPECT_DOUBLE_EQ(flops_per_token(m), full);
}

TEST(Model, MlaFlopsPerToken) {
  ModelConfig m = tiny("llama");
  m.layers = 3, m.hidden = 16, m.heads = 4, m.kv_heads = 4, m.ffn_hidden = 24, m.seq_len = 7, m.vocab = 13;
  m.attention = AttentionKind::mla, m.mla = {10, 6, 4, 4, 3};
  // per layer: q_a 16x10 + q_b 10x(4x8) + kv_a 16x(6+4) + kv_b 6x(4x7) + o (4x3)x16 = 1000; MLP 3 x 16 x 24 = 1152
  // 6 x (3 x (1000 + 1152) + 13 x 16) + 6 x 3 x 7 x 4 x (8 + 3) = 39984 + 5544
  EXPECT_DOUBLE_EQ(flops_per_token(m), 45528.0);
  m.mla.q_lora_rank = 0;  // q_proj 16 x 32 replaces q_a and q_b (160 + 320)
  EXPECT_DOUBLE_EQ(flops_per_token(m), 45528.0 + 6 * 3 * (512 - 480));
  // multi-token prediction, 2 depths: each a block (1032 + 1152), eh_proj 2 x 16^2, the head 13 x 16, attention
  m.mtp.depth = 2;
  EXPECT_DOUBLE_EQ(flops_per_token(m), 45528.0 + 6 * 3 * 32 + 2 * (6 * (1032 + 1152 + 512 + 208) + 6 * 7 * 4 * 11));
}

// The activation formula with multi-token prediction (2 depths, MoE blocks
// after a dense layer, MLA) in every recompute mode: the head chunk's
// blocks and buffers.
TEST(Memory, ActivationFormulaMtp) {
  ModelConfig m = tiny("llama");
  m.kv_heads = m.heads, m.attention = AttentionKind::mla, m.mla = {7, 5, 4, 2, 3}, m.mtp = {2, 0.3};
  m.moe.enabled = true, m.moe.experts = 4, m.moe.top_k = 2, m.moe.ffn_hidden = 5, m.moe.first_dense = 1;
  model::Transformer<float> net(m, 1);
  for (auto rc : {model::Recompute::none, model::Recompute::selective, model::Recompute::full})
    for (bool split : {false, true}) {
      auto ctx = net.make_activations(3, rc, 0, split);
      int64_t got = 0;
      for (const auto& t : ctx->storage) got += t.numel();
      EXPECT_EQ(got, model::activation_elements(m, {3, 1, false, rc, split}, m.layers, true,
                                                model::moe_layers_in(m, 0, m.layers)))
          << enum_name(rc) << (split ? " split" : "");
    }
}

TEST(Model, DecayRangesSkipNormsBiasesEmbeddings) {
  ModelConfig m;
  m.arch = Arch::gpt2, m.layers = 1, m.hidden = 8, m.heads = 2, m.kv_heads = 2, m.ffn_hidden = 16, m.seq_len = 4,
  m.vocab = 10;
  ParamRegistry reg(m);
  OptimConfig o;
  o.weight_decay = 0.1;
  auto ranges = decay_ranges(reg, o);
  int64_t decayed = 0, covered = 0;
  for (auto& r : ranges) covered += r.size, decayed += r.weight_decay > 0 ? r.size : 0;
  EXPECT_EQ(covered, reg.total());
  EXPECT_EQ(decayed, 3 * 64 + 64 + 16 * 8 + 8 * 16);  // the four matmul weights only
  o.decay_embeddings = o.decay_norms_and_biases = true;
  auto all = decay_ranges(reg, o);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].weight_decay, 0.1);
}

// Muon's matrices (optim.name muon): a LLaMA-family MoE with a dense first
// layer, a shared expert, the router's bias and the experts' biases. Each
// hidden weight is one matrix (q, k, v, o, gate, up, down), each expert's
// gate, up and down one each; the embeddings, head, norms, biases, routers
// and the shared-expert gate are AdamW's. Muon's and AdamW's elements are
// disjoint and together the decay ranges' (every parameter but buffers).
TEST(Model, MuonMatricesAreTheHiddenWeights) {
  ModelConfig m = tiny("llama");
  m.moe.enabled = true, m.moe.experts = 4, m.moe.top_k = 2, m.moe.ffn_hidden = 5, m.moe.first_dense = 1;
  m.moe.shared_experts = 1, m.moe.shared_ffn_hidden = 8, m.moe.shared_expert_gate = true;
  m.moe.router_bias = m.moe.expert_bias = true;
  ParamRegistry reg(m);
  const auto matrices = muon_matrices(reg, m, 0, reg.total(), false);
  const int64_t C = m.hidden, D = m.head_dim(), H = m.heads, KV = m.kv_heads;
  // layer 0: q, k, v, o, gate, up, down; layer 1: q, k, v, o, 4 experts x (gate, up, down), shared gate/up/down
  ASSERT_EQ(matrices.size(), size_t(7 + 4 + 4 * 3 + 3));
  EXPECT_EQ(matrices[0].rows * 1000 + matrices[0].cols, H * D * 1000 + C);   // q_proj
  EXPECT_EQ(matrices[1].rows * 1000 + matrices[1].cols, KV * D * 1000 + C);  // k_proj
  EXPECT_EQ(matrices[3].rows * 1000 + matrices[3].cols, C * 1000 + H * D);   // o_proj
  int64_t expert_in = 0, expert_out = 0, muon = 0;
  for (const auto& x : matrices) {
    muon += x.rows * x.cols;
    expert_in += x.rows == 5 && x.cols == C, expert_out += x.rows == C && x.cols == 5;
  }
  EXPECT_EQ(expert_in, 8);  // 4 experts' gate and up, apart
  EXPECT_EQ(expert_out, 4);
  OptimConfig o;
  const auto all = decay_ranges(reg, o), adamw = without_matrices(all, matrices, 0);
  int64_t covered = 0, rest = 0;
  for (const auto& r : all) covered += r.size;
  for (const auto& r : adamw) {
    rest += r.size;
    for (const auto& x : matrices)  // disjoint from every matrix (each whole in one block)
      EXPECT_TRUE(r.offset + r.size <= x.held[0][0].offset || x.held[0][0].offset + x.rows * x.cols <= r.offset)
          << r.offset;
  }
  EXPECT_EQ(rest + muon, covered);
  int64_t embeddings_and_head = 0;
  for (const auto& p : reg.params()) embeddings_and_head += p.vocab_rows ? p.numel : 0;
  EXPECT_GT(rest, embeddings_and_head);  // norms, biases, routers, the gate too
}

// Muon's matrices sliced over a tensor group (optim/muon.hpp): GPT-2's
// c_attn (three matrices in one column-parallel weight), LLaMA's q, k, v
// with the KV heads replicated (tensor 4 > 2 KV heads) and an MoE's
// experts split by rows and columns. Each matrix is assembled from every
// tensor rank's blocks of its initialised buffer, each element once (equal
// blocks: the same values), and equals the single-rank model's matrix.
TEST(Model, MuonMatricesSlicedOverTheTensorGroup) {
  ModelConfig moe = tiny("llama");
  moe.moe.enabled = true, moe.moe.experts = 4, moe.moe.top_k = 2, moe.moe.ffn_hidden = 8;
  ModelConfig gpt2 = tiny("gpt2");
  gpt2.ffn_hidden = 24;  // split over 3 ranks
  for (const auto& [m, t] : std::vector<std::pair<ModelConfig, int>>{{gpt2, 3}, {tiny("llama"), 4}, {moe, 2}}) {
    ParamRegistry whole(m);
    std::vector<double> ref(size_t(whole.total()));
    whole.initialize(ref.data(), 5);
    const auto single = muon_matrices(whole, m, 0, whole.total(), false);
    std::vector<std::vector<double>> bufs;
    std::vector<std::vector<kernels::MuonMatrix>> per_rank;
    for (int r = 0; r < t; ++r) {
      ParamRegistry reg(m, TensorShard{r, t});
      bufs.emplace_back(size_t(reg.total()));
      reg.initialize(bufs.back().data(), 5);
      per_rank.push_back(muon_matrices(reg, m, 0, reg.total(), true));
      ASSERT_EQ(per_rank.back().size(), single.size());
    }
    int64_t equal_blocks = 0;
    for (size_t i = 0; i < single.size(); ++i) {
      const kernels::MuonMatrix& x = per_rank[0][i];
      ASSERT_EQ(x.rows * 1000 + x.cols, single[i].rows * 1000 + single[i].cols);
      std::vector<double> got(size_t(x.rows * x.cols), 0);
      std::vector<int> seen(got.size(), 0);
      for (int r = 0; r < t; ++r) {
        EXPECT_EQ(per_rank[size_t(r)][i].held.size(), size_t(t));
        for (const auto& b : x.held[size_t(r)]) {
          EXPECT_TRUE(per_rank[size_t(r)][i].held[size_t(r)] == x.held[size_t(r)]);  // every rank sees the same
          for (int64_t a = 0; a < b.rows; ++a)
            for (int64_t c = 0; c < b.cols; ++c) {
              const size_t at = size_t((b.row + a) * x.cols + b.col + c);
              const double v = bufs[size_t(r)][size_t(b.offset + a * b.cols + c)];
              if (seen[at]++) EXPECT_EQ(got[at], v);
              got[at] = v;
            }
          for (int q = 0; q < r; ++q) equal_blocks += std::count(x.held[size_t(q)].begin(), x.held[size_t(q)].end(), b);
        }
      }
      const auto& s = single[i].held[0][0];
      for (size_t e = 0; e < got.size(); ++e) {
        ASSERT_GT(seen[e], 0) << "matrix " << i << " element " << e;
        ASSERT_EQ(got[e], ref[size_t(s.offset) + e]) << "matrix " << i << " element " << e;
      }
    }
    // the replicated KV heads of tensor 4 over 2 KV heads: k and v of each layer, one equal pair each
    EXPECT_EQ(equal_blocks, m.arch == Arch::llama && t == 4 ? m.layers * 2 * 2 : 0);
  }
}

}  // namespace trident::model

namespace trident::model {

// QK-clip (model/qk_clip.hpp) through the model's own attention: a
// training forward records each head's largest logit S_h; with the
// threshold between the heads' maxima and one layer's heads given (the
// others' -inf: no clip), apply() scales that layer's query and key
// weights, and the next forward's largest logit is tau for every clipped
// head of it (all of a head's logits scale by gamma_h = tau / S_h, so its
// largest pair stays the largest) and S_h, to rounding, for every other
// head of it and of the layers before (whose inputs did not change).
// GPT-2 (fused c_attn with biases), LLaMA with grouped queries and q/k
// biases (a clipped and an unclipped head may share a KV head), MLA with
// and without a query latent, multi-token prediction's block included.
TEST(Model, QkClipBringsEveryClippedHeadToTheThreshold) {
  ModelConfig gqa = tiny("llama"), mla = tiny("llama"), mla_direct, gpt2 = tiny("gpt2");
  gqa.attention_bias = true;
  mla.kv_heads = mla.heads, mla.attention = AttentionKind::mla, mla.mla = {7, 5, 4, 2, 3}, mla.mtp = {1, 0.3};
  mla_direct = mla, mla_direct.mla.q_lora_rank = 0, mla_direct.mtp = {};
  int64_t clipped_heads = 0, kept_heads = 0;
  for (ModelConfig m : {gpt2, gqa, mla, mla_direct}) {
    m.init_std = 1.0;  // logits of a few units: room for a threshold between the heads
    const int64_t B = 2, N = B * m.seq_len, H = m.heads, L = m.layers + m.mtp.depth;
    for (int64_t layer = 0; layer < L; ++layer) {
      Transformer<double> net(m, 11);
      net.track_max_logits();
      auto ctx = net.make_activations(B, Recompute::none);
      const Batch batch(N, m.vocab, 3);
      auto max_logits = [&] {
        net.reset_moe_step();
        net.forward(*ctx, batch.tokens.data(), batch.targets.data(), 1.0 / double(N));
        std::vector<double> all(size_t(L * H));
        for (int l = 0; l < net.local_layers(); ++l)
          for (int64_t h = 0; h < H; ++h)
            all[size_t(net.global_layer(l) * H + h)] = net.max_logits()[size_t(l * H + h)];
        return all;
      };
      const std::vector<double> before = max_logits();
      std::vector<double> mine(before.begin() + layer * H, before.begin() + (layer + 1) * H);
      std::sort(mine.begin(), mine.end());
      const size_t mid = mine.size() / 2;
      ASSERT_GT(mine[mid] - mine[mid - 1], 1e-6);  // a margin on both sides of tau
      const double tau = (mine[mid] + mine[mid - 1]) / 2;
      std::vector<double> given(before.size(), -INFINITY);
      std::copy_n(before.begin() + layer * H, H, given.begin() + layer * H);
      const QkClip clip(net.registry(), m, tau);
      EXPECT_EQ(clip.apply(net.params().data<double>(), 0, net.registry().total(), given), int64_t(mine.size() - mid));
      const std::vector<double> after = max_logits();
      for (int64_t i = 0; i < (layer + 1) * H; ++i) {
        const bool clipped = i >= layer * H && before[size_t(i)] > tau;
        (clipped ? clipped_heads : kept_heads) += 1;
        EXPECT_NEAR(after[size_t(i)], clipped ? tau : before[size_t(i)], 1e-9 * std::abs(before[size_t(i)]))
            << enum_name(m.arch) << (m.is_mla() ? " mla" : "") << " layer " << i / H << " head " << i % H;
      }
    }
  }
  EXPECT_GT(clipped_heads, 10);
  EXPECT_GT(kept_heads, 10);
}

}  // namespace trident::model
