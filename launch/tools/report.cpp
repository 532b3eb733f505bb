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
  std::string name;                               // the run's name: its legend entry
  std::vector<std::pair<double, double>> points;  // (x, y)
  bool dashed = false;                            // the chart's second kind of line (valid, simulated)
  size_t color = 0;                               // the run's colour, the same in every chart
};

// A line chart (series of points) or a bar chart (groups x stacks).
struct Chart {
  std::string id, title, x_label, y_label;
  std::string solid, dashed;  // what the two line styles mean ("train", "valid"); "" when one style
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

constexpr int kW = 760, kPlotH = 340, kLeft = 70, kRight = 20, kTop = 40, kBottom = 60;
constexpr double kCharW = 6.8, kLineH = 17;  // 12 px sans-serif: mean character width, line height

struct Legend {
  std::string svg;
  double height = 0;
};

struct LegendEntry {
  std::string text, color;
  bool dashed = false, box = false;  // a dashed line sample; a filled box (bars) instead of a line
};

// Legend entries below the plot, left to right, wrapping to the chart's
// width; an entry longer than a line is wrapped itself, never cut.
Legend legend(const std::vector<LegendEntry>& entries, double y0) {
  Legend out;
  const double x_start = kLeft, x_end = kW - kRight, sample = 28;
  const size_t max_chars = size_t((x_end - x_start - sample) / kCharW);
  double x = x_start, y = y0;
  for (const auto& e : entries) {
    std::vector<std::string> lines;
    for (size_t at = 0; at < e.text.size(); at += max_chars) lines.push_back(e.text.substr(at, max_chars));
    if (lines.empty()) lines.push_back("");
    size_t widest = 0;
    for (const auto& l : lines) widest = std::max(widest, l.size());
    const double w = sample + double(widest) * kCharW + 18;
    if (x > x_start && x + w > x_end) x = x_start, y += kLineH;
    if (e.box)
      out.svg +=
          fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"10\" fill=\"{}\"/>", x, y - 9, e.color);
    else
      out.svg += fmt::format(
          "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"{}/>", x,
          x + 22, y - 4, y - 4, e.color, e.dashed ? " stroke-dasharray=\"6 4\"" : "");
    for (size_t i = 0; i < lines.size(); ++i)
      out.svg +=
          fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>", x + sample, y + kLineH * double(i), esc(lines[i]));
    out.svg += "\n";
    y += kLineH * double(lines.size() - 1);
    x = lines.size() > 1 ? x_end : x + w;  // after a wrapped entry, a new line
  }
  out.height = entries.empty() ? 0 : y - y0 + kLineH;
  return out;
}

// The svg element and title of a chart of `height` pixels.
std::string svg_head(const Chart& c, double height) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{:.0f}\" viewBox=\"0 0 {} {:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"12\" id=\"chart-{}\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
      kW, height, kW, height, c.id, kLeft, esc(c.title));
}

const char* run_color(size_t i) { return kPalette[i % std::size(kPalette)]; }

