// The equivalence test for data parallelism, run by ctest under mpirun with
// 1, 2 and 4 ranks: for ZeRO 0, 1, 2 and 3, with and without gradient
// accumulation, the demo model trained on `world` data ranks gives the
// single-rank run's step-1 gradients (relative norm of the difference
// <= 1e-5) and its losses over 10 steps (relative <= 1e-4). A second test
// checks the allocator's per-rank peaks against the ZeRO formulas.
// The single-rank reference runs in the same process (MPI ignored).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "core/recipe/recipe.hpp"
#include "launch/train/trainer.hpp"
#include "model/transformer.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/launch/train/equivalence.hpp"
#include "tests/mpi_test_main.hpp"

namespace trident {

int g_world = 1;

Recipe recipe(int data, int zero, int64_t global_batch, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"train.steps=10", "train.micro_batch=4", "log.metrics=",
                                   "eval.batches=0", "train.threads=1",     "parallel.bucket_bytes=65536"};
  sets.push_back("train.global_batch=" + std::to_string(global_batch));
  sets.push_back("parallel.data=" + std::to_string(data));
  sets.push_back("parallel.zero=" + std::to_string(zero));
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml", sets, data);
}

const test::EquivalenceRun& reference(int64_t global_batch) {
  return test::single_rank_reference(std::to_string(global_batch), [&] { return recipe(1, 0, global_batch); });
}

struct Case {
  int zero;
  bool accumulate;  // several micro-batches per rank per step
};

class DataParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallel, MatchesSingleRank) {
  const auto [zero, accumulate] = GetParam();
  // micro-batch 4: 32 sequences = 8, 4, 2 micro-batches per rank; 4 x world = one each
  const int64_t global_batch = accumulate ? 32 : 4 * g_world;
  const auto& ref = reference(global_batch);
  const test::EquivalenceRun run =
      test::train_with_step1_gradients(recipe(g_world, zero, global_batch), {.quiet = true});
  test::expect_equivalent(ref, run, fmt::format("data {} zero {}", g_world, zero));
}

INSTANTIATE_TEST_SUITE_P(Zero, DataParallel,
                         ::testing::Values(Case{0, true}, Case{1, true}, Case{2, true}, Case{3, true}, Case{0, false},
                                           Case{1, false}, Case{2, false}, Case{3, false}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.zero) +
                                  (info.param.accumulate ? "_accumulate" : "_one_micro_batch");
                         });

// Per-rank peaks (bytes) against the ZeRO formulas for P fp32 parameters on d
// ranks. Stages 2 and 3 also hold transient segment windows (at most 4 of
// the largest segment for gradients, 3 for parameters: docs/parallelism.md),
// so there the check is formula <= peak <= formula + windows. A 16-layer
// model keeps the windows small enough that a full-size buffer would fail.
class ZeroMemory : public ::testing::TestWithParam<int> {};

TEST_P(ZeroMemory, PeaksMatchFormulas) {
  const int zero = GetParam();
  const std::vector<std::string> deep = {"model.layers=16", "model.hidden=64", "train.steps=2"};
  Recipe rc = recipe(g_world, zero, 4 * g_world, deep);
  launch::TrainSummary run = launch::train(rc, {.quiet = true});
  model::Transformer<float> shape(rc.model, 1, {.full_buffers = false});
  const double P = double(shape.registry().total()), d = g_world;
  int64_t max_seg = 0;
  for (auto& s : shape.segments()) max_seg = std::max(max_seg, s.size());
  const double params = zero >= 3 ? 4 * P / d : 4 * P, grads = zero >= 2 ? 4 * P / d : 4 * P;
  const double optimizer = zero >= 1 ? 8 * P / d : 8 * P;
  EXPECT_NEAR(run.peak_optimizer / optimizer, 1.0, 0.05) << "optimizer, zero " << zero;
  if (zero < 3) {
    EXPECT_NEAR(run.peak_params / params, 1.0, 0.05) << "params, zero " << zero;
  } else {
    EXPECT_GE(run.peak_params, 0.95 * params);
    EXPECT_LE(run.peak_params, 1.05 * params + 3 * 4 * max_seg) << "params, zero 3";
  }
  if (zero < 2) {
    EXPECT_NEAR(run.peak_grads / grads, 1.0, 0.05) << "grads, zero " << zero;
  } else {
    EXPECT_GE(run.peak_grads, 0.95 * grads);
    EXPECT_LE(run.peak_grads, 1.05 * grads + 4 * 4 * max_seg) << "grads, zero " << zero << ", P " << P;
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, ZeroMemory, ::testing::Values(0, 1, 2, 3));

// The last train record's data_shard bytes in a metrics file.
double shard_bytes(const std::string& metrics) {
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find("\"type\":\"train\"") != std::string::npos) last = line;
  const size_t at = last.find("\"data_shard\":", last.find("\"comm_bytes\":{"));
  EXPECT_NE(at, std::string::npos) << last;
  return at == std::string::npos ? 0 : std::stod(last.substr(at + 13));
}

