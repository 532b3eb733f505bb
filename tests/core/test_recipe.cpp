// Recipe validation: each bad recipe fails with a message that names the
// place (file:line or --set), the key, what was expected and what was found.
// Also: defaults, overrides, and that docs/recipes.md documents every key.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/recipe/recipe.hpp"
#include "tests/test_util.hpp"

namespace trident {

const char* kGood = R"(model:
  arch: gpt2
  layers: 2
  hidden: 64
  heads: 4
  seq_len: 32
  vocab: 50
train: {global_batch: 8, micro_batch: 2, steps: 10}
optim: {lr: 1.0e-3}
)";

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}, int64_t world = 1) {
  try {
    load_recipe_text(text, "r.yaml", sets, world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

void expect_error(const std::string& text, const std::vector<std::string>& fragments,
                  const std::vector<std::string>& sets = {}, int64_t world = 1) {
  std::string msg = error_of(text, sets, world);
  for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "expected '" << f << "' in: " << msg;
}

std::string with(const std::string& line) { return std::string(kGood) + line + "\n"; }

TEST(Recipe, GoodRecipeLoadsWithDefaults) {
  Recipe r = load_recipe_text(kGood, "r.yaml");
  EXPECT_EQ(r.model.kv_heads, 4);
  EXPECT_EQ(r.model.ffn_hidden, 256);
  EXPECT_TRUE(r.model.tie_embeddings);
  EXPECT_EQ(r.optim.decay, LrDecay::cosine);
  EXPECT_EQ(r.train.recompute, Recompute::none);
  EXPECT_TRUE(r.data.synthetic);
  EXPECT_EQ(r.data.syn.vocab, 50);
  EXPECT_EQ(r.micro_batches_per_step(1), 4);
  EXPECT_EQ(r.seed, 1234);
}

TEST(Recipe, OverridesApply) {
  Recipe r = load_recipe_text(
      kGood, "r.yaml", {"train.steps=99", "optim.betas=[0.8, 0.9]", "model.arch=llama", "log.metrics=out.jsonl"});
  EXPECT_EQ(r.train.steps, 99);
  EXPECT_DOUBLE_EQ(r.optim.betas[0], 0.8);
  EXPECT_EQ(r.model.arch, Arch::llama);
  EXPECT_FALSE(r.model.tie_embeddings);
  EXPECT_EQ(r.log.metrics, "out.jsonl");
}

TEST(Recipe, UnknownKeyNamesLineAndSuggests) {
  expect_error(with("log: {evrey: 5}"), {"r.yaml:10:", "unknown key 'log.evrey'", "did you mean 'every'"});
}
TEST(Recipe, UnknownSection) { expect_error(with("modle: {}"), {"r.yaml:10:1", "unknown key 'modle'", "'model'"}); }
TEST(Recipe, WrongType) {
  expect_error(
      kGood, {"--set train.steps=ten", "key 'train.steps'", "expected an integer in [1, 1099511627776]", "found 'ten'"},
      {"train.steps=ten"});
}
TEST(Recipe, OutOfRange) {
  expect_error(with("parallel: {zero: 4}"),
               {"r.yaml:10:", "'parallel.zero'", "expected an integer in [0, 3]", "found '4'"});
}
TEST(Recipe, MissingRequiredKey) {
  std::string t = kGood;
  t.erase(t.find("  layers: 2\n"), 12);
  expect_error(t, {"r.yaml", "missing required key 'model.layers'", "integer"});
}
TEST(Recipe, BadEnum) {
  expect_error(kGood,
               {"--set optim.decay=exponential", "'optim.decay'", "one of constant | cosine | linear | wsd",
                "found 'exponential'"},
               {"optim.decay=exponential"});
}
TEST(Recipe, HiddenNotDivisibleByHeads) {
  expect_error(kGood, {"--set model.heads=5", "hidden(64) % heads(5) = 4 != 0"}, {"model.heads=5"});
}
TEST(Recipe, HeadsNotDivisibleByKvHeads) {
  expect_error(kGood, {"heads(4) % kv_heads(3) = 1 != 0"}, {"model.arch=llama", "model.kv_heads=3"});
}
TEST(Recipe, GlobalBatchNotDivisible) {
  expect_error(kGood, {"'train.global_batch'", "global_batch(8) % (micro_batch(3) x data(1)) = 2 != 0"},
               {"train.micro_batch=3"});
}
TEST(Recipe, MeshDoesNotMatchWorld) {
  // one process: the message says how to launch it
  expect_error(with("parallel: {data: 2, tensor: 2}"),
               {"data(2) x tensor(2) x pipeline(1) = 4 ranks, but this is one process", "mpirun -np 4 trident",
                "srun -n 4 --mpi=pmix"});
  expect_error(with("parallel: {tensor: 2}"),
               {"data(1) x tensor(2) x pipeline(1) = 2 ranks, but this is one process", "mpirun -np 2 trident"});
  // the fix is named, and only meshes this recipe passes are listed: not 1x1x4 (2 layers on 4 stages)
  expect_error(with("parallel: {data: 2}"),
               {"= 2 != world size 4; set parallel.data=auto (data 4 on 4 ranks), or use one of the meshes (data x "
                "tensor x pipeline) of 4 ranks this recipe can use: 4x1x1, 2x1x2, 2x2x1, 1x2x2, 1x4x1"},
               {}, 4);
  EXPECT_EQ(error_of(with("parallel: {data: 2}"), {}, 4).find("1x1x4"), std::string::npos);
  // data 8 leaves global_batch 8 / micro_batch 2 on 8 ranks no whole micro-batch: auto is not offered
  expect_error(with("parallel: {data: 2}"),
               {"= 2 != world size 8; use one of the meshes (data x tensor x pipeline) of 8 ranks this recipe can "
                "use: 4x1x2, 4x2x1, 2x2x2, 2x4x1, 1x4x2"},
               {}, 8);
  expect_error(
      with("parallel: {tensor: 2}"),
      {"key 'parallel.data': `auto`: world size 3 is not divisible by tensor(2) x pipeline(1) x context(1) = 2; "
       "no mesh of 3 ranks passes this recipe's checks"},
      {}, 3);
}
TEST(Recipe, AutoMeshSizeIsInferred) {
  Recipe r = load_recipe_text(with("parallel: {data: auto, tensor: 2}"), "r.yaml", {}, 8);
  EXPECT_EQ(r.parallel.data, 4);
  EXPECT_EQ(r.parallel.inferred, "data");
  // data is auto unless given, as Megatron-Core and torchtitan infer it
  r = load_recipe_text(with("parallel: {tensor: 2}"), "r.yaml", {}, 4);
  EXPECT_EQ(r.parallel.data, 2);
  EXPECT_EQ(r.parallel.inferred, "data");
  r = load_recipe_text(with("parallel: {data: 2, tensor: 2}"), "r.yaml", {}, 4);
  EXPECT_EQ(r.parallel.inferred, "");
  // another axis auto: data is 1
  r = load_recipe_text(with("parallel: {tensor: auto}"), "r.yaml", {}, 4);
  EXPECT_EQ(r.parallel.data, 1);
  EXPECT_EQ(r.parallel.tensor, 4);
  EXPECT_EQ(r.parallel.inferred, "tensor");
  expect_error(with("parallel: {data: auto, tensor: auto}"), {"at most one"}, {}, 4);
  // unplaced (the planner): data stays auto until a mesh is chosen
  EXPECT_EQ(load_recipe_text(kGood, "r.yaml", {}, 0).parallel.data, 0);
}
TEST(Recipe, LayersNotDivisibleByPipeline) {
  expect_error(with("parallel: {pipeline: 2, virtual_stages: 2}"),
               {"layers(2) % (pipeline(2) x virtual_stages(2)) != 0"}, {}, 2);
}
// The schedules' rules on the mesh, named by key before any rank starts:
// 4 micro-batches per step (global 8 / micro 2) on 2 layers.
TEST(Recipe, ScheduleRulesOnTheMesh) {
  const std::vector<std::string> two = {"parallel.pipeline=2", "model.tie_embeddings=false"};
  auto sets = [&](std::vector<std::string> more) {
    more.insert(more.begin(), two.begin(), two.end());
    return more;
  };
  expect_error(kGood, {"key 'parallel.virtual_stages'", "schedule 1f1b", "needs virtual_stages 1, found 2"},
               {"parallel.virtual_stages=2", "model.layers=4"});
  expect_error(kGood, {"key 'parallel.virtual_stages'", "interleaved_1f1b needs virtual_stages >= 2, found 1"},
               sets({"parallel.schedule=interleaved_1f1b"}), 2);
  expect_error(kGood,
               {"key 'train.micro_batch'", "micro-batches(2) % pipeline(4) = 2 != 0",
                "global_batch(8) / (micro_batch(4) x data(1))"},
               {"parallel.pipeline=4", "model.layers=8", "parallel.virtual_stages=2", "model.tie_embeddings=false",
                "parallel.schedule=interleaved_1f1b", "train.micro_batch=4"},
               4);
  expect_error(
      kGood,
      {"key 'train.micro_batch'", "dualpipev", "micro-batches(2) must be >= 2 x pipeline(2) = 4",
       "micro-batches = global_batch(8) / (micro_batch(4) x data(1))"},
      sets({"parallel.schedule=dualpipev", "parallel.virtual_stages=2", "model.layers=4", "train.micro_batch=4"}), 2);
  EXPECT_EQ(error_of(kGood, sets({"parallel.schedule=dualpipev", "parallel.virtual_stages=2", "model.layers=4"}), 2),
            "no error");
}

TEST(Recipe, GptWithGroupedQueryHeadsIsRejected) {
  expect_error(kGood, {"gpt2 uses multi-head attention: kv_heads(2) != heads(4)"}, {"model.kv_heads=2"});
}
TEST(Recipe, TensorParallelDivisibility) {
  // kGood: hidden 64, heads 4, ffn_hidden 256 (4 x hidden), micro_batch 2 x seq_len 32
  expect_error(with("parallel: {tensor: 3}"), {"'parallel.tensor'", "heads(4) % tensor(3) != 0"}, {}, 3);
  expect_error(with("parallel: {tensor: 4}"), {"'parallel.tensor'", "ffn_hidden(250) % tensor(4) != 0"},
               {"model.ffn_hidden=250"}, 4);
  expect_error(
      with("parallel: {tensor: 4, sequence_parallel: true}"),
      {"'parallel.sequence_parallel'", "micro_batch(1) x seq_len(30) = 30 token rows over tensor(4)", "30 % 4 != 0"},
      {"train.micro_batch=1", "model.seq_len=30"}, 4);
  expect_error(kGood, {"'model.vocab_multiple'", "found '0'"}, {"model.vocab_multiple=0"});
  Recipe r = load_recipe_text(with("parallel: {tensor: 4}"), "r.yaml", {"model.vocab_multiple=3"}, 4);
  EXPECT_EQ(r.model.padded_vocab(4), 60);  // 50 -> a multiple of 3 x 4
  EXPECT_EQ(r.model.padded_vocab(1), 51);
}
TEST(Recipe, BadOrder) {
  expect_error(
      with("parallel: {order: [tensor, data, data]}"),
      {"'parallel.order'", "a permutation of [tensor, context, data, pipeline], or of [tensor, data, pipeline]"});
}
TEST(Recipe, BetasWrongLength) {
  expect_error(kGood, {"'optim.betas'", "a list of 2 numbers", "found a list of 1 ([0.9])"}, {"optim.betas=[0.9]"});
}
// Messages that name the right thing, and no lax parsing.
TEST(Recipe, MessagesNameWhatIsWrong) {
  // a --set of an unknown section names the option, not FILE:0:0
  const std::string unknown = error_of(kGood, {"a.b=1"});
  EXPECT_EQ(unknown.find("--set a.b=1: unknown key 'a'"), 0u) << unknown;
  EXPECT_EQ(unknown.find(":0:0"), std::string::npos) << unknown;
  // tabs in the indentation are named, with the line
  expect_error("model:\n\tarch: gpt2\n", {"r.yaml:2:1: a tab character in the indentation"});
  // nesting beyond the parser's depth
  expect_error("a: " + std::string(2000, '[') + std::string(2000, ']') + "\n", {"YAML nested too deeply"});
  // 010 is not octal 8, a quoted "2" is not an integer, "true" in quotes is not a boolean
  expect_error(kGood, {"key 'train.steps'", "found '010'"}, {"train.steps=010"});
  expect_error(kGood, {"key 'train.steps'", "found the quoted string \"2\""}, {"train.steps=\"2\""});
  expect_error(kGood, {"key 'optim.lr'", "found the quoted string \"0.1\""}, {"optim.lr='0.1'"});
  expect_error(kGood, {"key 'checkpoint.async'", "true or false"}, {"checkpoint.async=\"true\""});
  EXPECT_EQ(error_of(kGood, {"train.steps=10", "optim.lr=1e-3", "optim.min_lr=0"}), "no error");
  // a second YAML document is not ignored
  expect_error(std::string(kGood) + "---\nseed: 5\n", {"a second YAML document ('---'); a recipe is one document"});
  EXPECT_EQ(error_of("---\n" + std::string(kGood)), "no error");  // a leading marker is one document
}
TEST(Recipe, DirectoryIsNotARecipe) {
  try {
    load_recipe(TRIDENT_SOURCE_DIR);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a directory, expected a recipe file"), std::string::npos) << e.what();
  }
}
TEST(Recipe, DuplicateKey) {
  expect_error(with("optim: {lr: 2.0e-3}"), {"r.yaml:10:1", "duplicate key 'optim'", "first at line 9"});
}
TEST(Recipe, NegativeLearningRate) {
  expect_error(kGood, {"'optim.lr'", "expected a number in (0, 10]", "found '-1'"}, {"optim.lr=-1"});
}
TEST(Recipe, MinLrAboveLr) { expect_error(kGood, {"min_lr(0.1) > lr(0.001)"}, {"optim.min_lr=0.1"}); }
TEST(Recipe, BothDataSources) {
  expect_error(with("data: {train: x, synthetic: {vocab: 10}}"), {"either data.train", "or data.synthetic"});
}
TEST(Recipe, SyntheticVocabTooLarge) {
  expect_error(with("data: {synthetic: {vocab: 60}}"), {"synthetic vocab(60) > model.vocab(50)"});
}
TEST(Recipe, YamlSyntaxError) { expect_error("model: {arch: gpt2\n  layers: [\n", {"r.yaml:", "YAML syntax error"}); }
TEST(Recipe, BadSetSyntax) {
  expect_error(kGood, {"--set train.steps", "expected key.path=value"}, {"train.steps"});
  expect_error(kGood, {"--set train..steps=3", "empty component"}, {"train..steps=3"});
}
TEST(Recipe, UnsupportedPrecisionAndDevice) {
  expect_error(kGood, {"'train.precision'", "one of fp32", "bf16", "fp16", "found 'fp8'"}, {"train.precision=fp8"});
  expect_error(kGood, {"'device'", "one of cpu", "cuda", "found 'tpu'"}, {"device=tpu"});
}
TEST(Recipe, MissingFile) {
  try {
    load_recipe("/nonexistent/recipe.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/recipe.yaml: cannot open"), std::string::npos);
  }
}

TEST(Recipe, EveryKeyIsDocumented) {
  std::ifstream in(std::string(TRIDENT_SOURCE_DIR) + "/docs/recipes.md");
  ASSERT_TRUE(in) << "docs/recipes.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  Recipe r = load_recipe_text(kGood, "r.yaml");
  ASSERT_GT(r.keys_read.size(), 40u);
  for (const auto& k : r.keys_read)
    EXPECT_NE(doc.find("`" + k + "`"), std::string::npos) << k << " not in docs/recipes.md";
}

// The key tables of docs/recipes.md are the key table's (core/recipe/keys.cpp):
// a key added, renamed or re-documented there shows here until the page is
// regenerated with `trident keys --update docs/recipes.md`.
TEST(Recipe, ReferenceTablesComeFromTheKeyTable) {
  std::ifstream in(std::string(TRIDENT_SOURCE_DIR) + "/docs/recipes.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  EXPECT_EQ(doc, recipe_doc_with_tables(doc)) << "regenerate: trident keys --update docs/recipes.md";
  // every key appears in exactly one table row
  for (const auto& k : recipe_keys()) {
    const std::string row = "\n| `" + k.path + "` |";
    const size_t at = doc.find(row);
    EXPECT_NE(at, std::string::npos) << k.path;
    EXPECT_EQ(doc.find(row, at + 1), std::string::npos) << k.path << " twice";
  }
  // a loaded recipe reads exactly the table's keys
  const Recipe r = load_recipe_text(kGood, "r.yaml");
  std::vector<std::string> table;
  for (const auto& k : recipe_keys())
    if (k.type != "map") table.push_back(k.path);
  EXPECT_EQ(r.keys_read, table);
}

// Every recipe in configs/ loads (placed on its own mesh where it names one)
// and is named in the README and in docs/.
TEST(Recipe, ShippedRecipesLoadAndAreDocumented) {
  const std::string root = TRIDENT_SOURCE_DIR;
  auto text = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string readme = text(root + "/README.md");
  std::string docs;
  for (const auto& e : std::filesystem::directory_iterator(root + "/docs"))
    if (e.path().extension() == ".md") docs += text(e.path().string());
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(root + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    const std::string name = e.path().filename().string();
    ++n;
    EXPECT_NO_THROW(load_recipe_unplaced(e.path().string())) << name;
    EXPECT_NE(readme.find("configs/" + name), std::string::npos) << name << " is not named in README.md";
    EXPECT_NE(docs.find(name), std::string::npos) << name << " is not named in docs/";
  }
  EXPECT_GE(n, 16);
  for (std::string name : {"demo", "gpt2-124m", "gpt2-350m", "llama-tiny", "llama-1b", "moe-tiny", "deepseek-v3-tiny"})
    EXPECT_NO_THROW(load_recipe(root + "/configs/" + name + ".yaml")) << name << " on one process";
}

}  // namespace trident

namespace trident {
namespace {

std::string with_data(const std::string& data) { return std::string(kGood) + "data: " + data + "\n"; }

TEST(Recipe, DataBlends) {
  Recipe one = load_recipe_text(with_data("{train: corpus_train, valid: corpus_valid}"), "r.yaml");
  ASSERT_EQ(one.data.train.size(), 1u);
  EXPECT_EQ(one.data.train[0].path, "corpus_train");
  EXPECT_FALSE(one.data.synthetic);
  Recipe blend = load_recipe_text(
      with_data("{train: [{path: web_train, weight: 0.7}, {path: code_train, weight: 0.3}, books_train], "
                "document_mask: true}"),
      "r.yaml");
  ASSERT_EQ(blend.data.train.size(), 3u);
  EXPECT_EQ(blend.data.train[1].path, "code_train");
  EXPECT_DOUBLE_EQ(blend.data.train[1].weight, 0.3);
  EXPECT_DOUBLE_EQ(blend.data.train[2].weight, 1.0);
  EXPECT_TRUE(blend.data.document_mask);
  expect_error(with_data("{train: [{path: a, weight: -1}]}"), {"r.yaml:", "'data.train[0].weight'", ">= 0", "-1"});
  expect_error(with_data("{train: [{path: a, weight: 0}, {path: b, weight: 0}]}"), {"'data.train'", "all zero"});
  expect_error(with_data("{train: [{path: a, wieght: 1}]}"), {"'data.train[0]'", "unknown key 'wieght'"});
  expect_error(with_data("{train: [{weight: 1}]}"), {"'data.train[0].path'", "expected a dataset prefix"});
  expect_error(with_data("{synthetic: {vocab: 10}, document_mask: true}"), {"'data.document_mask'", "synthetic"});
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

// Sizes whose products the run computes with are bounded: no overflow.
TEST(Recipe, NoIntegerOverflow) {
  expect_error(kGood, {"'train.global_batch'", "expected an integer in [1, 16777216]", "4294967296"},
               {"train.global_batch=4294967296"});
  expect_error(kGood, {"'train.global_batch'", "8589934596"}, {"train.global_batch=8589934596"});
  expect_error(kGood, {"'train.steps'", "steps(1099511627776) x global_batch(16777216)", "> 2^48"},
               {"train.steps=1099511627776", "train.global_batch=16777216", "train.micro_batch=2"});
}

}  // namespace
// Placing a recipe on one process sets the mesh in the typed recipe and
// re-checks it with no YAML: what the file said about the data survives (a
// dataset recipe stays one, it does not fall back to the synthetic source).
TEST(Recipe, OneProcessPlacementKeepsEverythingButTheMesh) {
  const std::string text = std::string(kGood) +
                           "parallel: {data: 2, tensor: 2, zero: 2, sequence_parallel: true}\n"
                           "data: {train: ds_train, valid: ds_valid}\n";
  const Recipe r = load_recipe_text_on_one_process(text, "r.yaml", {"train.steps=3"});
  EXPECT_EQ(r.parallel.data * r.parallel.tensor * r.parallel.pipeline * r.parallel.context, 1);
  EXPECT_EQ(r.parallel.zero, 0);
  EXPECT_FALSE(r.parallel.sequence_parallel);
  EXPECT_FALSE(r.data.synthetic);
  ASSERT_EQ(r.data.train.size(), 1u);
  EXPECT_EQ(r.data.train[0].path, "ds_train");
  ASSERT_EQ(r.data.valid.size(), 1u);
  EXPECT_EQ(r.train.steps, 3);
  EXPECT_EQ(r.overrides, std::vector<std::string>{"train.steps=3"});  // the file's record: the user's own --set
  // the mesh is the only thing placed: a recipe that cannot run on one rank still says why
  try {
    load_recipe_text_on_one_process(text, "r.yaml", {"train.micro_batch=3"});
    ADD_FAILURE() << "micro_batch 3 of a global batch of 8 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("global_batch(8) % (micro_batch(3) x data(1)) = 2 != 0"), std::string::npos)
        << e.what();
  }
}

// model.moe: the keys, their defaults, the layers they select, and the
// combinations refused with the key named.
TEST(Recipe, MlaKeys) {
  const std::string mla = R"(model: {arch: llama, layers: 2, hidden: 48, heads: 4, seq_len: 32, vocab: 50,
        attention: mla, mla: {q_lora_rank: 24, kv_lora_rank: 16, qk_nope_head_dim: 8, qk_rope_head_dim: 4,
                              v_head_dim: 6}}
train: {global_batch: 8, micro_batch: 2, steps: 10}
optim: {lr: 1.0e-3}
)";
  const Recipe r = load_recipe_text(mla, "r.yaml", {}, 1);
  EXPECT_TRUE(r.model.is_mla());
  EXPECT_EQ(r.model.q_head_dim(), 12);
  EXPECT_EQ(r.model.v_head_dim(), 6);
  EXPECT_EQ(r.model.kv_heads, 4);  // every query head has its key and value head
  // DeepSeek-V3's sizes by default
  const Recipe d = load_recipe_text(mla, "r.yaml", {"model.mla={}"}, 1);
  EXPECT_EQ(d.model.mla.q_lora_rank, 1536);
  EXPECT_EQ(d.model.mla.kv_lora_rank, 512);
  EXPECT_EQ(d.model.q_head_dim(), 192);
  EXPECT_EQ(d.model.v_head_dim(), 128);
  // hidden / heads need not divide: the head sizes are MLA's own
  EXPECT_NO_THROW(load_recipe_text(mla, "r.yaml", {"model.hidden=50"}, 1));
  EXPECT_FALSE(load_recipe_text(kGood, "r.yaml", {}, 1).model.is_mla());
  // the value heads are the attention kernels' own size: wider than the query heads too
  EXPECT_EQ(load_recipe_text(mla, "r.yaml", {"model.mla.v_head_dim=13"}, 1).model.v_head_dim(), 13);
  expect_error(mla, {"model.mla.qk_rope_head_dim", "even size, found 3"}, {"model.mla.qk_rope_head_dim=3"});
  expect_error(mla, {"model.kv_heads", "kv_heads(2) != heads(4)"}, {"model.kv_heads=2"});
  expect_error(mla, {"model.attention", "arch llama, found arch gpt2"}, {"model.arch=gpt2"});
  expect_error(mla, {"model.qk_norm", "standard attention"}, {"model.qk_norm=true"});
  // on CUDA the attention kernels' head size bound, for query and value heads alike
  EXPECT_NO_THROW(load_recipe_text(mla, "r.yaml", {"device=cuda"}, 1));
  expect_error(mla, {"model.mla.qk_nope_head_dim", "device cuda", "up to 256", "= 257"},
               {"device=cuda", "model.mla.qk_nope_head_dim=193", "model.mla.qk_rope_head_dim=64"});
  expect_error(mla, {"model.mla.v_head_dim", "device cuda", "up to 256", "found 257"},
               {"device=cuda", "model.mla.v_head_dim=257"});
  expect_error(mla, {"model.mla", "set model.attention: mla"}, {"model.attention=standard"});
  expect_error(mla, {"model.attention", "expected one of", "standard", "mla"}, {"model.attention=latent"});
}

TEST(Recipe, MtpKeys) {
  const std::string mtp = R"(model: {arch: llama, layers: 2, hidden: 48, heads: 4, seq_len: 32, vocab: 50,
        mtp: {depth: 2, loss_weight: 0.1}}
train: {global_batch: 8, micro_batch: 2, steps: 10}
optim: {lr: 1.0e-3}
)";
  const Recipe r = load_recipe_text(mtp, "r.yaml", {}, 1);
  EXPECT_EQ(r.model.mtp.depth, 2);
  EXPECT_DOUBLE_EQ(r.model.mtp.loss_weight, 0.1);
  EXPECT_EQ(load_recipe_text(mtp, "r.yaml", {"model.mtp={}"}, 1).model.mtp.depth, 1);  // the section: depth 1
  EXPECT_DOUBLE_EQ(load_recipe_text(mtp, "r.yaml", {"model.mtp={}"}, 1).model.mtp.loss_weight, 0.3);
  EXPECT_EQ(load_recipe_text(kGood, "r.yaml", {}, 1).model.mtp.depth, 0);  // none without it
  // placed again without its YAML (the planner, import, export): kept
  EXPECT_EQ(load_recipe_text_on_one_process(mtp, "r.yaml", {}).model.mtp.depth, 2);
  expect_error(mtp, {"model.mtp.depth", "depth(32) >= seq_len(32)"}, {"model.mtp.depth=32"});
  expect_error(mtp, {"model.tie_embeddings", "untied"}, {"model.tie_embeddings=true"});
  expect_error(mtp, {"model.mtp", "arch llama, found arch gpt2"}, {"model.arch=gpt2", "model.tie_embeddings=false"});
  expect_error(mtp, {"parallel.context", "context(2) with model.mtp"}, {"parallel.context=2"}, 2);
  expect_error(mtp, {"model.mtp", "device cuda"}, {"device=cuda"});
  expect_error(mtp, {"model.mtp.depth", "an integer in [1, 64]", "found '0'"}, {"model.mtp.depth=0"});
}

