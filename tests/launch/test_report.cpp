// trident report: the page's embedded data holds exactly the series of the
// runs' metrics files (two runs overlaid, validation, throughput, memory by
// category, checkpoints, the trace's spans) and of a sweep (planner against
// measured per mesh); every chart is a PNG of the right size; bad input is
// exit 2 and leaves no output directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include <fmt/format.h>

#include "tests/test_util.hpp"

namespace trident {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string src(const std::string& rel) { return std::string(TRIDENT_SOURCE_DIR) + "/" + rel; }

using test::Scratch;

test::CliRun trident(const std::string& args) { return test::run_cli(TRIDENT_BINARY, args); }

std::vector<Json> records(const std::string& path, const std::string& type) {
  std::vector<Json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) {
    const Json j = Json::parse(l);
    if (j.value("type", "") == type) out.push_back(j);
  }
  return out;
}

// The JSON the page embeds for scripts and tests.
Json page_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"trident-report-data\">";
  const size_t a = html.find(open);
  EXPECT_NE(a, std::string::npos);
  const size_t b = html.find("</script>", a);
  std::string text = html.substr(a + open.size(), b - a - open.size());
  for (size_t at = text.find("<\\/"); at != std::string::npos; at = text.find("<\\/", at)) text.replace(at, 3, "</");
  return Json::parse(text);
}

const Json& chart(const Json& data, const std::string& id) {
  for (const Json& c : data["charts"])
    if (c["id"] == id) return c;
  static const Json none;
  ADD_FAILURE() << "no chart " << id;
  return none;
}

const Json& series(const Json& c, const std::string& name) {
  for (const Json& s : c["series"])
    if (s["name"] == name) return s;
  static const Json none;
  ADD_FAILURE() << "no series " << name << " in " << c["id"];
  return none;
}

// width and height from a PNG's IHDR
std::pair<int, int> png_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char h[24] = {};
  in.read(reinterpret_cast<char*>(h), 24);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h + 1), 3), "PNG") << path;
  auto be = [&](int o) { return int(h[o]) << 24 | int(h[o + 1]) << 16 | int(h[o + 2]) << 8 | int(h[o + 3]); };
  return {be(16), be(20)};
}

}  // namespace

