// trident report (see report.hpp).
#include "launch/tools/report.hpp"

#include <cairo.h>
#include <fmt/format.h>
#include <librsvg/rsvg.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::launch {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
  bool dashed = false;
};

// A line chart (series of points) or a bar chart (groups x stacks).
struct Chart {
  std::string id, title, x_label, y_label;
  std::vector<Series> series;
  std::vector<std::string> groups, stacks;  // bars: one group per label, stacks within (stacked or side by side)
  std::vector<std::vector<double>> bars;    // [group][stack]
  bool stacked = false;
  bool is_bars() const { return !groups.empty(); }
};

struct Run {
  std::string name, source;
  std::vector<Json> train, eval;
  Json start;
  std::vector<std::pair<int64_t, std::string>> checkpoints;  // step, mesh
  std::vector<std::pair<std::string, double>> trace;         // span name -> seconds, largest first
};

struct Sweep {
  std::string name;
  std::vector<std::tuple<std::string, double, double>> meshes;  // label, measured, predicted tokens/s
};

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo > 0 ? hi - lo : std::max(std::abs(hi), 1.0);
  const double raw = span / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) out.push_back(t);
  return out;
}

std::string number(double v) {
  const double a = std::abs(v);
  if (a < 1e-12) return "0";
  if (a >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.4g}", v);
}

constexpr int kW = 760, kH = 360, kLeft = 70, kRight = 170, kTop = 40, kBottom = 50;

std::string svg_line_chart(const Chart& c) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : c.series)
    for (auto [x, y] : s.points)
      if (std::isfinite(y)) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  const double pad = (y1 - y0) * 0.05 + (y1 == y0 ? std::max(std::abs(y0) * 0.05, 1e-3) : 0);
  y0 -= pad, y1 += pad;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\" id=\"chart-{}\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
      kW, kH, kW, kH, c.id, kLeft, esc(c.title));
  for (double t : ticks(y0, y1))
    s += fmt::format(
        "<line x1=\"{}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
        "y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, kLeft + pw, Y(t), Y(t), kLeft - 6, Y(t) + 4, number(t));
  for (double t : ticks(x0, x1))
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(t), kTop + ph + 16, number(t));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", kLeft, kTop,
                   pw, ph);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2, kH - 10,
                   esc(c.x_label));
  s += fmt::format("<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   kTop + ph / 2, esc(c.y_label));
  for (size_t i = 0; i < c.series.size(); ++i) {
    const auto& se = c.series[i];
    const char* color = kPalette[i % std::size(kPalette)];
    std::string pts;
    for (auto [x, y] : se.points)
      if (std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n", color,
                     se.dashed ? " stroke-dasharray=\"6 4\"" : "", pts);
    if (se.points.size() == 1)
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(se.points[0].first),
                       Y(se.points[0].second), color);
    const double ly = kTop + 14 + 18 * double(i);
    s += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"{}/>"
        "<text x=\"{}\" y=\"{:.1f}\">{}</text>\n",
        kW - kRight + 10, kW - kRight + 34, ly, ly, color, se.dashed ? " stroke-dasharray=\"6 4\"" : "",
        kW - kRight + 40, ly + 4, esc(se.name));
  }
  return s + "</svg>\n";
}

std::string svg_bar_chart(const Chart& c) {
  double top = 0;
  for (const auto& g : c.bars) {
    double sum = 0;
    for (double v : g) sum += v, top = std::max(top, v);
    if (c.stacked) top = std::max(top, sum);
  }
  if (top <= 0) top = 1;
  top *= 1.05;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto Y = [&](double y) { return kTop + (1 - y / top) * ph; };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\" id=\"chart-{}\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
      kW, kH, kW, kH, c.id, kLeft, esc(c.title));
  for (double t : ticks(0, top))
    s += fmt::format(
        "<line x1=\"{}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
        "y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, kLeft + pw, Y(t), Y(t), kLeft - 6, Y(t) + 4, number(t));
  const double slot = pw / double(c.groups.size()), width = slot * 0.7;
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double gx = kLeft + slot * double(g) + (slot - width) / 2;
    double base = 0;
    for (size_t k = 0; k < c.stacks.size(); ++k) {
      const double v = c.bars[g][k];
      const char* color = kPalette[k % std::size(kPalette)];
      if (c.stacked) {
        s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n", gx,
                         Y(base + v), width, Y(base) - Y(base + v), color);
        base += v;
      } else {
        const double w = width / double(c.stacks.size());
        s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
                         gx + w * double(k), Y(v), w * 0.95, Y(0) - Y(v), color);
      }
    }
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", gx + width / 2, kTop + ph + 16,
                     esc(c.groups[g]));
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", kLeft, kTop,
                   pw, ph);
  s += fmt::format("<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   kTop + ph / 2, esc(c.y_label));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2, kH - 10,
                   esc(c.x_label));
  for (size_t k = 0; k < c.stacks.size(); ++k) {
    const double ly = kTop + 14 + 18 * double(k);
    s += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"14\" height=\"10\" fill=\"{}\"/><text x=\"{}\" "
        "y=\"{:.1f}\">{}</text>\n",
        kW - kRight + 10, ly - 8, kPalette[k % std::size(kPalette)], kW - kRight + 30, ly + 1, esc(c.stacks[k]));
  }
  return s + "</svg>\n";
}

