// Checkpoints, run by ctest under mpirun with 1 and 4 ranks.
// Exact resume: a run of 6 steps saving every 3, and a second run resumed
// from its step-3 checkpoint, give bitwise the same losses for steps 4-6, on
// several meshes (data with ZeRO 0, 1 and 3, tensor, pipeline with
// interleaving, all three). Keep-N rotation and the cleanup of an
// abandoned (interrupted) save. Damage: a flipped byte (checksum), a
// truncated or missing shard, a wrong format version, another model, another
// mesh (resharding is not supported yet): each an InputError naming the file
// or key, raised on every rank, with the checkpoint left as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/recipe.hpp"
#include "launch/trainer.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/mpi_test_main.hpp"

namespace trident {

namespace fs = std::filesystem;
int g_world = 1;
parallel::MpiCommunicator* g_comm = nullptr;

void barrier() { g_comm->barrier()->wait(); }
bool leader() { return g_comm->rank() == 0; }

// A directory every rank sees, fresh for each test.
std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(TRIDENT_BINARY_DIR) + "/checkpoint_test/" + name + "_np" + std::to_string(g_world);
  if (leader()) fs::remove_all(dir);
  barrier();
  return dir;
}

Recipe recipe(const std::string& dir, std::vector<std::string> mesh, int64_t steps = 6, int64_t every = 3) {
  std::vector<std::string> sets = {"train.steps=" + std::to_string(steps), "train.micro_batch=2",
                                   "train.global_batch=8", "log.metrics=", "eval.batches=0", "train.threads=1",
                                   "checkpoint.dir=" + dir, "checkpoint.every=" + std::to_string(every),
                                   "checkpoint.keep=3"};
  sets.insert(sets.end(), mesh.begin(), mesh.end());
  return load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml", sets, g_world);
}

std::string error_of(const Recipe& rc, const std::string& from) {
  try {
    launch::train(rc, {.quiet = true, .resume = from});
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::vector<std::vector<std::string>> meshes() {
  if (g_world == 1) return {{}};
  return {{"parallel.data=4", "parallel.zero=0"},
          {"parallel.data=4", "parallel.zero=1"},
          {"parallel.data=2", "parallel.tensor=2", "parallel.zero=3", "parallel.sequence_parallel=true"},
          {"parallel.pipeline=2", "parallel.tensor=2", "parallel.schedule=interleaved_1f1b",
           "parallel.virtual_stages=2"},
          {"parallel.data=2", "parallel.pipeline=2", "parallel.zero=1"}};
}

TEST(Checkpoint, ResumeIsExact) {
  int i = 0;
  for (const auto& mesh : meshes()) {
    const std::string dir = fresh_dir("exact" + std::to_string(i++));
    const Recipe rc = recipe(dir, mesh);
    const launch::TrainSummary full = launch::train(rc, {.quiet = true});
    ASSERT_TRUE(fs::exists(dir + "/step_00000003/index.json"));
    ASSERT_TRUE(fs::exists(dir + "/step_00000006/index.json"));
    const launch::TrainSummary resumed = launch::train(rc, {.quiet = true, .resume = dir + "/step_00000003"});
    ASSERT_EQ(resumed.losses.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(resumed.losses[s], full.losses[s + 3]) << "step " << s + 4 << ", mesh " << ::testing::PrintToString(mesh);
      EXPECT_EQ(resumed.grad_norms[s], full.grad_norms[s + 3]) << "step " << s + 4;
    }
    // --resume auto picks `latest` (step 6, the end): nothing left to train
    EXPECT_EQ(launch::train(rc, {.quiet = true, .resume = "auto"}).losses.size(), 0u);
  }
}

TEST(Checkpoint, KeepsTheNewestAndCleansAbandonedSaves) {
  const std::string dir = fresh_dir("keep");
  if (leader()) {  // an interrupted save: a temporary directory without an index
    fs::create_directories(dir + "/.tmp_step_00000099");
    std::ofstream(dir + "/.tmp_step_00000099/dp0_pp0_tp0.safetensors") << "partial";
  }
  barrier();
  launch::train(recipe(dir, meshes().front(), 5, 1), {.quiet = true});
  barrier();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000003", "step_00000004", "step_00000005"}));
  std::ifstream latest(dir + "/latest");
  std::string l;
  latest >> l;
  EXPECT_EQ(l, "step_00000005");
}

TEST(Checkpoint, DamageIsAClearErrorAndChangesNothing) {
  const auto mesh = meshes().back();
  const std::string dir = fresh_dir("damage");
  const Recipe rc = recipe(dir, mesh, 3, 3);
  launch::train(rc, {.quiet = true});
  const std::string ck = dir + "/step_00000003";
  const std::string shard = ck + "/dp0_pp0_tp0.safetensors";
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::string good = bytes(shard), index = bytes(ck + "/index.json");
  barrier();  // every rank has its copy before rank 0 starts damaging
  auto restore = [&] {
    if (leader()) {
      std::ofstream(shard, std::ios::binary | std::ios::trunc) << good;
      std::ofstream(ck + "/index.json", std::ios::binary | std::ios::trunc) << index;
    }
    barrier();
  };
  auto damage = [&](const std::function<void()>& f) {
    if (leader()) f();
    barrier();
  };
  struct Case {
    std::string name;
    std::function<void()> damage;
    std::vector<std::string> fragments;  // expected in rank 0's message (its file is the damaged one)
  };
  std::vector<Case> cases = {
      {"flipped byte", [&] { std::string b = good; b[b.size() / 2] ^= 1; std::ofstream(shard, std::ios::binary | std::ios::trunc) << b; },
       {shard, "checksum", "corrupted"}},
      {"truncated", [&] { std::ofstream(shard, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() - 100); },
       {shard, "truncated"}},
      {"missing shard", [&] { fs::remove(shard); }, {shard, "missing"}},
      {"version", [&] {
         std::string t = index;
         t.replace(t.find("\"version\":1"), 11, "\"version\":9");
         std::ofstream(ck + "/index.json", std::ios::binary | std::ios::trunc) << t;
       },
       {"index.json", "'version'", "expected 1, found 9"}},
  };
  for (const auto& c : cases) {
    damage(c.damage);
    const std::string msg = error_of(rc, ck);
    if (leader())
      for (const auto& f : c.fragments) EXPECT_NE(msg.find(f), std::string::npos) << c.name << ": " << msg;
    else
      EXPECT_NE(msg, "no error") << c.name << ": every rank refuses";
    restore();
  }
  // another model or another mesh
  Recipe other = rc;
  other.model.hidden = 64;
  EXPECT_NE(error_of(other, ck).find("model.hidden: the checkpoint has 128, the recipe 64"), std::string::npos);
  if (g_world == 4) {
    const Recipe moved = recipe(dir, {"parallel.data=4", "parallel.zero=1"}, 3, 3);
    EXPECT_NE(error_of(moved, ck).find("resharding) is not supported yet"), std::string::npos);
  }
  // nothing was overwritten: the checkpoint still resumes
  const std::string now = bytes(shard);
  EXPECT_TRUE(now == good) << "rank " << g_comm->rank() << ": " << now.size() << " bytes now, " << good.size()
                           << " at the start";
  EXPECT_EQ(launch::train(rc, {.quiet = true, .resume = ck}).losses.size(), 0u);
}

}  // namespace trident

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv, [](trident::parallel::MpiCommunicator& w) {
    trident::g_world = w.size();
    trident::g_comm = &w;
  });
}