// model.head_dim: heads of their own size (Qwen3, Mistral-Nemo), by default hidden / heads.
TEST(Recipe, HeadDimKey) {
  const std::string llama = R"(model: {arch: llama, layers: 2, hidden: 48, heads: 4, kv_heads: 2, seq_len: 32,
        vocab: 50, head_dim: 16}
train: {global_batch: 8, micro_batch: 2, steps: 10}
optim: {lr: 1.0e-3}
)";
  const Recipe r = load_recipe_text(llama, "r.yaml", {}, 1);
  EXPECT_EQ(r.model.head_dim(), 16);
  EXPECT_EQ(r.model.q_head_dim(), 16);
  EXPECT_EQ(
      load_recipe_text(kGood, "r.yaml", {}, 1).model.head_dim(),
      load_recipe_text(kGood, "r.yaml", {}, 1).model.hidden / load_recipe_text(kGood, "r.yaml", {}, 1).model.heads);
  // with its own head size, the width need not divide by the heads
  EXPECT_EQ(load_recipe_text(llama, "r.yaml", {"model.heads=5", "model.kv_heads=5"}, 1).model.head_dim(), 16);
  std::string plain = llama;
  plain.replace(plain.find(", head_dim: 16"), std::string(", head_dim: 16").size(), "");
  expect_error(plain, {"model.heads", "hidden(48) % heads(5) = 3 != 0"}, {"model.heads=5", "model.kv_heads=5"});
  expect_error(llama, {"model.head_dim", "even head size, found 15"}, {"model.head_dim=15"});
  expect_error(llama, {"model.head_dim", "heads x head_dim = hidden: 4 x 16 != 48"},
               {"model.arch=gpt2", "model.kv_heads=4"});
  expect_error(llama, {"model.head_dim", "device cuda", "up to 256 values, found 512"},
               {"model.head_dim=512", "device=cuda"});
  expect_error(llama, {"model.head_dim", "model.mla"}, {"model.attention=mla"});
}

