// The trainer: one loop that reads top to bottom.
//   recipe -> data sampler -> model -> optimizer ->
//   for each step { micro-batches: forward, backward (gradient accumulation);
//                   clip; LR; optimizer step; log; evaluate }
// Data parallelism (ZeRO 0/1) over MPI when launched with several ranks;
// tensor and pipeline parallelism are not implemented yet.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe.hpp"

namespace trident::launch {

struct TrainSummary {
  std::vector<double> losses;  // per step
  std::vector<double> grad_norms;
  std::vector<double> loss_scales;  // the scale each step ran at (1 unless fp16)
  std::vector<bool> skipped;        // fp16: steps skipped for inf/NaN gradients
  std::vector<double> step_seconds;  // per step, wall time
  double final_val_loss = 0;
  double entropy_floor = 0;    // synthetic source only, else 0
  double tokens_per_s = 0;     // mean over steps after the first
  double mfu = 0;
  double comm_wait_s = 0;      // total time blocked on data-parallel communication
  std::vector<float> step1_grads;  // reduced gradient of step 1, consolidated (capture_step1_grads)
  std::vector<std::vector<double>> bubbles;  // per step: measured bubble fraction of each pipeline stage
  double predicted_bubble = 0;               // the simulator's, unit costs
  int stopped_by_signal = 0;                 // SIGTERM / SIGUSR1 stopped the run early (after saving)
  int64_t peak_params = 0, peak_grads = 0, peak_optimizer = 0;  // this rank's allocator peaks
  int64_t peak_activations = 0, peak_comm = 0, peak_other = 0, peak_total = 0;
};

struct TrainOptions {
  bool quiet = false;                // no per-step stdout lines (tests)
  bool capture_step1_grads = false;  // fill TrainSummary::step1_grads (tests)
  bool single_process = false;       // ignore MPI even when initialised (reference runs in tests)
  std::string resume;                // "", "auto" or a checkpoint directory (trident train --resume)
};

TrainSummary train(const Recipe& recipe, const TrainOptions& opts = {});

// Stop signals (SIGTERM, SIGUSR1): call install_stop_signals() first thing in
// main, before MPI or any thread starts. During a run with a checkpoint.dir
// the ranks then stop after the current step, save and return
// (TrainSummary::stopped_by_signal); otherwise the signal terminates as usual.
void install_stop_signals();
void request_stop(int sig);  // the same, in-process (tests)

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
