// Tensor parallelism, run by ctest under mpirun with 2, 4 and 8 ranks.
//
// Layers (2 and 4 ranks, the world is the tensor group), in double, with and
// without sequence parallelism: each parallel layer, built from the region
// ops and this rank's slice of the weights, gives the unsplit layer's
// outputs and input / weight gradients (slices cut here, independently of the
// parameter registry): column-parallel and row-parallel linear,
// vocab-parallel embedding, vocab-parallel cross-entropy with padding, and
// attention with its query and grouped-query KV heads split (or replicated).
// Initialisation: a tensor-parallel model starts from the single-rank weights.
//
// Whole model (the equivalence test): tensor x data meshes of the world, with
// and without sequence parallelism, ZeRO 1 and 3 (and 0 and 2 with data 2
// and sequence parallelism), GPT-2 and LLaMA (whose
// vocabulary, 31, is not a multiple of the tensor size): step-1 gradients
// within 1e-5 relative, 10-step losses and gradient norms within 1e-4 of the
// single-rank run of the same recipe in the same process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/recipe/recipe.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/residual.hpp"
#include "launch/train/trainer.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/tensor_parallel.hpp"
#include "tests/launch/train/equivalence.hpp"
#include "tests/mpi_test_main.hpp"
#include "tests/test_util.hpp"

namespace trident {

namespace k = kernels;
using V = std::vector<double>;
using test::randn;

int g_world = 1;
parallel::MpiCommunicator* g_comm = nullptr;

// Columns [c0, c0 + cn) of a row-major [rows, cols] matrix.
V cols_of(const V& m, int64_t rows, int64_t cols, int64_t c0, int64_t cn) {
  V out(size_t(rows * cn));
  for (int64_t i = 0; i < rows; ++i)
    std::copy(m.begin() + i * cols + c0, m.begin() + i * cols + c0 + cn, out.begin() + i * cn);
  return out;
}
// Rows [r0, r0 + rn) of a row-major [*, cols] matrix.
V rows_of(const V& m, int64_t cols, int64_t r0, int64_t rn) {
  return V(m.begin() + r0 * cols, m.begin() + (r0 + rn) * cols);
}

void expect_near(const std::string& what, const double* got, const V& want, double tol = 1e-11) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double e = std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i]));
    if (e > worst) worst = e, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": max error " << worst << " at " << at << " (got " << got[at] << ", want "
                        << want[at] << "), rank " << g_comm->rank() << " of " << g_world;
}

// One parallel layer's test: the world as the tensor group.
class Layer : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (g_world != 2 && g_world != 4) GTEST_SKIP() << "layer tests run on 2 and 4 ranks";
    tp = parallel::TensorParallel(g_comm, GetParam());
    r = g_comm->rank(), t = g_world;
    R = tp.rows(N), row0 = tp.row_begin(N);
  }
  parallel::TensorParallel tp;
  int r = 0, t = 1;
  static constexpr int64_t B = 2, T = 6, N = B * T;
  int64_t R = N, row0 = 0;
};

// The unsplit linear layer y = x W^T + b, forward and backward, on random
// inputs x [N,C], W [OC,C], b [OC] and output gradient dy [N,OC].
struct LinearCase {
  V x, W, b, dy, y, dx, dW, db;
  LinearCase(int64_t N, int64_t C, int64_t OC, uint32_t seed)
      : x(randn(N * C, seed)),
        W(randn(OC * C, seed + 1)),
        b(randn(OC, seed + 2)),
        dy(randn(N * OC, seed + 3)),
        y(N * OC),
        dx(N * C),
        dW(OC * C),
        db(OC) {
    k::linear_forward(y.data(), x.data(), W.data(), b.data(), N, C, OC);
    k::linear_backward(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), N, C, OC, false);
  }
};