std::string svg_line_chart(const Chart& c) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : c.series)
    for (auto [x, y] : s.points)
      if (std::isfinite(y)) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  const double pad = (y1 - y0) * 0.05 + (y1 == y0 ? std::max(std::abs(y0) * 0.05, 1e-3) : 0);
  y0 -= pad, y1 += pad;
  const double pw = kW - kLeft - kRight, ph = kPlotH - kTop - kBottom;
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  // the legend: each run once, in its colour; then what the two line styles mean
  std::vector<LegendEntry> entries;
  for (const auto& se : c.series)
    if (std::none_of(entries.begin(), entries.end(), [&](const LegendEntry& e) { return e.text == se.name; }))
      entries.push_back({se.name, run_color(se.color)});
  if (!c.dashed.empty()) entries.push_back({c.solid, "#555"}), entries.push_back({c.dashed, "#555", true});
  const Legend key = legend(entries, kPlotH + 8);
  std::string s = svg_head(c, kPlotH + key.height + 8);
  for (double t : ticks(y0, y1))
    s += fmt::format(
        "<line x1=\"{}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
        "y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, kLeft + pw, Y(t), Y(t), kLeft - 6, Y(t) + 4, number(t));
  for (double t : ticks(x0, x1))
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(t), kTop + ph + 16, number(t));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", kLeft, kTop,
                   pw, ph);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2, kTop + ph + 34,
                   esc(c.x_label));
  s += fmt::format("<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   kTop + ph / 2, esc(c.y_label));
  for (const auto& se : c.series) {
    const char* color = run_color(se.color);
    std::string pts;
    for (auto [x, y] : se.points)
      if (std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n", color,
                     se.dashed ? " stroke-dasharray=\"6 4\"" : "", pts);
    if (se.points.size() == 1)
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(se.points[0].first),
                       Y(se.points[0].second), color);
  }
  return s + key.svg + "</svg>\n";
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
  const double pw = kW - kLeft - kRight, ph = kPlotH - kTop - kBottom;
  auto Y = [&](double y) { return kTop + (1 - y / top) * ph; };
  std::vector<LegendEntry> entries;
  for (size_t k = 0; k < c.stacks.size(); ++k) entries.push_back({c.stacks[k], run_color(k), false, true});
  const Legend key = legend(entries, kPlotH + 8);
  std::string s = svg_head(c, kPlotH + key.height + 8);
  for (double t : ticks(0, top))
    s += fmt::format(
        "<line x1=\"{}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
        "y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, kLeft + pw, Y(t), Y(t), kLeft - 6, Y(t) + 4, number(t));
  const double slot = pw / double(c.groups.size()), width = slot * 0.7;
  const size_t label_chars = std::max<size_t>(4, size_t(slot / kCharW));
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double gx = kLeft + slot * double(g) + (slot - width) / 2;
    double base = 0;
    for (size_t k = 0; k < c.stacks.size(); ++k) {
      const double v = c.bars[g][k];
      const char* color = run_color(k);
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
    // the group's label under its bars, wrapped to its slot (two lines at most: the full name is in the table)
    const std::string& label = c.groups[g];
    for (size_t line = 0, at = 0; at < label.size() && line < 2; ++line, at += label_chars) {
      std::string part = label.substr(at, label_chars);
      if (line == 1 && at + label_chars < label.size()) part = part.substr(0, part.size() - 1) + "~";
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", gx + width / 2,
                       kTop + ph + 16 + 13 * double(line), esc(part));
    }
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", kLeft, kTop,
                   pw, ph);
  s += fmt::format("<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   kTop + ph / 2, esc(c.y_label));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2, kTop + ph + 44,
                   esc(c.x_label));
  return s + key.svg + "</svg>\n";
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
    // "a train", "a valid": the run and, where the chart has two kinds of line, which
    const std::string kind = c.dashed.empty() ? "" : " " + (s.dashed ? c.dashed : c.solid);
    series.push_back({{"name", s.name + kind}, {"run", s.name}, {"color", run_color(s.color)}, {"points", pts}});
  }
  j["series"] = series;
  return j;
}

