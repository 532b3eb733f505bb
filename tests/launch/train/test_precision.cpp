// Mixed precision on the CPU (train.precision bf16 / fp16: bf16 or fp16
// storage of activations and parameters, fp32 math, fp32 master weights and
// gradient accumulation) and fp16's dynamic loss scaling.
// The rounding itself is checked against hand-computed values; training in
// bf16/fp16 must track fp32 closely but not bit for bit (proof that the
// rounding is applied); overflowing steps are skipped without touching the
// weights; the scaler's state survives a checkpoint (exact resume).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/recipe/recipe.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"
#include "kernels/precision.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/train/trainer.hpp"
#include "model/transformer.hpp"
#include "tests/test_util.hpp"

namespace trident {
namespace fs = std::filesystem;
using kernels::Precision;

// The model with its two bf16 storage choices reachable (packed activations,
// the GEMMs' 2-byte copies): the tests switch them off to compare against
// the plain path. Production code has no such switch.
struct PlainPathTransformer : model::Transformer<float> {
  using model::Transformer<float>::Transformer;
  void set_pack_activations(bool on) { pool_->pack = on; }
  void set_gemm_copies(bool on) { ops_.copies = on; }
};

std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }

std::string temp_dir(const std::string& name) {
  return (fs::temp_directory_path() / ("trident_precision_" + name + "_" + std::to_string(getpid()))).string();
}

