// The equivalence test of the project, run by ctest under mpirun with 8
// ranks: meshes data x tensor x pipeline = 8 (every factorisation), pipeline
// schedules, ZeRO stages, GPT-2 and LLaMA, each trained for 10 steps and
// compared with the single-rank run of the same recipe in the same process:
// step-1 gradients (consolidated: every tensor and pipeline slice, padding
// stripped, the tied copy once) within 1e-5 relative, 10 losses and gradient
// norms within 1e-4 relative.
//
// The model is the demo recipe made divisible by every mesh: 8 layers,
// hidden 64, 8 heads (LLaMA: 2 KV heads, replicated at tensor 4 and 8;
// vocabulary 31, padded only to the tensor size), micro-batch 2, global batch
// 16 (8 / data micro-batches per step per rank).
//
// Default: a CI-sized subset (every mesh once, every schedule, every ZeRO
// stage and both architectures at least once). With --full (ctest label
// `full`): the whole matrix, every mesh x schedule x ZeRO 0, 1, 3 x arch
// (interleaved_1f1b with 2 virtual stages; at pipeline 8 the model gets 16
// layers so that its 16 chunks divide).
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/data/dataset.hpp"
#include "core/device_memory.hpp"
#include "core/recipe/recipe.hpp"
#include "kernels/backends.hpp"
#include "launch/train/trainer.hpp"
#include "model/params.hpp"
#include "parallel/mesh.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/launch/train/equivalence.hpp"
#include "tests/mpi_test_main.hpp"

namespace trident {

int g_world = 1;
bool g_full = false;

struct Case {
  int data, tensor, pipeline;
  std::string schedule;
  int zero;
  std::string arch;
  bool sp = false;
  int layers = 8;  // 16 for interleaving over 8 stages (16 chunks)
  std::string recompute = "none";
  std::string precision = "fp32";
  std::string device = "cpu";
  bool documents = false;  // train on the document dataset with data.document_mask
  bool eod_loss = false;   // ... and data.mask_eod_loss
  int context = 1;         // parallel.context
  std::string context_mode = "ring";
  std::vector<std::string> sets = {};  // more --set overrides (named in the case)
  std::string name() const {
    return fmt::format("{} data {} x tensor {} x pipeline {}{} {} zero {}{}{}{}", arch, data, tensor, pipeline,
                       context > 1 ? fmt::format(" x context {} {}", context, context_mode) : "", schedule, zero,
                       sp ? " sequence parallel" : "", recompute == "none" ? "" : " recompute " + recompute,
                       precision == "fp32" ? "" : " " + precision) +
           (device == "cpu" ? "" : " on " + device) + (documents ? " document mask" : "") +
           (eod_loss ? " no EOD loss" : "") + (sets.empty() ? "" : " " + fmt::format("{}", fmt::join(sets, " ")));
  }
};

// A dataset of short documents (3..40 tokens, seq_len 32: most samples hold
// several) ending with EOD = 30, and its record; written by rank 0.
std::string g_documents;
void write_document_dataset(int rank) {
  const std::string dir = std::string(TRIDENT_BINARY_DIR) + "/pipeline_documents";
  g_documents = dir + "/docs_train";
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    data::IndexedDatasetWriter w(g_documents, data::TokenDType::u16);
    uint64_t x = 12345;
    for (int d = 0; d < 400; ++d) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      std::vector<int32_t> doc(size_t(3 + (x >> 33) % 38));
      for (size_t i = 0; i + 1 < doc.size(); ++i) doc[i] = int32_t((x >> (i % 40)) % 29 + i % 2);
      doc.back() = 30;
      w.add_sequence(doc.data(), int64_t(doc.size()));
      w.end_document();
    }
    w.finish();
    std::ofstream(dir + "/docs.meta.json")
        << R"({"tokenizer": {"kind": "byte", "vocab": 31, "eod": 30}, "splits": {"train": {"max_id": 30}}})";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

Recipe recipe(const Case& c, int world) {
  std::vector<std::string> sets = {"train.steps=10",        "train.micro_batch=2",
                                   "train.global_batch=16", "model.hidden=64",
                                   "model.heads=8",         "model.seq_len=32",
                                   "log.metrics=",          "eval.batches=0",
                                   "train.threads=1",       "parallel.bucket_bytes=65536",
                                   "parallel.timeout_s=60"};
  std::string file = "demo.yaml";
  if (c.arch == "llama" || c.arch == "moe") {
    file = c.arch == "moe" ? "moe-tiny.yaml" : "llama-tiny.yaml";
    for (const char* s : {"model.kv_heads=2", "model.ffn_hidden=176", "model.vocab=31", "data.synthetic.vocab=31",
                          "model.vocab_multiple=1"})
      sets.push_back(s);
  }
  if (c.arch == "deepseek") {  // configs/deepseek-v3-tiny.yaml: MLA, a dense first layer, MoE with a shared expert
    file = "deepseek-v3-tiny.yaml";
    for (const char* s : {"model.kv_heads=8", "model.ffn_hidden=176", "model.vocab=31", "data.synthetic.vocab=31",
                          "model.vocab_multiple=1", "model.moe.ffn_hidden=48", "model.moe.shared_ffn_hidden=32",
                          "model.moe.balance.bias_rate=0.05"})
      sets.push_back(s);
  }
  if (c.arch == "moe")  // 8 experts of 48, a gated shared expert, layer 0 dense
    for (const char* s : {"model.moe.ffn_hidden=48", "model.moe.shared_experts=1", "model.moe.shared_ffn_hidden=32",
                          "model.moe.shared_expert_gate=true"})
      sets.push_back(s);
  sets.push_back("model.layers=" + std::to_string(c.layers));
  sets.push_back("parallel.data=" + std::to_string(c.data));
  sets.push_back("parallel.tensor=" + std::to_string(c.tensor));
  sets.push_back("parallel.pipeline=" + std::to_string(c.pipeline));
  sets.push_back("parallel.context=" + std::to_string(c.context));
  sets.push_back("parallel.context_mode=" + c.context_mode);
  sets.push_back("parallel.schedule=" + c.schedule);
  sets.push_back("parallel.virtual_stages=" +
                 std::string(c.schedule == "interleaved_1f1b" || c.schedule == "dualpipev" ? "2" : "1"));
  sets.push_back("parallel.zero=" + std::to_string(c.zero));
  sets.push_back(std::string("parallel.sequence_parallel=") + (c.sp ? "true" : "false"));
  sets.push_back("train.recompute=" + c.recompute);
  sets.push_back("train.precision=" + c.precision);
  sets.push_back("device=" + c.device);
  if (c.documents)
    for (const std::string& d :
         {std::string("data.synthetic=null"), "data.train=" + g_documents, std::string("data.document_mask=true")})
      sets.push_back(d);
  if (c.eod_loss) sets.push_back("data.mask_eod_loss=true");
  for (const std::string& s : c.sets) sets.push_back(s);
  return load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + file, sets, world);
}

// The mesh's own keys (parallel.expert) are not the reference's.
const test::EquivalenceRun& single_rank(const Case& c) {
  std::vector<std::string> sets;
  for (const std::string& s : c.sets)
    if (!s.starts_with("parallel.")) sets.push_back(s);
  return test::single_rank_reference(c.arch + std::to_string(c.layers) + c.precision + (c.documents ? "docs" : "") +
                                         (c.eod_loss ? "eod" : "") + fmt::format("{}", fmt::join(sets, " ")),
                                     [&] {
                                       Case one{1, 1, 1, "1f1b", 0, c.arch};
                                       one.layers = c.layers, one.precision = c.precision, one.documents = c.documents,
                                       one.eod_loss = c.eod_loss;
                                       one.sets = sets;
                                       return recipe(one, 1);
                                     });
}