// model.sliding_window, model.layer_types, model.attention_sinks: each
// layer's window (none without sliding_window; every layer when
// layer_types is left out), and the errors naming the key.
TEST(Recipe, SlidingWindowAndSinkKeys) {
  const std::string llama = R"(model: {arch: llama, layers: 3, hidden: 48, heads: 4, kv_heads: 2, seq_len: 32,
        vocab: 50, sliding_window: 8, layer_types: [sliding, full, sliding], attention_sinks: true}
train: {global_batch: 8, micro_batch: 2, steps: 10}
optim: {lr: 1.0e-3}
)";
  const Recipe r = load_recipe_text(llama, "r.yaml", {}, 1);
  EXPECT_EQ(r.model.window(0), 8);
  EXPECT_EQ(r.model.window(1), 0);
  EXPECT_EQ(r.model.window(2), 8);
  EXPECT_EQ(r.model.window(3), 0);  // a multi-token prediction block
  EXPECT_TRUE(r.model.attention_sinks);
  const Recipe every = load_recipe_text(llama, "r.yaml", {"model.layer_types=[]"}, 1);
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(every.model.window(l), 8);
  EXPECT_EQ(load_recipe_text(kGood, "r.yaml", {}, 1).model.window(0), 0);
  expect_error(llama, {"model.layer_types", "2 entries for model.layers(3)"}, {"model.layer_types=[full, full]"});
  expect_error(llama, {"model.layer_types", "full, sliding", "found 'window'"},
               {"model.layer_types=[full, window, full]"});
  expect_error(llama, {"model.layer_types", "needs model.sliding_window > 0"}, {"model.sliding_window=0"});
  expect_error(llama, {"model.attention_sinks", "arch gpt2"},
               {"model.arch=gpt2", "model.kv_heads=4", "model.layer_types=[]", "model.sliding_window=0"});
}

