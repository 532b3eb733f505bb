// Checkpoints, run by ctest under mpirun with 1 and 4 ranks.
// Exact resume: a run of 6 steps saving every 3, and a second run resumed
// from its step-3 checkpoint, give bitwise the same losses for steps 4-6, on
// several meshes (data with ZeRO 0, 1 and 3, tensor, context with ZeRO 1
// over data x context, pipeline with interleaving, all three). Keep-N rotation and the cleanup of an
// abandoned (interrupted) save. Damage: a flipped byte (checksum), a
// truncated or missing shard, a wrong format version, another model: each an
// InputError naming the file or key, raised on every rank, with the
// checkpoint left as it was. Resharding: a checkpoint saved under each mesh
// (and by one process) resumes under every other (and on one process) with
// the uninterrupted single-rank run's losses within 1e-4.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/data/dataset.hpp"
#include "core/error.hpp"
#include "core/recipe/recipe.hpp"
#include "core/safetensors.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/train/trainer.hpp"
#include "model/params.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/mpi_test_main.hpp"
#include "tests/test_util.hpp"

namespace trident {

namespace fs = std::filesystem;
int g_world = 1;
parallel::MpiCommunicator* g_comm = nullptr;

void barrier() { g_comm->barrier()->wait(); }
bool leader() { return g_comm->rank() == 0; }

// A directory every rank sees, fresh for each test.
std::string fresh_dir(const std::string& name) {
  const std::string dir =
      std::string(TRIDENT_BINARY_DIR) + "/checkpoint_test/" + name + "_np" + std::to_string(g_world);
  if (leader()) fs::remove_all(dir);
  barrier();
  return dir;
}

Recipe recipe(const std::string& dir, std::vector<std::string> mesh, int64_t steps = 6, int64_t every = 3,
              const std::string& file = "demo.yaml") {
  std::vector<std::string> sets = {"train.steps=" + std::to_string(steps),
                                   "train.micro_batch=2",
                                   "train.global_batch=8",
                                   "log.metrics=",
                                   "eval.batches=0",
                                   "train.threads=1",
                                   "checkpoint.dir=" + dir,
                                   "checkpoint.every=" + std::to_string(every),
                                   "checkpoint.keep=3"};
  sets.insert(sets.end(), mesh.begin(), mesh.end());
  return load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + file, sets, g_world);
}

// An MoE model with DeepSeek-V3 routing whose correction bias moves every
// step (aux-loss-free balancing): the bias is state the checkpoint must carry.
std::vector<std::string> moe_mesh(std::vector<std::string> mesh) {
  for (const char* s :
       {"model.layers=4", "model.moe.router.score=sigmoid", "model.moe.router.groups=4",
        "model.moe.router.group_topk=2", "model.moe.balance.bias_rate=0.05", "model.moe.shared_experts=1"})
    mesh.push_back(s);
  return mesh;
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
  return {
      {"parallel.data=4", "parallel.zero=0"},
      {"parallel.data=4", "parallel.zero=1"},
      {"parallel.data=2", "parallel.tensor=2", "parallel.zero=3", "parallel.sequence_parallel=true"},
      {"parallel.data=2", "parallel.context=2", "parallel.zero=1"},  // ZeRO shards over data x context
      {"parallel.pipeline=2", "parallel.tensor=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"},
      {"parallel.data=2", "parallel.pipeline=2", "parallel.zero=1"},
      // HSDP: ZeRO 3 in shard groups of 2, ZeRO 1 over data x context in shards of 2
      {"parallel.data=4", "parallel.zero=3", "parallel.data_shard=2"},
      {"parallel.data=2", "parallel.context=2", "parallel.zero=1", "parallel.data_shard=2"}};
}

// A run resumed from its step-3 checkpoint gives steps 4-6 of the whole run, bit for bit.
void expect_resumed_steps_4_to_6(const launch::TrainSummary& full, const launch::TrainSummary& resumed,
                                 const std::vector<std::string>& mesh) {
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(resumed.losses[s], full.losses[s + 3]) << "step " << s + 4 << ", mesh " << ::testing::PrintToString(mesh);
    EXPECT_EQ(resumed.grad_norms[s], full.grad_norms[s + 3]) << "step " << s + 4;
  }
}