std::string svg(const Chart& c) { return c.is_bars() ? svg_bar_chart(c) : svg_line_chart(c); }

// The chart's data as the page embeds it (what the tests read back).
Json chart_json(const Chart& c) {
  Json j = {{"id", c.id}, {"title", c.title}, {"x", c.x_label}, {"y", c.y_label}};
  if (c.is_bars()) {
    j["groups"] = c.groups, j["stacks"] = c.stacks, j["values"] = c.bars, j["stacked"] = c.stacked;
    return j;
  }
  Json series = Json::array();
  for (const auto& s : c.series) {
    Json pts = Json::array();
    for (auto [x, y] : s.points) pts.push_back({x, y});
    series.push_back({{"name", s.name}, {"points", pts}});
  }
  j["series"] = series;
  return j;
}

void render_png(const std::string& svg_text, const std::string& path) {
  GError* err = nullptr;
  RsvgHandle* h = rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg_text.data()), svg_text.size(), &err);
  if (!h) throw Error(fmt::format("report: librsvg could not read a chart: {}", err ? err->message : "?"));
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, kW, kH);
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  const RsvgRectangle viewport{0, 0, double(kW), double(kH)};
  const bool ok = rsvg_handle_render_document(h, cr, &viewport, &err);
  const cairo_status_t written = ok ? cairo_surface_write_to_png(surface, path.c_str()) : CAIRO_STATUS_WRITE_ERROR;
  cairo_destroy(cr);
  cairo_surface_destroy(surface);
  g_object_unref(h);
  if (!ok) throw Error(fmt::format("report: librsvg could not render {}: {}", path, err ? err->message : "?"));
  if (written != CAIRO_STATUS_SUCCESS)
    throw Error(fmt::format("report: cannot write {}: {}", path, cairo_status_to_string(written)));
}

// The known fields the report draws have their documented types (a wrongly
// typed one is bad input, not a gap): numbers, or null where the run wrote a
// non-finite value; `bubble` a list of numbers, `peak_bytes` an object of them.
void check_known_fields(const Json& j, const std::string& type, const std::string& where) {
  auto numeric = [](const Json& v) { return v.is_number() || v.is_null(); };
  static const std::vector<std::string> train = {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "bubble_predicted"};
  static const std::vector<std::string> eval = {"step", "val_loss"};
  for (const auto& key : type == "train" ? train : eval)
    if (j.contains(key) && !numeric(j[key]))
      fail_input("report: {}: key '{}': expected a number, found {}", where, key, j[key].dump());
  if (type != "train") return;
  if (j.contains("bubble") && !(j["bubble"].is_array() && std::all_of(j["bubble"].begin(), j["bubble"].end(), numeric)))
    fail_input("report: {}: key 'bubble': expected a list of numbers, found {}", where, j["bubble"].dump());
  if (j.contains("peak_bytes") &&
      !(j["peak_bytes"].is_object() && std::all_of(j["peak_bytes"].begin(), j["peak_bytes"].end(), numeric)))
    fail_input("report: {}: key 'peak_bytes': expected an object of byte counts, found {}", where,
               j["peak_bytes"].dump());
}

std::vector<Json> read_json_lines(const std::string& path, Run& run) {
  std::ifstream in(path);
  if (!in) fail_input("report: {}: cannot open the metrics file", path);
  std::vector<Json> all;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j;
    try {
      j = Json::parse(line);
    } catch (const std::exception& e) {
      fail_input("report: {}:{}: expected a JSON record, found '{}'", path, line_no, line.substr(0, 60));
    }
    const std::string type =
        j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
    if (type == "train" && (!j.contains("step") || !j["step"].is_number()))
      fail_input("report: {}:{}: a train record without a numeric 'step'", path, line_no);
    if (type == "train" || type == "eval") check_known_fields(j, type, fmt::format("{}:{}", path, line_no));
    if (type == "train") {
      // a resumed run appends: the last record of a step wins
      while (!run.train.empty() && run.train.back()["step"].get<double>() >= j["step"].get<double>())
        run.train.pop_back();
      run.train.push_back(j);
    } else if (type == "eval") {
      run.eval.push_back(j);
    } else if (type == "start" && run.start.is_null()) {
      run.start = j;
    }
    all.push_back(j);
  }
  return all;
}