// y = x W^T + b with W's rows (outputs) split; the input enters the region.
TEST_P(Layer, ColumnParallelLinear) {
  const int64_t C = 8, OC = 16, OCl = OC / t;
  const LinearCase ref(N, C, OC, 1);
  const auto& [x, W, b, dy, y, dx, dW, db] = ref;

  V Wr = rows_of(W, C, r * OCl, OCl), br(b.begin() + r * OCl, b.begin() + (r + 1) * OCl);
  V x_local = rows_of(x, C, row0, R), full(N * C), yr(N * OCl);
  const double* h = tp.enter(full.data(), x_local.data(), N, C);
  k::linear_forward(yr.data(), h, Wr.data(), br.data(), N, C, OCl);
  expect_near("column forward", yr.data(), cols_of(y, N, OC, r * OCl, OCl));
  V dyr = cols_of(dy, N, OC, r * OCl, OCl), dxp(N * C), dWr(OCl * C), dbr(OCl), dlocal(R * C);
  k::linear_backward(dxp.data(), dWr.data(), dbr.data(), dyr.data(), h, Wr.data(), N, C, OCl, false);
  const double* dxr = tp.enter_backward(dlocal.data(), dxp.data(), N, C);
  expect_near("column input gradient", dxr, rows_of(dx, C, row0, R));
  expect_near("column weight gradient", dWr.data(), rows_of(dW, C, r * OCl, OCl));
  expect_near("column bias gradient", dbr.data(), V(db.begin() + r * OCl, db.begin() + (r + 1) * OCl));
}

// y = x W^T + b with W's columns (inputs) split; the partial sums exit the
// region, the replicated bias is added once after the reduction.
TEST_P(Layer, RowParallelLinear) {
  const int64_t C = 16, OC = 8, Cl = C / t;
  const LinearCase ref(N, C, OC, 5);
  const auto& [x, W, b, dy, y, dx, dW, db] = ref;

  V xr = cols_of(x, N, C, r * Cl, Cl), Wr = cols_of(W, OC, C, r * Cl, Cl), partial(N * OC), local(R * OC);
  k::linear_forward(partial.data(), xr.data(), Wr.data(), static_cast<const double*>(nullptr), N, Cl, OC);
  const double* ysum = tp.exit(local.data(), partial.data(), N, OC);
  V zeros(R * OC, 0.0), out(R * OC);
  k::residual_forward(out.data(), zeros.data(), ysum, b.data(), R, OC);
  expect_near("row forward", out.data(), rows_of(y, OC, row0, R));
  V dy_local = rows_of(dy, OC, row0, R), dfull(N * OC), dxr(N * Cl), dWr(OC * Cl), dbr(OC);
  k::bias_backward(dbr.data(), dy_local.data(), R, OC, false);
  // with sequence parallelism each rank saw its rows only: the trainer sums
  // replicated parameters' gradients over the group
  if (tp.sequence_parallel()) g_comm->all_reduce(Tensor::borrow(dbr.data(), OC))->wait();
  const double* dyf = tp.exit_backward(dfull.data(), dy_local.data(), N, OC);
  k::linear_backward(dxr.data(), dWr.data(), static_cast<double*>(nullptr), dyf, xr.data(), Wr.data(), N, Cl, OC,
                     false);
  expect_near("row input gradient", dxr.data(), cols_of(dx, N, C, r * Cl, Cl));
  expect_near("row weight gradient", dWr.data(), cols_of(dW, OC, C, r * Cl, Cl));
  expect_near("row bias gradient", dbr.data(), db);
}

// 13 real tokens in a table padded to 16 rows, split by rows.
TEST_P(Layer, VocabParallelEmbedding) {
  const int64_t C = 5, Vpad = 16, Vl = Vpad / t;
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[size_t(i)] = int32_t((i * 7 + 3) % 13);
  V wte = randn(Vpad * C, 9), dout = randn(N * C, 10), y(N * C), dwte(Vpad * C, 0.0);
  k::embedding_forward(y.data(), tokens.data(), wte.data(), N, C, 0, Vpad);
  k::embedding_backward(dwte.data(), dout.data(), tokens.data(), N, C, 0, Vpad);

  V wr = rows_of(wte, C, r * Vl, Vl), partial(N * C), local(R * C);
  k::embedding_forward(partial.data(), tokens.data(), wr.data(), N, C, r * Vl, Vl);
  expect_near("embedding forward", tp.exit(local.data(), partial.data(), N, C), rows_of(y, C, row0, R));
  V d_local = rows_of(dout, C, row0, R), dfull(N * C), dwr(Vl * C, 0.0);
  const double* dyf = tp.exit_backward(dfull.data(), d_local.data(), N, C);
  k::embedding_backward(dwr.data(), dyf, tokens.data(), N, C, r * Vl, Vl);
  expect_near("embedding gradient", dwr.data(), rows_of(dwte, C, r * Vl, Vl));
}