TEST(Report, ChartsHoldTheRunsSeries) {
  Scratch s("report");
  const std::string common =
      "--set train.steps=8 --set log.every=8 --set eval.every=4 --set eval.batches=2 --set train.threads=1";
  ASSERT_EQ(trident(fmt::format("train {} {} --set log.metrics={} --set checkpoint.dir={} --set checkpoint.every=4 "
                                "--set log.trace={}",
                                src("configs/demo.yaml"), common, s / "a/metrics.jsonl", s / "a", s / "a/trace.json"))
                .code,
            0);
  ASSERT_EQ(trident(fmt::format("train {} {} --set optim.lr=1e-3 --set log.metrics={}", src("configs/demo.yaml"),
                                common, s / "b.jsonl"))
                .code,
            0);
  // a sweep's output, as `trident sweep` writes it
  fs::create_directories(s / "sw");
  std::ofstream(s / "sw/sweep.json") << R"([
    {"data": 2, "tensor": 1, "pipeline": 1, "context": 1, "valid": true, "reason": null,
     "measured": {"tokens_per_s": 15000}, "predicted": {"tokens_per_s": 16000}},
    {"data": 1, "tensor": 1, "pipeline": 1, "context": 2, "valid": true, "reason": null,
     "measured": {"tokens_per_s": 9000}, "predicted": {"tokens_per_s": 9500}},
    {"data": 1, "tensor": 3, "pipeline": 1, "context": 1, "valid": false, "reason": "heads",
     "measured": {"tokens_per_s": 0}, "predicted": {"tokens_per_s": 0}}])";
  // a run with a name longer than a legend line: shown whole
  const std::string long_name =
      "lr-1e-3-data-1-tensor-1-pipeline-1-zero-0-fp32-demo-recipe-with-a-long-name-" + std::string(40, 'x');
  fs::copy_file(s / "b.jsonl", s / (long_name + ".jsonl"));
  const auto r = trident(fmt::format("report {} {} {} {} --out {}", s / "a", s / "b.jsonl", s / "sw",
                                     s / (long_name + ".jsonl"), s / "out"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream page(s / "out/index.html");
  const std::string html((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  const Json data = page_data(html);
  // every train record's loss, tokens/s and MFU, both runs; validation at steps 4 and 8
  const auto a = records(s / "a/metrics.jsonl", "train"), b = records(s / "b.jsonl", "train");
  ASSERT_EQ(a.size(), 8u);
  const Json& loss = chart(data, "loss");
  for (const auto& [name, recs] : {std::pair{std::string("a"), a}, std::pair{std::string("b"), b}}) {
    const Json& pts = series(loss, name + " train")["points"];
    ASSERT_EQ(pts.size(), recs.size()) << name;
    for (size_t i = 0; i < recs.size(); ++i) {
      EXPECT_EQ(pts[i][0].get<double>(), recs[i]["step"].get<double>());
      EXPECT_EQ(pts[i][1].get<double>(), recs[i]["loss"].get<double>()) << name << " step " << i + 1;
      EXPECT_EQ(series(chart(data, "tokens_per_s"), name)["points"][i][1].get<double>(),
                recs[i]["tokens_per_s"].get<double>());
      EXPECT_EQ(series(chart(data, "mfu"), name)["points"][i][1].get<double>(), recs[i]["mfu"].get<double>());
    }
  }
  const auto evals = records(s / "a/metrics.jsonl", "eval");
  ASSERT_EQ(evals.size(), 2u);
  const Json& valid = series(loss, "a valid")["points"];
  ASSERT_EQ(valid.size(), 2u);
  EXPECT_EQ(valid[1][1].get<double>(), evals[1]["val_loss"].get<double>());
  // memory: the last record's peak bytes, by category, stacked per run
  const Json& mem = chart(data, "memory");
  EXPECT_EQ(mem["groups"], Json({"a", "b", long_name}));
  EXPECT_EQ(mem["y"], "MiB");
  ASSERT_EQ(mem["stacks"][3], "activations");
  EXPECT_EQ(mem["values"][0][3].get<double>(), a.back()["peak_bytes"]["activations"].get<double>() / (1 << 20));
  EXPECT_EQ(mem["values"][1][2].get<double>(), b.back()["peak_bytes"]["optimizer"].get<double>() / (1 << 20));
  // one colour per run in every chart; no pipeline chart for runs without a pipeline
  for (const char* id : {"loss", "tokens_per_s", "mfu"}) {
    EXPECT_EQ(series(chart(data, id), id == std::string("loss") ? "a train" : "a")["color"],
              series(loss, "a valid")["color"])
        << id;
    EXPECT_NE(series(chart(data, id), id == std::string("loss") ? "b train" : "b")["color"],
              series(loss, "a train")["color"])
        << id;
  }
  for (const Json& c : data["charts"]) EXPECT_NE(c["id"], "bubble") << "no run has a pipeline";
  // the legend holds every name whole (wrapped over lines, never cut), and says what the line styles mean
  const auto svg_at = html.find("id=\"chart-loss\"");
  const std::string svg = html.substr(svg_at, html.find("</svg>", svg_at) - svg_at);
  std::string text;  // the legend's text, lines joined
  for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at + 1)) {
    const size_t open = svg.find('>', at) + 1;
    text += svg.substr(open, svg.find("</text>", open) - open);
  }
  EXPECT_NE(text.find(long_name), std::string::npos) << svg;
  EXPECT_NE(text.find("train"), std::string::npos) << svg;
  EXPECT_NE(text.find("valid"), std::string::npos) << svg;
  // the runs' table: recipe, model, mesh, schedule, ZeRO, precision, steps
  EXPECT_NE(html.find("<td>gpt2 4 x 128</td><td>1 x 1 x 1 x 1</td><td>none</td><td>0</td><td>fp32</td><td>8</td>"),
            std::string::npos)
      << html.substr(html.find("<h2>Runs"), 1500);
  // the sweep: valid meshes only, measured and predicted
  const Json& sw = chart(data, "sweep_sw");
  EXPECT_EQ(sw["groups"], Json({"2x1x1", "1x1x1x2"}));
  EXPECT_EQ(sw["values"][1], Json({9000.0, 9500.0}));
  // checkpoints and the trace of run a
  EXPECT_EQ(data["runs"][0]["checkpoints"].size(), 2u);
  EXPECT_NE(html.find("Trace of a: seconds by span"), std::string::npos);
  // one PNG per chart, drawn at the page's size
  for (const Json& c : data["charts"]) {
    const std::string png = s / ("out/" + c["id"].get<std::string>() + ".png");
    ASSERT_TRUE(fs::exists(png)) << png;
    const auto [w, h] = png_size(png);
    EXPECT_EQ(w, 760) << png;
    EXPECT_GE(h, 340 + 17) << png << ": the plot and at least one legend line";
  }
  // a second report replaces the first whole
  ASSERT_EQ(trident(fmt::format("report {} --out {}", s / "b.jsonl", s / "out")).code, 0);
  EXPECT_FALSE(fs::exists(s / "out/sweep_sw.png"));
}

// An MoE run's metrics: the balancing losses and each MoE layer's expert
// load, the same under full recomputation (whose reruns must not count
// twice), every token routed k times; the report charts the worst layer.
TEST(Report, MoeRunsRecordAndChartTheExpertLoad) {
  Scratch s("report_moe");
  const std::string common = "--set train.steps=4 --set log.every=4 --set eval.batches=0 --set train.threads=1";
  for (const char* r : {"none", "full"})
    ASSERT_EQ(trident(fmt::format("train {} {} --set train.recompute={} --set log.metrics={}",
                                  src("configs/moe-tiny.yaml"), common, r, s / (std::string(r) + ".jsonl")))
                  .code,
              0);
  const auto none = records(s / "none.jsonl", "train"), full = records(s / "full.jsonl", "train");
  ASSERT_EQ(none.size(), 4u);
  for (size_t i = 0; i < none.size(); ++i) {
    ASSERT_TRUE(none[i].contains("expert_load") && none[i].contains("aux_loss") && none[i].contains("z_loss"));
    EXPECT_GT(none[i]["aux_loss"].get<double>(), 0);
    ASSERT_EQ(none[i]["expert_load"].size(), 3u);  // layers 1 to 3 (layer 0 is dense)
    EXPECT_EQ(none[i]["expert_load"][0]["layer"], 1);
    for (const Json& layer : none[i]["expert_load"]) {
      EXPECT_EQ(layer["tokens"].get<double>(), 32.0 * 64 * 2);  // global_batch x seq_len x top_k
      EXPECT_LE(layer["min"].get<double>(), 32.0 * 64 * 2 / 8);
      EXPECT_GE(layer["max"].get<double>(), 32.0 * 64 * 2 / 8);
    }
    EXPECT_EQ(none[i]["expert_load"], full[i]["expert_load"]) << "step " << i + 1;
    EXPECT_EQ(none[i]["aux_loss"], full[i]["aux_loss"]) << "step " << i + 1;
  }
  // aux-loss-free balancing: the bias range moves by bias_rate a step, up for some experts, down for others
  ASSERT_EQ(
      trident(fmt::format("train {} {} --set model.moe.router.score=sigmoid --set model.moe.balance.bias_rate=0.05 "
                          "--set log.metrics={}",
                          src("configs/moe-tiny.yaml"), common, s / "bias.jsonl"))
          .code,
      0);
  const auto biased = records(s / "bias.jsonl", "train");
  ASSERT_EQ(biased.size(), 4u);
  for (size_t i = 0; i < biased.size(); ++i)
    for (const Json& layer : biased[i]["expert_load"]) {
      ASSERT_TRUE(layer.contains("bias_min") && layer.contains("bias_max")) << layer;
      EXPECT_LE(layer["bias_max"].get<double>(), 0.05 * double(i + 1) + 1e-6);
      EXPECT_GE(layer["bias_min"].get<double>(), -0.05 * double(i + 1) - 1e-6);
      // after the first step the experts above the mean went down, the others up (later steps can bring a
      // layer's biases together by chance: +, -, + for one expert and -, +, + for another)
      if (i == 0) EXPECT_LT(layer["bias_min"].get<double>(), layer["bias_max"].get<double>()) << "step 1";
    }
  EXPECT_FALSE(none[0]["expert_load"][0].contains("bias_min"));  // a softmax router has no bias
  ASSERT_EQ(trident(fmt::format("report {} --out {}", s / "none.jsonl", s / "out")).code, 0);
  std::ifstream page(s / "out/index.html");
  const Json data = page_data(std::string((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>()));
  const Json& pts = series(chart(data, "expert_load"), "none")["points"];
  ASSERT_EQ(pts.size(), 4u);
  const Json& last = none.back()["expert_load"];
  double worst = 0;  // the chart shows the worst layer
  for (const Json& layer : last) worst = std::max(worst, layer["imbalance"].get<double>());
  EXPECT_EQ(pts[3][1].get<double>(), worst);
  EXPECT_TRUE(fs::exists(s / "out/expert_load.png"));
}

TEST(Report, BadInputIsExitTwoAndLeavesNothing) {
  Scratch s("report_bad");
  auto refused = [&](const std::string& args, const std::string& message) {
    const auto r = trident("report " + args + " --out " + (s / "out"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(s / "out"));
    for (const auto& e : fs::directory_iterator(s.dir))
      EXPECT_EQ(e.path().filename().string().find("out.tmp"), std::string::npos) << e.path();
  };
  refused(s / "missing.jsonl", "no such run");
  std::ofstream(s / "bad.jsonl") << "{\"type\": \"train\", \"step\": 1, \"loss\": 3}\nnot json\n";
  refused(s / "bad.jsonl", "bad.jsonl:2: expected a JSON record");
  // a known field of the wrong type is bad input, not a gap in a chart (null is: a non-finite value)
  std::ofstream(s / "typed.jsonl") << "{\"type\": \"train\", \"step\": 1, \"loss\": null}\n"
                                   << "{\"type\": \"train\", \"step\": 2, \"loss\": \"abc\"}\n";
  refused(s / "typed.jsonl", "typed.jsonl:2: key 'loss': expected a number, found \"abc\"");
  std::ofstream(s / "typed2.jsonl") << "{\"type\": \"train\", \"step\": 1, \"loss\": 2, \"peak_bytes\": 5}\n";
  refused(s / "typed2.jsonl", "typed2.jsonl:1: key 'peak_bytes': expected an object of byte counts, found 5");
  std::ofstream(s / "typed3.jsonl") << "{\"type\": \"train\", \"step\": 1, \"loss\": 2}\n"
                                    << "{\"type\": \"eval\", \"step\": 1, \"val_loss\": [1]}\n";
  refused(s / "typed3.jsonl", "typed3.jsonl:2: key 'val_loss': expected a number, found [1]");
  std::ofstream(s / "empty.jsonl") << "{\"type\": \"start\"}\n";
  refused(s / "empty.jsonl", "no training records");
  fs::create_directories(s / "other");
  std::ofstream(s / "other/notes.txt") << "x";
  std::ofstream(s / "ok.jsonl") << "{\"type\": \"train\", \"step\": 1, \"loss\": 3}\n";
  const auto r = trident("report " + (s / "ok.jsonl") + " --out " + (s / "other"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("exists and is not a report"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(s / "other/notes.txt"));
}

}  // namespace trident
