// `trident report RUN [RUN...] --out DIR`: one self-contained HTML page
// (charts as inline SVG, the data behind every chart embedded as JSON) and
// a PNG per chart, from what runs leave behind (docs/metrics.md#report):
//   a metrics file (JSON lines), or a run directory holding metrics.jsonl,
//   checkpoint steps (step_*/index.json) and a Chrome trace (trace.json);
//   a `trident sweep` output directory (sweep.json).
// Charts: training and validation loss of every run overlaid, tokens/s and
// MFU, the measured pipeline bubble against the simulator's, peak memory by
// category as stacked bars, and for a sweep the planner's tokens/s against
// the measured per mesh. PNGs are rendered from the same SVG by librsvg.
// Bad input (a missing run, a line that is not JSON, a run without training
// records) is an InputError naming the file and line; the output directory
// is written under a temporary name and renamed when complete, so a failed
// report leaves nothing behind and an existing report is replaced whole.
#pragma once
#include <string>
#include <vector>

namespace trident::launch {

struct ReportOptions {
  std::vector<std::string> runs;
  std::string out = "report";
};

// Returns the chart ids written (each OUT/<id>.png and a section of OUT/index.html).
std::vector<std::string> write_report(const ReportOptions& o);

}  // namespace trident::launch