Run load_run(const std::string& arg) {
  Run run;
  fs::path p(arg);
  std::error_code ec;
  std::string metrics;
  if (fs::is_directory(p, ec)) {
    run.name = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
    metrics = (p / "metrics.jsonl").string();
    if (!fs::exists(metrics))
      fail_input("report: {}: a run directory needs metrics.jsonl (or name the metrics file itself)", arg);
    for (const auto& e : fs::directory_iterator(p, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step_", 0) != 0 || !fs::exists(e.path() / "index.json")) continue;
      try {
        std::ifstream in(e.path() / "index.json");
        const Json x = Json::parse(in);
        const auto& m = x.at("mesh");
        run.checkpoints.push_back(
            {x.at("step").get<int64_t>(),
             fmt::format("data {} x tensor {} x pipeline {}{}", m.at("data").get<int64_t>(),
                         m.at("tensor").get<int64_t>(), m.at("pipeline").get<int64_t>(),
                         m.value("context", 1) > 1 ? fmt::format(" x context {}", m.value("context", 1)) : "")});
      } catch (const std::exception& ex) {
        fail_input("report: {}: not a checkpoint index ({})", (e.path() / "index.json").string(), ex.what());
      }
    }
    std::sort(run.checkpoints.begin(), run.checkpoints.end());
    if (fs::exists(p / "trace.json")) {  // a Chrome trace: seconds by span name
      try {
        std::ifstream in(p / "trace.json");
        const Json t = Json::parse(in);
        std::map<std::string, double> by;
        for (const auto& ev : t.at("traceEvents"))
          if (ev.value("ph", "") == "X") by[ev.value("name", "?")] += ev.value("dur", 0.0) / 1e6;
        run.trace.assign(by.begin(), by.end());
        std::sort(run.trace.begin(), run.trace.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      } catch (const std::exception& ex) {
        fail_input("report: {}: not a Chrome trace ({})", (p / "trace.json").string(), ex.what());
      }
    }
  } else if (fs::is_regular_file(p, ec)) {
    run.name = p.stem().string();
    metrics = arg;
  } else {
    fail_input("report: {}: no such run (a metrics file, a run directory or a sweep directory)", arg);
  }
  run.source = metrics;
  read_json_lines(metrics, run);
  if (run.train.empty()) fail_input("report: {}: no training records (\"type\": \"train\")", metrics);
  return run;
}

Sweep load_sweep(const std::string& dir) {
  Sweep s;
  s.name = fs::path(dir).filename().string();
  const std::string path = (fs::path(dir) / "sweep.json").string();
  try {
    std::ifstream in(path);
    const Json j = Json::parse(in);
    for (const auto& m : j) {
      if (!m.at("valid").get<bool>()) continue;
      std::string label = fmt::format("{}x{}x{}", m.at("data").get<int64_t>(), m.at("tensor").get<int64_t>(),
                                      m.at("pipeline").get<int64_t>());
      if (m.value("context", 1) > 1) label += fmt::format("x{}", m.value("context", 1));
      s.meshes.push_back({label, m.at("measured").at("tokens_per_s").get<double>(),
                          m.at("predicted").at("tokens_per_s").get<double>()});
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    fail_input("report: {}: not a sweep result ({})", path, e.what());
  }
  return s;
}

double number_at(const Json& r, const char* key) {
  return r.contains(key) && r[key].is_number() ? r[key].get<double>() : NAN;
}

std::vector<Chart> make_charts(const std::vector<Run>& runs, const std::vector<Sweep>& sweeps) {
  std::vector<Chart> out;
  if (!runs.empty()) {
    Chart loss{"loss", "Loss", "step", "nats per token", {}, {}, {}, {}, false};
    Chart speed{"tokens_per_s", "Throughput", "step", "tokens/s", {}, {}, {}, {}, false};
    Chart mfu{"mfu", "Model FLOPs utilisation", "step", "MFU (fraction of peak)", {}, {}, {}, {}, false};
    Chart bubble{"bubble", "Pipeline bubble: measured vs simulated", "step", "fraction of the schedule", {}, {}, {}, {},
                 false};
    Chart memory{"memory", "Peak memory by category (rank 0)", "run", "bytes", {}, {}, {}, {}, true};
    memory.stacks = {"params", "grads", "optimizer", "activations", "comm", "other"};
    Chart load{"expert_load",
               "MoE expert load: the most-loaded expert against the mean (worst layer)",
               "step",
               "max / mean tokens per expert",
               {},
               {},
               {},
               {},
               false};
    bool piped = false, moe = false;
    for (const Run& r : runs) {
      Series lm{r.name, {}, false};
      for (const Json& x : r.train)
        if (x.contains("expert_load") && x["expert_load"].is_array() && !x["expert_load"].empty()) {
          double worst = 0;
          for (const auto& layer : x["expert_load"]) worst = std::max(worst, number_at(layer, "imbalance"));
          lm.points.push_back({x["step"].get<double>(), worst});
        }
      moe |= !lm.points.empty();
      load.series.push_back(lm);
      Series l{r.name + " train", {}, false}, v{r.name + " valid", {}, true}, t{r.name, {}, false},
          m{r.name, {}, false};
      Series bm{r.name + " measured", {}, false}, bp{r.name + " simulated", {}, true};
      for (const Json& x : r.train) {
        const double step = x["step"].get<double>();
        l.points.push_back({step, number_at(x, "loss")});
        t.points.push_back({step, number_at(x, "tokens_per_s")});
        m.points.push_back({step, number_at(x, "mfu")});
        if (x.contains("bubble") && x["bubble"].is_array() && !x["bubble"].empty()) {
          double sum = 0;
          for (const auto& b : x["bubble"]) sum += b.is_number() ? b.get<double>() : 0;
          bm.points.push_back({step, sum / double(x["bubble"].size())});
          bp.points.push_back({step, number_at(x, "bubble_predicted")});
          piped |= x["bubble"].size() > 1;
        }
      }
      for (const Json& x : r.eval) v.points.push_back({number_at(x, "step"), number_at(x, "val_loss")});
      loss.series.push_back(l);
      if (!v.points.empty()) loss.series.push_back(v);
      speed.series.push_back(t), mfu.series.push_back(m);
      bubble.series.push_back(bm), bubble.series.push_back(bp);
      memory.groups.push_back(r.name);
      std::vector<double> cats;
      const Json& last = r.train.back();
      for (const auto& c : memory.stacks)
        cats.push_back(last.contains("peak_bytes") && std::isfinite(number_at(last["peak_bytes"], c.c_str()))
                           ? number_at(last["peak_bytes"], c.c_str())
                           : 0);
      memory.bars.push_back(cats);
    }
    out.push_back(loss), out.push_back(speed), out.push_back(mfu);
    if (piped) out.push_back(bubble);
    if (moe) out.push_back(load);
    out.push_back(memory);
  }
  for (const Sweep& s : sweeps) {
    Chart c{"sweep_" + s.name,
            "Sweep " + s.name + ": planner vs measured",
            "mesh (D x T x P [x C])",
            "tokens/s",
            {},
            {},
            {"measured", "predicted"},
            {},
            false};
    for (const auto& [label, measured, predicted] : s.meshes) {
      c.groups.push_back(label);
      c.bars.push_back({measured, predicted});
    }
    if (c.groups.empty()) fail_input("report: sweep {}: no valid mesh", s.name);
    out.push_back(c);
  }
  return out;
}

std::string html_page(const std::vector<Run>& runs, const std::vector<Sweep>& sweeps,
                      const std::vector<Chart>& charts) {
  std::string h =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Trident report</title>\n<style>body{font-family:"
      "sans-serif;margin:24px;max-width:820px}table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px "
      "solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}td:first-child{text-align:left}"
      "figure{margin:0 0 24px}</style></head><body>\n<h1>Trident report</h1>\n";
  if (!runs.empty()) {
    h += "<h2>Runs</h2>\n<table><tr><th>run</th><th>steps</th><th>last loss</th><th>best val loss</th><th>median "
         "tokens/s</th><th>median MFU</th><th>peak bytes</th><th>checkpoints</th></tr>\n";
    for (const Run& r : runs) {
      std::vector<double> tps, mfu;
      for (const Json& x : r.train) tps.push_back(number_at(x, "tokens_per_s")), mfu.push_back(number_at(x, "mfu"));
      auto median = [](std::vector<double> v) {
        v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
        if (v.empty()) return double(NAN);
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      double best = INFINITY;
      for (const Json& x : r.eval) best = std::min(best, number_at(x, "val_loss"));
      const Json& last = r.train.back();
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{:.4f}</td><td>{}</td><td>{:.0f}</td><td>{:.1f}%</td><td>{}</td>"
          "<td>{}</td></tr>\n",
          esc(r.name), last["step"].get<int64_t>(), number_at(last, "loss"),
          std::isfinite(best) ? fmt::format("{:.4f}", best) : "-", median(tps), 100 * median(mfu),
          last.contains("peak_bytes") ? number(number_at(last["peak_bytes"], "total")) : "-",
          r.checkpoints.empty() ? std::string("-") : fmt::format("{}", r.checkpoints.size()));
    }
    h += "</table>\n";
  }
  for (const Chart& c : charts)
    h += fmt::format("<figure>\n{}<figcaption><a href=\"{}.png\">{}.png</a></figcaption></figure>\n", svg(c), c.id,
                     c.id);
  for (const Run& r : runs) {
    if (!r.checkpoints.empty()) {
      h += fmt::format("<h2>Checkpoints of {}</h2>\n<table><tr><th>step</th><th>mesh</th></tr>\n", esc(r.name));
      for (const auto& [step, mesh] : r.checkpoints)
        h += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", step, esc(mesh));
      h += "</table>\n";
    }
    if (!r.trace.empty()) {
      h += fmt::format("<h2>Trace of {}: seconds by span</h2>\n<table><tr><th>span</th><th>s</th></tr>\n", esc(r.name));
      for (size_t i = 0; i < std::min<size_t>(r.trace.size(), 12); ++i)
        h += fmt::format("<tr><td>{}</td><td>{:.4f}</td></tr>\n", esc(r.trace[i].first), r.trace[i].second);
      h += "</table>\n";
    }
  }
  // the data behind every chart, for scripts and tests
  Json data = {{"runs", Json::array()}, {"sweeps", Json::array()}, {"charts", Json::array()}};
  for (const Run& r : runs) {
    Json cks = Json::array();
    for (const auto& [step, mesh] : r.checkpoints) cks.push_back({{"step", step}, {"mesh", mesh}});
    data["runs"].push_back({{"name", r.name}, {"metrics", r.source}, {"steps", r.train.size()}, {"checkpoints", cks}});
  }
  for (const Sweep& s : sweeps) data["sweeps"].push_back({{"name", s.name}, {"meshes", s.meshes.size()}});
  for (const Chart& c : charts) data["charts"].push_back(chart_json(c));
  std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (size_t at = text.find("</"); at != std::string::npos; at = text.find("</", at + 2)) text.replace(at, 2, "<\\/");
  h += "<script type=\"application/json\" id=\"trident-report-data\">" + text + "</script>\n</body></html>\n";
  return h;
}

}  // namespace

std::vector<std::string> write_report(const ReportOptions& o) {
  if (o.runs.empty())
    fail_input("report: name at least one run (a metrics file, a run directory or a sweep directory)");
  std::vector<Run> runs;
  std::vector<Sweep> sweeps;
  for (const auto& arg : o.runs) {
    std::error_code ec;
    if (fs::is_directory(arg, ec) && fs::exists(fs::path(arg) / "sweep.json"))
      sweeps.push_back(load_sweep(arg));
    else
      runs.push_back(load_run(arg));
  }
  const std::vector<Chart> charts = make_charts(runs, sweeps);
  const fs::path out(o.out);
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::exists(out / "index.html")) && !fs::is_empty(out, ec))
    fail_input("report: --out {}: exists and is not a report (no index.html); choose another directory", o.out);
  // written whole under a temporary name, then renamed over any earlier report
  const fs::path tmp = out.string() + fmt::format(".tmp-{}", ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)  // an output place the user named that cannot be used: bad input (exit 2)
    fail_input("report: --out: expected a directory it can create, found '{}' ({} creating {})", o.out, ec.message(),
               tmp.string());
  std::vector<std::string> ids;
  try {
    for (const Chart& c : charts) {
      render_png(svg(c), (tmp / (c.id + ".png")).string());
      ids.push_back(c.id);
    }
    std::ofstream page(tmp / "index.html");
    page << html_page(runs, sweeps, charts);
    page.close();
    if (!page) throw Error(fmt::format("report: cannot write {} (an I/O failure)", (tmp / "index.html").string()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(out, ec);
  fs::rename(tmp, out, ec);
  if (ec) throw Error(fmt::format("report: cannot rename {} to {}: {}", tmp.string(), o.out, ec.message()));
  log::info("report: {}/index.html and {} chart(s) as PNG", o.out, ids.size());
  return ids;
}

}  // namespace trident::launch