std::vector<std::array<int, 3>> meshes(int world) {  // data, tensor, pipeline
  std::vector<std::array<int, 3>> out;
  for (int d = 1; d <= world; d *= 2)
    for (int t = 1; d * t <= world; t *= 2)
      if (world % (d * t) == 0) out.push_back({d, t, world / (d * t)});
  return out;
}

std::vector<Case> cases(int world) {
  const std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"};
  const std::vector<int> zeros = {0, 1, 3};
  std::vector<Case> out;
  int i = 0;
  for (auto [d, t, p] : meshes(world)) {
    auto valid = [&](const std::string& s) { return p > 1 || s == "1f1b"; };
    if (g_full) {
      for (const auto& s : schedules)
        for (int z : zeros)
          for (std::string arch : {"gpt2", "llama"})
            if (valid(s)) out.push_back({d, t, p, s, z, arch, false, s == "interleaved_1f1b" && p == 8 ? 16 : 8});
      continue;
    }
    // subset: rotate schedules, stages and architectures over the meshes
    std::string s = "1f1b";
    if (p > 1)
      for (int k = 0; k < 4; ++k)
        if (valid(schedules[size_t((i + k) % 4)])) {
          s = schedules[size_t((i + k) % 4)];
          break;
        }
    out.push_back({d, t, p, s, zeros[size_t(i % 3)], i % 2 ? "llama" : "gpt2", t > 1 && i % 2 == 0,
                   s == "interleaved_1f1b" && p == 8 ? 16 : 8});
    ++i;
  }
  return out;
}

// |run - ref| / |ref| over the consolidated step-1 gradients
// TRIDENT_TEST_CASE=a|b: run only the cases whose name contains a or b (debugging).
bool matches(const std::string& name, const std::string& patterns) {
  size_t start = 0;
  while (start <= patterns.size()) {
    const size_t end = std::min(patterns.find('|', start), patterns.size());
    if (name.find(patterns.substr(start, end - start)) != std::string::npos) return true;
    start = end + 1;
  }
  return false;
}

// Each case (those TRIDENT_TEST_CASE names) against the single-rank run of its recipe.
void expect_each_matches_single_rank(const std::vector<Case>& list) {
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    test::expect_equivalent(ref, run, c.name());
  }
}

TEST(Pipeline, EveryMeshMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "the equivalence matrix runs on 8 ranks";
  std::map<std::string, int> seen;
  for (const Case& c : cases(g_world)) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    if (std::getenv("TRIDENT_TEST_VERBOSE")) std::fprintf(stderr, "case: %s\n", c.name().c_str());
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    seen["schedule " + c.schedule]++, seen["zero " + std::to_string(c.zero)]++, seen[c.arch]++;
    test::expect_equivalent(ref, run, c.name());
  }
  // the subset covers every schedule, ZeRO stage and architecture
  for (const char* k : {"schedule gpipe", "schedule 1f1b", "schedule interleaved_1f1b", "schedule zero_bubble",
                        "zero 0", "zero 1", "zero 3", "gpt2", "llama"})
    EXPECT_GT(seen[k], 0) << k;
}

// Mixture-of-experts models (a dense first layer, then MoE layers with a
// gated shared expert) under data, tensor +- sequence and pipeline
// parallelism: every schedule, ZeRO 0 to 3, 8-rank combinations.
TEST(Pipeline, MoeMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  std::vector<Case> list = {{2, 2, 2, "1f1b", 1, "moe", true},
                            {1, 2, 4, "zero_bubble", 3, "moe"},
                            {2, 1, 4, "gpipe", 0, "moe"},
                            {1, 4, 2, "interleaved_1f1b", 1, "moe", true},
                            {8, 1, 1, "1f1b", 3, "moe"},
                            {4, 1, 2, "gpipe", 2, "moe"},
                            {2, 2, 2, "zero_bubble", 0, "moe", true}};
  list.back().recompute = "selective";
  list[0].recompute = "full";
  // context parallelism: the balancing counts summed over the context group
  // (per micro-batch, and per sequence), with a sigmoid router over groups
  Case ring{2, 2, 1, "1f1b", 1, "moe", true};
  ring.context = 2;
  Case a2a{2, 1, 2, "zero_bubble", 0, "moe"};
  a2a.context = 2, a2a.context_mode = "all_to_all", a2a.sets = {"model.moe.balance.kind=seq_aux_loss"};
  Case four{1, 1, 2, "gpipe", 3, "moe"};
  four.context = 4;
  four.sets = {"model.moe.router.score=sigmoid", "model.moe.router.groups=4", "model.moe.router.group_topk=2",
               "model.moe.balance.kind=seq_aux_loss"};
  for (const Case& c : {ring, a2a, four}) list.push_back(c);
  // aux-loss-free balancing: the bias moves by the counts of every rank, the
  // same numbers on every mesh (ZeRO 3 shards it, tensor 2 replicates it)
  const std::vector<std::string> deepseek = {"model.moe.router.score=sigmoid",   "model.moe.router.groups=4",
                                             "model.moe.router.group_topk=2",    "model.moe.router.scaling=2.5",
                                             "model.moe.balance.bias_rate=0.05", "model.moe.balance.kind=none"};
  Case biased{2, 2, 2, "1f1b", 3, "moe", true};
  Case biased_data{8, 1, 1, "1f1b", 1, "moe"};
  biased.sets = biased_data.sets = deepseek;
  for (const Case& c : {biased, biased_data}) list.push_back(c);
  // transformers' cross-layer balancing loss (kind hf): one stage, counts over data, tensor and context
  Case hf_data{8, 1, 1, "1f1b", 1, "moe"};
  Case hf_context{2, 2, 1, "1f1b", 3, "moe", true};
  hf_context.context = 2;
  hf_data.sets = hf_context.sets = {"model.moe.balance.kind=hf"};
  for (const Case& c : {hf_data, hf_context}) list.push_back(c);
  expect_each_matches_single_rank(list);
}

// Expert parallelism: each MoE layer's experts split over an expert group
// carved out of data x context (2, 4 and 8 ranks), under data and ZeRO 0-3
// (the experts' shards over the expert-data group), tensor +- sequence
// parallelism, every pipeline schedule and context parallelism (both
// modes), with the auxiliary loss and with the correction bias: the
// single-rank run's step-1 gradients (every expert's, consolidated from the
// rank that holds it), losses, gradient norms (each expert counted once)
// and tokens per expert. The same mesh twice is bitwise identical.
TEST(Pipeline, ExpertParallelMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto expert = [](Case c, int n, std::vector<std::string> more = {}) {
    c.sets = {"parallel.expert=" + std::to_string(n)};
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  const std::vector<std::string> deepseek = {"model.moe.router.score=sigmoid",   "model.moe.router.groups=4",
                                             "model.moe.router.group_topk=2",    "model.moe.router.scaling=2.5",
                                             "model.moe.balance.bias_rate=0.05", "model.moe.balance.kind=none"};
  Case ring{2, 2, 1, "1f1b", 1, "moe", true}, a2a{2, 1, 2, "zero_bubble", 3, "moe"}, wide{4, 1, 1, "1f1b", 2, "moe"};
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  wide.context = 2;  // expert 8 over data 4 x context 2
  Case whole_ring{2, 2, 1, "1f1b", 1, "moe", true};
  whole_ring.context = 2;  // whole experts over data 2 x context 2 x tensor 2
  std::vector<Case> list = {
      expert({4, 1, 2, "1f1b", 0, "moe"}, 4),  // the issue's mesh: expert-data 1
      expert({8, 1, 1, "1f1b", 1, "moe"}, 8),
      expert({8, 1, 1, "gpipe", 3, "moe"}, 4),  // expert-data 2, ZeRO 3 shards over it
      expert({4, 2, 1, "1f1b", 2, "moe", true}, 2), expert({2, 2, 2, "zero_bubble", 3, "moe", true}, 2),
      expert({2, 2, 2, "interleaved_1f1b", 1, "moe"}, 2), expert({4, 1, 2, "zero_bubble", 2, "moe"}, 2),
      expert(ring, 4), expert(a2a, 2), expert(wide, 8), expert({8, 1, 1, "gpipe", 3, "moe"}, 8),
      // whole experts (expert_tensor 1): the expert group spans the tensor ranks
      expert({2, 2, 2, "1f1b", 1, "moe"}, 4, {"parallel.expert_tensor=1"}),
      expert({2, 2, 2, "zero_bubble", 3, "moe", true}, 2, {"parallel.expert_tensor=1"}),
      expert({4, 2, 1, "gpipe", 2, "moe", true}, 8, {"parallel.expert_tensor=1"}),
      expert({1, 2, 4, "interleaved_1f1b", 0, "moe"}, 1, {"parallel.expert_tensor=1"}),
      expert(whole_ring, 8, {"parallel.expert_tensor=1"}), expert({8, 1, 1, "1f1b", 0, "moe"}, 4, deepseek),
      expert({2, 2, 2, "1f1b", 3, "moe", true}, 2, deepseek)};
  list[3].recompute = "selective", list[5].recompute = "full";
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    test::expect_equivalent(ref, run, c.name());
    if (&c != &list[0]) continue;
    const test::EquivalenceRun again = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    EXPECT_EQ(again.losses, run.losses) << c.name() << ": run twice";
    EXPECT_EQ(again.grad_norms, run.grad_norms) << c.name() << ": run twice";
    EXPECT_EQ(again.step1_grads, run.step1_grads) << c.name() << ": run twice";
  }
}

