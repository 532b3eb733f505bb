// trident export / import / sample from the command line: the text path a
// user follows (prepare -> train -> sample), import -> train, and every
// refusal: exit code 2, a message naming the file, key or tensor, and nothing
// written. The logits against transformers are checked by tests/launch/hf/interop.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/safetensors.hpp"
#include "tests/test_util.hpp"

namespace trident {

namespace fs = std::filesystem;
using test::CliRun;

CliRun run(const std::string& args) { return test::run_cli(TRIDENT_BINARY, args); }
std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }
bool has(const CliRun& r, const std::string& s) { return r.out.find(s) != std::string::npos; }

class Interop : public ::testing::Test {
 public:
  static const std::string& dir() { return dir_; }

 protected:
  static std::string dir_;
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("trident_interop_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const CliRun r =
        run("train " + src("configs/demo.yaml") +
            " --set train.steps=20 --set eval.batches=2 --set log.metrics= --set checkpoint.dir=" + dir_ + "/ck");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& rel) { return dir_ + "/" + rel; }
  // An exported model directory, rewritten with `edit` applied to its tensors.
  static std::string edited_export(const std::string& name,
                                   const std::function<void(std::vector<SafetensorsInput>&)>& edit) {
    const std::string out = path(name);
    fs::copy(path("hf"), out, fs::copy_options::recursive);
    SafetensorsReader r(out + "/model.safetensors");
    std::vector<std::vector<char>> data;
    std::vector<SafetensorsInput> ts;
    for (const auto& e : r.entries()) {
      data.emplace_back(size_t(e.end - e.begin));
      r.read(e.name, data.back().data());
      ts.push_back({e.name, e.dtype, e.shape, data.back().data()});
    }
    edit(ts);
    write_safetensors(out + "/model.safetensors", ts);
    return out;
  }
};
std::string Interop::dir_;

// A staging directory NAME.tmp.PID of an export or import left behind.
bool staging_left(const std::string& name) {
  for (const auto& e : fs::directory_iterator(Interop::dir()))
    if (e.path().filename().string().rfind(name + ".tmp.", 0) == 0) return true;
  return false;
}

TEST_F(Interop, ExportWritesAModelDirectoryOrNothing) {
  fs::create_directories(path("hf.tmp"));  // a user's directory that happens to have the staging name
  std::ofstream(path("hf.tmp/notes.txt")) << "mine";
  const CliRun ok = run("export " + path("ck") + " --format hf --out " + path("hf"));
  ASSERT_EQ(ok.code, 0) << ok.out;
  for (const char* f : {"model.safetensors", "config.json"}) EXPECT_TRUE(fs::exists(path("hf/") + f)) << f;
  EXPECT_TRUE(fs::exists(path("hf.tmp/notes.txt"))) << "export removed a directory it did not create";
  EXPECT_FALSE(staging_left("hf"));
  {  // vocabulary padding stripped (32 of 64 rows), Conv1D weights [in, out], no tied lm_head
    SafetensorsReader r(path("hf/model.safetensors"));
    EXPECT_EQ(r.at("transformer.wte.weight").shape, (Shape{32, 128}));
    EXPECT_EQ(r.at("transformer.h.0.attn.c_attn.weight").shape, (Shape{128, 384}));
    EXPECT_EQ(r.at("transformer.h.3.mlp.c_proj.weight").shape, (Shape{512, 128}));
    EXPECT_FALSE(r.contains("lm_head.weight"));
    EXPECT_EQ(r.metadata().at("format"), "pt");
  }
  // refusals
  CliRun r = run("export " + path("ck") + " --format hf --out " + path("hf"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r, "exists and is not empty")) << r.out;
  r = run("export " + path("ck") + " --format onnx --out " + path("x"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r, "--format: expected hf, found 'onnx'")) << r.out;
  // a place where nothing can be created (as on a read-only file system): exit 2 naming --out, nothing left
  r = run("export " + path("ck") + " --format hf --out /proc/trident_interop_export");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "--out: expected a directory that can be created")) << r.out;
  r = run("import " + path("hf") + " --recipe " + src("configs/demo.yaml") + " --out /proc/trident_interop_import");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r, "--out: expected a directory that can be created")) << r.out;
  r = run("export " + path("nothing") + " --format hf --out " + path("x"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r, "no such checkpoint")) << r.out;
  // a damaged checkpoint: the checksum names the file; no output directory
  fs::copy(path("ck"), path("damaged"), fs::copy_options::recursive);
  const std::string shard = path("damaged/step_00000020/dp0_pp0_tp0.safetensors");
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4000);
    f.put('\x7f');
  }
  r = run("export " + path("damaged") + " --format hf --out " + path("x"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r, "dp0_pp0_tp0.safetensors: checksum")) << r.out;
  EXPECT_FALSE(fs::exists(path("x")));
  EXPECT_FALSE(staging_left("x"));
}

