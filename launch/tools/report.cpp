// trident report (see report.hpp).
#include "launch/tools/report.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "launch/tools/report_charts.hpp"

namespace trident::launch {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

using report::Chart;
using report::chart_json;
using report::esc;
using report::render_png;
using report::run_color;
using report::Series;
using report::svg;

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
