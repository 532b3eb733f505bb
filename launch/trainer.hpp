// The trainer: one loop that reads top to bottom.
//   recipe -> data sampler -> model -> optimizer ->
//   for each step { micro-batches: forward, backward (gradient accumulation);
//                   clip; LR; optimizer step; log; evaluate }
// Single process for now; the parallel plan slots in between model and loop.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe.hpp"

namespace trident::launch {

struct TrainSummary {
  std::vector<double> losses;  // per step
  std::vector<double> grad_norms;
  double final_val_loss = 0;
  double entropy_floor = 0;    // synthetic source only, else 0
  double tokens_per_s = 0;     // mean over steps after the first
  double mfu = 0;
};

struct TrainOptions {
  bool quiet = false;  // no per-step stdout lines (tests)
};

TrainSummary train(const Recipe& recipe, const TrainOptions& opts = {});

// Measured fp32 GEMM throughput of this process (FLOP/s), the MFU reference
// on CPU when log.peak_flops is not set.
double measure_gemm_peak(double seconds = 0.3);

// Text -> indexed dataset, see docs/data.md. Returns 0 or throws.
struct PrepareOptions {
  std::string input, out, tokenizer = "byte";
  double valid_fraction = 0.1;
};
void prepare(const PrepareOptions& opts);

std::string format_duration(double seconds);

}  // namespace trident::launch
