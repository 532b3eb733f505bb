// The report's charts (see report_charts.hpp).
#include "launch/tools/report_charts.hpp"

#include <cairo.h>
#include <fmt/format.h>
#include <librsvg/rsvg.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace trident::launch::report {

using Json = nlohmann::ordered_json;

namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

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

}  // namespace

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

const char* run_color(size_t i) { return kPalette[i % std::size(kPalette)]; }

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

}  // namespace trident::launch::report