// The released families' attention (Qwen3, Mistral-Nemo, Llama 3.1,
// DeepSeek-V3): heads of their own size (model.head_dim 12 on a 64-wide
// model with 8 heads: q_proj [96, 64], o_proj [64, 96]), with QK-norm, and
// rotary scaling (llama3, yarn, DeepSeek's yarn), under tensor + sequence
// (heads split), pipeline (every schedule), context (both modes, with
// document masking), data / ZeRO 3 and expert meshes: the single-rank
// losses and gradients.
TEST(Pipeline, ReleasedFamiliesMatchSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  const std::vector<std::string> head_dim = {"model.head_dim=12", "model.qk_norm=true"};
  auto with = [&](Case c, std::vector<std::string> more = {}) {
    c.sets = head_dim;
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  Case ring{2, 2, 1, "1f1b", 1, "llama", true}, a2a{2, 1, 2, "zero_bubble", 3, "llama"};
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  std::vector<Case> list = {with({2, 2, 2, "1f1b", 3, "llama", true}),
                            with({1, 2, 4, "interleaved_1f1b", 1, "llama"}),
                            with({8, 1, 1, "gpipe", 3, "llama"}),
                            with({1, 1, 8, "zero_bubble", 0, "llama"}),
                            with(ring),
                            with(a2a),
                            with({2, 2, 2, "1f1b", 1, "moe", true}, {"parallel.expert=2"}),
                            with({2, 2, 2, "dualpipev", 0, "moe"}, {"parallel.expert=2"})};
  list[1].layers = 16;
  // rotary scaling (model.rope_scaling): Llama 3.1's and YaRN's frequencies at every position a rank holds
  // (context parallelism's shifted positions, documents' restarts), DeepSeek-V3's YaRN with its softmax scale
  const std::vector<std::string> llama3 = {"model.rope_scaling.type=llama3", "model.rope_scaling.factor=8",
                                           "model.rope_scaling.original_seq_len=8", "model.rope_theta=500"};
  const std::vector<std::string> yarn = {"model.rope_scaling.type=yarn", "model.rope_scaling.factor=4",
                                         "model.rope_scaling.original_seq_len=8", "model.rope_theta=500",
                                         "model.rope_scaling.truncate=false"};
  Case ring_docs{2, 2, 1, "1f1b", 1, "llama", true}, a2a_docs{2, 1, 2, "zero_bubble", 3, "llama"};
  ring_docs.context = 2, a2a_docs.context = 2, a2a_docs.context_mode = "all_to_all";
  ring_docs.documents = a2a_docs.documents = true;
  list.push_back(with(ring_docs, llama3));
  list.push_back(with(a2a_docs, yarn));
  list.push_back(with({2, 2, 2, "1f1b", 3, "llama", true}, llama3));
  // biases on q, k, v and o (model.attention_bias, model.o_bias): split like the weights (tensor 4 with 2 KV heads
  // replicates them), o's added once after the tensor group's sum
  const std::vector<std::string> biases = {"model.attention_bias=true", "model.o_bias=true"};
  list.push_back(with({2, 2, 2, "1f1b", 3, "llama", true}, biases));
  list.push_back(with({1, 4, 2, "interleaved_1f1b", 1, "llama", true}, biases));
  list.push_back(with({8, 1, 1, "gpipe", 3, "llama"}, biases));
  list.back().context = 1;
  Case deepseek{2, 2, 2, "1f1b", 1, "deepseek", true};
  deepseek.sets = {"model.rope_scaling.type=yarn",          "model.rope_scaling.factor=40",
                   "model.rope_scaling.original_seq_len=8", "model.rope_scaling.mscale=1",
                   "model.rope_scaling.mscale_all_dim=1",   "parallel.expert=2"};
  list.push_back(deepseek);
  expect_each_matches_single_rank(list);
}

// gpt-oss's attention: sliding windows on alternating layers (3 keys: shorter
// than a context-parallel block of 16 rows and than a chunk of 8) and
// attention sinks, with the head size of its own, under tensor + sequence
// (the sinks split with the heads), pipeline (every schedule), context (both
// modes, with documents), data / ZeRO 3, expert meshes and recomputation:
// the single-rank losses and gradients, the sinks' included.
TEST(Pipeline, SlidingWindowsAndSinksMatchSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto with = [](Case c) {
    std::string types;
    for (int l = 0; l < c.layers; ++l) types += std::string(l ? ", " : "") + (l % 2 == 0 ? "sliding" : "full");
    c.sets = {"model.head_dim=12", "model.sliding_window=3", "model.layer_types=[" + types + "]",
              "model.attention_sinks=true"};
    if (c.arch == "moe") c.sets.push_back("parallel.expert=2");
    return c;
  };
  Case ring{2, 2, 1, "1f1b", 1, "llama", true}, a2a{2, 1, 2, "zero_bubble", 3, "llama"};
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  ring.documents = true;
  Case interleaved{1, 2, 4, "interleaved_1f1b", 1, "llama"}, zero3{8, 1, 1, "gpipe", 3, "llama"};
  Case tensor4{1, 4, 2, "1f1b", 1, "llama", true}, full{2, 2, 2, "1f1b", 3, "llama", true};
  interleaved.layers = 16, zero3.recompute = "selective", full.recompute = "full";
  std::vector<Case> list = {with({2, 2, 2, "1f1b", 3, "llama", true}),
                            with(interleaved),
                            with(zero3),
                            with({1, 1, 8, "zero_bubble", 0, "llama"}),
                            with(tensor4),
                            with(full),
                            with(ring),
                            with(a2a),
                            with({2, 2, 2, "dualpipev", 0, "moe"})};
  expect_each_matches_single_rank(list);
}

// gpt-oss's MoE: the router's logit bias, the experts' biases (gate|up
// split like the weights, down added once after the tensor sum) and the
// clamped SwiGLU (a limit low enough to clamp: 0.1 against gate and up
// values of about 0.16), with the attention's sinks and windows, under
// tensor + sequence, pipeline, data / ZeRO 3, expert meshes (the experts
// split over ranks, and whole experts beside a tensor split) and context.
TEST(Pipeline, GptOssMoeMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto with = [](Case c, std::vector<std::string> more = {}) {
    c.sets = {"model.moe.router.bias=true", "model.moe.expert_bias=true", "model.moe.activation=clamped_swiglu",
              "model.moe.swiglu_limit=0.1", "model.moe.shared_experts=0", "model.moe.shared_expert_gate=false",
              "model.attention_sinks=true", "model.sliding_window=5"};
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  Case ring{2, 2, 1, "1f1b", 1, "moe", true}, a2a{2, 1, 2, "zero_bubble", 3, "moe"};
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  std::vector<Case> list = {with({2, 2, 2, "1f1b", 1, "moe", true}, {"parallel.expert=2"}),
                            with({2, 2, 2, "dualpipev", 0, "moe"}, {"parallel.expert=2"}),
                            with({8, 1, 1, "1f1b", 3, "moe"}, {"parallel.expert=8"}),
                            with({2, 4, 1, "1f1b", 1, "moe", true}, {"parallel.expert=2", "parallel.expert_tensor=1"}),
                            with({1, 2, 4, "zero_bubble", 0, "moe"}),
                            with(ring, {"parallel.expert=2"}),
                            with(a2a)};
  expect_each_matches_single_rank(list);
}

// parallel.zero_accumulate shard: ZeRO 2 and 3 with 4 micro-batches per
// rank, each micro-batch's gradients reduce-scattered and added into the
// shard (no full-size buffer), on data, tensor +- sequence, context,
// expert and pipeline meshes (every schedule: each chunk's backward, or
// each half of a split one, added): the single-rank losses and gradients; on 32 layers the
// gradients' allocated peak is the shard and the windows in flight (about
// four layers'), under half of zero_accumulate full's (the whole buffer).
TEST(Pipeline, ZeroAccumulateShardMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto with = [](Case c, std::vector<std::string> more = {}) {
    c.sets = {"parallel.zero_accumulate=shard", "train.global_batch=" + std::to_string(8 * c.data * c.context)};
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  Case context{4, 1, 1, "gpipe", 2, "llama"};
  context.context = 2;
  const std::vector<Case> list = {with({8, 1, 1, "gpipe", 3, "gpt2"}), with({8, 1, 1, "gpipe", 2, "llama"}),
                                  with({4, 2, 1, "1f1b", 3, "llama", true}), with(context),
                                  with({8, 1, 1, "1f1b", 3, "moe"}, {"parallel.expert=2"}),
                                  with({4, 2, 1, "1f1b", 2, "deepseek", true}, {"parallel.expert=2"}),
                                  // pipelines: each chunk's backward (or each half of a split one) added
                                  with({4, 1, 2, "1f1b", 3, "llama"}), with({2, 1, 4, "interleaved_1f1b", 2, "llama"}),
                                  with({2, 1, 4, "zero_bubble", 3, "llama"}), with({4, 1, 2, "dualpipev", 3, "llama"}),
                                  with({4, 1, 2, "1f1b", 2, "moe"}, {"parallel.expert=2"})};
  expect_each_matches_single_rank(list);
  for (int zero : {2, 3}) {
    Case c{8, 1, 1, "gpipe", zero, "llama"};
    c.layers = 32;  // the windows in flight (about four layers) a small share of the model
    c.sets = {"train.global_batch=64", "train.steps=1"};
    const launch::TrainSummary full = launch::train(recipe(c, g_world), {.quiet = true});
    c.sets.push_back("parallel.zero_accumulate=shard");
    const launch::TrainSummary shard = launch::train(recipe(c, g_world), {.quiet = true});
    const int64_t P = model::ParamRegistry(recipe(c, g_world).model).total();
    EXPECT_GE(full.peak_grads, 4 * P) << "zero " << zero << ": full keeps the whole buffer";
    EXPECT_LT(shard.peak_grads, 2 * P) << "zero " << zero << ": shard keeps the shard and the windows";
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
      std::fprintf(stderr,
                   "[zero_accumulate] ZeRO %d, 8 ranks, 4 micro-batches: gradients' peak %lld (full) vs %lld "
                   "(shard) bytes, 4P = %lld\n",
                   zero, (long long)full.peak_grads, (long long)shard.peak_grads, (long long)(4 * P));
  }
}

// HSDP (parallel.data_shard): ZeRO 1, 2 and 3 sharded within groups of 1,
// 2 or 4 ranks and all-reduced across their replicas, on data, tensor +-
// sequence, pipeline (every gradient reduced after the schedule), context
// and expert meshes (the expert-data group split too), with accumulation in
// the full buffer and in the shard, with Muon: the single-rank losses,
// gradient norms and gradients, and every replica's gradient and parameter
// shards the same in every bit after every step (the harness checks them).
TEST(Pipeline, HsdpMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto with = [](Case c, int shard, std::vector<std::string> more = {}) {
    c.sets = {"parallel.data_shard=" + std::to_string(shard)};
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  Case context{2, 2, 1, "1f1b", 1, "llama", true};
  context.context = 2;
  Case accumulate_context{4, 1, 1, "gpipe", 3, "llama"};
  accumulate_context.context = 2;
  const std::vector<Case> list = {
      with({8, 1, 1, "1f1b", 1, "gpt2"}, 2), with({8, 1, 1, "1f1b", 3, "llama"}, 4, {"train.global_batch=64"}),
      with({8, 1, 1, "gpipe", 2, "llama"}, 1), with({4, 2, 1, "1f1b", 2, "llama", true}, 2),
      with({4, 1, 2, "1f1b", 3, "gpt2"}, 2, {"train.global_batch=32"}),
      with({4, 1, 2, "interleaved_1f1b", 1, "llama"}, 2, {"train.global_batch=32"}), with(context, 2),
      with(accumulate_context, 4, {"parallel.zero_accumulate=shard", "train.global_batch=64"}),
      with({4, 1, 2, "zero_bubble", 3, "llama"}, 2, {"parallel.zero_accumulate=shard", "train.global_batch=32"}),
      with({8, 1, 1, "1f1b", 3, "moe"}, 4, {"parallel.expert=2"}),
      with({4, 2, 1, "1f1b", 2, "moe", true}, 2, {"parallel.expert=4"}),
      with({4, 1, 2, "1f1b", 1, "deepseek"}, 2, {"parallel.expert=2"}),
      // whole experts (expert_tensor 1): expert-data 4 over data x tensor, split into 2 replicas of 2
      with({4, 2, 1, "1f1b", 3, "moe", true}, 2, {"parallel.expert=2", "parallel.expert_tensor=1"}),
      with({4, 2, 1, "1f1b", 1, "llama"}, 2,
           {"optim.name=muon", "optim.muon.ns_precision=fp32", "optim.muon.adjust_lr=match_rms_adamw"})};
  expect_each_matches_single_rank(list);
}

// HSDP traffic: the bytes each rank sends per step through its shard group
// and across the replicas, counted by the mesh's groups, against the
// formulas: inside the shard group ZeRO's traffic of an S-way group
// (reduce-scatter and all-gather, (S-1)/S x 4P each, and the gradient norm's
// one double); across replicas the all-reduce of this rank's shard only,
// 2 (R-1)/R x 4P/S. The metrics' comm_bytes say the same.
TEST(Pipeline, HsdpTrafficMatchesTheFormula) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  for (auto [zero, shard] : {std::pair{1, 2}, {2, 4}, {3, 2}}) {
    Case c{8, 1, 1, "1f1b", zero, "llama"};
    c.sets = {"parallel.data_shard=" + std::to_string(shard), "train.steps=3"};
    Recipe rc = recipe(c, g_world);
    const std::string dir = std::string(TRIDENT_BINARY_DIR) + "/hsdp_traffic";
    std::filesystem::create_directories(dir);
    rc.log.metrics = dir + "/metrics.jsonl";
    const double S = shard, R = 8.0 / shard;
    std::vector<std::array<double, 2>> per_step;  // shard group, replicas
    std::array<double, 2> before{0, 0};
    double P = 0, mine = 0, ends = 0;  // ends: the embeddings' and the head's segments (not in a layer)
    launch::TrainOptions opts{.quiet = true};
    opts.on_updated = [&](const launch::StepGradients& g) {
      const std::array<double, 2> now{g.mesh.traffic(parallel::GroupKind::data_shard),
                                      g.mesh.traffic(parallel::GroupKind::data_replicate)};
      per_step.push_back({now[0] - before[0], now[1] - before[1]});
      before = now;
      P = double(g.registry.total()), mine = double(g.data_parallel[0].dp->shard_size()), ends = 0;
      for (const auto& p : g.registry.params()) {
        bool layer = false;
        for (int64_t l = 0; l < rc.model.layers; ++l)
          layer = layer || p.name.starts_with(model::layer_prefix(rc.model, l));
        if (!layer) ends += double(p.numel);
      }
    };
    launch::train(rc, opts);
    ASSERT_EQ(per_step.size(), 3u);
    const double ring = (S - 1) / S * 4 * P, norm = 2 * (S - 1) / S * 8;
    const double replicas = 2 * (R - 1) / R * 4 * mine;
    // ZeRO 3 gathers each layer for the forward and again for the backward; the embeddings and the head
    // are held from their forward to their backward
    const double inside = (zero == 3 ? 3 * ring - (S - 1) / S * 4 * ends : 2 * ring) + norm;
    for (size_t s = 1; s < per_step.size(); ++s) {  // step 1 also carries the start-up's collectives
      EXPECT_NEAR(per_step[s][1], replicas, 1e-6 * replicas)
          << "ZeRO " << zero << " shard " << shard << " step " << s + 1;
      EXPECT_NEAR(per_step[s][0], inside, 1e-6 * inside) << "ZeRO " << zero << " shard " << shard << " step " << s + 1;
    }
    // the metrics' last train record: the busiest rank's bytes of each kind
    std::array<double, 2> busiest = per_step.back();
    MPI_Allreduce(MPI_IN_PLACE, busiest.data(), 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    std::ifstream mf(rc.log.metrics);
    std::string line, last;
    while (std::getline(mf, line))
      if (line.find("\"type\":\"train\"") != std::string::npos) last = line;
    for (auto [kind, bytes] : {std::pair{"data_shard", busiest[0]}, {"data_replicate", busiest[1]}}) {
      const size_t at = last.find(fmt::format("\"{}\":", kind), last.find("\"comm_bytes\":{"));
      ASSERT_NE(at, std::string::npos) << kind << " in " << last;
      EXPECT_NEAR(std::stod(last.substr(at + std::strlen(kind) + 3)), bytes, 1.0) << kind << " in " << last;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Muon (optim.name muon) on data (ZeRO 0-3: a matrix a shard cuts is
// gathered), pipeline (every schedule) and context, GPT-2 (c_attn's q, k, v
// apart), LLaMA, the MoE model (each expert's gate, up and down apart) and
// DeepSeek-V3 (MLA's latents, multi-token prediction): the single-rank
// losses and gradients, every step's update being the single rank's.
TEST(Pipeline, MuonMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto with = [](Case c) {
    c.sets = {"optim.name=muon", "optim.muon.ns_precision=fp32", "optim.muon.adjust_lr=match_rms_adamw"};
    return c;
  };
  Case ring{2, 1, 2, "1f1b", 0, "llama"}, a2a{2, 1, 2, "zero_bubble", 0, "moe"};
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  Case interleaved{1, 1, 8, "interleaved_1f1b", 0, "deepseek"}, dualpipe{2, 1, 2, "dualpipev", 0, "moe"};
  interleaved.layers = 16, dualpipe.context = 2;
  // ZeRO 1-3: a shard may cut a matrix; its u is gathered over the replicas (optim/muon.hpp)
  expect_each_matches_single_rank(
      {with({8, 1, 1, "gpipe", 1, "gpt2"}), with({4, 1, 2, "1f1b", 2, "moe"}), with({8, 1, 1, "1f1b", 3, "deepseek"})});
  expect_each_matches_single_rank({with({8, 1, 1, "gpipe", 0, "gpt2"}), with({2, 1, 4, "1f1b", 0, "moe"}),
                                   with({4, 1, 2, "zero_bubble", 0, "llama"}), with(interleaved), with(dualpipe),
                                   with(ring), with(a2a)});
}

// Muon on meshes that cut its matrices: tensor slices (GPT-2's c_attn,
// LLaMA's KV heads replicated over tensor 4 > 2 KV heads, MLA's heads with
// its latents whole on every tensor rank), +- sequence, with ZeRO shards
// over them; expert shards with each expert sliced over the tensor group
// (expert_tensor = tensor) or whole on its rank (expert_tensor 1). Every
// matrix is orthogonalised whole by one owner (optim/muon.hpp): the
// single-rank losses and gradients, every step.
TEST(Pipeline, MuonSlicedMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto with = [](Case c, std::vector<std::string> more = {}) {
    c.sets = {"optim.name=muon", "optim.muon.ns_precision=fp32", "optim.muon.adjust_lr=match_rms_adamw"};
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  expect_each_matches_single_rank(
      {with({2, 2, 2, "1f1b", 1, "gpt2", true}), with({1, 4, 2, "interleaved_1f1b", 0, "llama"}),
       with({2, 4, 1, "gpipe", 3, "llama", true}),
       with({2, 2, 2, "zero_bubble", 3, "moe", true}, {"parallel.expert=2"}),
       with({4, 2, 1, "1f1b", 2, "moe"}, {"parallel.expert=4", "parallel.expert_tensor=1"}),
       with({8, 1, 1, "1f1b", 1, "moe"}, {"parallel.expert=8"}),
       with({2, 2, 2, "1f1b", 1, "deepseek", true}, {"parallel.expert=2"}), with({2, 2, 2, "dualpipev", 0, "moe"})});
}

// Muon's state: 4 bytes per element of its matrices (the momentum, in
// exp_avg), 8 per AdamW element (exp_avg_sq packed over AdamW's ranges):
// the optimizer category's peak on a rank holding the whole model.
TEST(Pipeline, MuonStateIsFourBytesPerMatrixElement) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  for (const char* arch : {"llama", "moe"}) {
    Case c{8, 1, 1, "1f1b", 0, arch};
    c.sets = {"train.steps=1"};
    const Recipe adamw = recipe(c, g_world);
    c.sets.push_back("optim.name=muon");
    const Recipe muon = recipe(c, g_world);
    const model::ParamRegistry reg(muon.model);
    int64_t matrices = 0;
    for (const auto& m : model::muon_matrices(reg, muon.model, 0, reg.total(), false)) matrices += m.rows * m.cols;
    const launch::TrainSummary a = launch::train(adamw, {.quiet = true}), b = launch::train(muon, {.quiet = true});
    EXPECT_EQ(a.peak_optimizer, 8 * reg.total()) << arch;
    EXPECT_EQ(b.peak_optimizer, 8 * reg.total() - 4 * matrices) << arch;
    EXPECT_GT(matrices, reg.total() / 2) << arch;  // most of the model: the saving is real
  }
}

// QK-clip (optim.muon.qk_clip) on meshes that split the heads (tensor),
// the sequence (context: ring and all-to-all, each rank's rows or heads),
// the layers (pipeline, every schedule) and the data: each head's largest
// logit is the max over every rank, so the same heads are clipped by the
// same factors as on one rank. The threshold sits among the heads' logits:
// some heads are clipped at some steps, others not.
TEST(Pipeline, QkClipMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto with = [](Case c, std::vector<std::string> more = {}) {
    c.sets = {"optim.name=muon", "optim.muon.ns_precision=fp32", "optim.muon.adjust_lr=match_rms_adamw",
              "optim.muon.qk_clip.on=true", "optim.muon.qk_clip.threshold=0.15"};
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  Case ring = with({2, 1, 2, "1f1b", 1, "llama"}), a2a = with({2, 1, 2, "gpipe", 0, "gpt2"});
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  const std::vector<Case> list = {
      with({2, 2, 2, "1f1b", 1, "llama", true}),
      with({1, 4, 2, "interleaved_1f1b", 3, "gpt2"}),
      with({1, 2, 4, "zero_bubble", 0, "llama"}),
      ring,
      a2a,
      with({2, 2, 2, "1f1b", 1, "deepseek", true}, {"parallel.expert=2", "optim.muon.qk_clip.threshold=0.07"})};
  expect_each_matches_single_rank(list);
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    int64_t clipped = 0;
    for (int64_t n : ref.qk_clipped) clipped += n;
    const int64_t heads = 8 * int64_t(c.layers + (c.arch == "deepseek" ? 1 : 0)) * int64_t(ref.qk_clipped.size());
    EXPECT_GT(clipped, 0) << c.name() << ": no head clipped";
    EXPECT_LT(clipped, heads) << c.name() << ": every head clipped at every step";
  }
}

// A DeepSeek-V3-shaped model (multi-head latent attention with a query
// latent, a dense first layer, MoE layers with a shared expert, sigmoid
// group-limited routing, the per-sequence aux loss and a moving correction
// bias, a multi-token prediction module; depth 2 in the last six cases)
// under tensor +- sequence (heads split, latents replicated), pipeline
// (every schedule), data / ZeRO 0-3, context (both modes, without
// multi-token prediction) and expert meshes of 8 ranks, and recomputation.
TEST(Pipeline, DeepseekV3MatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  std::vector<Case> list = {{2, 2, 2, "1f1b", 1, "deepseek", true},
                            {1, 8, 1, "1f1b", 0, "deepseek"},
                            {1, 2, 4, "zero_bubble", 3, "deepseek"},
                            {2, 1, 4, "gpipe", 2, "deepseek"},
                            {1, 4, 2, "interleaved_1f1b", 1, "deepseek", true},
                            {8, 1, 1, "1f1b", 3, "deepseek"}};
  list[1].recompute = "full", list[3].recompute = "selective";
  Case ring{2, 2, 1, "1f1b", 1, "deepseek", true}, a2a{2, 1, 2, "zero_bubble", 0, "deepseek"};
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  ring.sets = a2a.sets = {"model.mtp=null"};  // multi-token prediction does not take context parallelism yet
  Case expert{2, 2, 2, "1f1b", 3, "deepseek", true}, expert8{8, 1, 1, "1f1b", 1, "deepseek"};
  expert.sets = {"parallel.expert=2"}, expert8.sets = {"parallel.expert=8"};
  for (const Case& c : {ring, a2a, expert, expert8}) list.push_back(c);
  // multi-token prediction (depth 2) on the last stage: the head stage's copy of the token table (its
  // gradient summed with the first stage's), the split backward, tensor +- sequence, ZeRO 3, experts
  const std::vector<std::string> mtp = {"model.mtp.depth=2"};
  std::vector<Case> with_mtp = {{2, 2, 2, "1f1b", 1, "deepseek", true}, {1, 2, 4, "zero_bubble", 3, "deepseek"},
                                {8, 1, 1, "1f1b", 3, "deepseek"},       {1, 4, 2, "interleaved_1f1b", 0, "deepseek"},
                                {2, 1, 4, "gpipe", 2, "deepseek"},      {2, 2, 2, "1f1b", 3, "deepseek", true}};
  with_mtp[4].recompute = "full";
  for (size_t i = 0; i < with_mtp.size(); ++i) {
    with_mtp[i].sets = mtp;
    if (i == 5) with_mtp[i].sets.push_back("parallel.expert=2");
    list.push_back(with_mtp[i]);
  }
  // dualpipev: the V's two chunks per rank (the embedding's and the head's on rank 0, the two middle ones
  // handed over in memory on the last rank), its split and whole backwards, under tensor, ZeRO and experts
  std::vector<Case> v = {{1, 2, 4, "dualpipev", 1, "deepseek"},
                         {2, 2, 2, "dualpipev", 3, "deepseek", true},
                         {1, 4, 2, "dualpipev", 2, "deepseek", true}};
  v[1].sets = {"model.mtp=null", "parallel.expert=2"}, v[0].sets = v[2].sets = {"model.mtp=null"};
  v[2].recompute = "selective";
  // and with multi-token prediction, whose modules on rank 0's head chunk read and add to the table of its
  // embedding chunk (no copy: the step's first writer zeroes the gradient), as on one stage with two chunks
  Case v_mtp{1, 2, 4, "dualpipev", 3, "deepseek"}, v_mtp_experts{2, 2, 2, "dualpipev", 1, "deepseek", true},
      one_stage_two_chunks{8, 1, 1, "interleaved_1f1b", 2, "deepseek"};
  v_mtp.sets = one_stage_two_chunks.sets = mtp, v_mtp_experts.sets = {"model.mtp.depth=2", "parallel.expert=2"};
  // paired passes (expert 2): each paired forward and backward interleave at their expert exchanges, each
  // in its own workspace, on 4 stages (5 pairs on the first rank), with selective recompute and ZeRO 2, and
  // with ZeRO 3 (each pass gathers its own segments) and selective recompute
  Case v_paired{2, 1, 4, "dualpipev", 0, "deepseek"}, v_paired_selective{2, 1, 4, "dualpipev", 2, "deepseek"},
      v_paired_zero3{2, 1, 4, "dualpipev", 3, "deepseek"};
  v_paired.sets = v_paired_selective.sets =
      v_paired_zero3.sets = {"model.mtp=null", "parallel.expert=2", "train.micro_batch=1"};
  v_paired_selective.recompute = v_paired_zero3.recompute = "selective";
  // paired passes over empty experts and ranks whose experts receive nothing: 64 experts, top-1, 4 tokens a
  // micro-batch (each expert rank's 32 experts get none of them in about one micro-batch of 16)
  Case v_paired_empty{2, 1, 4, "dualpipev", 1, "deepseek"};
  v_paired_empty.sets = {
      "model.mtp=null",       "parallel.expert=2", "train.micro_batch=1",       "model.seq_len=4",
      "model.moe.experts=64", "model.moe.top_k=1", "model.moe.router.groups=1", "model.moe.router.group_topk=1"};
  for (const Case& c :
       {v_mtp, v_mtp_experts, one_stage_two_chunks, v_paired, v_paired_selective, v_paired_zero3, v_paired_empty})
    v.push_back(c);
  for (const Case& c : v) list.push_back(c);
  expect_each_matches_single_rank(list);
}

// Mixed precision under every parallel dimension: bf16/fp16 runs match the
// single-rank run in the same precision. Not bit for bit: tensor-parallel
// partial sums are rounded per rank before their reduction, and a rounding
// difference of one bf16 ulp (2^-8) can propagate, so the tolerances are
// those of the format, still far below what a missing reduction gives
// (a factor of the mesh size in some gradients).
TEST(Pipeline, MixedPrecisionMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  std::vector<Case> list = {{2, 2, 2, "1f1b", 1, "gpt2", true},
                            {8, 1, 1, "1f1b", 3, "llama"},
                            {1, 4, 2, "interleaved_1f1b", 0, "llama"},
                            {2, 1, 4, "zero_bubble", 1, "gpt2"}};
  list.push_back({2, 2, 2, "interleaved_1f1b", 1, "moe", true});  // MoE in bf16 and fp16
  list.push_back({4, 1, 2, "zero_bubble", 3, "moe"});
  list[0].precision = list[1].precision = list[2].precision = list[4].precision = "bf16";
  list[3].precision = list[5].precision = "fp16";
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    const bool bf16 = c.precision == "bf16";
    test::expect_equivalent(
        ref, run, c.name(),
        {.grads = bf16 ? 2e-2 : 1e-3, .loss = bf16 ? 5e-4 : 1e-4, .grad_norm = -1, .routes = false});
  }
}

// FP8 GEMMs (train.fp8) on every kind of mesh: tensor (+ sequence), pipeline
// (every schedule kind), data / ZeRO 3, context (both modes), expert and
// MLA meshes train as the single-rank FP8 run does. The meshes' GEMMs sum
// in other orders, and FP8's casts turn a float32 rounding difference near
// one of their steps into a whole FP8 step (6-25%) in that value, which
// then moves the values after it: the runs drift apart by far more than
// float32 rounding (measured: losses within 4e-4 over 4 steps, step-1
// gradients within 12% relative L2 under delayed scaling's first-step scale
// of 1). So this compares to those bounds (a wrong gradient reduction or
// update is far outside them), and routes are not compared; that every
// quantised operand is the single rank's, scales reduced over the right
// ranks, is test_fp8_mesh's exact check on the same inputs.
TEST(Pipeline, Fp8MatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  auto fp8 = [](Case c, const std::string& recipe, std::vector<std::string> more = {}) {
    c.sets = {"train.steps=4", "train.fp8.recipe=" + recipe};
    if (recipe != "blockwise") c.sets.push_back("train.fp8.format=hybrid");
    if (recipe == "delayed") c.sets.push_back("train.fp8.amax_history=4");
    c.sets.insert(c.sets.end(), more.begin(), more.end());
    return c;
  };
  Case ring{2, 2, 1, "1f1b", 1, "llama", true}, a2a{2, 1, 2, "zero_bubble", 3, "llama"};
  ring.context = 2, a2a.context = 2, a2a.context_mode = "all_to_all";
  Case wide{2, 2, 2, "1f1b", 1, "llama"};  // blockwise under tensor parallelism: whole 128-wide tiles on each rank
  wide.layers = 2;
  std::vector<Case> list = {
      fp8({2, 2, 2, "1f1b", 3, "llama", true}, "tensorwise"),
      fp8({1, 4, 2, "interleaved_1f1b", 1, "llama"}, "delayed"),
      fp8({8, 1, 1, "gpipe", 3, "llama"}, "delayed"),
      fp8({2, 1, 4, "zero_bubble", 1, "llama"}, "blockwise"),
      fp8(ring, "tensorwise"),
      fp8(a2a, "delayed"),
      fp8({2, 2, 2, "dualpipev", 0, "moe"}, "tensorwise", {"parallel.expert=2"}),
      fp8({2, 2, 2, "1f1b", 1, "deepseek", true}, "delayed", {"parallel.expert=2"}),
      fp8(wide, "blockwise", {"model.hidden=256", "model.heads=2", "model.kv_heads=2", "model.ffn_hidden=512"})};
  // train.fp8.saved_inputs (bf16): the weight gradients read the forward's codes, those of the gathered input
  // under sequence parallelism, in the split backward's weight pass, under context parallelism
  Case kept_split{2, 2, 2, "zero_bubble", 1, "llama", true}, kept_ring{2, 1, 2, "1f1b", 3, "moe"};
  kept_ring.context = 2;
  kept_split.precision = kept_ring.precision = "bf16";
  list.push_back(fp8(kept_split, "tensorwise", {"train.fp8.saved_inputs=true"}));
  list.push_back(fp8(kept_ring, "delayed", {"train.fp8.saved_inputs=true"}));
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    test::expect_equivalent(ref, run, c.name(), {.grads = 0.3, .loss = 2e-3, .grad_norm = 0.2, .routes = false});
  }
}

// Document masking under every parallel dimension: attention stays inside
// each document and positions restart (learned for GPT-2, rotary for
// LLaMA); each mesh matches the single-rank run with masking, and masking
// changes the run (it is not a no-op on this data).
TEST(Pipeline, DocumentMaskMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  std::vector<Case> list = {{2, 2, 2, "1f1b", 1, "gpt2", true},
                            {1, 4, 2, "interleaved_1f1b", 3, "llama"},
                            {8, 1, 1, "1f1b", 0, "llama"},
                            {1, 2, 4, "zero_bubble", 0, "gpt2", true}};
  for (Case& c : list) c.documents = true;
  // data.mask_eod_loss: the mean is over the targets that count, summed over the data group
  for (Case c : {Case{2, 2, 2, "1f1b", 1, "llama", true}, Case{4, 1, 2, "gpipe", 3, "gpt2"}}) {
    c.documents = c.eod_loss = true;
    list.push_back(c);
  }
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    // Step-1 gradients and every loss at the usual tolerances. The gradient
    // norm drifts further here: AdamW's first steps move every weight by
    // about lr whatever its gradient's size, so rounding differences in the
    // masked (near-zero) gradients grow about 2.5x a step. Measured on gpt2
    // data 2 x tensor 2 x pipeline 2 with sequence parallelism: 1.2e-8 at
    // step 1, 4.2e-6 at step 7, 9.9e-5 at step 10 in a Release build and
    // 2.1e-4 in an -O2 sanitizer build. A wrong reduction is caught by the
    // step-1 gradients (relative L2 1e-5) and the losses.
    test::expect_equivalent(ref, run, c.name(), {.grad_norm = 1e-3});
  }
  for (const char* arch : {"gpt2", "llama"}) {
    Case masked{1, 1, 1, "1f1b", 0, arch};
    masked.documents = true;
    Recipe plain = recipe(masked, 1);
    plain.data.document_mask = false;
    const launch::TrainSummary unmasked = launch::train(plain, {.quiet = true, .single_process = true});
    EXPECT_GT(std::abs(unmasked.losses.back() / single_rank(masked).losses.back() - 1), 1e-3)
        << arch << ": masking did not change the run";
    Case no_eod = masked;
    no_eod.eod_loss = true;
    EXPECT_GT(std::abs(single_rank(no_eod).losses.back() / single_rank(masked).losses.back() - 1), 1e-3)
        << arch << ": mask_eod_loss did not change the run";
  }
}

// Context parallelism: every mesh of 8 ranks with context 2 or 4 (the rest
// data x tensor x pipeline) against the single-rank run, both modes, both
// architectures (LLaMA with grouped-query attention: 8 heads over 2 KV
// heads). all_to_all needs this rank's KV heads divisible by context: LLaMA
// at tensor > 1 or context 4 runs the ring instead. CI: every mesh once with
// the mode, architecture, ZeRO stage and schedule rotated, plus document
// masking, recomputation and bf16; --full: every mesh x mode x architecture.
std::vector<Case> context_cases(int world) {
  std::vector<Case> out;
  const std::vector<int> zeros = {0, 1, 2, 3};
  const std::vector<std::string> schedules = {"1f1b", "gpipe", "interleaved_1f1b", "zero_bubble"};
  int i = 0;
  for (int c : {2, 4})
    for (auto [d, t, p] : meshes(world / c)) {
      auto make = [&](const std::string& arch, const std::string& mode) {
        Case k{d, t, p, p > 1 ? schedules[size_t(i % 4)] : "1f1b", zeros[size_t(i % 4)], arch, t > 1 && i % 2 == 0};
        k.context = c, k.context_mode = mode;
        const int kv_local = t >= 2 ? 1 : 2;  // llama: 2 KV heads, replicated when tensor > 2
        if (arch == "llama" && mode == "all_to_all" && kv_local % c != 0) k.context_mode = "ring";
        return k;
      };
      if (g_full) {
        for (std::string arch : {"gpt2", "llama"})
          for (std::string mode : {"ring", "all_to_all"}) out.push_back(make(arch, mode)), ++i;
      } else {
        out.push_back(make(i % 2 ? "llama" : "gpt2", (i / 2) % 2 ? "all_to_all" : "ring"));
        ++i;
      }
    }
  return out;
}

TEST(Pipeline, ContextParallelMatchesSingleRank) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  std::vector<Case> list = context_cases(g_world);
  std::map<std::string, int> seen;
  // composition: document masking, recomputation, bf16
  Case docs{2, 2, 1, "1f1b", 1, "gpt2", true};
  docs.context = 2, docs.documents = true;
  Case docs_a2a{2, 1, 2, "gpipe", 3, "llama"};
  docs_a2a.context = 2, docs_a2a.context_mode = "all_to_all", docs_a2a.documents = true, docs_a2a.eod_loss = true;
  Case full{1, 1, 4, "interleaved_1f1b", 0, "gpt2"};
  full.context = 2, full.recompute = "full";
  Case selective{1, 2, 2, "zero_bubble", 1, "llama"};
  selective.context = 2, selective.recompute = "selective";
  Case half{2, 2, 1, "1f1b", 1, "llama", true};
  half.context = 2, half.precision = "bf16";
  for (const Case& c : {docs, docs_a2a, full, selective, half}) list.push_back(c);
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    const auto& ref = single_rank(c);
    if (std::getenv("TRIDENT_TEST_VERBOSE")) std::fprintf(stderr, "case: %s\n", c.name().c_str());
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    seen[c.context_mode]++, seen[c.arch]++, seen["context " + std::to_string(c.context)]++;
    const bool bf16 = c.precision == "bf16";
    test::expect_equivalent(ref, run, c.name(),
                            {.grads = bf16 ? 2e-2 : 1e-5,
                             .loss = bf16 ? 5e-4 : 1e-4,
                             .grad_norm = bf16          ? -1
                                          : c.documents ? 1e-3
                                                        : 1e-4});
  }
  if (!std::getenv("TRIDENT_TEST_CASE"))
    for (const char* k : {"ring", "all_to_all", "gpt2", "llama", "context 2", "context 4"}) EXPECT_GT(seen[k], 0) << k;
}

// device: cuda under every parallel dimension, all ranks on the one GPU
// (device buffers staged through host memory over MPI, since NCCL needs a
// GPU per rank): each mesh matches the single-rank CPU run. Skipped where
// no GPU exists. Tolerances: the GPU's fp32 sums run in other orders.
TEST(Pipeline, CudaMeshesMatchSingleRankCpu) {
  if (!kernels::cuda_built() || device_count() == 0)
    GTEST_SKIP() << "no CUDA device here (" << kernels::cuda_backend() << "): device: cuda runs where a GPU exists";
  std::vector<Case> list;
  for (auto [d, t, p] : meshes(g_world)) {
    const bool piped = p > 1;
    Case c{d,
           t,
           p,
           piped ? "1f1b" : "1f1b",
           int(list.size() % 3 == 2 ? 3 : list.size() % 2),
           list.size() % 2 ? "llama" : "gpt2",
           t > 1 && list.size() % 2 == 0};
    if (piped && list.size() % 3 == 1) c.schedule = "interleaved_1f1b";
    if (c.schedule == "interleaved_1f1b" && p == 8) c.layers = 16;
    c.device = "cuda";
    list.push_back(c);
  }
  for (const Case& c : list) {
    if (const char* only = std::getenv("TRIDENT_TEST_CASE"); only && !matches(c.name(), only)) continue;
    Case cpu = c;
    cpu.device = "cpu";
    const auto& ref = single_rank(cpu);
    const test::EquivalenceRun run = test::train_with_step1_gradients(recipe(c, g_world), {.quiet = true});
    test::expect_equivalent(ref, run, c.name(), {.grads = 1e-4, .loss = 1e-4, .grad_norm = -1});
  }
}

// Recomputation inside pipelines: the micro-batches in flight on a stage share
// the buffers recomputation rebuilds (one set per chunk), and the run still
// matches the single-rank one (trained without recomputation).
TEST(Pipeline, RecomputeWithManyMicroBatchesInFlight) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  for (const std::string rc : {"selective", "full"})
    for (Case c : {Case{1, 1, 8, "gpipe", 0, "gpt2"}, Case{2, 2, 2, "interleaved_1f1b", 1, "llama", true}}) {
      c.recompute = rc;
      const auto& ref = single_rank(c);
      const launch::TrainSummary run = launch::train(recipe(c, g_world), {.quiet = true});
      for (size_t s = 0; s < ref.losses.size(); ++s)
        EXPECT_LE(std::abs(run.losses[s] / ref.losses[s] - 1), 1e-4)
            << c.name() << ", step " << s + 1 << ": loss " << run.losses[s] << " vs " << ref.losses[s];
    }
}

// Observability: the measured bubble of every stage in the summary and the
// metrics file beside the simulator's prediction, and a Chrome trace with a
// track per rank and spans of every kind.
TEST(Pipeline, TraceAndMeasuredBubble) {
  if (g_world != 8) GTEST_SKIP() << "runs on 8 ranks";
  const std::string dir = std::string(TRIDENT_BINARY_DIR) + "/pipeline_trace_test";
  std::filesystem::create_directories(dir);
  Recipe rc = recipe({1, 1, 8, "1f1b", 0, "gpt2"}, g_world);
  rc.train.steps = 3;
  rc.log.trace = dir + "/trace.json";
  rc.log.trace_steps = {2, 3};
  rc.log.metrics = dir + "/metrics.jsonl";
  launch::TrainSummary run = launch::train(rc, {.quiet = true});
  EXPECT_NEAR(run.predicted_bubble, 7.0 / 15.0, 1e-12);  // (P-1)/(M+P-1), P = M = 8
  ASSERT_EQ(run.bubbles.size(), 3u);
  for (const auto& step : run.bubbles) {
    ASSERT_EQ(step.size(), 8u);
    for (double b : step) EXPECT_TRUE(b >= 0 && b < 1) << b;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  std::ifstream t(rc.log.trace);
  std::string trace((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
  EXPECT_EQ(trace.rfind("{\"traceEvents\":[", 0), 0u);
  for (const char* s :
       {"\"tid\":0,", "\"tid\":7,", "\"name\":\"forward\"", "\"name\":\"backward\"", "\"name\":\"recv (waiting)\"",
        "\"name\":\"send\"", "\"name\":\"gradient sync\"", "\"name\":\"optimizer\"", "\"step\":2,", "\"step\":3,"})
    EXPECT_NE(trace.find(s), std::string::npos) << s;
  EXPECT_EQ(trace.find("\"step\":1,"), std::string::npos) << "step 1 was not asked for";
  // the traced steps' measured bubble per stage, as in the summary, and the prediction
  for (int s : {2, 3}) {
    std::string want = fmt::format("\"{}\":[", s);
    for (size_t i = 0; i < 8; ++i)
      want += fmt::format("{}{}", i ? "," : "", std::round(run.bubbles[size_t(s - 1)][i] * 1e4) / 1e4);
    EXPECT_NE(trace.find(want), std::string::npos) << want;
  }
  EXPECT_NE(trace.find("\"bubble_predicted\":0.4667"), std::string::npos);
  std::ifstream mf(rc.log.metrics);
  std::string line, last;
  while (std::getline(mf, line))
    if (line.find("\"type\":\"train\"") != std::string::npos) last = line;
  EXPECT_NE(last.find("\"bubble_predicted\":0.4667"), std::string::npos) << last;
  const size_t b = last.find("\"bubble\":[");
  ASSERT_NE(b, std::string::npos) << last;
  EXPECT_EQ(std::count(last.begin() + long(b), last.begin() + long(last.find(']', b)), ','), 7) << last;
}

}  // namespace trident

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--full") == 0) trident::g_full = true;
  return trident::test::run_mpi_tests(argc, argv, [](trident::parallel::MpiCommunicator& w) {
    trident::g_world = w.size();
    trident::write_document_dataset(w.rank());
  });
}