TEST(Checkpoint, ResumeIsExact) {
  int i = 0;
  for (const auto& mesh : meshes()) {
    const std::string dir = fresh_dir("exact" + std::to_string(i++));
    const Recipe rc = recipe(dir, mesh);
    const launch::TrainSummary full = launch::train(rc, {.quiet = true});
    ASSERT_TRUE(fs::exists(dir + "/step_00000003/index.json"));
    ASSERT_TRUE(fs::exists(dir + "/step_00000006/index.json"));
    if (rc.parallel.hsdp()) {  // one writer per shard group: the replicas write nothing
      int files = 0;
      for (const auto& e : fs::directory_iterator(dir + "/step_00000003"))
        files += e.path().extension() == ".safetensors";
      EXPECT_EQ(files, rc.parallel.data_shard_size() * rc.parallel.tensor * rc.parallel.pipeline)
          << ::testing::PrintToString(mesh);
    }
    const launch::TrainSummary resumed = launch::train(rc, {.quiet = true, .resume = dir + "/step_00000003"});
    expect_resumed_steps_4_to_6(full, resumed, mesh);
    // --resume auto picks `latest` (step 6, the end): nothing left to train
    EXPECT_EQ(launch::train(rc, {.quiet = true, .resume = "auto"}).losses.size(), 0u);
  }
}

TEST(Checkpoint, MoeResumesExactlyAndReshards) {
  int i = 0;
  std::vector<std::string> saved;
  for (const auto& mesh : meshes()) {
    const std::string dir = fresh_dir("moe" + std::to_string(i++));
    const Recipe rc = recipe(dir, moe_mesh(mesh), 6, 3, "moe-tiny.yaml");
    const launch::TrainSummary full = launch::train(rc, {.quiet = true});
    const launch::TrainSummary resumed = launch::train(rc, {.quiet = true, .resume = dir + "/step_00000003"});
    expect_resumed_steps_4_to_6(full, resumed, mesh);
    saved.push_back(dir + "/step_00000003");
  }
  if (g_world == 1) return;
  // each checkpoint resumed under the next mesh, against the one-process run
  const Recipe one = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/moe-tiny.yaml",
                                 moe_mesh({"train.steps=6", "train.micro_batch=2", "train.global_batch=8",
                                           "log.metrics=", "eval.batches=0", "train.threads=1"}),
                                 1);
  const launch::TrainSummary ref = launch::train(one, {.quiet = true, .single_process = true});
  const auto all = meshes();
  for (size_t a = 0; a < saved.size(); ++a) {
    const size_t b = (a + 1) % all.size();
    const launch::TrainSummary run = launch::train(
        recipe(fresh_dir("moe_to"), moe_mesh(all[b]), 6, 100, "moe-tiny.yaml"), {.quiet = true, .resume = saved[a]});
    ASSERT_EQ(run.losses.size(), 3u);
    for (size_t s = 0; s < 3; ++s)
      EXPECT_LE(std::abs(run.losses[s] / ref.losses[s + 3] - 1), 1e-4)
          << "saved under mesh " << a << ", resumed under mesh " << b << ", step " << s + 4;
  }
}