// train.fp8.param_gather: ZeRO 3 gathering the FP8 GEMMs' weights as FP8
// codes (model/fp8_gather.hpp) is the run that gathers them in float32, bit
// for bit (every loss, the step-1 gradients), with fewer bytes through the
// shard group: dense (LLaMA under tensor parallelism: the amax over the
// tensor group too), MoE with its experts split (their own part and shard
// group, a scale per expert) and DeepSeek-V3 (MLA's projections, kv_a's two
// scales), under tensorwise and delayed scaling.
TEST(Fp8ParamGather, IsTheFloat32GatherBitForBit) {
  if (g_world < 2) GTEST_SKIP() << "gathers over 2 or more ranks";
  struct Run {
    const char* config;
    const char* recipe;
    int data;
    std::vector<std::string> sets;
  };
  const std::vector<std::string> small = {"model.vocab=64",  "data.synthetic.vocab=64", "model.vocab_multiple=1",
                                          "model.hidden=64", "model.heads=4",           "model.kv_heads=2",
                                          "model.layers=3"};
  std::vector<Run> runs = {{"llama-tiny.yaml", "tensorwise", g_world, {}}, {"moe-tiny.yaml", "delayed", g_world, {}}};
  if (g_world == 4) {
    runs[0] = {"llama-tiny.yaml", "tensorwise", 2, {"parallel.tensor=2", "parallel.sequence_parallel=true"}};
    runs[1].sets = {"parallel.expert=2"};
    runs.push_back({"deepseek-v3-tiny.yaml",
                    "delayed",
                    4,
                    {"parallel.expert=2", "model.mtp=null", "model.kv_heads=4", "model.moe.ffn_hidden=48",
                     "model.moe.shared_ffn_hidden=32"}});
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const Run& r : runs) {
    auto recipe_of = [&](bool gather) {
      std::vector<std::string> sets = {"train.steps=3",
                                       "train.micro_batch=2",
                                       "train.global_batch=8",
                                       "eval.batches=0",
                                       "train.threads=1",
                                       "parallel.zero=3",
                                       "parallel.data=" + std::to_string(r.data),
                                       "train.fp8.format=hybrid",
                                       "train.fp8.recipe=" + std::string(r.recipe),
                                       "train.fp8.param_gather=" + std::string(gather ? "true" : "false"),
                                       fmt::format("log.metrics={}/fp8_gather_{}.jsonl", TRIDENT_BINARY_DIR, gather)};
      sets.insert(sets.end(), small.begin(), small.end());
      sets.insert(sets.end(), r.sets.begin(), r.sets.end());
      return load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + r.config, sets, g_world);
    };
    const Recipe plain = recipe_of(false), cast = recipe_of(true);
    if (rank == 0) std::remove(plain.log.metrics.c_str()), std::remove(cast.log.metrics.c_str());
    const test::EquivalenceRun a = test::train_with_step1_gradients(plain, {.quiet = true});
    const test::EquivalenceRun b = test::train_with_step1_gradients(cast, {.quiet = true});
    const std::string what = fmt::format("{} {} on {} ranks", r.config, r.recipe, g_world);
    EXPECT_EQ(a.losses, b.losses) << what;
    ASSERT_EQ(a.step1_grads.size(), b.step1_grads.size()) << what;
    EXPECT_EQ(0, std::memcmp(a.step1_grads.data(), b.step1_grads.data(), a.step1_grads.size() * sizeof(float)))
        << what << ": step-1 gradients";
    if (rank == 0) {  // the metrics' writer
      const double bytes_plain = shard_bytes(plain.log.metrics), bytes_cast = shard_bytes(cast.log.metrics);
      std::printf("%s: data_shard bytes of step 3: %.0f float32, %.0f FP8 (%.2fx)\n", what.c_str(), bytes_plain,
                  bytes_cast, bytes_cast / bytes_plain);
      EXPECT_LT(bytes_cast, 0.75 * bytes_plain) << what;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace trident

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv,
                                      [](trident::parallel::MpiCommunicator& w) { trident::g_world = w.size(); });
}