// optim.name muon and its keys, on meshes that cut matrices (tensor slices, expert shards) too; device cuda refused.
TEST(Recipe, MuonKeys) {
  const std::string muon = R"(model: {arch: llama, layers: 2, hidden: 48, heads: 4, kv_heads: 2, seq_len: 32, vocab: 50}
train: {global_batch: 8, micro_batch: 2, steps: 10}
optim: {name: muon, lr: 1.0e-3, weight_decay: 0.1, muon: {ns_steps: 4, adjust_lr: match_rms_adamw,
        ns_coefficients: [2, -1.5, 0.5]}}
)";
  const Recipe r = load_recipe_text(muon, "r.yaml", {}, 1);
  EXPECT_EQ(r.optim.name, OptimizerKind::muon);
  EXPECT_EQ(r.optim.muon.ns_steps, 4);
  EXPECT_EQ(r.optim.muon.adjust_lr, MuonAdjustLr::match_rms_adamw);
  EXPECT_EQ(r.optim.muon.ns_coefficients[1], -1.5);
  EXPECT_EQ(r.optim.muon.weight_decay, 0.1);  // optim.weight_decay's by default
  EXPECT_EQ(r.optim.muon.ns_precision, MuonPrecision::bf16);
  EXPECT_EQ(load_recipe_text(muon, "r.yaml", {"optim.muon.weight_decay=0"}, 1).optim.muon.weight_decay, 0.0);
  EXPECT_EQ(load_recipe_text(muon, "r.yaml", {"parallel.tensor=2"}, 2).parallel.tensor, 2);
  expect_error(muon, {"device", "cuda with optim.name muon"}, {"device=cuda"});
  // parallel.zero_accumulate: shard needs ZeRO 2-3, and untied embeddings with a pipeline
  EXPECT_EQ(
      load_recipe_text(muon, "r.yaml", {"parallel.data=2", "parallel.zero=3", "parallel.zero_accumulate=shard"}, 2)
          .parallel.zero_accumulate,
      ZeroAccumulate::shard);
  expect_error(muon, {"parallel.zero_accumulate", "ZeRO 1"},
               {"parallel.data=2", "parallel.zero=1", "parallel.zero_accumulate=shard"}, 2);
  expect_error(
      muon, {"parallel.zero_accumulate", "pipeline 2 and model.tie_embeddings"},
      {"parallel.pipeline=2", "parallel.zero=2", "parallel.zero_accumulate=shard", "model.tie_embeddings=true"}, 2);
  EXPECT_EQ(
      load_recipe_text(muon, "r.yaml", {"parallel.pipeline=2", "parallel.zero=2", "parallel.zero_accumulate=shard"}, 2)
          .parallel.zero_accumulate,
      ZeroAccumulate::shard);
  // HSDP: data x context = data_replicate x data_shard, with the arithmetic in the message; needs ZeRO >= 1
  {
    const Recipe h = load_recipe_text(
        muon, "r.yaml", {"parallel.data=8", "parallel.zero=3", "parallel.data_shard=2", "train.global_batch=16"}, 8);
    EXPECT_EQ(h.parallel.data_shard_size(), 2);
    EXPECT_EQ(h.parallel.data_replicate_size(), 4);
    const Recipe g = load_recipe_text(muon, "r.yaml",
                                      {"parallel.data=4", "parallel.context=2", "parallel.zero=1",
                                       "parallel.data_replicate=2", "train.global_batch=16"},
                                      8);
    EXPECT_EQ(g.parallel.data_shard_size(), 4);
    EXPECT_TRUE(g.parallel.hsdp());
    EXPECT_FALSE(load_recipe_text(muon, "r.yaml", {"parallel.data=8", "parallel.zero=3", "train.global_batch=16"}, 8)
                     .parallel.hsdp());
    expect_error(muon, {"parallel.data_shard", "data_shard(3) does not divide data = 8"},
                 {"parallel.data=8", "parallel.zero=1", "parallel.data_shard=3", "train.global_batch=16"}, 8);
    expect_error(muon, {"parallel.data_replicate", "data_replicate(2) x data_shard(2) = 4 != data = 8"},
                 {"parallel.data=8", "parallel.zero=1", "parallel.data_shard=2", "parallel.data_replicate=2",
                  "train.global_batch=16"},
                 8);
    expect_error(muon, {"parallel.data_shard", "parallel.zero is 0"},
                 {"parallel.data=8", "parallel.data_shard=4", "train.global_batch=16"}, 8);
  }
  // QK-clip: its keys, refused with QK-norm (which undoes the scaling) and without Muon
  const Recipe clip = load_recipe_text(muon, "r.yaml", {"optim.muon.qk_clip.on=true"}, 1);
  EXPECT_TRUE(clip.optim.muon.qk_clip.on);
  EXPECT_EQ(clip.optim.muon.qk_clip.threshold, 100.0);
  expect_error(muon, {"optim.muon.qk_clip.on", "model.qk_norm"}, {"optim.muon.qk_clip.on=true", "model.qk_norm=true"});
  expect_error(muon, {"optim.muon.qk_clip.on", "set optim.name muon"},
               {"optim.muon.qk_clip.on=true", "optim.name=adamw"});
  expect_error(muon, {"optim.muon.qk_clip.threshold"}, {"optim.muon.qk_clip.threshold=0"});
  EXPECT_EQ(load_recipe_text(muon, "r.yaml", {"parallel.data=2", "parallel.zero=3"}, 2).parallel.zero, 3);
  const std::string moe =
      std::string(muon).replace(muon.find("vocab: 50}"), 10, "vocab: 50, moe: {experts: 4, top_k: 2, ffn_hidden: 16}}");
  EXPECT_EQ(load_recipe_text(moe, "r.yaml", {"parallel.data=2", "parallel.expert=2"}, 2).parallel.expert, 2);
  expect_error(muon, {"optim.muon.ns_coefficients", "a list of 3 numbers"}, {"optim.muon.ns_coefficients=[1, 2]"});
  expect_error(muon, {"optim.name", "adamw", "muon", "found 'sgd'"}, {"optim.name=sgd"});
}