// Experts split over ranks: each rank's file holds its dense shard and its
// expert shard. Resuming on the same mesh is exact; each checkpoint resumed
// under the next mesh (expert 4 -> 2 -> 1 -> 2 -> 2 -> 4 whole over data x
// tensor -> 1 whole -> 2 under HSDP -> 4, ZeRO 0-3, with tensor + sequence
// and pipeline parallelism) continues the one-process run.
TEST(Checkpoint, ExpertParallelResumesExactlyAndReshards) {
  if (g_world != 4) GTEST_SKIP() << "runs on 4 ranks";
  const std::vector<std::vector<std::string>> all = {
      {"parallel.data=4", "parallel.expert=4", "parallel.zero=0"},
      {"parallel.data=4", "parallel.expert=2", "parallel.zero=1"},
      {"parallel.data=4", "parallel.zero=3"},
      {"parallel.data=2", "parallel.tensor=2", "parallel.expert=2", "parallel.zero=3",
       "parallel.sequence_parallel=true"},
      {"parallel.data=2", "parallel.pipeline=2", "parallel.expert=2", "parallel.zero=2"},
      // whole experts (expert_tensor 1): over data x tensor, and whole on every tensor rank (expert 1)
      {"parallel.data=2", "parallel.tensor=2", "parallel.expert=4", "parallel.expert_tensor=1", "parallel.zero=1"},
      {"parallel.data=2", "parallel.tensor=2", "parallel.expert_tensor=1", "parallel.zero=3"},
      // HSDP: dense shards of 2 replicated twice, experts (expert-data 2) replicated, not sharded
      {"parallel.data=4", "parallel.expert=2", "parallel.zero=3", "parallel.data_shard=2"}};
  std::vector<std::string> saved;
  int i = 0;
  for (const auto& mesh : all) {
    const std::string dir = fresh_dir("expert" + std::to_string(i++));
    const Recipe rc = recipe(dir, moe_mesh(mesh), 6, 3, "moe-tiny.yaml");
    const launch::TrainSummary full = launch::train(rc, {.quiet = true});
    const launch::TrainSummary resumed = launch::train(rc, {.quiet = true, .resume = dir + "/step_00000003"});
    expect_resumed_steps_4_to_6(full, resumed, mesh);
    saved.push_back(dir + "/step_00000003");
  }
  const Recipe one = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/moe-tiny.yaml",
                                 moe_mesh({"train.steps=6", "train.micro_batch=2", "train.global_batch=8",
                                           "log.metrics=", "eval.batches=0", "train.threads=1"}),
                                 1);
  const launch::TrainSummary ref = launch::train(one, {.quiet = true, .single_process = true});
  for (size_t a = 0; a < saved.size(); ++a) {
    const size_t b = (a + 1) % all.size();
    const launch::TrainSummary run = launch::train(
        recipe(fresh_dir("expert_to"), moe_mesh(all[b]), 6, 100, "moe-tiny.yaml"), {.quiet = true, .resume = saved[a]});
    ASSERT_EQ(run.losses.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_LE(std::abs(run.losses[s] / ref.losses[s + 3] - 1), 1e-4)
          << "saved under " << ::testing::PrintToString(all[a]) << ", resumed under "
          << ::testing::PrintToString(all[b]) << ", step " << s + 4;
      EXPECT_LE(std::abs(run.grad_norms[s] / ref.grad_norms[s + 3] - 1), 1e-4) << "step " << s + 4;
    }
  }
  // the whole model from a checkpoint saved with expert 4 (every expert from the rank that held it)
  const launch::WholeModel whole = launch::load_whole_model(saved[0]);
  const launch::WholeModel dense = launch::load_whole_model(saved[2]);
  ASSERT_EQ(whole.params.size(), dense.params.size());
  double diff = 0, norm = 0;
  for (size_t k = 0; k < whole.params.size(); ++k)
    diff += std::pow(whole.params[k] - dense.params[k], 2), norm += std::pow(dense.params[k], 2);
  EXPECT_LE(std::sqrt(diff / norm), 1e-4) << "expert 4's checkpoint against expert 1's, after the same 3 steps";
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
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "run.lock", "step_00000003", "step_00000004", "step_00000005"}));
  std::ifstream latest(dir + "/latest");
  std::string l;
  latest >> l;
  EXPECT_EQ(l, "step_00000005");
}

