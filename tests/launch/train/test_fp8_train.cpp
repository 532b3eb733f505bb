// FP8 training (train.fp8, docs/precision.md#fp8-training) through the whole
// trainer: the keys' checks, training that tracks bf16 and breaks on
// purpose (TRIDENT_FAULT's fp8_frozen_scales, fp8_e5m2_forward), delayed
// scaling's state resumed exactly from a checkpoint (and a damaged state
// refused), the metrics' FP8 statistics, and the modules kept in bf16.
// Fp8Full.* is the 600-step comparison of every recipe with bf16 on
// llama-tiny and moe-tiny, three seeds each (ctest -L full:
// test_fp8_train_full_llama and _moe: 33 and 52 minutes measured, one core each);
// the CI runs a 100-step one.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/recipe/recipe.hpp"
#include "launch/train/trainer.hpp"

namespace trident {
namespace fs = std::filesystem;

namespace {

std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }

std::string temp_dir(const std::string& name) {
  return (fs::temp_directory_path() / ("trident_fp8_" + name + "_" + std::to_string(getpid()))).string();
}

// TRIDENT_FAULT for one run.
struct FaultScope {
  explicit FaultScope(const char* faults) { setenv("TRIDENT_FAULT", faults, 1); }
  ~FaultScope() { unsetenv("TRIDENT_FAULT"); }
};

launch::TrainSummary train(const std::string& config, std::vector<std::string> sets, const char* fault = nullptr) {
  sets.insert(sets.begin(), {"log.metrics=", "train.precision=bf16"});
  std::unique_ptr<FaultScope> scope = fault ? std::make_unique<FaultScope>(fault) : nullptr;
  return launch::train(load_recipe(src(config), sets), {.quiet = true});
}

std::string error_of(const std::vector<std::string>& sets) {
  try {
    load_recipe(src("configs/llama-tiny.yaml"), sets);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Fp8Train, RecipeKeysAreValidated) {
  const std::string fp16 = error_of({"train.fp8.recipe=tensorwise", "train.precision=fp16"});
  EXPECT_NE(fp16.find("train.fp8.recipe"), std::string::npos) << fp16;
  EXPECT_NE(fp16.find("found fp16"), std::string::npos) << fp16;
  const std::string hybrid =
      error_of({"train.fp8.recipe=blockwise", "train.fp8.format=hybrid", "train.precision=bf16"});
  EXPECT_NE(hybrid.find("train.fp8.format"), std::string::npos) << hybrid;
  const std::string gather = error_of({"train.fp8.recipe=tensorwise", "train.fp8.param_gather=true"});
  EXPECT_NE(gather.find("train.fp8.param_gather"), std::string::npos) << gather;
  EXPECT_NE(gather.find("parallel.zero must be 3 (found 0)"), std::string::npos) << gather;
  const std::string tiled = error_of({"train.fp8.recipe=blockwise", "train.fp8.param_gather=true", "parallel.zero=3"});
  EXPECT_NE(tiled.find("recipe tensorwise or delayed (found blockwise)"), std::string::npos) << tiled;
  EXPECT_EQ(error_of({"train.fp8.recipe=delayed", "train.fp8.param_gather=true", "parallel.zero=3"}), "");
  const std::string saved = error_of({"train.fp8.recipe=blockwise", "train.fp8.saved_inputs=true"});
  EXPECT_NE(saved.find("train.fp8.saved_inputs"), std::string::npos) << saved;
  EXPECT_NE(saved.find("recipe tensorwise or delayed (found blockwise"), std::string::npos) << saved;
  const std::string saved32 = error_of({"train.fp8.recipe=tensorwise", "train.fp8.saved_inputs=true"});
  EXPECT_NE(saved32.find("expected train.precision bf16, found fp32"), std::string::npos) << saved32;
  const std::string full = error_of(
      {"train.fp8.recipe=delayed", "train.fp8.saved_inputs=true", "train.precision=bf16", "train.recompute=full"});
  EXPECT_NE(full.find("(expected recompute none or selective)"), std::string::npos) << full;
  EXPECT_EQ(error_of({"train.fp8.recipe=delayed", "train.fp8.saved_inputs=true", "train.precision=bf16"}), "");
  const std::string kind = error_of({"train.fp8.recipe=tensorwise", "train.fp8.keep_high_precision=[lm_head, mpl]"});
  EXPECT_NE(kind.find("train.fp8.keep_high_precision"), std::string::npos) << kind;
  EXPECT_NE(kind.find("found 'mpl'"), std::string::npos) << kind;
  EXPECT_EQ(error_of({"train.fp8.recipe=delayed", "train.precision=bf16", "train.fp8.amax_history=16",
                      "train.fp8.keep_high_precision=[first_layer, last_layer]"}),
            "");
  const Recipe r = load_recipe(src("configs/llama-tiny.yaml"), {"train.fp8.recipe=tensorwise"});
  EXPECT_TRUE(r.train.fp8.keeps(Fp8Module::lm_head) && r.train.fp8.keeps(Fp8Module::router)) << "the default list";
  EXPECT_FALSE(r.train.fp8.keeps(Fp8Module::mlp));
}

// train.fp8.saved_inputs: the weight gradients read the codes the forward
// GEMMs read (kept a byte a value) instead of casting the unpacked 2-byte
// copies again, the same cast: the same run bit for bit, in fewer bytes
// (Planner.Fp8SavedInputsAreTheMeasuredSaving counts them). llama-tiny
// (every layer's three inputs; selective recompute; the split backward's
// weight pass), moe-tiny (its MoE layers' attention input; the dense
// layer's three), deepseek-v3-tiny (MLA, whose input three GEMMs cast: the
// dense layer's MLP inputs; the multi-token prediction block's), tensorwise
// and delayed scaling.
TEST(Fp8Train, SavedInputsAreTheSameRunInFewerBytes) {
  struct Run {
    const char* config;
    std::vector<std::string> sets;
  };
  const std::vector<Run> runs = {
      {"configs/llama-tiny.yaml", {"train.fp8.recipe=tensorwise", "train.fp8.format=hybrid"}},
      {"configs/llama-tiny.yaml",
       {"train.fp8.recipe=delayed", "train.fp8.amax_history=4", "train.recompute=selective"}},
      {"configs/llama-tiny.yaml",
       {"train.fp8.recipe=tensorwise", "parallel.schedule=zero_bubble", "train.fp8.keep_high_precision=[first_layer]"}},
      {"configs/moe-tiny.yaml", {"train.fp8.recipe=tensorwise"}},
      {"configs/deepseek-v3-tiny.yaml", {"train.fp8.recipe=delayed"}}};
  for (const Run& r : runs) {
    std::vector<std::string> sets = r.sets;
    sets.insert(sets.end(), {"train.steps=3", "eval.every=0", "eval.batches=2", "train.threads=1"});
    const launch::TrainSummary cast = train(r.config, sets);
    sets.push_back("train.fp8.saved_inputs=true");
    const launch::TrainSummary kept = train(r.config, sets);
    const std::string what = std::string(r.config) + " " + r.sets[0] + (r.sets.size() > 1 ? " " + r.sets[1] : "");
    EXPECT_EQ(kept.losses, cast.losses) << what;
    EXPECT_EQ(kept.grad_norms, cast.grad_norms) << what;
    EXPECT_EQ(kept.final_val_loss, cast.final_val_loss) << what;
    EXPECT_LT(kept.peak_activations, cast.peak_activations) << what << ": nothing kept in FP8?";
  }
}

// Every recipe learns (100 steps of a one-layer llama-tiny: the validation
// loss within 5% of bf16's; early in training, where the loss still falls
// fast, the recipes' measured gaps are 0.1-1.2%; Fp8Full holds them to 1%
// after 600 steps), and with the scales left at 1 (no amax ever scales a
// tensor: the small gradients underflow FP8) it does not.
TEST(Fp8Train, RecipesLearnAndFrozenScalesDoNot) {
  const std::vector<std::string> run = {"train.steps=100", "model.layers=1", "eval.every=0", "eval.batches=8"};
  const launch::TrainSummary bf16 = train("configs/llama-tiny.yaml", run);
  for (const char* recipe : {"tensorwise", "delayed", "blockwise"}) {
    std::vector<std::string> sets = run;
    sets.push_back(std::string("train.fp8.recipe=") + recipe);
    const launch::TrainSummary s = train("configs/llama-tiny.yaml", sets);
    EXPECT_LT(std::abs(s.final_val_loss / bf16.final_val_loss - 1), 0.05)
        << recipe << ": val loss " << s.final_val_loss << ", bf16 " << bf16.final_val_loss;
    EXPECT_NE(s.final_val_loss, bf16.final_val_loss) << recipe << ": nothing quantised?";
  }
  std::vector<std::string> frozen = run;
  frozen.push_back("train.fp8.recipe=tensorwise");
  const launch::TrainSummary broken = train("configs/llama-tiny.yaml", frozen, "fp8_frozen_scales");
  EXPECT_GT(broken.final_val_loss, 1.25 * bf16.final_val_loss)
      << "scales frozen at 1: val loss " << broken.final_val_loss << ", bf16 " << bf16.final_val_loss;
}

// Delayed scaling's state (every tensor's scale and amax history) comes
// back from a checkpoint exactly: 3 steps, save, 3 more resumed give the
// 6-step run's losses bit for bit (the state restored at 1 would not: the
// scales start at 1 again); a damaged state file is refused, naming it.
TEST(Fp8Train, DelayedStateResumesExactly) {
  const std::string dir = temp_dir("resume");
  fs::remove_all(dir);
  const std::vector<std::string> base = {"train.steps=6", "train.fp8.recipe=delayed", "train.fp8.amax_history=3",
                                         "eval.batches=0", "train.global_batch=16"};
  const launch::TrainSummary whole = train("configs/llama-tiny.yaml", base);
  std::vector<std::string> first = base;
  first.insert(first.end(), {"train.steps=3", "checkpoint.dir=" + dir});
  train("configs/llama-tiny.yaml", first);
  const std::string state = dir + "/step_00000003/fp8_state.json";
  ASSERT_TRUE(fs::exists(state));
  std::vector<std::string> rest = base;
  rest.push_back("checkpoint.dir=" + dir);
  std::vector<std::string> sets = {"log.metrics=", "train.precision=bf16"};
  sets.insert(sets.end(), rest.begin(), rest.end());
  const launch::TrainSummary resumed = launch::train(load_recipe(src("configs/llama-tiny.yaml"), sets),
                                                     {.quiet = true, .resume = dir + "/step_00000003"});
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) EXPECT_EQ(resumed.losses[s], whole.losses[s + 3]) << "step " << s + 4;
  // a changed byte: the checksum the index records no longer holds
  {
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('#');
  }
  fs::remove_all(dir + "/step_00000006");
  std::ofstream(dir + "/latest") << "step_00000003\n";
  try {
    launch::train(load_recipe(src("configs/llama-tiny.yaml"), sets), {.quiet = true, .resume = dir + "/step_00000003"});
    ADD_FAILURE() << "a damaged FP8 state was loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_state.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// The metrics' FP8 statistics: each layer's smallest scale, and the values
// clamped at FP8's largest. Delayed scaling casts with the steps before's
// scales, so a growing tensor saturates some values; keep_high_precision
// first_layer leaves layer 0 out of FP8 (no statistics there).
TEST(Fp8Train, MetricsAndKeptLayers) {
  const launch::TrainSummary s = train(
      "configs/llama-tiny.yaml",
      {"train.steps=6", "train.fp8.recipe=delayed", "eval.batches=0", "train.fp8.keep_high_precision=[first_layer]"});
  ASSERT_EQ(s.fp8_scale.size(), 6u);
  int64_t saturated = 0;
  for (int64_t n : s.fp8_saturated) saturated += n;
  for (size_t step = 0; step < 6; ++step) {
    ASSERT_EQ(s.fp8_scale[step].size(), 2u);
    EXPECT_EQ(s.fp8_scale[step][0], 0.0) << "layer 0 is kept in bf16";
    EXPECT_GT(s.fp8_scale[step][1], 0.0) << "layer 1's FP8 GEMMs, step " << step + 1;
  }
  EXPECT_EQ(s.fp8_scale[0][1], 1.0) << "delayed scaling's first step casts with scale 1";
  EXPECT_NE(s.fp8_scale[1][1], 1.0) << "the second with the first step's amaxes";
  EXPECT_GT(saturated, 0) << "delayed scaling's stale scales clamp some values";
}

// 600 steps, every recipe against bf16 on llama-tiny and moe-tiny: the
// validation loss, the mean of three seeds' runs (a run's own trajectory
// moves its final loss by about 1% from seed to seed on these tiny models,
// the size of the gap asserted, so one seed cannot tell a recipe's gap from
// its noise), within 1% of bf16's mean, and the scales frozen at 1 far from
// it. ctest -L full (two tests: one a model). Measured in
// docs/precision.md#fp8-training. e5m2 for the forward is printed, not
// asserted: on these models it does no worse than e4m3, their loss cannot
// tell two mantissa bits from three.
class Fp8Full : public ::testing::TestWithParam<const char*> {};

TEST_P(Fp8Full, SixHundredStepsTrackBf16) {
  if (!std::getenv("TRIDENT_FP8_FULL")) GTEST_SKIP() << "600 steps a run: ctest -L full (test_fp8_train_full)";
  const std::string config = std::string("configs/") + GetParam() + ".yaml";
  const std::vector<std::string> run = {"train.steps=600"};
  auto mean_of_seeds = [&](const char* what, std::vector<std::string> sets) {
    double sum = 0;
    std::string each;
    for (const char* seed : {"seed=1234", "seed=1235", "seed=1236"}) {
      sets.push_back(seed);
      const double v = train(config, sets).final_val_loss;
      sets.pop_back();
      sum += v, each += fmt::format(" {:.4f}", v);
    }
    std::printf("[fp8] %s %s: val loss%s, mean %.4f\n", GetParam(), what, each.c_str(), sum / 3);
    std::fflush(stdout);
    return sum / 3;
  };
  const double bf16 = mean_of_seeds("bf16", run);
  double worst_gap = 0;
  for (const char* recipe : {"tensorwise", "delayed", "blockwise"}) {
    std::vector<std::string> sets = run;
    sets.push_back(std::string("train.fp8.recipe=") + recipe);
    const double gap = mean_of_seeds(recipe, sets) / bf16 - 1;
    std::printf("[fp8] %s %s: %+.2f%% from bf16's mean\n", GetParam(), recipe, 100 * gap);
    EXPECT_LT(std::abs(gap), 0.01) << GetParam() << " " << recipe;
    worst_gap = std::max(worst_gap, std::abs(gap));
  }
  std::vector<std::string> broken = run;
  broken.push_back("train.fp8.recipe=tensorwise");
  const launch::TrainSummary frozen = train(config, broken, "fp8_frozen_scales");
  const launch::TrainSummary e5m2 = train(config, broken, "fp8_e5m2_forward");
  std::printf("[fp8] %s breaks (seed 1234): frozen scales %.4f, e5m2 forward %.4f, bf16's mean %.4f\n", GetParam(),
              frozen.final_val_loss, e5m2.final_val_loss, bf16);
  EXPECT_GT(frozen.final_val_loss, 1.2 * bf16) << GetParam() << ": scales frozen at 1";
  std::printf("[fp8] %s: the recipes' largest gap %.2f%%, e5m2 forward's %+.2f%%\n", GetParam(), 100 * worst_gap,
              100 * (e5m2.final_val_loss / bf16 - 1));
}
INSTANTIATE_TEST_SUITE_P(Models, Fp8Full, ::testing::Values("llama-tiny", "moe-tiny"), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

}  // namespace trident