void render_png(const std::string& svg_text, const std::string& path) {
  GError* err = nullptr;
  RsvgHandle* h = rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg_text.data()), svg_text.size(), &err);
  if (!h) throw Error(fmt::format("report: librsvg could not read a chart: {}", err ? err->message : "?"));
  gdouble width = kW, height = kPlotH;  // the chart's own size (its legend's height varies)
  if (!rsvg_handle_get_intrinsic_size_in_pixels(h, &width, &height)) width = kW, height = kPlotH;
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, int(width), int(height));
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  const RsvgRectangle viewport{0, 0, width, height};
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
    auto line_chart = [](const char* id, const char* title, const char* y) {
      Chart c;
      c.id = id, c.title = title, c.x_label = "step", c.y_label = y;
      return c;
    };
    Chart loss = line_chart("loss", "Loss", "nats per token");
    Chart speed = line_chart("tokens_per_s", "Throughput", "tokens/s");
    Chart mfu = line_chart("mfu", "Model FLOPs utilisation", "MFU (fraction of peak)");
    Chart bubble = line_chart("bubble", "Pipeline bubble: measured vs simulated (runs with a pipeline)",
                              "fraction of the schedule");
    Chart load = line_chart("expert_load", "MoE expert load: the most-loaded expert over the mean (worst layer)",
                            "max / mean tokens per expert");
    Chart memory;
    memory.id = "memory", memory.title = "Peak memory by category (rank 0)", memory.x_label = "run";
    memory.y_label = "MiB", memory.stacked = true;
    memory.stacks = {"params", "grads", "optimizer", "activations", "comm", "other"};
    bubble.solid = "measured", bubble.dashed = "simulated";
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      Series lm{r.name, {}, false, i};
      for (const Json& x : r.train)
        if (x.contains("expert_load") && x["expert_load"].is_array() && !x["expert_load"].empty()) {
          double worst = 0;
          for (const auto& layer : x["expert_load"]) worst = std::max(worst, number_at(layer, "imbalance"));
          lm.points.push_back({x["step"].get<double>(), worst});
        }
      if (!lm.points.empty()) load.series.push_back(lm);  // MoE runs only
      Series l{r.name, {}, false, i}, v{r.name, {}, true, i}, t{r.name, {}, false, i}, m{r.name, {}, false, i};
      Series bm{r.name, {}, false, i}, bp{r.name, {}, true, i};
      bool piped = false;
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
      if (!v.points.empty()) loss.series.push_back(v), loss.solid = "train", loss.dashed = "valid";
      speed.series.push_back(t), mfu.series.push_back(m);
      if (piped) bubble.series.push_back(bm), bubble.series.push_back(bp);  // runs with a pipeline only
      memory.groups.push_back(r.name);
      std::vector<double> cats;
      const Json& last = r.train.back();
      for (const auto& c : memory.stacks)
        cats.push_back(last.contains("peak_bytes") && std::isfinite(number_at(last["peak_bytes"], c.c_str()))
                           ? number_at(last["peak_bytes"], c.c_str()) / (1 << 20)
                           : 0);
      memory.bars.push_back(cats);
    }
    out.push_back(loss), out.push_back(speed), out.push_back(mfu);
    if (!bubble.series.empty()) out.push_back(bubble);
    if (!load.series.empty()) out.push_back(load);
    out.push_back(memory);
  }
  for (const Sweep& s : sweeps) {
    Chart c;
    c.id = "sweep_" + s.name, c.title = "Sweep " + s.name + ": planner vs measured";
    c.x_label = "mesh (D x T x P [x C])", c.y_label = "tokens/s", c.stacks = {"measured", "predicted"};
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
      "sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px "
      "solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}td:first-child{text-align:left}"
      "figure{margin:0 0 24px}</style></head><body>\n<h1>Trident report</h1>\n";
  if (!runs.empty()) {
    // one row per run: what it was (from its start record) and how it ended, in the run's chart colour
    h += "<h2>Runs</h2>\n<table><tr><th>run</th><th>recipe</th><th>model</th><th>mesh (D x T x P x C, expert)</th>"
         "<th>schedule</th><th>ZeRO</th><th>precision</th><th>steps</th><th>last loss</th><th>best val loss</th>"
         "<th>median tokens/s</th><th>median MFU</th><th>peak MiB</th><th>checkpoints</th></tr>\n";
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
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
      const Json& st = r.start;
      auto text = [&](const char* key) -> std::string {  // a start field, "-" in a file written before it existed
        if (!st.is_object() || !st.contains(key)) return "-";
        return st[key].is_string() ? st[key].get<std::string>() : st[key].dump();
      };
      std::string mesh = "-";
      if (st.is_object() && st.contains("mesh") && st["mesh"].is_object()) {
        const Json& m = st["mesh"];
        mesh = fmt::format("{} x {} x {} x {}", m.value("data", 0), m.value("tensor", 0), m.value("pipeline", 0),
                           m.value("context", 0));
        if (m.value("expert", 1) > 1) mesh += fmt::format(", expert {}", m.value("expert", 1));
      }
      std::string schedule = text("schedule");
      if (schedule != "-" && schedule != "none" && st.value("virtual_stages", 1) > 1)
        schedule += fmt::format(" (v {})", st.value("virtual_stages", 1));
      const double steps =
          st.is_object() && st.contains("steps") && st["steps"].is_number() ? st["steps"].get<double>() : NAN;
      h += fmt::format(
          "<tr><td><span style=\"color:{}\">&#9632;</span> {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td><td>{}{}</td><td>{:.4f}</td><td>{}</td><td>{:.0f}</td><td>{:.1f}%</td><td>{}</td>"
          "<td>{}</td></tr>\n",
          run_color(i), esc(r.name), esc(text("recipe")), esc(text("model")), esc(mesh), esc(schedule),
          esc(text("zero")), esc(text("precision")), last["step"].get<int64_t>(),
          std::isfinite(steps) && steps != last["step"].get<double>() ? fmt::format(" of {:.0f}", steps) : "",
          number_at(last, "loss"), std::isfinite(best) ? fmt::format("{:.4f}", best) : "-", median(tps),
          100 * median(mfu),
          last.contains("peak_bytes") && std::isfinite(number_at(last["peak_bytes"], "total"))
              ? fmt::format("{:.1f}", number_at(last["peak_bytes"], "total") / (1 << 20))
              : "-",
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