// The background writer saves the state as it was at start(), whatever the
// training does to the shard afterwards; a second start() finishes the first
// save before it begins.
TEST(Checkpoint, BackgroundSaveWritesTheSnapshot) {
  const std::string dir = fresh_dir("async");
  Recipe rc = recipe(dir, {"parallel.data=" + std::to_string(g_world)}, 1, 1);
  ASSERT_TRUE(rc.checkpoint.async);
  const model::ParamRegistry reg(rc.model);
  const int64_t n = reg.total();
  std::vector<float> p(static_cast<size_t>(n), 1.0f), m(static_cast<size_t>(n), 2.0f), v(static_cast<size_t>(n), 3.0f);
  // every rank a distinct (dp) coordinate of the same whole-model shard, as with ZeRO >= 1
  rc.parallel.zero = 1;
  launch::RankState s{&reg, g_comm->rank(), 0, 0, 0, n, p.data(), m.data(), v.data()};
  launch::CheckpointSaver saver(rc, g_comm);
  saver.start(1, s);
  EXPECT_EQ(saver.buffer_bytes(), 3 * 4 * n);
  std::fill(p.begin(), p.end(), -1.0f);  // "the next step" changes the state while the file is written
  EXPECT_TRUE(saver.pending());
  EXPECT_FALSE(fs::exists(dir + "/step_00000001"));  // finished only by poll(), finish() or the next start()
  saver.start(2, s);                                 // waits for step 1 and finishes it
  barrier();
  EXPECT_TRUE(fs::exists(dir + "/step_00000001/index.json"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000002"));  // not finished yet
  EXPECT_EQ(saver.finish(), dir + "/step_00000002");
  SafetensorsReader one(dir + "/step_00000001/" + fmt::format("dp{}_pp0_tp0.safetensors", g_comm->rank()));
  SafetensorsReader two(dir + "/step_00000002/" + fmt::format("dp{}_pp0_tp0.safetensors", g_comm->rank()));
  std::vector<float> got(static_cast<size_t>(n));
  one.read("params", got.data());
  EXPECT_EQ(got, std::vector<float>(static_cast<size_t>(n), 1.0f));
  two.read("params", got.data());
  EXPECT_EQ(got, std::vector<float>(static_cast<size_t>(n), -1.0f));
  one.read("exp_avg_sq", got.data());
  EXPECT_EQ(got, v);
  std::ifstream latest(dir + "/latest");
  std::string l;
  latest >> l;
  EXPECT_EQ(l, "step_00000002");
  barrier();
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
  // Every rank has finished its attempt before rank 0 repairs the files: a
  // rank still loading would otherwise read the repaired checkpoint, go on
  // to train, and wait in collectives the others never enter.
  auto restore = [&] {
    barrier();
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
      {"flipped byte",
       [&] {
         std::string b = good;
         b[b.size() / 2] ^= 1;
         std::ofstream(shard, std::ios::binary | std::ios::trunc) << b;
       },
       {shard, "checksum", "corrupted"}},
      {"truncated",
       [&] { std::ofstream(shard, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() - 100); },
       {shard, "truncated"}},
      {"missing shard", [&] { fs::remove(shard); }, {shard, "missing"}},
      {"edited index",
       [&] {
         std::string t = index;
         t.replace(t.find("\"offset\":0"), 10, "\"offset\":4");
         std::ofstream(ck + "/index.json", std::ios::binary | std::ios::trunc) << t;
       },
       {"index.json", "'index_crc32c'", "changed or damaged"}},
      {"version",
       [&] {
         std::string t = test::without_index_checksum(index);
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
  // nothing was overwritten: the checkpoint still resumes
  const std::string now = bytes(shard);
  EXPECT_TRUE(now == good) << "rank " << g_comm->rank() << ": " << now.size() << " bytes now, " << good.size()
                           << " at the start";
  EXPECT_EQ(launch::train(rc, {.quiet = true, .resume = ck}).losses.size(), 0u);
}

// A resume never reinterprets a checkpoint: the index records every model
// key of the recipe that saved, and a change of any of them (even one that
// keeps every tensor's size: MLA's head split, where the dense layer is, the
// router's keys) is refused naming the key and both values; the training
// coefficients are said and accepted.
TEST(Checkpoint, ResumeRefusesAnotherModelKeyNamingIt) {
  const std::string dir = fresh_dir("model_keys");
  const std::vector<std::string> tiny = {"model.layers=3", "model.seq_len=16", "model.mtp.depth=1",
                                         "parallel.data=" + std::to_string(g_world)};
  const Recipe rc = recipe(dir, tiny, 1, 1, "deepseek-v3-tiny.yaml");
  launch::train(rc, {.quiet = true});
  const std::string ck = dir + "/step_00000001";
  ASSERT_TRUE(fs::exists(ck + "/index.json"));
  std::ifstream in(ck + "/index.json");
  const std::string index((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(index.find("\"model.moe.router.scaling\":\"2.5\""), std::string::npos) << "recorded";
  struct Change {
    std::vector<std::string> sets;
    std::string fragment;
  };
  const std::vector<Change> changes = {
      {{"model.mla.qk_rope_head_dim=8", "model.mla.qk_nope_head_dim=40"},
       "model.mla.qk_nope_head_dim: the checkpoint has 32, the recipe 40"},
      {{"model.moe.first_dense=0", "model.moe.dense_layers=[0]"},
       "model.moe.first_dense: the checkpoint has 1, the recipe 0"},
      {{"model.moe.top_k=1"}, "model.moe.top_k: the checkpoint has 2, the recipe 1"},
      {{"model.moe.router.groups=2"}, "model.moe.router.groups: the checkpoint has 4, the recipe 2"},
      {{"model.moe.router.scaling=1.5"}, "model.moe.router.scaling: the checkpoint has 2.5, the recipe 1.5"},
      {{"model.moe.router.norm_topk=false"}, "model.moe.router.norm_topk: the checkpoint has true, the recipe false"},
      {{"model.moe.router.score=softmax"}, "model.moe.router.score: the checkpoint has sigmoid, the recipe softmax"}};
  for (const Change& c : changes) {
    std::vector<std::string> sets = tiny;
    sets.insert(sets.end(), c.sets.begin(), c.sets.end());
    const std::string msg = error_of(recipe(dir, sets, 2, 1, "deepseek-v3-tiny.yaml"), ck);
    EXPECT_NE(msg.find(c.fragment), std::string::npos) << msg;
    EXPECT_NE(msg.find("index.json"), std::string::npos) << msg;
  }
  // the training coefficients may change: the run goes on
  std::vector<std::string> sets = tiny;
  for (const char* s : {"model.mtp.loss_weight=0.1", "model.moe.balance.bias_rate=0", "model.init_std=0.01"})
    sets.push_back(s);
  EXPECT_EQ(
      launch::train(recipe(dir, sets, 2, 1, "deepseek-v3-tiny.yaml"), {.quiet = true, .resume = ck}).losses.size(), 1u);
}

// Non-finite values are never loaded: a checkpoint whose files are intact
// (sizes and checksums agree) but hold a NaN or an infinity is refused,
// naming the tensor and the element, on every rank.
TEST(Checkpoint, NonFiniteValuesAreRefusedNamingTheTensor) {
  if (g_world != 1) GTEST_SKIP() << "one process writes the checkpoint";
  const std::string dir = fresh_dir("nonfinite");
  Recipe rc = recipe(dir, {}, 1, 1);
  const model::ParamRegistry reg(rc.model);
  const auto& bias = reg.at("transformer.h.1.attn.c_attn.bias");
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> params(size_t(reg.total()), 0.01f), m(params.size(), 0.0f), v(params.size(), 0.0f);
    params[size_t(bias.offset + 5)] = bad;
    rc.checkpoint.dir = dir + (std::isnan(bad) ? "/nan" : "/inf");
    const launch::RankState s{&reg, 0, 0, 0, 0, reg.total(), params.data(), m.data(), v.data()};
    ASSERT_FALSE(launch::save_checkpoint(rc, 1, s, nullptr).empty());
    const std::string msg = error_of(rc, rc.checkpoint.dir);
    EXPECT_NE(msg.find("params of tensor 'transformer.h.1.attn.c_attn.bias': element 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::isnan(bad) ? "nan" : "inf"), std::string::npos) << msg;
  }
}

// Ranks that see different checkpoints (a damaged copy, an empty directory:
// what a shared filesystem that is not yet consistent shows) all refuse to
// resume, with a message; none goes on to train while the others have left
// (which would hang in the first collective).
TEST(Checkpoint, RanksThatSeeDifferentCheckpointsAllRefuse) {
  if (g_world == 1) GTEST_SKIP() << "needs several ranks";
  const std::string dir = fresh_dir("views");
  const Recipe rc = recipe(dir + "/run", {"parallel.data=" + std::to_string(g_world)}, 3, 3);
  launch::train(rc, {.quiet = true});
  const std::string good = dir + "/run/step_00000003", bad = dir + "/bad/step_00000003";
  if (leader()) {
    fs::create_directories(dir + "/bad");
    fs::copy(good, bad, fs::copy_options::recursive);
    std::ifstream in(bad + "/index.json");
    std::string t((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    t = test::without_index_checksum(t);
    t.replace(t.find("\"version\":1"), 11, "\"version\":9");
    std::ofstream(bad + "/index.json", std::ios::trunc) << t;
    fs::create_directories(dir + "/empty");
  }
  barrier();
  Recipe quick = rc;
  quick.parallel.timeout_s = 30;  // a hang fails the test in 30 s, not 600
  // rank 0 is given the good checkpoint, every other rank the damaged copy
  std::string msg = error_of(quick, leader() ? good : bad);
  if (leader())
    EXPECT_NE(msg.find("rejected by another rank"), std::string::npos) << msg;
  else
    EXPECT_NE(msg.find("expected 1, found 9"), std::string::npos) << msg;
  barrier();
  // --resume auto: rank 0 finds no checkpoint in its directory, the others one
  Recipe split = quick;
  if (leader()) split.checkpoint.dir = dir + "/empty";
  try {
    launch::train(split, {.quiet = true, .resume = "auto"});
    msg = "no error";
  } catch (const InputError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("the same directory on every node"), std::string::npos) << msg;
  EXPECT_NE(msg.find(leader() ? "this rank finds no checkpoint, another rank one" : "another rank none"),
            std::string::npos)
      << msg;
  barrier();
}

// Two datasets of short documents ending with EOD 31 (demo vocabulary 32),
// with their records, written by rank 0: the blend and masking sets.
std::vector<std::string> blend_with_documents(const std::string& dir) {
  if (leader()) {
    fs::create_directories(dir);
    for (int k = 0; k < 2; ++k) {
      data::IndexedDatasetWriter w(dir + "/d" + std::to_string(k) + "_train", data::TokenDType::u16);
      uint64_t x = 99 + uint64_t(k);
      for (int d = 0; d < 300; ++d) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::vector<int32_t> doc(size_t(2 + (x >> 33) % 30));
        for (size_t i = 0; i + 1 < doc.size(); ++i) doc[i] = int32_t((x >> (i % 50)) % 31);
        doc.back() = 31;
        w.add_sequence(doc.data(), int64_t(doc.size()));
        w.end_document();
      }
      w.finish();
      std::ofstream(dir + "/d" + std::to_string(k) + ".meta.json")
          << R"({"tokenizer": {"kind": "byte", "vocab": 32, "eod": 31}, "splits": {"train": {"max_id": 31}}})";
    }
  }
  barrier();
  return {"data.synthetic=null",
          "data.train=[{path: " + dir + "/d0_train, weight: 2}, {path: " + dir + "/d1_train, weight: 1}]",
          "data.document_mask=true"};
}

// The new sampler (epoch-exact indexes, a blend, document masking) keeps
// resume exact, and a checkpoint reshards to another mesh.
TEST(Checkpoint, ResumeIsExactOnABlendWithDocumentMasking) {
  const std::string data = fresh_dir("blend_data");
  const std::vector<std::string> with = blend_with_documents(data);
  const auto all = meshes();
  const std::vector<std::vector<std::string>> list = g_world == 1 ? all : std::vector{all[2], all[4]};
  for (size_t i = 0; i < list.size(); ++i) {
    std::vector<std::string> mesh = list[i];
    mesh.insert(mesh.end(), with.begin(), with.end());
    const std::string dir = fresh_dir("blend" + std::to_string(i));
    const Recipe rc = recipe(dir, mesh);
    const launch::TrainSummary full = launch::train(rc, {.quiet = true});
    const launch::TrainSummary resumed = launch::train(rc, {.quiet = true, .resume = dir + "/step_00000003"});
    ASSERT_EQ(resumed.losses.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(resumed.losses[s], full.losses[s + 3]) << "step " << s + 4 << ", mesh " << i;
      EXPECT_EQ(resumed.grad_norms[s], full.grad_norms[s + 3]) << "step " << s + 4;
    }
    if (i == 1) {  // resharded: saved under the second mesh, resumed under the first
      std::vector<std::string> other = list[0];
      other.insert(other.end(), with.begin(), with.end());
      const launch::TrainSummary moved =
          launch::train(recipe(fresh_dir("blend_moved"), other), {.quiet = true, .resume = dir + "/step_00000003"});
      for (size_t s = 0; s < 3; ++s)
        EXPECT_LE(std::abs(moved.losses[s] / full.losses[s + 3] - 1), 1e-4) << "resharded, step " << s + 4;
    }
  }
}

TEST(Checkpoint, ReshardsAcrossMeshes) {
  if (g_world != 4) GTEST_SKIP() << "runs on 4 ranks";
  // the reference: one process, 6 steps, no checkpoints
  const Recipe ref_rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml",
                                    {"train.steps=6", "train.micro_batch=2", "train.global_batch=8",
                                     "log.metrics=", "eval.batches=0", "train.threads=1"},
                                    1);
  const launch::TrainSummary ref = launch::train(ref_rc, {.quiet = true, .single_process = true});
  auto meshes4 = meshes();
  // saved under each 4-rank mesh, and by one process (rank 0 alone)
  std::vector<std::string> saved;
  for (size_t a = 0; a < meshes4.size(); ++a) {
    const std::string dir = fresh_dir("reshard_from" + std::to_string(a));
    launch::train(recipe(dir, meshes4[a], 3, 3), {.quiet = true});
    saved.push_back(dir + "/step_00000003");
  }
  {
    const std::string dir = fresh_dir("reshard_from_one");
    if (leader()) {
      Recipe one =
          load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml",
                      {"train.steps=3", "train.micro_batch=2", "train.global_batch=8", "log.metrics=", "eval.batches=0",
                       "train.threads=1", "checkpoint.dir=" + dir, "checkpoint.every=3"},
                      1);
      launch::train(one, {.quiet = true, .single_process = true});
    }
    barrier();
    saved.push_back(dir + "/step_00000003");
  }
  auto expect_matches = [&](const launch::TrainSummary& run, const std::string& what) {
    ASSERT_EQ(run.losses.size(), 3u) << what;
    for (size_t s = 0; s < 3; ++s)
      EXPECT_LE(std::abs(run.losses[s] / ref.losses[s + 3] - 1), 1e-4)
          << what << ", step " << s + 4 << ": " << run.losses[s] << " vs " << ref.losses[s + 3];
  };
  for (size_t a = 0; a < saved.size(); ++a)
    for (size_t b = 0; b < meshes4.size(); ++b) {
      if (a == b) continue;
      const std::string scratch = fresh_dir("reshard_to");
      expect_matches(launch::train(recipe(scratch, meshes4[b], 6, 100), {.quiet = true, .resume = saved[a]}),
                     "saved under mesh " + std::to_string(a) + " (" + std::to_string(meshes4.size()) +
                         " = one process), resumed under mesh " + std::to_string(b));
    }
  // a 4-rank checkpoint resumed by one process
  for (size_t a = 0; a < meshes4.size(); ++a) {
    if (leader()) {
      Recipe one = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml",
                               {"train.steps=6", "train.micro_batch=2", "train.global_batch=8",
                                "log.metrics=", "eval.batches=0", "train.threads=1"},
                               1);
      expect_matches(launch::train(one, {.quiet = true, .single_process = true, .resume = saved[a]}),
                     "saved under mesh " + std::to_string(a) + ", resumed by one process");
    }
    barrier();
  }
}

// The whole state (parameters and both moments) of a checkpoint, read on this rank alone.
struct WholeState {
  std::vector<float> params, exp_avg, exp_avg_sq;
};
WholeState read_whole(const Recipe& rc, const std::string& dir) {
  Recipe one = rc;
  one.parallel = ParallelConfig{};
  const model::ParamRegistry reg(one.model);
  WholeState w;
  for (auto* v : {&w.params, &w.exp_avg, &w.exp_avg_sq}) v->assign(size_t(reg.total()), 0.0f);
  const launch::RankState s{&reg, 0, 0, 0, 0, reg.total(), w.params.data(), w.exp_avg.data(), w.exp_avg_sq.data()};
  launch::load_checkpoint(one, dir, s, nullptr);
  return w;
}

// HSDP checkpoints: one writer per shard group (the first replica's ranks;
// the others write nothing), and resharding plain ZeRO 3 (data 4) -> HSDP
// (shards of 2, then of 1) -> plain again moves every bit of the parameters
// and both moments: each save, read whole, is the first checkpoint's state.
TEST(Checkpoint, HsdpWritesOneCopyAndReshardsBitExactly) {
  if (g_world != 4) GTEST_SKIP() << "runs on 4 ranks";
  const std::string first = fresh_dir("hsdp_plain");
  const Recipe plain = recipe(first, {"parallel.data=4", "parallel.zero=3"}, 3, 3);
  launch::train(plain, {.quiet = true});
  const WholeState want = read_whole(plain, first + "/step_00000003");
  const model::ParamRegistry reg(plain.model);
  std::string from = first + "/step_00000003";
  for (int shard : {2, 1, 4}) {
    const std::string dir = fresh_dir("hsdp_" + std::to_string(shard));
    Recipe rc = recipe(dir, {"parallel.data=4", "parallel.zero=3", "parallel.data_shard=" + std::to_string(shard)});
    // this rank's shard as the trainer lays it out: an equal split over its shard group
    const int place = g_comm->rank() % shard, replica = g_comm->rank() / shard;
    const std::vector<int64_t> counts = parallel::split_counts(reg.total(), shard, {});
    int64_t begin = 0;
    for (int q = 0; q < place; ++q) begin += counts[size_t(q)];
    const int64_t n = counts[size_t(place)];
    std::vector<float> p(static_cast<size_t>(n)), m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    launch::RankState s{&reg, g_comm->rank(), 0, 0, begin, begin + n, p.data(), m.data(), v.data()};
    s.writes = replica == 0;
    EXPECT_EQ(launch::load_checkpoint(rc, from, s, g_comm), 3);
    launch::save_checkpoint(rc, 3, s, g_comm);
    from = dir + "/step_00000003";
    int files = 0;
    for (const auto& e : fs::directory_iterator(from)) files += e.path().extension() == ".safetensors";
    EXPECT_EQ(files, shard) << "data 4 in shards of " << shard << ": one file per rank of a shard group";
    const WholeState got = read_whole(plain, from);
    for (auto [a, b, name] : {std::tuple{&want.params, &got.params, "params"},
                              {&want.exp_avg, &got.exp_avg, "exp_avg"},
                              {&want.exp_avg_sq, &got.exp_avg_sq, "exp_avg_sq"}})
      EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)), 0)
          << name << " after resharding into shards of " << shard;
  }
}

// A checkpoint of parameters only, at step 0 (what `trident import` writes:
// zero moments), is the model that trains under every mesh and ZeRO stage:
// the losses of the single-process run resumed from it, and not those of the
// recipe's own initialisation. ZeRO 1 and 2 once kept their own initial
// replicas outside the loaded shard.
TEST(Checkpoint, AStepZeroCheckpointIsWhatTrainsOnEveryMesh) {
  const std::string demo = std::string(TRIDENT_SOURCE_DIR) + "/configs/demo.yaml";
  const std::vector<std::string> one_process = {"train.steps=3", "train.micro_batch=2", "train.global_batch=8",
                                                "log.metrics=",  "eval.batches=0",      "train.threads=1"};
  const std::string dir = fresh_dir("step0");
  if (leader()) {
    Recipe w = load_recipe(demo, one_process, 1);
    w.checkpoint.dir = dir, w.checkpoint.async = false, w.checkpoint.keep = 1;
    const model::ParamRegistry reg(w.model);
    std::vector<float> params(size_t(reg.total())), zeros(size_t(reg.total()), 0.0f);
    reg.initialize_range(params.data(), 0, reg.total(), 99);  // not the recipe's seed, and larger:
    for (float& x : params) x *= 3;                           // a first loss far from log(vocab)
    const launch::RankState s{&reg, 0, 0, 0, 0, reg.total(), params.data(), zeros.data(), zeros.data()};
    ASSERT_FALSE(launch::save_checkpoint(w, 0, s, nullptr).empty());
  }
  barrier();
  const Recipe ref_rc = load_recipe(demo, one_process, 1);
  const launch::TrainSummary ref = launch::train(ref_rc, {.quiet = true, .single_process = true, .resume = dir});
  const launch::TrainSummary own = launch::train(ref_rc, {.quiet = true, .single_process = true});
  ASSERT_EQ(ref.losses.size(), 3u);
  ASSERT_GT(std::abs(ref.losses[0] / own.losses[0] - 1), 1e-2) << "the checkpoint's model is not another one";
  auto all = meshes();
  if (g_world == 4) {
    all.push_back({"parallel.data=4", "parallel.zero=2"});
    all.push_back({"parallel.data=4", "parallel.zero=3"});
    all.push_back({"parallel.data=2", "parallel.pipeline=2", "parallel.zero=2"});
  }
  for (const auto& mesh : all) {
    const launch::TrainSummary run =
        launch::train(recipe(fresh_dir("step0_to"), mesh, 3, 100), {.quiet = true, .resume = dir});
    ASSERT_EQ(run.losses.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_LE(std::abs(run.losses[s] / ref.losses[s] - 1), 1e-4)
          << "step " << s + 1 << ", mesh " << ::testing::PrintToString(mesh) << ": " << run.losses[s]
          << " vs one process " << ref.losses[s] << " (own initialisation: " << own.losses[s] << ")";
      EXPECT_LE(std::abs(run.grad_norms[s] / ref.grad_norms[s] - 1), 1e-3) << "step " << s + 1;
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
