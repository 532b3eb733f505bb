// Training on `device: cuda` against the same run on the CPU, and the
// planner's activation bytes for a GPU cluster against the device
// allocator's measured peak. Without a GPU (or a CUDA build) every test
// skips with the reason. (The kernels one by one: tests/kernels/test_cuda.)
#include <gtest/gtest.h>

#include <string>
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
