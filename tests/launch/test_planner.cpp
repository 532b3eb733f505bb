// The planner: memory formulas against hand-computed values, enumeration
// completeness, rejection messages, the JSON schema, the command line.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/recipe.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/planner.hpp"
#include "launch/trainer.hpp"
#include "tests/test_util.hpp"

namespace trident::launch {

std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }

Recipe recipe(const std::string& name) {
  Recipe rc = load_recipe(src("configs/" + name), single_process_overrides(), 1);
  rc.overrides.clear();
  return rc;
}

Cluster cpu() { return load_cluster(src("configs/clusters/cpu-local.yaml"), Precision::fp32); }

// The demo (GPT-2, 4 layers, hidden 128, vocabulary 32 padded to 64,
// sequence 64) by hand: 809,728 parameters with the padding; one micro-batch
// of 8 in flight.
TEST(Planner, MemoryByHand) {
  const Recipe rc = recipe("demo.yaml");
  const int64_t P = 64 * 128 + 64 * 128 +
                    4 * (4 * 128 + 3 * 128 * 128 + 384 + 128 * 128 + 128 + 512 * 128 + 512 + 128 * 512 + 128) + 2 * 128;
  ASSERT_EQ(P, 809728);
  PlanResult r = plan_one(rc, cpu(), {2, 1, 1, 1, 8, 0, Recompute::none, ScheduleKind::one_f_one_b, false});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_EQ(r.stage_params, P);
  EXPECT_EQ(r.params, P - 32 * 128);  // the consolidated model: no padding rows
  EXPECT_DOUBLE_EQ(r.memory.params, 4.0 * P);
  EXPECT_DOUBLE_EQ(r.memory.grads, 4.0 * P);
  EXPECT_DOUBLE_EQ(r.memory.optimizer, 8.0 * P);
  // activations: N = 512 rows, per layer 985,088 elements + 131,072 attention
  // probabilities; layer inputs, the output, the head (norm, statistics,
  // logits [512, 64], losses); the shared scratch 1,179,648
  const double per_layer = 2 * 65536 + 4 * 512 + 512 * 384 + 512 * 128 + 512 * 128 + 512 * 512 + 512 * 512 + 131072;
  const double ctx = 4 * per_layer + 4 * 65536 + 65536 + (65536 + 2 * 512 + 512 * 64 + 512);
  EXPECT_DOUBLE_EQ(r.memory.activations, 4 * (ctx + 1179648));
  EXPECT_DOUBLE_EQ(r.memory.buffers, 0);  // ZeRO 0 reduces in place
  // ZeRO shards by the data size; 1 receives its shard into a buffer; 2 and 3
  // hold every gradient window until the step's reductions finish; 3 gathers
  // a layer (198,272 parameters) and prefetches the next
  r = plan_one(rc, cpu(), {2, 1, 1, 1, 8, 1, Recompute::none, ScheduleKind::one_f_one_b, false});
  EXPECT_DOUBLE_EQ(r.memory.optimizer, 8.0 * P / 2);
  EXPECT_DOUBLE_EQ(r.memory.grads, 4.0 * P);
  EXPECT_DOUBLE_EQ(r.memory.buffers, 4.0 * P / 2);
  r = plan_one(rc, cpu(), {2, 1, 1, 1, 8, 3, Recompute::none, ScheduleKind::one_f_one_b, false});
  EXPECT_DOUBLE_EQ(r.memory.params, 4.0 * P / 2 + 2 * 4.0 * 198272);
  EXPECT_DOUBLE_EQ(r.memory.grads, 4.0 * P / 2 + 4.0 * P);  // 2 micro-batches: a whole accumulation buffer
  // one micro-batch per step: three segment windows instead
  Recipe one_micro = rc;
  one_micro.overrides = {"train.global_batch=16"};
  r = plan_one(one_micro, cpu(), {2, 1, 1, 1, 8, 2, Recompute::none, ScheduleKind::one_f_one_b, false});
  ASSERT_EQ(r.micro_batches, 1);
  EXPECT_DOUBLE_EQ(r.memory.grads, 4.0 * P / 2 + 3 * 4.0 * 198272);
  // full recompute keeps one layer's set and each layer's input
  r = plan_one(rc, cpu(), {2, 1, 1, 1, 8, 0, Recompute::full, ScheduleKind::one_f_one_b, false});
  EXPECT_DOUBLE_EQ(r.memory.activations,
                   4 * (per_layer + 4 * 65536 + 65536 + (65536 + 2 * 512 + 512 * 64 + 512) + 1179648));
  // bf16: 2-byte parameters, fp32 master weights in the optimizer
  r = plan_one(rc, load_cluster(src("configs/clusters/dgx-h100.yaml"), Precision::bf16),
               {2, 1, 1, 1, 8, 0, Recompute::none, ScheduleKind::one_f_one_b, false});
  EXPECT_DOUBLE_EQ(r.memory.params, 2.0 * P);
  EXPECT_DOUBLE_EQ(r.memory.optimizer, 12.0 * P);
}