TEST(Recipe, MoeKeys) {
  const std::string llama = R"(model: {arch: llama, layers: 4, hidden: 64, heads: 4, seq_len: 32, vocab: 50,
        moe: {experts: 8, top_k: 2, ffn_hidden: 32, first_dense: 1, dense_layers: [2],
              router: {score: sigmoid, groups: 4, group_topk: 2, scaling: 2.5},
              balance: {kind: seq_aux_loss, coef: 0.001, z_loss: 0.0001}}}
train: {global_batch: 8, micro_batch: 2, steps: 10}
optim: {lr: 1.0e-3}
)";
  const Recipe r = load_recipe_text(llama, "r.yaml", {}, 1);
  const MoeConfig& e = r.model.moe;
  EXPECT_TRUE(e.enabled);
  EXPECT_EQ(e.experts, 8);
  EXPECT_EQ(e.score, RouterScore::sigmoid);
  EXPECT_EQ(e.balance, Balance::seq_aux_loss);
  EXPECT_TRUE(e.norm_topk);
  EXPECT_EQ(e.shared_ffn_hidden, 32);  // defaults to the expert width
  EXPECT_FALSE(e.is_moe(0));
  EXPECT_TRUE(e.is_moe(1));
  EXPECT_FALSE(e.is_moe(2));
  EXPECT_TRUE(e.is_moe(3));
  EXPECT_FALSE(load_recipe_text(kGood, "r.yaml", {}, 1).model.moe.enabled);
  // placed again without its YAML (the planner, import, export): still MoE
  EXPECT_TRUE(load_recipe_text_on_one_process(llama, "r.yaml", {}).model.moe.enabled);
  // every second layer, the Qwen way: (l + 1) % every == 0
  const Recipe q = load_recipe_text(llama, "r.yaml", {"model.moe.every=2", "model.moe.first_dense=0"}, 1);
  EXPECT_FALSE(q.model.moe.is_moe(0));
  EXPECT_TRUE(q.model.moe.is_moe(1));
  EXPECT_FALSE(q.model.moe.is_moe(2));  // listed dense
  expect_error(llama, {"model.moe.top_k", "top_k(9) > experts(8)"}, {"model.moe.top_k=9"});
  expect_error(llama, {"model.moe.router.groups", "experts(8) % groups(3)"}, {"model.moe.router.groups=3"});
  expect_error(llama, {"model.moe.top_k", "top_k(5) > group_topk(2) x experts(8) / groups(4) = 4"},
               {"model.moe.top_k=5"});
  expect_error(llama, {"model.moe.shared_expert_gate", "shared_experts >= 1"}, {"model.moe.shared_expert_gate=true"});
  expect_error(llama, {"model.moe.dense_layers", "layer 7 >= model.layers(4)"}, {"model.moe.dense_layers=[7]"});
  expect_error(llama, {"model.moe", "no layer of 4 is an MoE layer"}, {"model.moe.first_dense=4"});
  expect_error(llama, {"model.moe", "model.moe.experts is required"}, {"model.moe={top_k: 2}"});
  expect_error(llama, {"unknown key 'model.moe.router.scroe'", "did you mean 'score'"},
               {"model.moe.router.scroe=softmax"});
  expect_error(llama, {"model.moe.balance.kind", "expected one of"}, {"model.moe.balance.kind=switch"});
  expect_error(llama, {"model.moe.balance.kind", "softmax routers without groups"}, {"model.moe.balance.kind=hf"});
  expect_error(llama, {"parallel.pipeline", "one pipeline stage"},
               {"model.moe.balance.kind=hf", "model.moe.router.score=softmax", "model.moe.router.groups=1",
                "model.moe.router.group_topk=1", "parallel.pipeline=2"},
               2);
  expect_error(llama, {"model.moe.capacity_factor", "dropless"}, {"model.moe.capacity_factor=1.25"});
  expect_error(llama, {"model.moe", "arch llama, found arch gpt2"}, {"model.arch=gpt2"});
  expect_error(llama, {"parallel.tensor", "moe.ffn_hidden(32) % tensor(3)"},
               {"parallel.tensor=3", "model.heads=3", "model.hidden=48", "model.kv_heads=3", "model.ffn_hidden=48"}, 3);
  expect_error(kGood, {"train.recompute", "zero_bubble", "none or selective"},
               {"parallel.schedule=zero_bubble", "train.recompute=full"});
  // dualpipev: two chunks per rank in a V; the token table's two ends on rank 0
  expect_error(llama, {"parallel.virtual_stages", "needs virtual_stages 2, found 1"}, {"parallel.schedule=dualpipev"});
  expect_error(llama, {"train.recompute", "dualpipev", "none or selective"},
               {"parallel.schedule=dualpipev", "parallel.virtual_stages=2", "train.recompute=full"});
  expect_error(kGood, {"model.tie_embeddings", "dualpipev", "tie_embeddings false"},
               {"parallel.schedule=dualpipev", "parallel.virtual_stages=2"});
  EXPECT_NO_THROW(load_recipe_text(
      llama, "r.yaml", {"parallel.schedule=dualpipev", "parallel.virtual_stages=2", "model.mtp={depth: 1}"}, 1));
}

}  // namespace trident
