// The equivalence test for data parallelism, run by ctest under mpirun with
// 1, 2 and 4 ranks: for ZeRO 0 and 1, the demo model trained on `world` data
// ranks gives the single-rank run's step-1 gradients (relative norm of the
// difference <= 1e-5) and its losses over 10 steps (relative <= 1e-4); the
// allocator's per-rank peaks match the ZeRO formulas within 5%.
// The single-rank reference runs in the same process (MPI ignored).
#include <gtest/gtest.h>

#include <cmath>

#include "core/recipe.hpp"
#include "launch/trainer.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

namespace trident {

int g_world = 1;

std::vector<std::string> common() {
  // micro-batch 4: 8, 4 or 2 accumulated micro-batches per rank for 1, 2, 4 ranks
  return {"train.steps=10", "train.global_batch=32", "train.micro_batch=4", "log.metrics=", "eval.batches=0",
          "train.threads=1", "parallel.bucket_bytes=65536"};
}

Recipe recipe(int data, int zero) {
  auto sets = common();
  sets.push_back("parallel.data=" + std::to_string(data));
  sets.push_back("parallel.zero=" + std::to_string(zero));
  return load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml", sets, data);
}

const launch::TrainSummary& reference() {
  static launch::TrainSummary ref = launch::train(recipe(1, 0), {.quiet = true, .capture_step1_grads = true,
                                                                  .single_process = true});
  return ref;
}

class DataParallel : public ::testing::TestWithParam<int> {};

TEST_P(DataParallel, MatchesSingleRank) {
  const int zero = GetParam();
  const auto& ref = reference();
  launch::TrainSummary run = launch::train(recipe(g_world, zero), {.quiet = true, .capture_step1_grads = true});
  ASSERT_EQ(run.step1_grads.size(), ref.step1_grads.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.step1_grads.size(); ++i) {
    double a = ref.step1_grads[i], b = run.step1_grads[i];
    diff += (a - b) * (a - b), norm += a * a;
  }
  EXPECT_LE(std::sqrt(diff / norm), 1e-5) << "step-1 gradients, data " << g_world << " zero " << zero;
  ASSERT_EQ(run.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_LE(std::abs(run.losses[s] / ref.losses[s] - 1), 1e-4)
        << "step " << s + 1 << ": " << run.losses[s] << " vs single-rank " << ref.losses[s];
  // memory per rank against the ZeRO formulas (P parameters, d ranks, fp32)
  const double P = double(ref.step1_grads.size()), d = g_world;
  EXPECT_NEAR(run.peak_params / (4 * P), 1.0, 0.05);
  EXPECT_NEAR(run.peak_grads / (4 * P), 1.0, 0.05);
  EXPECT_NEAR(run.peak_optimizer / (zero >= 1 ? 8 * P / d : 8 * P), 1.0, 0.05)
      << "optimizer bytes " << run.peak_optimizer << " for P = " << P << ", d = " << d;
}

INSTANTIATE_TEST_SUITE_P(Zero, DataParallel, ::testing::Values(0, 1), [](const auto& info) {
  return "zero" + std::to_string(info.param);
});

}  // namespace trident

int main(int argc, char** argv) {
  trident::parallel::MpiRuntime mpi(&argc, &argv);
  trident::g_world = mpi.world();
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int any = rc;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
