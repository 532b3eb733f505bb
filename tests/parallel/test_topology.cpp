// Topology arithmetic: rank <-> coordinates for several meshes and orders,
// every group kind, and validation messages of the recipe loader for meshes.
#include "core/error.hpp"
#include "core/recipe.hpp"
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
      for (int s : seen) EXPECT_EQ(s, 1) << group_name(k);
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

TEST(Topology, RecipeValidationMessages) {
  const char* base =
      "model: {arch: llama, layers: 4, hidden: 64, heads: 4, kv_heads: 2, seq_len: 8, vocab: 16}\n"
      "train: {global_batch: 8, micro_batch: 2, steps: 1}\noptim: {lr: 1.0e-3}\n";
  auto err = [&](std::vector<std::string> sets, int64_t world) {
    try {
      load_recipe_text(base, "r.yaml", sets, world);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err({"parallel.data=2"}, 8).find("data(2) x tensor(1) x pipeline(1) = 2 != world size 8"),
            std::string::npos);
  EXPECT_NE(err({"parallel.data=2"}, 8).find("8x1x1, 4x1x2"), std::string::npos);
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

}  // namespace trident::parallel