TEST_F(Interop, ImportRefusesWhatDoesNotFitAndTrainsFromWhatDoes) {
  if (!fs::exists(path("hf"))) ASSERT_EQ(run("export " + path("ck") + " --format hf --out " + path("hf")).code, 0);
  auto refused = [&](const std::string& args, const std::string& message) {
    const CliRun r = run("import " + args + " --out " + path("imp"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(has(r, message)) << "expected '" << message << "' in:\n" << r.out;
    EXPECT_FALSE(fs::exists(path("imp")));
    EXPECT_FALSE(staging_left("imp"));
  };
  refused(path("hf") + " --recipe " + src("configs/llama-tiny.yaml"), "key 'model_type' is 'gpt2'");
  refused(path("hf") + " --recipe " + src("configs/demo.yaml") + " --set model.layers=2",
          "config.json: key 'n_layer' is 4, the recipe " + src("configs/demo.yaml") +
              " has model.layers = 2: set model.layers: 4");
  refused(path("nothing") + " --recipe " + src("configs/demo.yaml"), "config.json: missing");
  refused(
      edited_export("missing", [](auto& ts) { ts.erase(ts.begin() + 3); }) + " --recipe " + src("configs/demo.yaml"),
      "no tensor 'transformer.h.");
  refused(edited_export("shape",
                        [](auto& ts) {
                          for (auto& t : ts)
                            if (t.name == "transformer.h.1.attn.c_attn.weight") t.shape = {384, 128};
                        }) +
              " --recipe " + src("configs/demo.yaml"),
          "tensor 'transformer.h.1.attn.c_attn.weight': expected shape [128,384], found [384,128]");
  static float extra[4] = {};
  refused(edited_export("extra",
                        [](auto& ts) {
                          ts.push_back({"transformer.h.9.ln_1.weight", DType::f32, {4}, extra});
                        }) +
              " --recipe " + src("configs/demo.yaml"),
          "tensor 'transformer.h.9.ln_1.weight' is not a parameter");

  refused(edited_export("nan",
                        [](auto& ts) {
                          for (auto& t : ts)
                            if (t.name == "transformer.h.2.mlp.c_fc.weight")
                              const_cast<float*>(static_cast<const float*>(t.data))[7] = std::nanf("");
                        }) +
              " --recipe " + src("configs/demo.yaml"),
          "tensor 'transformer.h.2.mlp.c_fc.weight': element 7 (of 65536) is nan");
  const CliRun ok = run("import " + path("hf") + " --recipe " + src("configs/demo.yaml") + " --out " + path("imp"));
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(fs::exists(path("imp/step_00000000/index.json")));
  // training from it starts from the imported weights: its first loss is the
  // trained model's, well below a fresh model's (about log(32) = 3.47)
  auto common = [&](const std::string& ck) {
    return " --set train.steps=1 --set eval.batches=2 --set log.metrics= --set checkpoint.dir=" + path(ck);
  };
  const CliRun from = run("train " + src("configs/demo.yaml") + common("ck2") + " --resume " + path("imp"));
  ASSERT_EQ(from.code, 0) << from.out;
  EXPECT_TRUE(has(from, "resumed from " + path("imp/step_00000000"))) << from.out;
  const CliRun fresh = run("train " + src("configs/demo.yaml") + common("ck3"));
  ASSERT_EQ(fresh.code, 0) << fresh.out;
  auto first_loss = [](const std::string& out) {
    const size_t at = out.find("| loss ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 7));
  };
  EXPECT_LT(first_loss(from.out), first_loss(fresh.out) - 0.05) << from.out << fresh.out;
  EXPECT_GT(first_loss(from.out), 0);
  // a recipe of the model alone imports: the training keys it does not use get placeholders, named
  std::ofstream(path("model-only.yaml")) << "model: {arch: gpt2, layers: 4, hidden: 128, heads: 4, seq_len: 64, "
                                            "vocab: 32}\n";
  const CliRun model_only =
      run("import " + path("hf") + " --recipe " + path("model-only.yaml") + " --out " + path("imp_model"));
  ASSERT_EQ(model_only.code, 0) << model_only.out;
  EXPECT_TRUE(has(model_only,
                  "--set train.global_batch=... --set train.micro_batch=... --set train.steps=... --set "
                  "optim.lr=... (the recipe has no training keys: give them)"))
      << model_only.out;
  const CliRun trained = run("train " + src("configs/demo.yaml") + common("ck4") + " --resume " + path("imp_model"));
  EXPECT_EQ(trained.code, 0) << trained.out;
  EXPECT_EQ(first_loss(trained.out), first_loss(from.out)) << "the same weights as the full recipe's import";
}

// The released checkpoints' quantized weights, end to end: a tiny
// DeepSeek-V3 exported by Trident whose projections are rewritten as FP8
// codes with 128 x 128 block scales (the released format, with its
// quantization_config), and a tiny gpt-oss whose experts are rewritten as
// MXFP4 blocks and e8m0 scales, import without a recipe and export back
// f32 values equal to the codes times their scales (the experts in gpt-oss's
// layout), every other tensor bit for bit; a weight without its scales, and
// a quantization method import does not read, are refused by name.
TEST_F(Interop, QuantizedCheckpointsImportExactly) {
  auto train_export = [&](const std::string& name, const std::string& recipe, const std::string& sets) {
    const CliRun t = run("train " + recipe + " --set train.steps=1 --set eval.batches=0 --set log.metrics= " + sets +
                         " --set checkpoint.dir=" + path(name + "_ck"));
    ASSERT_EQ(t.code, 0) << t.out;
    const CliRun e = run("export " + path(name + "_ck") + " --format hf --out " + path(name + "_hf"));
    ASSERT_EQ(e.code, 0) << e.out;
  };
  // the tensors of a model directory, by name
  auto tensors = [](const std::string& dir) {
    SafetensorsReader r(dir + "/model.safetensors");
    std::map<std::string, std::pair<Shape, std::vector<float>>> out;
    for (const auto& e : r.entries()) {
      std::vector<float> v(size_t(shape_numel(e.shape)));
      if (e.dtype == DType::f32) r.read(e.name, v.data());
      out[e.name] = {e.shape, v};
    }
    return out;
  };
  // a copy of dir with these tensors (and config.json's quantization_config)
  auto rewrite = [&](const std::string& from, const std::string& to, const std::vector<SafetensorsInput>& ts,
                     const std::string& quantization) {
    fs::copy(path(from), path(to), fs::copy_options::recursive);
    write_safetensors(path(to) + "/model.safetensors", ts);
    std::string config = test::read_text(path(to) + "/config.json");
    config.insert(config.find('{') + 1, "\n  \"quantization_config\": " + quantization + ",");
    std::ofstream(path(to) + "/config.json") << config;
  };
  uint32_t x = 4321;
  auto next = [&] { return x = x * 1664525u + 1013904223u, uint8_t(x >> 24); };
  std::vector<std::vector<uint8_t>> bytes;  // the rewritten tensors' data
  std::vector<std::vector<float>> floats;

  // DeepSeek-V3: every projection's weight in FP8 with its block scales
  train_export("ds", src("configs/deepseek-v3-tiny.yaml"), "");
  const auto ds = tensors(path("ds_hf"));
  std::vector<SafetensorsInput> ds_q;
  std::map<std::string, std::vector<float>> ds_want;
  for (const auto& [name, t] : ds) {
    const auto& [shape, v] = t;
    if (shape.size() != 2 || !name.ends_with("_proj.weight")) {
      ds_q.push_back({name, DType::f32, shape, v.data()});
      continue;
    }
    const int64_t rows = shape[0], cols = shape[1], gr = (rows + 127) / 128, gc = (cols + 127) / 128;
    auto& codes = bytes.emplace_back(size_t(rows * cols));
    for (auto& c : codes)
      if (((c = next()) & 0x7f) == 0x7f) c = 0x3f;
    auto& scale = floats.emplace_back(size_t(gr * gc));
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = 0.001f * float(1 + i) + 1e-4f * float(next());
    auto& want = ds_want[name];
    for (int64_t i = 0; i < rows * cols; ++i)
      want.push_back(test::fp8_e4m3_by_bits(codes[size_t(i)]) * scale[size_t(i / cols / 128 * gc + i % cols / 128)]);
    ds_q.push_back({name, DType::f8_e4m3, shape, codes.data()});
    ds_q.push_back({name + "_scale_inv", DType::f32, {gr, gc}, scale.data()});
  }
  ASSERT_GT(ds_want.size(), 10u);
  const std::string fp8 =
      R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})";
  rewrite("ds_hf", "ds_fp8", ds_q, fp8);
  const CliRun imp = run("import " + path("ds_fp8") + " --out " + path("ds_imp"));
  ASSERT_EQ(imp.code, 0) << imp.out;
  ASSERT_EQ(run("export " + path("ds_imp") + " --format hf --out " + path("ds_back")).code, 0);
  for (const auto& [name, t] : tensors(path("ds_back"))) {
    const std::vector<float>& want = ds_want.count(name) ? ds_want.at(name) : ds.at(name).second;
    EXPECT_EQ(t.second, want) << name << (ds_want.count(name) ? " (FP8)" : "");
  }
  // a weight without its scales; a method import does not read
  std::vector<SafetensorsInput> no_scale;
  for (const auto& t : ds_q)
    if (t.name != "model.layers.1.self_attn.o_proj.weight_scale_inv") no_scale.push_back(t);
  rewrite("ds_hf", "ds_no_scale", no_scale, fp8);
  CliRun bad = run("import " + path("ds_no_scale") + " --out " + path("ds_bad"));
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(has(bad,
                  "tensor 'model.layers.1.self_attn.o_proj.weight' is F8_E4M3 without its block scales "
                  "'model.layers.1.self_attn.o_proj.weight_scale_inv'"))
      << bad.out;
  rewrite("ds_hf", "ds_awq", ds_q, R"({"quant_method": "awq", "bits": 4})");
  bad = run("import " + path("ds_awq") + " --out " + path("ds_bad"));
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(has(bad, "key 'quantization_config.quant_method' is awq")) << bad.out;
  EXPECT_FALSE(fs::exists(path("ds_bad")));

  // gpt-oss: the experts in MXFP4 (blocks [E, rows, cols / 32, 16] of gate|up interleaved and of down as they
  // multiply, scales [E, rows, cols / 32])
  train_export("oss", src("configs/moe-tiny.yaml"),
               "--set model.moe.first_dense=0 --set model.moe.router.bias=true --set model.moe.expert_bias=true "
               "--set model.moe.activation=clamped_swiglu --set model.moe.balance.z_loss=0 --set "
               "model.attention_sinks=true --set model.attention_bias=true --set model.o_bias=true --set "
               "model.sliding_window=16 --set model.layer_types=[sliding,full,sliding,full]");
  const auto oss = tensors(path("oss_hf"));
  std::vector<SafetensorsInput> oss_q;
  std::map<std::string, std::vector<float>> oss_want;
  const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (const auto& [name, t] : oss) {
    const auto& [shape, v] = t;
    if (!name.ends_with("mlp.experts.gate_up_proj") && !name.ends_with("mlp.experts.down_proj")) {
      oss_q.push_back({name, DType::f32, shape, v.data()});
      continue;
    }
    // theirs [E, K, R] (K = C for gate_up, I for down): the blocks hold [E, R, K], K in groups of 32
    const int64_t E = shape[0], K = shape[1], R = shape[2], G = K / 32;
    auto& blocks = bytes.emplace_back(size_t(E * R * G * 16));
    auto& scales = bytes.emplace_back(size_t(E * R * G));
    for (auto& b : blocks) b = next();
    for (auto& s : scales) s = uint8_t(120 + next() % 12);
    auto& want = oss_want[name];
    want.resize(v.size());
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t g = (e * R + r) * G + k / 32, i = k % 32;
          const uint8_t byte = blocks[size_t(g * 16 + i / 2)];
          want[size_t((e * K + k) * R + r)] =
              fp4[i % 2 ? byte >> 4 : byte & 15] * std::exp2(float(int(scales[size_t(g)]) - 127));
        }
    oss_q.push_back({name + "_blocks", DType::u8, {E, R, G, 16}, blocks.data()});
    oss_q.push_back({name + "_scales", DType::u8, {E, R, G}, scales.data()});
  }
  ASSERT_EQ(oss_want.size(), 8u);  // 4 layers, gate_up and down
  rewrite("oss_hf", "oss_mxfp4", oss_q,
          R"({"modules_to_not_convert": ["model.layers.*.self_attn", )"
          R"("model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], )"
          R"("quant_method": "mxfp4"})");
  const CliRun oimp = run("import " + path("oss_mxfp4") + " --out " + path("oss_imp"));
  ASSERT_EQ(oimp.code, 0) << oimp.out;
  ASSERT_EQ(run("export " + path("oss_imp") + " --format hf --out " + path("oss_back")).code, 0);
  for (const auto& [name, t] : tensors(path("oss_back"))) {
    const std::vector<float>& want = oss_want.count(name) ? oss_want.at(name) : oss.at(name).second;
    EXPECT_EQ(t.second, want) << name << (oss_want.count(name) ? " (MXFP4)" : "");
  }
  const std::string config = test::read_text(path("oss_back/config.json"));
  EXPECT_EQ(config.find("quantization_config"), std::string::npos) << "exported in f32, unquantized";
  EXPECT_NE(config.find("\"model_type\": \"gpt_oss\""), std::string::npos) << config;
}

