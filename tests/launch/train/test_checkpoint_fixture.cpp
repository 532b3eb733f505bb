// A checkpoint written by an earlier trainer (tests/launch/fixtures/checkpoint_v1:
// a tiny GPT-2 saved after step 2, and the losses, gradient norms and learning
// rates of its uninterrupted 4-step run) still loads and resumes exactly:
// the on-disk format is the project's promise, whatever the code around it.
// Regenerating the fixture is not the fix for a failure here.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/recipe/recipe.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/train/trainer.hpp"

namespace trident {
namespace fs = std::filesystem;

const std::string kFixture = std::string(TRIDENT_SOURCE_DIR) + "/tests/launch/fixtures/checkpoint_v1";

TEST(CheckpointFixture, OlderCheckpointResumesExactly) {
  const fs::path dir = fs::temp_directory_path() / ("trident_fixture_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(kFixture + "/step_00000002", dir / "step_00000002");  // resuming writes beside it
  const Recipe rc = load_recipe(kFixture + "/recipe.yaml", {"checkpoint.dir=" + dir.string(), "log.metrics="});
  const launch::TrainSummary run =
      launch::train(rc, {.quiet = true, .single_process = true, .resume = (dir / "step_00000002").string()});
  std::ifstream in(kFixture + "/expected.json");
  const auto expected = nlohmann::json::parse(in)["steps"];
  ASSERT_EQ(run.losses.size(), 2u) << "steps 3 and 4 after the saved step 2";
  for (size_t i = 0; i < 2; ++i) {
    const auto& want = expected[i + 2];
    ASSERT_EQ(want["step"].get<int>(), int(i) + 3);
    // the same arithmetic in the same order: equal to the last bits up to the
    // GEMM library's thread split (the fixture ran on 2 threads)
    EXPECT_NEAR(run.losses[i], want["loss"].get<double>(), 1e-6 * want["loss"].get<double>()) << "step " << i + 3;
    EXPECT_NEAR(run.grad_norms[i], want["grad_norm"].get<double>(), 1e-5 * want["grad_norm"].get<double>())
        << "step " << i + 3;
  }
  // and the whole model reads back for export and sampling
  const launch::WholeModel whole = launch::load_whole_model(kFixture + "/step_00000002");
  EXPECT_EQ(whole.step, 2);
  EXPECT_EQ(whole.recipe.model.layers, 2);
  fs::remove_all(dir);
}

}  // namespace trident
