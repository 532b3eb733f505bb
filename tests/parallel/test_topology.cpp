// Topology arithmetic: rank <-> coordinates for several meshes and orders,
// every group kind, and validation messages of the recipe loader for meshes.
#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <tuple>

#include "core/error.hpp"
#include "core/recipe/recipe.hpp"
#include "parallel/slow_link.hpp"
#include "parallel/topology.hpp"
#include "tests/test_util.hpp"

namespace trident::parallel {

TEST(Topology, DefaultOrderPutsTensorInnermost) {
  Topology t(2, 2, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline});  // data, pipeline, tensor
  EXPECT_EQ(t.world(), 8);
  EXPECT_EQ(t.coords(0), (Coords{0, 0, 0}));
  EXPECT_EQ(t.coords(1), (Coords{0, 0, 1}));  // tp varies fastest
  EXPECT_EQ(t.coords(2), (Coords{1, 0, 0}));  // then dp
  EXPECT_EQ(t.coords(4), (Coords{0, 1, 0}));  // then pp
  for (int r = 0; r < 8; ++r) EXPECT_EQ(t.rank_of(t.coords(r)), r);
  EXPECT_EQ(t.members(GroupKind::tensor, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(t.members(GroupKind::data, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(t.members(GroupKind::pipeline, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(t.members(GroupKind::model_parallel, 5), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(t.members(GroupKind::embedding, 3), (std::vector<int>{3, 7}));
  EXPECT_EQ(t.groups(GroupKind::tensor).size(), 4u);
  EXPECT_EQ(t.groups(GroupKind::model_parallel).size(), 2u);
  EXPECT_EQ(t.groups(GroupKind::embedding).size(), 4u);
}

TEST(Topology, OtherOrders) {
  Topology t(4, 1, 2, {MeshAxis::data, MeshAxis::tensor, MeshAxis::pipeline});
  EXPECT_EQ(t.coords(1), (Coords{1, 0, 0}));
  EXPECT_EQ(t.coords(4), (Coords{0, 0, 1}));
  EXPECT_EQ(t.members(GroupKind::data, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(t.members(GroupKind::tensor, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(t.members(GroupKind::embedding, 5), (std::vector<int>{5}));  // pipeline 1
  Topology p(1, 3, 1, {MeshAxis::pipeline, MeshAxis::tensor, MeshAxis::data});
  EXPECT_EQ(p.members(GroupKind::pipeline, 1), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p.members(GroupKind::embedding, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(p.members(GroupKind::embedding, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(p.members(GroupKind::embedding, 1), (std::vector<int>{1}));  // a middle stage: alone
}

TEST(Topology, EveryRankInExactlyOneGroupOfEachKind) {
  for (auto order : std::vector<std::vector<MeshAxis>>{{MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline},
                                                       {MeshAxis::pipeline, MeshAxis::data, MeshAxis::tensor},
                                                       {MeshAxis::data, MeshAxis::pipeline, MeshAxis::tensor}}) {
    Topology t(3, 2, 2, order);
    for (GroupKind k : {GroupKind::tensor, GroupKind::pipeline, GroupKind::data, GroupKind::model_parallel}) {
      std::vector<int> seen(12, 0);
      for (auto& g : t.groups(k))
        for (int r : g) seen[size_t(r)]++;
      for (int s : seen) EXPECT_EQ(s, 1) << enum_name(k);
    }
    // group sizes
    EXPECT_EQ(t.members(GroupKind::data, 7).size(), 3u);
    EXPECT_EQ(t.members(GroupKind::model_parallel, 7).size(), 4u);
  }
}

TEST(Topology, DescribeTable) {
  Topology t(2, 1, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline});
  std::string s = t.describe(2);
  EXPECT_NE(s.find("mesh data 2 x pipeline 1 x tensor 2 = world 4"), std::string::npos) << s;
  EXPECT_NE(s.find("    3     1    1    0    1  [2,3]"), std::string::npos) << s;
}

// The message loading recipe text `base` with `sets` on `world` ranks fails with ("no error": it loads).
static std::string recipe_error(const char* base, const std::vector<std::string>& sets, int64_t world) {
  try {
    load_recipe_text(base, "r.yaml", sets, world);
  } catch (const InputError& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

TEST(Topology, RecipeValidationMessages) {
  const char* base =
      "model: {arch: llama, layers: 4, hidden: 64, heads: 4, kv_heads: 2, seq_len: 8, vocab: 16}\n"
      "train: {global_batch: 8, micro_batch: 2, steps: 1}\noptim: {lr: 1.0e-3}\n";
  auto err = [&](std::vector<std::string> sets, int64_t world) { return recipe_error(base, sets, world); };
  EXPECT_NE(err({"parallel.data=2"}, 8).find("data(2) x tensor(1) x pipeline(1) = 2 != world size 8"),
            std::string::npos);
  // only meshes this recipe passes: not 8x1x1 (global_batch 8 / micro_batch 2 gives 4 data ranks at most)
  EXPECT_NE(err({"parallel.data=2"}, 8).find("of 8 ranks this recipe can use: 4x1x2, 2x1x4, 4x2x1"), std::string::npos)
      << err({"parallel.data=2"}, 8);
  EXPECT_EQ(err({"parallel.data=2"}, 8).find("8x1x1"), std::string::npos);
  EXPECT_NE(err({"parallel.tensor=8"}, 8).find("heads(4) % tensor(8) != 0"), std::string::npos);
  EXPECT_NE(err({"parallel.pipeline=3"}, 3).find("layers(4) % (pipeline(3) x virtual_stages(1)) != 0"),
            std::string::npos);
  EXPECT_EQ(err({"parallel.data=4"}, 4), "no error");
  EXPECT_NE(err({"parallel.data=8"}, 8).find("global_batch(8) % (micro_batch(2) x data(8)) = 8 != 0"),
            std::string::npos);
  EXPECT_NE(err({"parallel.tensor=3"}, 3).find("heads(4) % tensor(3) != 0"), std::string::npos);
  // kv heads: split when >= tensor, replicated when fewer (tensor a multiple of them)
  EXPECT_NE(err({"model.hidden=96", "model.heads=12", "model.kv_heads=6", "parallel.tensor=4"}, 4)
                .find("kv_heads(6) % tensor(4) != 0"),
            std::string::npos);
  EXPECT_EQ(err({"model.heads=8", "model.kv_heads=2", "parallel.tensor=4"}, 4), "no error");
  EXPECT_NE(err({"model.hidden=96", "model.heads=12", "model.kv_heads=4", "parallel.tensor=6"}, 6)
                .find("tensor(6) % kv_heads(4) != 0"),
            std::string::npos);
}

// The fourth axis: context inside data by default, and wherever an order puts it.
TEST(Topology, ContextAxis) {
  Topology t(2, 2, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline}, 2);  // context inserted inside data
  EXPECT_EQ(t.world(), 16);
  EXPECT_EQ(t.coords(1), (Coords{0, 0, 1, 0}));  // tp fastest
  EXPECT_EQ(t.coords(2), (Coords{0, 0, 0, 1}));  // then cp
  EXPECT_EQ(t.coords(4), (Coords{1, 0, 0, 0}));  // then dp
  EXPECT_EQ(t.coords(8), (Coords{0, 1, 0, 0}));  // then pp
  for (int r = 0; r < 16; ++r) EXPECT_EQ(t.rank_of(t.coords(r)), r);
  EXPECT_EQ(t.members(GroupKind::context, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(t.members(GroupKind::data, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(t.members(GroupKind::data_context, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(t.members(GroupKind::tensor, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(t.members(GroupKind::pipeline, 5), (std::vector<int>{5, 13}));
  EXPECT_EQ(t.members(GroupKind::model_parallel, 5), (std::vector<int>{4, 5, 12, 13}));
  EXPECT_EQ(t.members(GroupKind::embedding, 7), (std::vector<int>{7, 15}));
  for (GroupKind k : kAllGroupKinds) {  // every rank in exactly one group of each kind
    std::vector<int> seen(16, 0);
    for (auto& g : t.groups(k))
      for (int r : g) seen[size_t(r)]++;
    for (int n : seen) EXPECT_EQ(n, 1) << enum_name(k);
  }
  // context outermost when the order says so
  Topology o(2, 1, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline, MeshAxis::context}, 2);
  EXPECT_EQ(o.coords(4), (Coords{0, 0, 0, 1}));
  EXPECT_EQ(o.members(GroupKind::context, 1), (std::vector<int>{1, 5}));
  // context 1: the data_context group is the data group
  Topology d(4, 1, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline});
  for (int r = 0; r < 8; ++r) EXPECT_EQ(d.members(GroupKind::data_context, r), d.members(GroupKind::data, r));
  const std::string s = t.describe(8);
  EXPECT_NE(s.find("mesh data 2 x context 2 x pipeline 2 x tensor 2 = world 16"), std::string::npos) << s;
  EXPECT_NE(s.find("data_context"), std::string::npos) << s;
}

TEST(Topology, ContextRecipeValidationMessages) {
  const char* base =
      "model: {arch: llama, layers: 4, hidden: 64, heads: 4, kv_heads: 2, seq_len: 24, vocab: 16}\n"
      "train: {global_batch: 8, micro_batch: 2, steps: 1}\noptim: {lr: 1.0e-3}\n";
  auto err = [&](std::vector<std::string> sets, int64_t world) { return recipe_error(base, sets, world); };
  EXPECT_EQ(err({"parallel.context=2"}, 2), "no error");
  EXPECT_NE(err({"parallel.context=2", "parallel.data=1"}, 4)
                .find("data(1) x tensor(1) x pipeline(1) x context(2) = 2 != world size 4"),
            std::string::npos);
  EXPECT_EQ(err({"parallel.context=2"}, 4), "no error");  // data 2 inferred
  EXPECT_NE(err({"parallel.context=8"}, 8).find("seq_len(24) % (2 x context(8)) = 8 != 0"), std::string::npos);
  EXPECT_NE(err({"parallel.context=2", "device=cuda"}, 2).find("its ring and all-to-all move host buffers"),
            std::string::npos);
  // all_to_all: this rank's heads and KV heads over context
  EXPECT_EQ(err({"parallel.context=2", "parallel.context_mode=all_to_all"}, 2), "no error");
  EXPECT_NE(err({"parallel.context=2", "parallel.tensor=2", "parallel.context_mode=all_to_all"}, 4)
                .find("1 KV head(s) per tensor rank (kv_heads(2), tensor(2)), and 1 % context(2) = 1 != 0"),
            std::string::npos);
  // heads (4) divide over context 4, the KV heads (2) do not
  EXPECT_NE(err({"parallel.context=4", "model.seq_len=32", "parallel.context_mode=all_to_all"}, 4)
                .find("2 % context(4) = 2 != 0"),
            std::string::npos);
  EXPECT_NE(err({"parallel.order=[tensor, context, tensor, data]", "parallel.context=2"}, 2).find("a permutation of"),
            std::string::npos);
  EXPECT_NE(err({"parallel.context=2", "parallel.tensor=4", "parallel.sequence_parallel=true", "model.seq_len=4",
                 "train.micro_batch=1", "train.global_batch=1"},
                8)
                .find("micro_batch(1) x seq_len(4) / context(2) = 2 token rows over tensor(4): 2 % 4 != 0"),
            std::string::npos);
}

// The expert grid folded over data x context: expert groups are runs of
// adjacent replicas, expert_data the same place in every run; every rank in
// exactly one group of each; the drawing shows both.
TEST(Topology, ExpertGroupsFoldedOverDataAndContext) {
  Topology t(4, 1, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline}, 1, 2);  // data 4 x tensor 2, expert 2
  EXPECT_EQ(t.members(GroupKind::data_context, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(t.members(GroupKind::expert, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(t.members(GroupKind::expert, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(t.members(GroupKind::expert_data, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(t.members(GroupKind::expert_data, 7), (std::vector<int>{3, 7}));
  // with context: the data x context replicas, context innermost, cut into runs of 4
  Topology c(2, 1, 1, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline}, 2, 4);
  EXPECT_EQ(c.members(GroupKind::expert, 1), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c.members(GroupKind::expert_data, 1), (std::vector<int>{1}));
  for (const Topology* m : {&t, &c})
    for (GroupKind k : {GroupKind::expert, GroupKind::expert_data}) {
      std::vector<int> seen(size_t(m->world()), 0);
      for (auto& g : m->groups(k))
        for (int r : g) seen[size_t(r)]++;
      for (int n : seen) EXPECT_EQ(n, 1) << enum_name(k);
    }
  // expert 1: each rank alone, expert_data = data_context
  Topology one(4, 1, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline});
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(one.members(GroupKind::expert, r), (std::vector<int>{r}));
    EXPECT_EQ(one.members(GroupKind::expert_data, r), one.members(GroupKind::data_context, r));
  }
  const std::string s = t.describe(8);
  EXPECT_NE(s.find("experts: expert 2 x expert_data 2 (data x context = 4) x pipeline 1 x tensor 2"), std::string::npos)
      << s;
  EXPECT_NE(s.find("[5,7]          [1,5]"), std::string::npos) << s;
  EXPECT_EQ(one.describe(8).find("expert"), std::string::npos);
  // whole experts (expert_tensor 1 < tensor): runs over each pipeline stage's data x context x tensor ranks,
  // so the tensor ranks of a run hold different experts
  Topology w(2, 2, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline}, 1, 4, true);
  EXPECT_EQ(w.members(GroupKind::expert, 1), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(w.members(GroupKind::expert, 6), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(w.members(GroupKind::expert_data, 6), (std::vector<int>{6}));
  Topology w2(2, 1, 2, {MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline}, 1, 2, true);
  EXPECT_EQ(w2.members(GroupKind::expert, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(w2.members(GroupKind::expert_data, 3), (std::vector<int>{1, 3}));
  EXPECT_NE(w.describe(8).find("experts: expert 4 x expert_data 1 (data x context x tensor = 4, each expert whole: "
                               "expert_tensor 1) x pipeline 2"),
            std::string::npos)
      << w.describe(8);
}

TEST(Topology, ExpertRecipeValidationMessages) {
  const char* base =
      "model: {arch: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, seq_len: 8, vocab: 16,\n"
      "        moe: {experts: 6, top_k: 2, ffn_hidden: 32}}\n"
      "train: {global_batch: 8, micro_batch: 1, steps: 1}\noptim: {lr: 1.0e-3}\n";
  auto err = [&](std::vector<std::string> sets, int64_t world) { return recipe_error(base, sets, world); };
  EXPECT_EQ(err({"parallel.data=4", "parallel.expert=2"}, 4), "no error");
  EXPECT_NE(err({"parallel.data=4", "parallel.expert=4"}, 4).find("experts(6) % expert(4) != 0"), std::string::npos);
  EXPECT_NE(err({"parallel.data=2", "parallel.tensor=2", "parallel.expert=3", "model.moe.experts=6"}, 4)
                .find("expert(3) x expert_tensor (unset: = tensor(2)) = 6 does not divide data x context x tensor "
                      "= 2 x 1 x 2 = 4; set a parallel.expert that divides data x context = 2"),
            std::string::npos);
  // whole experts would fit: the message names the key that fixes it
  EXPECT_NE(err({"parallel.data=2", "parallel.tensor=2", "parallel.expert=4", "model.moe.experts=8"}, 4)
                .find("expert(4) x expert_tensor (unset: = tensor(2)) = 8 does not divide data x context x tensor = 2 "
                      "x 1 x 2 = 4; set parallel.expert_tensor=1 (each expert whole on one rank"),
            std::string::npos);
  EXPECT_EQ(err({"parallel.data=2", "parallel.tensor=2", "parallel.expert=4", "parallel.expert_tensor=1",
                 "model.moe.experts=8"},
                4),
            "no error");
  // whole experts (expert_tensor 1): carved out of data x context x tensor
  EXPECT_EQ(err({"parallel.data=2", "parallel.tensor=2", "parallel.expert=2", "parallel.expert_tensor=1",
                 "model.moe.experts=4"},
                4),
            "no error");
  EXPECT_NE(err({"parallel.data=2", "parallel.tensor=4", "parallel.expert_tensor=2"}, 8)
                .find("expert_tensor(2): each expert's FFN is split over the tensor group (0 or tensor(4)) or whole on "
                      "one rank (1)"),
            std::string::npos);
  EXPECT_NE(err({"parallel.data=2", "parallel.tensor=2", "parallel.expert_tensor=1", "model.moe.balance.kind=hf"}, 4)
                .find("only aux_loss and none"),
            std::string::npos);
  EXPECT_NE(err({"parallel.data=2", "parallel.tensor=2", "parallel.expert_tensor=1", "model.seq_len=3"}, 4)
                .find("expert_tensor(1): each tensor rank routes its share of the micro-batch's 3 token rows"),
            std::string::npos);
  const char* dense =
      "model: {arch: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, seq_len: 8, vocab: 16}\n"
      "train: {global_batch: 8, micro_batch: 1, steps: 1}\noptim: {lr: 1.0e-3}\n";
  EXPECT_NE(recipe_error(dense, {"parallel.data=2", "parallel.expert=2"}, 2).find("expert(2) needs model.moe"),
            std::string::npos);
}

// HSDP: data_shard groups are runs of consecutive data x context replicas,
// data_replicate the same place in every run; shard x replicate covers each
// data_context group once (their only common member is the rank itself).
// The expert part splits expert_data into gcd(replicas, expert_data)
// replicas; without HSDP the shard groups are the whole groups.
TEST(Topology, HsdpShardGroupsAreRunsAndReplicasCrossThem) {
  const std::vector<MeshAxis> order{MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline};
  Topology c(4, 1, 1, order, 2, 1, false, 4);  // data 4 x context 2, shard 4: two replicas
  EXPECT_EQ(c.data_shard(), 4);
  EXPECT_EQ(c.data_replicate(), 2);
  EXPECT_EQ(c.members(GroupKind::data_shard, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(c.members(GroupKind::data_replicate, 5), (std::vector<int>{1, 5}));
  Topology t(4, 2, 2, order, 1, 2, false, 2);  // data 4 x pipeline 2 x tensor 2, expert 2, shard 2
  EXPECT_EQ(t.members(GroupKind::data_context, 9), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(t.members(GroupKind::data_shard, 13), (std::vector<int>{13, 15}));
  EXPECT_EQ(t.members(GroupKind::data_replicate, 13), (std::vector<int>{9, 13}));
  // expert_data {9, 13} (2 members), replicas gcd(2, 2) = 2: expert shards of one rank
  EXPECT_EQ(t.members(GroupKind::expert_data, 13), (std::vector<int>{9, 13}));
  EXPECT_EQ(t.members(GroupKind::expert_shard, 13), (std::vector<int>{13}));
  EXPECT_EQ(t.members(GroupKind::expert_replicate, 13), (std::vector<int>{9, 13}));
  Topology e(8, 1, 1, order, 1, 2, false, 4);  // expert_data of 4, 2 replicas: expert shards of 2
  EXPECT_EQ(e.members(GroupKind::expert_shard, 6), (std::vector<int>{4, 6}));
  EXPECT_EQ(e.members(GroupKind::expert_replicate, 6), (std::vector<int>{2, 6}));
  Topology g(8, 1, 1, order, 1, 4, false, 2);  // expert_data of 2, 4 replicas: gcd 2, expert shards of 1
  EXPECT_EQ(g.members(GroupKind::expert_data, 1), (std::vector<int>{1, 5}));
  EXPECT_EQ(g.members(GroupKind::expert_shard, 1), (std::vector<int>{1}));
  EXPECT_EQ(g.members(GroupKind::expert_replicate, 1), (std::vector<int>{1, 5}));
  Topology plain(4, 1, 2, order, 1, 2);
  for (const Topology* m : {&c, &t, &e, &g, &plain})
    for (int r = 0; r < m->world(); ++r)
      for (auto [whole, shard, rep] :
           {std::tuple{GroupKind::data_context, GroupKind::data_shard, GroupKind::data_replicate},
            {GroupKind::expert_data, GroupKind::expert_shard, GroupKind::expert_replicate}}) {
        const std::vector<int> s = m->members(shard, r), p = m->members(rep, r), all = m->members(whole, r);
        EXPECT_EQ(s.size() * p.size(), all.size()) << r;
        std::vector<int> both;
        std::set_intersection(s.begin(), s.end(), p.begin(), p.end(), std::back_inserter(both));
        EXPECT_EQ(both, std::vector<int>{r});
        for (int q : s) EXPECT_TRUE(std::binary_search(all.begin(), all.end(), q));
        for (int q : p) EXPECT_TRUE(std::binary_search(all.begin(), all.end(), q));
      }
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(plain.members(GroupKind::data_shard, r), plain.members(GroupKind::data_context, r));
    EXPECT_EQ(plain.members(GroupKind::data_replicate, r), std::vector<int>{r});
  }
  const std::string s = t.describe(4);
  EXPECT_NE(s.find("hsdp: data_shard 2 x data_replicate 2 (data x context = 4)"), std::string::npos) << s;
  EXPECT_NE(s.find("[13,15]        [9,13]         [13]           [9,13]"), std::string::npos) << s;
  EXPECT_EQ(plain.describe(8).find("hsdp"), std::string::npos);
}

// TRIDENT_SLOW_LINK (benchmarks' simulated network): its three parts, and a
// malformed value refused naming the variable and the expected form.
TEST(Topology, SlowLinkFromTheEnvironment) {
  ::unsetenv("TRIDENT_SLOW_LINK");
  EXPECT_FALSE(slow_link_from_env().has_value());
  ::setenv("TRIDENT_SLOW_LINK", "4:0.5:20", 1);
  const std::optional<SlowLink> l = slow_link_from_env();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->ranks_per_node, 4);
  EXPECT_DOUBLE_EQ(l->bytes_per_s, 0.5e9);
  EXPECT_DOUBLE_EQ(l->latency_s, 20e-6);
  ::setenv("TRIDENT_SLOW_LINK", "2:1", 1);
  EXPECT_DOUBLE_EQ(slow_link_from_env()->latency_s, 0.0);
  for (const char* bad : {"fast", "0:1", "4:-1", "4:1:x"}) {
    ::setenv("TRIDENT_SLOW_LINK", bad, 1);
    try {
      slow_link_from_env();
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("TRIDENT_SLOW_LINK"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("TRIDENT_SLOW_LINK");
}

}  // namespace trident::parallel