// 13 real columns padded to 16; the padding holds huge logits that must
// neither win nor take probability. Losses against a direct log-sum-exp.
TEST_P(Layer, VocabParallelCrossEntropy) {
  const int64_t Vreal = 13, Vpad = 16, Vl = Vpad / t;
  const double dscale = 0.25;
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[size_t(i)] = int32_t((i * 5 + 1) % Vreal);
  V logits = randn(N * Vpad, 11, 3.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = Vreal; v < Vpad; ++v) logits[size_t(n * Vpad + v)] = 1e4;
  V want(N), dwant(N * Vpad, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < Vreal; ++v) mx = std::max(mx, logits[size_t(n * Vpad + v)]);
    for (int64_t v = 0; v < Vreal; ++v) s += std::exp(logits[size_t(n * Vpad + v)] - mx);
    want[size_t(n)] = mx + std::log(s) - logits[size_t(n * Vpad + targets[size_t(n)])];
    for (int64_t v = 0; v < Vreal; ++v)
      dwant[size_t(n * Vpad + v)] =
          dscale * (std::exp(logits[size_t(n * Vpad + v)] - mx) / s - (v == targets[size_t(n)] ? 1.0 : 0.0));
  }
  V lr = cols_of(logits, N, Vpad, r * Vl, Vl), losses(N);
  const int64_t valid = std::clamp<int64_t>(Vreal - r * Vl, 0, Vl);
  tp.cross_entropy(losses.data(), lr.data(), targets.data(), N, Vl, valid, r * Vl,
                   kernels::LossGrad<double>::scaled(dscale));
  expect_near("vocab-parallel losses", losses.data(), want);
  expect_near("vocab-parallel dlogits", lr.data(), cols_of(dwant, N, Vpad, r * Vl, Vl));
}

// Query heads split; KV heads split when there are at least t of them,
// replicated otherwise (their gradients then summed over the ranks sharing
// them: here by summing every rank's contribution into the full layout).
TEST_P(Layer, AttentionHeadsSplit) {
  const int64_t H = 4, D = 3;
  for (int64_t KV : {int64_t(4), int64_t(2), int64_t(1)}) {
    const int64_t W = (H + 2 * KV) * D, Hl = H / t, KVl = std::max<int64_t>(KV / t, 1), kv0 = r * KV / t;
    V qkv = randn(N * W, 12), datty = randn(N * H * D, 13), atty(N * H * D), lse(B * H * T), dqkv(N * W);
    k::attention_forward(atty.data(), lse.data(), qkv.data(), B, T, H, KV, D, D);
    k::attention_backward(dqkv.data(), datty.data(), qkv.data(), atty.data(), lse.data(), B, T, H, KV, D, D);
    // this rank's columns of the global qkv: its q heads, then its k and v heads
    const int64_t Wl = (Hl + 2 * KVl) * D;
    const int64_t starts[3] = {r * Hl * D, H * D + kv0 * D, (H + KV) * D + kv0 * D};
    const int64_t widths[3] = {Hl * D, KVl * D, KVl * D};
    V qkv_r(N * Wl);
    for (int64_t n = 0; n < N; ++n)
      for (int p = 0, c = 0; p < 3; c += int(widths[p]), ++p)
        std::copy_n(qkv.begin() + n * W + starts[p], widths[p], qkv_r.begin() + n * Wl + c);
    V atty_r(N * Hl * D), probs_r(B * Hl * T), dqkv_r(N * Wl);
    k::attention_forward(atty_r.data(), probs_r.data(), qkv_r.data(), B, T, Hl, KVl, D, D);
    expect_near("attention output, kv_heads " + std::to_string(KV), atty_r.data(),
                cols_of(atty, N, H * D, r * Hl * D, Hl * D));
    V datty_r = cols_of(datty, N, H * D, r * Hl * D, Hl * D);
    k::attention_backward(dqkv_r.data(), datty_r.data(), qkv_r.data(), atty_r.data(), probs_r.data(), B, T, Hl, KVl, D,
                          D);
    V sum(N * W, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int p = 0, c = 0; p < 3; c += int(widths[p]), ++p)
        for (int64_t j = 0; j < widths[p]; ++j) sum[size_t(n * W + starts[p] + j)] = dqkv_r[size_t(n * Wl + c + j)];
    g_comm->all_reduce(Tensor::borrow(sum.data(), N * W))->wait();
    expect_near("attention qkv gradient, kv_heads " + std::to_string(KV), sum.data(), dqkv);
  }
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, Layer, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "sequence_parallel" : "no_sequence_parallel"; });

