// Training on `device: cuda` against the same run on the CPU, and the
// planner's activation bytes for a GPU cluster against the device
// allocator's measured peak. Without a GPU (or a CUDA build) every test
// skips with the reason. (The kernels one by one: tests/kernels/test_cuda.)
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/device_memory.hpp"
#include "core/recipe/recipe.hpp"
#include "kernels/backends.hpp"
#include "launch/plan/planner.hpp"
#include "launch/train/trainer.hpp"
#include "tests/kernels/require_gpu.hpp"

namespace trident::launch {
namespace {

// The demo model on device: cuda tracks the same run on the CPU (fp32 on
// both: the GPU's GEMMs are exact fp32, its sums run in another order), and
// bf16 on the GPU tracks bf16 on the CPU.
TEST(Cuda, TrainingOnTheGpuMatchesTheCpu) {
  REQUIRE_GPU();
  for (const char* precision : {"fp32", "bf16"}) {
    std::vector<std::string> sets = {"train.steps=12", "log.metrics=", "eval.batches=0", "model.layers=2",
                                     std::string("train.precision=") + precision};
    const std::string file = std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml";
    const auto cpu = launch::train(load_recipe(file, sets), {.quiet = true, .single_process = true});
    sets.push_back("device=cuda");
    const auto gpu = launch::train(load_recipe(file, sets), {.quiet = true, .single_process = true});
    ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
    const double tol = std::string(precision) == "fp32" ? 1e-4 : 5e-3;
    for (size_t i = 0; i < cpu.losses.size(); ++i)
      EXPECT_NEAR(gpu.losses[i] / cpu.losses[i], 1.0, tol) << precision << " step " << i + 1;
    EXPECT_GT(gpu.peak_params, 0) << "the device allocator saw no parameters";
  }
}

// FP8 GEMMs (train.fp8) on the GPU: the quantisation kernels are the CPU's
// bits (kernels/cuda/fp8_cuda.cu, checked in the emulation), the GEMMs
// cuBLAS's fp32 on the dequantised operands. The GEMMs sum in another order
// than the CPU's, and a value that lands within that rounding of an FP8
// step casts to the neighbouring code, so the runs drift apart as FP8 runs
// on two meshes do (docs/precision.md#fp8-training): losses within 2e-3 over
// 8 steps, in fp32 activations (bf16's rounding would add its own flips).
TEST(Cuda, Fp8TrainingOnTheGpuMatchesTheCpu) {
  REQUIRE_GPU();
  for (const char* config : {"llama-tiny.yaml", "moe-tiny.yaml"})
    for (const char* recipe : {"tensorwise", "delayed", "blockwise"}) {
      std::vector<std::string> sets = {"train.steps=8", "log.metrics=", "eval.batches=0", "model.layers=2",
                                       "train.fp8.recipe=" + std::string(recipe)};
      const std::string file = std::string(TRIDENT_SOURCE_DIR) + "/configs/" + config;
      const auto cpu = launch::train(load_recipe(file, sets), {.quiet = true, .single_process = true});
      sets.push_back("device=cuda");
      const auto gpu = launch::train(load_recipe(file, sets), {.quiet = true, .single_process = true});
      ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
      for (size_t i = 0; i < cpu.losses.size(); ++i)
        EXPECT_NEAR(gpu.losses[i] / cpu.losses[i], 1.0, 2e-3) << config << " " << recipe << " step " << i + 1;
      ASSERT_EQ(gpu.fp8_scale.size(), cpu.fp8_scale.size());
      for (size_t l = 0; l < cpu.fp8_scale[0].size(); ++l)  // step 1: the same weights, the same amaxes
        EXPECT_NEAR(gpu.fp8_scale[0][l] / cpu.fp8_scale[0][l], 1.0, 1e-3) << config << " " << recipe << " layer " << l;
    }
}

// The recipe configs/FILE with `sets`, trained on the CPU and on device:
// cuda (one process each); the GPU's per-step losses within 1e-4 of the
// CPU's. Returns both runs for further checks.
std::pair<TrainSummary, TrainSummary> cpu_and_gpu(const std::string& file, std::vector<std::string> sets,
                                                  const std::string& what) {
  const std::string path = std::string(TRIDENT_SOURCE_DIR) + "/configs/" + file;
  auto cpu = launch::train(load_recipe(path, sets), {.quiet = true, .single_process = true});
  sets.push_back("device=cuda");
  auto gpu = launch::train(load_recipe(path, sets), {.quiet = true, .single_process = true});
  EXPECT_EQ(cpu.losses.size(), gpu.losses.size()) << what;
  for (size_t i = 0; i < std::min(cpu.losses.size(), gpu.losses.size()); ++i)
    EXPECT_NEAR(gpu.losses[i] / cpu.losses[i], 1.0, 1e-4) << what << " step " << i + 1;
  return {std::move(cpu), std::move(gpu)};
}

// Mixture-of-experts models on the GPU: moe-tiny with QK-norm (softmax
// router, a dense first layer) and a DeepSeek-style model (sigmoid router
// with groups, a moving correction bias, shared experts with Qwen's gate,
// per-sequence aux and z losses) on device: cuda track the same runs on the
// CPU in fp32: the router runs in host memory in both, the experts' grouped
// GEMMs, permutation, combine and gate on the device.
TEST(Cuda, MoeTrainingOnTheGpuMatchesTheCpu) {
  REQUIRE_GPU();
  const std::vector<std::vector<std::string>> cases = {
      {"model.qk_norm=true"},
      {"model.moe.router.score=sigmoid", "model.moe.router.groups=4", "model.moe.router.group_topk=2",
       "model.moe.router.norm_topk=true", "model.moe.router.scaling=2.5", "model.moe.balance.bias_rate=0.001",
       "model.moe.balance.kind=seq_aux_loss", "model.moe.balance.z_loss=0.001", "model.moe.shared_experts=1",
       "model.moe.shared_ffn_hidden=64", "model.moe.shared_expert_gate=true"}};
  for (const auto& extra : cases) {
    std::vector<std::string> sets = {"train.steps=8", "log.metrics=", "eval.batches=0"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    const auto [cpu, gpu] = cpu_and_gpu("moe-tiny.yaml", sets, extra[0]);
    ASSERT_EQ(cpu.expert_tokens.size(), gpu.expert_tokens.size());
    EXPECT_EQ(cpu.expert_tokens[0], gpu.expert_tokens[0]) << extra[0] << ": step 1's routes";
  }
}

// Multi-head latent attention on the GPU: DeepSeek-V3-tiny without its
// multi-token prediction module (CPU only), and the same with DeepSeek-V3's
// head sizes (query and key heads of 128 + 64 = 192 values, value heads of
// 128 padded to 192: the attention kernels' tiles of 32 rows), track the CPU
// in fp32.
TEST(Cuda, MlaTrainingOnTheGpuMatchesTheCpu) {
  REQUIRE_GPU();
  const std::vector<std::vector<std::string>> cases = {
      {"model.mtp=null"},
      {"model.mtp=null", "model.mla.qk_nope_head_dim=128", "model.mla.qk_rope_head_dim=64", "model.mla.v_head_dim=128",
       "model.hidden=256"}};
  for (const auto& extra : cases) {
    std::vector<std::string> sets = {"train.steps=6", "log.metrics=", "eval.batches=0"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    const auto [cpu, gpu] = cpu_and_gpu("deepseek-v3-tiny.yaml", sets, extra.back());
    ASSERT_FALSE(cpu.grad_norms.empty() || gpu.grad_norms.empty());
    EXPECT_NEAR(gpu.grad_norms[0] / cpu.grad_norms[0], 1.0, 1e-4) << extra.back();
  }
}

// The CUDA activation layout (one log-sum-exp per attention row, B·H·T):
// the planner's activation bytes for a GPU cluster equal the device
// allocator's measured peak, for every recompute mode.
TEST(Cuda, PlannerActivationBytesEqualTheDevicePeak) {
  REQUIRE_GPU();
  const std::string root = TRIDENT_SOURCE_DIR;
  const launch::Cluster gpu = launch::load_cluster(root + "/configs/clusters/dgx-h100.yaml", Precision::fp32);
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    std::vector<std::string> sets = {"train.steps=2",  "train.global_batch=4", "train.micro_batch=2",
                                     "eval.batches=0", "log.metrics=",         "device=cuda"};
    sets.push_back(fmt::format("train.recompute={}", rc));
    const Recipe run = load_recipe_on_one_process(root + "/configs/demo.yaml", sets);
    const auto measured = launch::train(run, {.quiet = true, .single_process = true});
    const auto plan = launch::plan_one(run, gpu, {1, 1, 1, 1, 2, 0, rc, ScheduleKind::one_f_one_b, false, {}});
    EXPECT_EQ(int64_t(plan.memory.activations), measured.peak_activations) << "recompute " << rc;
  }
}

}  // namespace
}  // namespace trident::launch