// Every configuration of 2 devices for the demo (4 layers, global batch 32):
// 2x1x1: 5 micro-batch sizes x 4 ZeRO x 3 recompute = 60; 1x2x1: 6 x 2
// (sequence parallel) x 12 = 144; 1x1x2: 2 virtual stage counts x 6 x 12 = 144.
// One activation layout for the allocator and the planner: the planner's
// activation bytes equal the peak the trainer's allocator measures, for every
// recompute mode and with the split backward of zero-bubble schedules (the
// CPU layout; the CUDA layout, B·H·T attention state, runs in test_cuda on a GPU).
TEST(Planner, ActivationBytesEqualTheMeasuredPeak) {
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
    for (const char* file : {"demo.yaml", "llama-tiny.yaml"}) {
      std::vector<std::string> sets = single_process_overrides();
      for (const char* s : {"train.steps=2", "train.global_batch=4", "train.micro_batch=2", "eval.batches=0",
                            "log.metrics=", "train.threads=1"})
        sets.push_back(s);
      sets.push_back(fmt::format("train.recompute={}", rc));
      const Recipe run = load_recipe(src(std::string("configs/") + file), sets, 1);
      const TrainSummary measured = train(run, {.quiet = true, .single_process = true});
      const PlanResult plan = plan_one(run, cpu(), {1, 1, 1, 1, 2, 0, rc, ScheduleKind::one_f_one_b, false});
      ASSERT_TRUE(plan.feasible) << plan.reason;
      EXPECT_EQ(int64_t(plan.memory.activations), measured.peak_activations) << file << " recompute " << rc;
    }
}

TEST(Planner, EnumerationIsComplete) {
  const Recipe rc = recipe("demo.yaml");
  const auto all = plan_all(rc, cpu(), 2);
  EXPECT_EQ(all.size(), 348u);
  int64_t feasible = 0, interleave_refused = 0;
  for (const auto& r : all) {
    feasible += r.feasible;
    if (!r.feasible) EXPECT_FALSE(r.reason.empty());
    if (r.config.virtual_stages == 2 && r.config.micro_batch == 32) {  // one micro-batch cannot interleave 2 stages
      EXPECT_FALSE(r.feasible);
      EXPECT_NE(r.reason.find("micro-batches(1) % pipeline(2)"), std::string::npos) << r.reason;
      ++interleave_refused;
    }
  }
  EXPECT_EQ(interleave_refused, 12);
  EXPECT_GT(feasible, 300);
  // ranked: feasible first, by predicted tokens/s
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i].feasible) EXPECT_GE(all[i - 1].tokens_per_s, all[i].tokens_per_s);
}

TEST(Planner, RejectionsSayWhy) {
  const auto all = plan_all(recipe("llama3-70b.yaml"), cpu(), 2);
  ASSERT_FALSE(all.empty());
  for (const auto& r : all) EXPECT_FALSE(r.feasible);
  const PlanResult r =
      plan_one(recipe("llama3-70b.yaml"), cpu(), {1, 2, 1, 1, 1, 0, Recompute::full, ScheduleKind::one_f_one_b, true});
  EXPECT_NE(r.reason.find("needs "), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find(" > 12.0 GiB: optimizer states "), std::string::npos) << r.reason;
  const PlanResult bad =
      plan_one(recipe("demo.yaml"), cpu(), {1, 3, 1, 1, 8, 0, Recompute::none, ScheduleKind::one_f_one_b, false});
  EXPECT_NE(bad.reason.find("heads(4) % tensor(3) != 0"), std::string::npos) << bad.reason;
}