// A tensor-parallel model's slices, consolidated, are the single-rank
// model's parameters bit for bit (Philox by global index), padding stripped.
TEST(TensorParallelInit, SameWeightsAsSingleRank) {
  if (g_world != 2 && g_world != 4) GTEST_SKIP() << "runs on 2 and 4 ranks";
  for (const std::string arch : {"gpt2", "llama"}) {
    ModelConfig m;
    m.arch = *parse_enum<Arch>(arch), m.layers = 2, m.hidden = 16, m.heads = 4, m.kv_heads = arch == "gpt2" ? 4 : 2;
    m.ffn_hidden = 24, m.seq_len = 8, m.vocab = 37, m.tie_embeddings = arch == "gpt2", m.vocab_multiple = 3;
    parallel::TensorParallel tp(g_comm, false);
    model::Transformer<float> split(m, 99, {.tp = &tp}), whole(m, 99);
    const int64_t n = split.registry().total();
    Tensor all = Tensor::zeros({g_world * n}, DType::f32, MemCategory::other);
    std::copy_n(split.params().data<float>(), n, all.data<float>() + g_comm->rank() * n);
    g_comm->all_gather(all)->wait();
    std::vector<const float*> ranks;
    for (int q = 0; q < g_world; ++q) ranks.push_back(all.data<float>() + q * n);
    std::vector<float> a(size_t(model::consolidated_numel(m))), b(a.size());
    model::consolidate(a.data(), m, ranks);
    model::consolidate(b.data(), m, {whole.params().data<float>()});
    EXPECT_EQ(a, b) << arch;
    EXPECT_EQ(int64_t(a.size()),
              int64_t(whole.registry().total()) - (m.padded_vocab(1) - m.vocab) * m.hidden * (m.tie_embeddings ? 1 : 2))
        << arch << ": consolidation strips the padding";
  }
}

// ---- whole model ----

struct Mesh {
  int tensor, data, zero;
  bool sp;
  std::string arch;
  std::string recompute = "none";
};

Recipe model_recipe(const Mesh& c) {
  std::vector<std::string> sets = {
      "train.steps=10", "train.micro_batch=4", "train.global_batch=16",      "log.metrics=",
      "eval.batches=0", "train.threads=1",     "parallel.bucket_bytes=65536"};
  std::string file = "demo.yaml";
  const bool moe = c.arch == "moe" || c.arch == "moe-qk";
  if (c.arch == "llama" || moe) {  // kv_heads 2: replicated at tensor 4; vocabulary 31, padded only to the tensor size
    file = moe ? "moe-tiny.yaml" : "llama-tiny.yaml";
    for (const char* s : {"model.vocab=31", "data.synthetic.vocab=31", "model.vocab_multiple=1"}) sets.push_back(s);
  }
  if (moe)  // experts split over the tensor group, and a gated shared expert
    for (const char* s :
         {"model.moe.shared_experts=1", "model.moe.shared_ffn_hidden=64", "model.moe.shared_expert_gate=true"})
      sets.push_back(s);
  if (c.arch == "moe-qk") sets.push_back("model.qk_norm=true");  // Qwen3-MoE: QK-norm's weights shared by every head
  sets.push_back("parallel.tensor=" + std::to_string(c.tensor));
  sets.push_back("parallel.data=" + std::to_string(c.data));
  sets.push_back("parallel.zero=" + std::to_string(c.zero));
  sets.push_back(std::string("parallel.sequence_parallel=") + (c.sp ? "true" : "false"));
  sets.push_back("train.recompute=" + c.recompute);
  return load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + file, sets, c.tensor * c.data);
}