// Muon's state resumes exactly: 6 steps saving every 3 against 3 steps
// resumed to 6 give the same losses bit for bit (the momentum in exp_avg,
// AdamW's second moment packed over its own elements); resharded onto
// another mesh it continues the run; the checkpoint under AdamW is refused,
// naming the index key.
TEST_F(Interop, MuonResumesExactlyAndOnlyAsMuon) {
  const std::string common = "train " + src("configs/llama-tiny.yaml") +
                             " --set optim.name=muon --set eval.batches=0 --set checkpoint.every=3 --set train.steps=6";
  auto losses = [](const std::string& metrics) {
    std::vector<std::string> out;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);)
      if (line.find("\"type\":\"train\"") != std::string::npos || line.find("\"type\": \"train\"") != std::string::npos)
        out.push_back(line.substr(line.find("\"loss\""), 30));
    return out;
  };
  ASSERT_EQ(run(common + " --set log.metrics=" + path("muon_a.jsonl") + " --set checkpoint.dir=" + path("muon_a")).code,
            0);
  const CliRun b = run(common + " --set log.metrics=" + path("muon_b.jsonl") +
                       " --set checkpoint.dir=" + path("muon_b") + " --resume " + path("muon_a/step_00000003"));
  ASSERT_EQ(b.code, 0) << b.out;
  const auto all = losses(path("muon_a.jsonl")), resumed = losses(path("muon_b.jsonl"));
  ASSERT_EQ(all.size(), 6u);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], all[3 + i]) << "step " << 4 + i;
  // resharded onto 4 ranks (data 2 with ZeRO 1 x pipeline 2: other shards of the momentum and of AdamW's
  // packed second moment): the uninterrupted run's losses, to the summation order's rounding
  const CliRun four = test::run_cli(
      "OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none "
      "-np 4 " +
          std::string(TRIDENT_BINARY),
      common + " --set log.metrics=" + path("muon_d.jsonl") + " --set checkpoint.dir=" + path("muon_d") +
          " --set parallel.data=2 --set parallel.zero=1 --set parallel.pipeline=2 --resume " +
          path("muon_a/step_00000003"));
  ASSERT_EQ(four.code, 0) << four.out;
  EXPECT_TRUE(has(four, "resharding")) << four.out;
  const auto value = [](const std::string& field) { return std::stod(field.substr(field.find(':') + 1)); };
  const auto resharded = losses(path("muon_d.jsonl"));
  ASSERT_EQ(resharded.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(value(resharded[i]), value(all[3 + i]), 1e-5 * value(all[3 + i])) << "step " << 4 + i;
  const CliRun adamw =
      run("train " + src("configs/llama-tiny.yaml") + " --set eval.batches=0 --set train.steps=6 " +
          "--set log.metrics= --set checkpoint.dir=" + path("muon_c") + " --resume " + path("muon_a/step_00000003"));
  EXPECT_EQ(adamw.code, 2) << adamw.out;
  EXPECT_TRUE(has(adamw,
                  "key 'optimizer.type': the checkpoint's optimizer state is muon's (3 steps), the recipe's "
                  "optim.name is adamw"))
      << adamw.out;
}