TEST(Precision, Bf16RoundsToNearestEven) {
  EXPECT_EQ(kernels::round_bf16(1.0f), 1.0f);
  // bf16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> even (1)
  EXPECT_EQ(kernels::round_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(kernels::round_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(kernels::round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);  // halfway, odd below -> up
  EXPECT_EQ(kernels::round_bf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isfinite(kernels::round_bf16(3.0e38f)));             // below bf16's max (3.39e38)
  EXPECT_EQ(kernels::round_bf16(1e-40f), kernels::round_bf16(1e-40f));  // subnormals kept
  EXPECT_TRUE(std::isnan(kernels::round_bf16(std::nanf(""))));
  EXPECT_EQ(kernels::round_bf16(-2.5f), -2.5f);
}

TEST(Precision, Fp16RoundsOverflowsAndUnderflows) {
  EXPECT_EQ(kernels::round_fp16(65504.0f), 65504.0f);  // the largest half
  EXPECT_EQ(kernels::round_fp16(65519.0f), 65504.0f);
  EXPECT_EQ(kernels::round_fp16(65520.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(kernels::round_fp16(1.0f + 0x1p-11f), 1.0f);                // halfway -> even
  EXPECT_EQ(kernels::round_fp16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);  // halfway -> even (up)
  EXPECT_EQ(kernels::round_fp16(0x1p-24f), 0x1p-24f);                   // the smallest subnormal
  EXPECT_EQ(kernels::round_fp16(0x1p-26f), 0.0f);
  EXPECT_EQ(kernels::round_fp16(-0.1f), -0.0999755859375f);
}

TEST(Precision, BufferRoundingAndNonFiniteCount) {
  std::vector<float> x = {1.0f + 0x1p-9f, 70000.0f, -3.0f, 0x1p-30f};
  std::vector<float> b = x, h = x;
  kernels::round_to_storage(b.data(), int64_t(b.size()), Precision::bf16);
  kernels::round_to_storage(h.data(), int64_t(h.size()), Precision::fp16);
  EXPECT_EQ(b, (std::vector<float>{1.0f, 70144.0f, -3.0f, 0x1p-30f}));
  EXPECT_EQ(h[0], 1.0f + 0x1p-9f);
  EXPECT_TRUE(std::isinf(h[1]));
  EXPECT_EQ(h[3], 0.0f);
  EXPECT_EQ(kernels::count_nonfinite(h.data(), int64_t(h.size())), 1);
  std::vector<float> same = x;
  kernels::round_to_storage(same.data(), int64_t(same.size()), Precision::fp32);
  EXPECT_EQ(same, x);
}

// The CPU's bf16 GEMM (train.precision bf16): on operands that hold bf16
// values it computes exact products with fp32 accumulation, in every
// transposition, with alpha and beta, on odd shapes.
TEST(Precision, CpuBf16GemmOnBf16Values) {
  for (auto [M, N, K] : std::vector<std::array<int64_t, 3>>{{37, 53, 29}, {1, 7, 3}, {64, 96, 200}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        std::vector<float> A(static_cast<size_t>(M * K)), B(static_cast<size_t>(K * N)), C(static_cast<size_t>(M * N));
        for (size_t i = 0; i < A.size(); ++i) A[i] = kernels::round_bf16(std::sin(float(i) * 0.37f) * 2.f);
        for (size_t i = 0; i < B.size(); ++i) B[i] = kernels::round_bf16(std::cos(float(i) * 0.11f));
        for (size_t i = 0; i < C.size(); ++i) C[i] = float(i % 5) - 2.f;
        std::vector<float> got = C;
        kernels::gemm<float>(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, got.data(), N,
                             Precision::bf16);
        double worst = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += double(ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) *
                   double(tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
            worst = std::max(worst, std::abs(0.5 * s + 0.25 * C[size_t(i * N + j)] - got[size_t(i * N + j)]));
          }
        EXPECT_LT(worst, 2e-5 * double(K)) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb;
      }
}

// The GEMMs' math is the model's own (its placement's precision), chosen
// once, not a process setting: a bf16 model's GEMMs (attention projections,
// MLP, MoE router, experts and shared experts, MLA, MTP, the head) are all
// bf16 ones, an fp32 or fp16 model built after it on the same thread asks
// for none, so a tool or a benchmark that builds a model gets its GEMMs.
TEST(Precision, ModelGemmsTakeThePlacementsPrecision) {
  for (const char* file : {"configs/moe-tiny.yaml", "configs/deepseek-v3-tiny.yaml"}) {
    Recipe r = load_recipe(src(file), {"model.layers=2"});
    const int64_t B = 2, N = B * r.model.seq_len;
    std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i)
      tokens[size_t(i)] = int32_t((i * 7 + 3) % 31), targets[size_t(i)] = int32_t((i * 5 + 1) % 31);
    for (Precision p : {Precision::bf16, Precision::fp32, Precision::fp16, Precision::bf16}) {
      int64_t before[3];
      for (int q = 0; q < 3; ++q) before[q] = kernels::cpu_gemm_calls(Precision(q));
      model::Transformer<float> net(r.model, 3, {.precision = p});
      auto ctx = net.make_activations(B, model::Recompute::none);
      net.forward(*ctx, tokens.data(), targets.data(), 1.0f / float(N));
      net.backward(*ctx, model::Recompute::none, false);
      for (int q = 0; q < 3; ++q) {
        const int64_t calls = kernels::cpu_gemm_calls(Precision(q)) - before[q];
        if (Precision(q) == p)
          EXPECT_GT(calls, 10) << file << " " << enum_name(p);
        else
          EXPECT_EQ(calls, 0) << file << ": a " << enum_name(p) << " model ran " << calls << " "
                              << enum_name(Precision(q)) << " GEMMs";
      }
    }
  }
}

TEST(Precision, RecipeKeysAreValidated) {
  EXPECT_NO_THROW(load_recipe(src("configs/demo.yaml"), {"train.precision=bf16"}));
  EXPECT_NO_THROW(load_recipe(src("configs/demo.yaml"), {"train.precision=fp16", "train.loss_scale=1024"}));
  EXPECT_THROW(load_recipe(src("configs/demo.yaml"), {"train.precision=fp8"}), InputError);
  EXPECT_THROW(load_recipe(src("configs/demo.yaml"), {"train.precision=bf16", "train.loss_scale=1024"}), InputError);
  EXPECT_THROW(
      load_recipe(src("configs/demo.yaml"), {"train.precision=fp16", "train.loss_scale=4", "train.min_loss_scale=8"}),
      InputError);
  EXPECT_EQ(load_recipe(src("configs/demo.yaml"), {"train.precision=fp16"}).train.loss_scale, 65536.0);
}

// Every activation the model stores is a bf16 value; the parameter
// gradients are accumulated in fp32 (not bf16 values); the results differ
// from the fp32 model's on the same weights.
TEST(Precision, ModelStoresRoundedActivationsAndFp32Gradients) {
  for (const char* file : {"configs/demo.yaml", "configs/llama-tiny.yaml", "configs/moe-tiny.yaml"}) {
    Recipe r = load_recipe(src(file), {"model.layers=2"});
    model::Transformer<float> net32(r.model, 7), net16(r.model, 7, {.precision = Precision::bf16});  // the same weights
    const int64_t B = 2, T = r.model.seq_len, N = B * T;
    std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i)
      tokens[size_t(i)] = int32_t((i * 7 + 3) % 31), targets[size_t(i)] = int32_t((i * 5 + 1) % 31);
    auto pass = [&](model::Transformer<float>& net, std::vector<float>& grads) {
      auto ctx = net.make_activations(B, model::Recompute::none);
      const double loss = net.forward(*ctx, tokens.data(), targets.data(), 1.0f / float(N));
      net.backward(*ctx, model::Recompute::none, /*accumulate=*/false);
      grads.assign(net.grads().data<float>(), net.grads().data<float>() + net.grads().numel());
      return std::make_pair(loss, std::move(ctx));
    };
    std::vector<float> g32, g16;
    auto [loss32, ctx32] = pass(net32, g32);
    auto [loss16, ctx16] = pass(net16, g16);
    const auto& a = ctx16->layers[1];
    const int64_t C = r.model.hidden;
    int64_t checked = 0;
    auto all_bf16 = [&](const float* x, int64_t n, const char* what) {
      for (int64_t i = 0; i < n; ++i)
        if (kernels::round_bf16(x[i]) != x[i]) {
          ADD_FAILURE() << file << ": " << what << "[" << i << "] = " << x[i] << " is not a bf16 value";
          return;
        }
      checked += n;
    };
    all_bf16(a.x_in, N * C, "layer 1 input");
    all_bf16(a.ln1, N * C, "ln1");
    all_bf16(a.x_mid, N * C, "x_mid");
    all_bf16(a.ln2, N * C, "ln2");
    all_bf16(a.act, N * net16.dims().ffn, "mlp activation");
    all_bf16(a.atty, N * C, "attention output");
    all_bf16(ctx16->x_final, N * C, "chunk output");
    all_bf16(ctx16->logits, N * net16.dims().vocab, "dlogits");
    EXPECT_GT(checked, 0);
    EXPECT_NE(loss16, loss32) << file;
    int64_t not_bf16 = 0, differ = 0;
    for (size_t i = 0; i < g16.size(); ++i)
      not_bf16 += kernels::round_bf16(g16[i]) != g16[i], differ += g16[i] != g32[i];
    EXPECT_GT(not_bf16, int64_t(g16.size()) / 4) << file << ": parameter gradients look bf16-rounded";
    EXPECT_GT(differ, int64_t(g16.size()) / 4) << file << ": bf16 activations did not change the gradients";
  }
}

// The saved activations as 2-byte values (the default under bf16/fp16) give
// bitwise the losses and gradients of the same values in fp32 buffers, in
// every recompute mode and with the split (zero-bubble) backward, and take
// less activation memory.
TEST(Precision, PackedActivationsAreExactAndSmaller) {
  for (const char* file : {"configs/demo.yaml", "configs/llama-tiny.yaml", "configs/moe-tiny.yaml"})
    for (Precision prec : {Precision::bf16, Precision::fp16})
      for (auto rc : {model::Recompute::none, model::Recompute::selective, model::Recompute::full})
        for (bool split : {false, true}) {
          if (split && rc == model::Recompute::full) continue;
          Recipe r = load_recipe(src(file), {"model.layers=3"});
          PlainPathTransformer net(r.model, 11, {.precision = prec});
          const int64_t B = 2, N = B * r.model.seq_len;
          std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
          for (int64_t i = 0; i < N; ++i)
            tokens[size_t(i)] = int32_t((i * 7 + 3) % 31), targets[size_t(i)] = int32_t((i * 5 + 1) % 31);
          auto pass = [&](bool packed, double& loss, int64_t& bytes) {
            net.set_pack_activations(packed);
            const int64_t before = HostAllocator::instance().stats().current[size_t(MemCategory::activations)];
            auto ctx = net.make_activations(B, rc, 0, split);
            bytes = HostAllocator::instance().stats().current[size_t(MemCategory::activations)] - before;
            EXPECT_EQ(ctx->is_packed(), packed);
            loss = net.forward(*ctx, tokens.data(), targets.data(), 1.0f / float(N));
            if (split) {
              net.backward_chunk(*ctx, nullptr, rc, false, model::BackwardPart::input);
              net.backward_chunk(*ctx, nullptr, rc, false, model::BackwardPart::weight);
            } else {
              net.backward(*ctx, rc, false);
            }
            return std::vector<float>(net.grads().data<float>(), net.grads().data<float>() + net.grads().numel());
          };
          double l1 = 0, l2 = 0;
          int64_t b1 = 0, b2 = 0;
          const auto g_packed = pass(true, l1, b1), g_plain = pass(false, l2, b2);
          const std::string what = std::string(file) + " " + enum_name(prec) + " recompute " + std::to_string(int(rc)) +
                                   (split ? " split" : "");
          EXPECT_EQ(l1, l2) << what;
          EXPECT_TRUE(g_packed == g_plain) << what << ": gradients differ";
          // later contexts share the working set made by the first packed one: compare a second context
          const int64_t again = [&] {
            net.set_pack_activations(true);
            const int64_t before = HostAllocator::instance().stats().current[size_t(MemCategory::activations)];
            auto ctx = net.make_activations(B, rc, 0, split);
            return HostAllocator::instance().stats().current[size_t(MemCategory::activations)] - before;
          }();
          EXPECT_LT(again, b2) << what << ": a packed context is not smaller (" << again << " vs " << b2 << " bytes)";
        }
}

// The CPU's bf16 path: GEMMs that read the 2-byte copies (weights refreshed
// at each forward, packed activations, output-gradient copies) give bitwise
// the results of converting every fp32 input at each GEMM, across recompute
// modes, split backward and packing, and after the weights change.
TEST(Precision, Bf16GemmCopiesMatchConvertingEveryGemm) {
  for (const char* file : {"configs/demo.yaml", "configs/llama-tiny.yaml"})
    for (auto rc : {model::Recompute::none, model::Recompute::selective, model::Recompute::full})
      for (bool split : {false, true})
        for (bool packed : {true, false}) {
          if (split && rc == model::Recompute::full) continue;
          Recipe r = load_recipe(src(file), {"model.layers=2"});
          const int64_t B = 2, N = B * r.model.seq_len;
          std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
          for (int64_t i = 0; i < N; ++i)
            tokens[size_t(i)] = int32_t((i * 7 + 3) % 31), targets[size_t(i)] = int32_t((i * 5 + 1) % 31);
          // two steps' forward and backward, the weights moved in between
          auto run_two = [&](bool copies) {
            PlainPathTransformer net(r.model, 5, {.precision = Precision::bf16});
            net.set_pack_activations(packed);
            net.set_gemm_copies(copies);
            auto ctx = net.make_activations(B, rc, 0, split);
            std::vector<float> out;
            for (int step = 0; step < 2; ++step) {
              out.push_back(float(net.forward(*ctx, tokens.data(), targets.data(), 1.0f / float(N))));
              if (split) {
                net.backward_chunk(*ctx, nullptr, rc, false, model::BackwardPart::input);
                net.backward_chunk(*ctx, nullptr, rc, false, model::BackwardPart::weight);
              } else {
                net.backward(*ctx, rc, false);
              }
              const float* g = net.grads().data<float>();
              out.insert(out.end(), g, g + net.grads().numel());
              float* p = net.params().data<float>();
              for (int64_t i = 0; i < net.params().numel(); ++i) p[i] = kernels::round_bf16(p[i] - 0.5f * g[i]);
            }
            return out;
          };
          const std::string what = std::string(file) + " recompute " + std::to_string(int(rc)) +
                                   (split ? " split" : "") + (packed ? " packed" : "");
          EXPECT_TRUE(run_two(true) == run_two(false)) << what << ": the 2-byte copies change the results";
        }
}

launch::TrainSummary run(const std::string& precision, std::vector<std::string> sets) {
  for (const char* s : {"log.metrics=", "train.threads=1", "eval.batches=0", "model.layers=2"}) sets.push_back(s);
  sets.push_back("train.precision=" + precision);
  return launch::train(load_recipe(src("configs/demo.yaml"), sets), {.quiet = true, .single_process = true});
}

// bf16 and fp16 track fp32 (relative loss difference well under 1% over 40
// steps) but differ from it: the rounding is really applied.
TEST(Precision, MixedPrecisionTracksFp32) {
  const std::vector<std::string> sets = {"train.steps=40"};
  const auto f32 = run("fp32", sets), b16 = run("bf16", sets), f16 = run("fp16", sets);
  double bmax = 0, hmax = 0;
  for (size_t i = 0; i < f32.losses.size(); ++i) {
    bmax = std::max(bmax, std::abs(b16.losses[i] / f32.losses[i] - 1));
    hmax = std::max(hmax, std::abs(f16.losses[i] / f32.losses[i] - 1));
  }
  EXPECT_GT(bmax, 1e-6) << "bf16 gave fp32's losses: nothing was rounded";
  EXPECT_GT(hmax, 1e-7) << "fp16 gave fp32's losses: nothing was rounded";
  EXPECT_LT(bmax, 1e-2);
  EXPECT_LT(hmax, 2e-3);  // fp16 keeps 3 more mantissa bits than bf16
  EXPECT_LT(f16.losses.back(), f16.losses.front() - 0.05) << "fp16 run did not learn";
  EXPECT_LT(b16.losses.back(), b16.losses.front() - 0.05) << "bf16 run did not learn";
  for (bool s : f16.skipped) EXPECT_FALSE(s);  // the default scale does not overflow this model
}

// An initial scale of 2^40 overflows fp16 at once: the scale halves per
// skipped step until the gradients fit, then grows after every window of
// clean steps; skipped steps leave the weights untouched.
TEST(Precision, Fp16DynamicLossScaling) {
  const auto s =
      run("fp16", {"train.steps=24", "train.loss_scale=1099511627776", "train.loss_scale_window=3", "optim.warmup=2"});
  ASSERT_EQ(s.skipped.size(), 24u);
  ASSERT_TRUE(s.skipped[0]);
  size_t first_clean = 0;
  while (first_clean < s.skipped.size() && s.skipped[first_clean]) ++first_clean;
  ASSERT_LT(first_clean, s.skipped.size()) << "every step overflowed";
  EXPECT_GE(first_clean, 3u) << "2^40 should take several halvings";
  for (size_t i = 1; i < first_clean; ++i) EXPECT_EQ(s.loss_scales[i], s.loss_scales[i - 1] / 2) << i;
  bool grew = false, skipped_again = false;
  for (size_t i = first_clean + 1; i < s.skipped.size(); ++i) {
    grew |= s.loss_scales[i] == 2 * s.loss_scales[i - 1];
    skipped_again |= s.skipped[i];
    if (!s.skipped[i - 1] && s.loss_scales[i] != s.loss_scales[i - 1])
      EXPECT_EQ(s.loss_scales[i], 2 * s.loss_scales[i - 1]) << "a clean step can only keep or double the scale";
  }
  EXPECT_TRUE(grew) << "no growth after " << s.skipped.size() - first_clean << " clean steps with window 3";
  EXPECT_TRUE(skipped_again) << "growing every 3 steps must overflow again";
  EXPECT_LT(s.losses.back(), s.losses.front() - 0.05) << "did not learn once the scale fitted";
}

TEST(Precision, SkippedStepsLeaveTheWeightsAndSaveTheScaler) {
  const std::string dir = temp_dir("skip");
  fs::remove_all(dir);
  // 1e36 needs far more than 3 halvings: all three steps are skipped
  const auto s = run("fp16", {"train.steps=3", "train.loss_scale=1.0e36", "checkpoint.dir=" + dir});
  for (bool k : s.skipped) EXPECT_TRUE(k);
  const auto saved = launch::load_whole_model(dir);
  Recipe r = load_recipe(src("configs/demo.yaml"), {"model.layers=2"});
  model::Transformer<float> init(r.model, uint64_t(r.seed));
  ASSERT_EQ(saved.params.size(), size_t(init.params().numel()));
  EXPECT_TRUE(std::equal(saved.params.begin(), saved.params.end(), init.params().data<float>()))
      << "a skipped step changed the (fp32 master) weights";
  std::ifstream in(dir + "/step_00000003/index.json");
  std::string index((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(index.find("\"optimizer\":{\"type\":\"adamw\",\"step\":0,"), std::string::npos) << index.substr(0, 600);
  EXPECT_NE(index.find("\"skipped_steps\":3"), std::string::npos);
  EXPECT_NE(index.find("\"train\":\"fp16\""), std::string::npos);
  fs::remove_all(dir);
}

// 8 straight steps == 4 steps, save, resume, 4 more: the master weights, the
// moments, the optimizer's own step count and the loss scaler all come back.
TEST(Precision, Fp16ResumeIsExact) {
  const std::string dir = temp_dir("resume");
  fs::remove_all(dir);
  const std::vector<std::string> sets = {
      "train.loss_scale=1099511627776", "train.loss_scale_window=2", "train.steps=8", "optim.warmup=2",
      "checkpoint.dir=" + dir,          "checkpoint.every=4"};
  const auto straight = run("fp16", sets);
  bool skipped_before = false;
  for (int i = 0; i < 4; ++i) skipped_before |= straight.skipped[size_t(i)];
  EXPECT_TRUE(skipped_before) << "the test needs a skipped step before the save";
  fs::remove_all(dir + "/step_00000008");
  { std::ofstream(dir + "/latest") << "step_00000004\n"; }
  auto sets2 = sets;
  for (const char* s : {"log.metrics=", "train.threads=1", "eval.batches=0", "model.layers=2", "train.precision=fp16"})
    sets2.push_back(s);
  const auto resumed = launch::train(load_recipe(src("configs/demo.yaml"), sets2),
                                     {.quiet = true, .single_process = true, .resume = "auto"});
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(resumed.losses[i], straight.losses[i + 4]) << "step " << i + 5;
    EXPECT_EQ(resumed.loss_scales[i], straight.loss_scales[i + 4]) << "step " << i + 5;
  }
  // a malformed scaler field in the index is refused, naming the key
  const std::string index_path = dir + "/step_00000004/index.json";
  std::string index;
  {
    std::ifstream in(index_path);
    index.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = index.find("\"loss_scale\":");
  ASSERT_NE(at, std::string::npos);
  index.insert(at + 13, "\"many\",\"was\":");
  std::ofstream(index_path) << test::without_index_checksum(index);
  { std::ofstream(dir + "/latest") << "step_00000004\n"; }
  try {
    launch::train(load_recipe(src("configs/demo.yaml"), sets2),
                  {.quiet = true, .single_process = true, .resume = "auto"});
    ADD_FAILURE() << "a malformed loss_scale was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'loss_scale'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("index.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace trident