const test::EquivalenceRun& single_rank(const std::string& arch) {
  return test::single_rank_reference(arch, [&] { return model_recipe({1, 1, 0, false, arch}); });
}

// Every mesh of this world size with data 2 (and data 1 at 2 and 4 ranks).
std::vector<Mesh> meshes() {
  std::vector<Mesh> out;
  std::vector<std::pair<int, int>> td;  // tensor, data
  if (g_world >= 2) td.push_back({g_world / 2, 2});
  if (g_world == 2 || g_world == 4) td.push_back({g_world, 1});
  for (auto [t, d] : td)
    for (std::string arch : {"gpt2", "llama"})
      for (int zero : {0, 1, 2, 3})
        for (bool sp : {false, true})
          // ZeRO 1 and 3 everywhere; 0 and 2 with sequence parallelism on the data-2 mesh
          if ((!sp || t > 1) && (zero % 2 == 1 || (sp && d == 2))) out.push_back({t, d, zero, sp, arch});
  // mixture of experts: experts split over the tensor group, router and gate on every row
  for (auto [t, d] : td)
    for (bool sp : {false, true})
      if (!sp || t > 1) out.push_back({t, d, sp ? 3 : 1, sp, "moe"});
  // QK-norm: each rank's weight gradients cover its heads, summed over the
  // tensor group with and without sequence parallelism
  for (auto [t, d] : td) out.push_back({t, d, 1, false, "moe-qk"});
  if (td.front().first > 1) out.push_back({td.front().first, td.front().second, 2, true, "moe-qk"});
  // full recompute reruns each layer's forward, collectives included, inside backward
  const auto [t, d] = td.front();
  if (t > 1) out.push_back({t, d, 1, true, "llama", "full"});
  return out;
}

TEST(TensorParallelModel, MatchesSingleRank) {
  if (g_world == 1) GTEST_SKIP() << "needs at least 2 ranks";
  for (const Mesh& c : meshes()) {
    const std::string what = c.arch + " tensor " + std::to_string(c.tensor) + " x data " + std::to_string(c.data) +
                             " zero " + std::to_string(c.zero) + (c.sp ? " sequence parallel" : "") + " recompute " +
                             c.recompute;
    const auto& ref = single_rank(c.arch);
    const test::EquivalenceRun run = test::train_with_step1_gradients(model_recipe(c), {.quiet = true});
    test::expect_equivalent(ref, run, what);
  }
}

// The planner's activation formula equals what the model allocates, for
// every recompute mode, with and without sequence parallelism, head or not.
TEST(Memory, ActivationFormulaMatchesTheModelsAllocation) {
  if (g_world != 2 && g_world != 4) GTEST_SKIP() << "runs on 2 and 4 ranks";
  for (const char* arch : {"gpt2", "llama"})
    for (bool sp : {false, true}) {
      ModelConfig cfg{*parse_enum<Arch>(arch), 2, 32, 4, std::string(arch) == "llama" ? 2 : 4, 64, 8, 37};
      parallel::TensorParallel tp(g_comm, sp);
      model::Transformer<float> net(cfg, 1, {.tp = &tp});
      for (auto rc : {model::Recompute::none, model::Recompute::selective, model::Recompute::full})
        for (bool split : {false, true}) {
          const int64_t B = 2;
          auto ctx = net.make_activations(B, rc, 0, split);
          int64_t got = 0;
          for (const auto& t : ctx->storage) got += t.numel();
          const model::ActivationShape shape{B, g_world, sp, rc, split};
          EXPECT_EQ(got, model::activation_elements(cfg, shape, cfg.layers, true))
              << arch << " sp " << sp << " recompute " << int(rc) << " split " << split;
        }
    }
}

}  // namespace trident

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv, [](trident::parallel::MpiCommunicator& w) {
    trident::g_world = w.size();
    trident::g_comm = &w;
  });
}