TEST(Planner, JsonSchema) {
  const auto all = plan_all(recipe("demo.yaml"), cpu(), 2);
  const YAML::Node j = YAML::Load(plan_json(all));
  ASSERT_TRUE(j.IsSequence());
  ASSERT_EQ(j.size(), all.size());
  for (const auto& item : j) {
    for (const char* k :
         {"data", "tensor", "pipeline", "virtual_stages", "micro_batch", "zero", "recompute", "sequence_parallel",
          "params", "memory_bytes", "step_time_s", "tokens_per_s", "tflops_per_device", "mfu", "feasible", "reason"})
      ASSERT_TRUE(item[k].IsDefined()) << k;
    for (const char* k : {"params", "grads", "optimizer", "activations", "buffers", "total"})
      ASSERT_TRUE(item["memory_bytes"][k].IsDefined()) << k;
    if (item["feasible"].as<bool>()) {
      EXPECT_TRUE(item["reason"].IsNull());
      EXPECT_GT(item["tokens_per_s"].as<double>(), 0);
    }
  }
}

TEST(Planner, CommandLine) {
  auto run = [](const std::string& args) { return test::run_cli(TRIDENT_BINARY, args); };
  test::CliRun r = run("plan " + src("configs/demo.yaml") + " --cluster " + src("configs/clusters/cpu-local.yaml") +
                       " --gpus 2 --explain");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("348 configurations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory per device: params"), std::string::npos) << r.out;
  r = run("plan " + src("configs/demo.yaml") + " --cluster " + src("configs/clusters/cpu-local.yaml") +
          " --gpus 4 --mesh 2,2,1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("1 configurations"), std::string::npos) << r.out;
  const std::string bad = (std::filesystem::temp_directory_path() / "trident_bad_cluster.yaml").string();
  std::ofstream(bad) << "name: x\ndevices_per_node: 8\nmemory_gib: 80\npeak_tflops: {fp32: 10}\ngemm_fraction: 2\n";
  r = run("plan " + src("configs/demo.yaml") + " --cluster " + bad + " --gpus 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("key 'gemm_fraction': expected at most 1, found 2"), std::string::npos) << r.out;
  r = run("plan " + src("configs/demo.yaml") + " --cluster " + src("configs/clusters/cpu-local.yaml") +
          " --gpus 4 --mesh 2,2,2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("2 x 2 x 2 = 8 != --gpus 4"), std::string::npos) << r.out;
}

// A sweep over 2 ranks: every mesh runs, each with its measurement and the
// plan; the predicted peak memory is within 10% of the measured one.
TEST(Planner, SweepOnTwoRanks) {
  const std::string out = (std::filesystem::temp_directory_path() / "trident_sweep_test").string();
  std::filesystem::remove_all(out);
  const test::CliRun r = test::run_cli(
      "OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "
      "2 " +
          std::string(TRIDENT_BINARY),
      "sweep " + src("configs/demo.yaml") + " --cluster " + src("configs/clusters/cpu-local.yaml") +
          " --warmup 1 --steps 2 --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("fastest measured: "), std::string::npos) << r.out;
  const YAML::Node j = YAML::LoadFile(out + "/sweep.json");
  ASSERT_EQ(j.size(), 3u);  // 2x1x1, 1x1x2, 1x2x1
  for (const auto& m : j) {
    ASSERT_TRUE(m["valid"].as<bool>());
    EXPECT_GT(m["measured"]["tokens_per_s"].as<double>(), 0);
    EXPECT_GT(m["predicted"]["tokens_per_s"].as<double>(), 0);
    const double meas = m["measured"]["memory_bytes"]["total"].as<double>();
    const double pred = m["predicted"]["memory_bytes"]["total"].as<double>();
    EXPECT_NEAR(pred / meas, 1.0, 0.10) << m["data"] << "x" << m["tensor"] << "x" << m["pipeline"];
  }
  EXPECT_TRUE(std::filesystem::exists(out + "/sweep.csv"));
  std::filesystem::remove_all(out);
}

}  // namespace trident::launch