TEST_F(Interop, PrepareTrainSample) {
  {  // a text of the user's: paragraphs of one sentence
    std::ofstream t(path("story.txt"));
    for (int p = 0; p < 200; ++p) {
      for (int l = 0; l < 5; ++l) t << "the quick brown fox jumps over the lazy dog.\n";
      t << "\n";
    }
  }
  CliRun r = run("prepare --input " + path("story.txt") + " --out " + path("story") + " --tokenizer char");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("train " + src("configs/demo.yaml") + " --set data.synthetic=null --set data.train=" + path("story_train") +
          " --set data.valid=" + path("story_valid") +
          " --set train.steps=150 --set eval.batches=2 --set log.metrics= --set checkpoint.dir=" + path("text_ck"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("sample " + path("text_ck") + " --prompt 'the quick' --tokens 40 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "the quick brown fox jumps over the lazy dog.")) << r.out;
  // top-k 1 is greedy; the same seed gives the same text, another seed (at temperature 1) may not
  const CliRun k1 = run("sample " + path("text_ck") + " --prompt 'the quick' --tokens 40 --top-k 1 --seed 5");
  EXPECT_EQ(k1.out, r.out);
  const CliRun s1 = run("sample " + path("text_ck") + " --prompt 'the' --tokens 30 --temperature 1.5 --seed 1");
  const CliRun s2 = run("sample " + path("text_ck") + " --prompt 'the' --tokens 30 --temperature 1.5 --seed 1");
  EXPECT_EQ(s1.code, 0);
  EXPECT_EQ(s1.out, s2.out);
  // the data prepared again with another tokenizer (a corpus of other
  // characters): the checkpoint samples with the tokenizer it recorded, and
  // will not be continued on the new data
  {
    std::ofstream t(path("story.txt"));
    for (int p = 0; p < 50; ++p) t << "ZYXW VUTS RQPO.\n\n";
  }
  ASSERT_EQ(run("prepare --input " + path("story.txt") + " --out " + path("story") + " --tokenizer char --force").code,
            0);
  EXPECT_EQ(run("sample " + path("text_ck") + " --prompt 'the quick' --tokens 40 --temperature 0").out, k1.out);
  const CliRun again =
      run("train " + src("configs/demo.yaml") + " --set data.synthetic=null --set data.train=" + path("story_train") +
          " --set data.valid=" + path("story_valid") +
          " --set train.steps=151 --set eval.batches=2 --set log.metrics= --set checkpoint.dir=" + path("text_ck") +
          " --resume");
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_TRUE(has(again, "key 'tokenizer': the checkpoint was trained on data made by a char tokenizer (CRC-32C"))
      << again.out;
  // refusals
  r = run("sample " + path("text_ck") + " --prompt 'the QUICK' --tokens 5");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r, "character 'Q' (U+0051) at byte offset 4 is not in the tokenizer's vocabulary")) << r.out;
  r = run("sample " + path("ck") + " --prompt 'hello'");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r, "synthetic data, which has no tokenizer")) << r.out;
  r = run("sample " + path("ck") + " --prompt-ids 1,2,99");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r, "token 99 at position 2 is outside the vocabulary [0, 32)")) << r.out;
  r = run("sample " + path("ck") + " --prompt-ids 1,2,3 --tokens 5 --temperature -1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(run("sample " + path("ck") + " --prompt-ids 1 --bogus 3").code, 2);
}

}  // namespace trident
