// The report's charts (trident report, report.hpp): line and bar charts as
// SVG, with the legend under the plot, each run in one colour; their data as
// JSON; PNGs rendered from the SVG by librsvg on cairo.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trident::launch::report {

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

std::string esc(const std::string& s);  // text for HTML and SVG
const char* run_color(size_t i);        // run i's colour, the same in every chart and the table
std::string svg(const Chart& c);
nlohmann::ordered_json chart_json(const Chart& c);  // the chart's data, as the page embeds it
void render_png(const std::string& svg_text, const std::string& path);

}  // namespace trident::launch::report
