// What a run tells its user, in one place: the start-up description, the
// per-step progress line, the JSON-lines metrics file (docs/metrics.md),
// the Chrome trace of chosen steps, the measured pipeline bubble, the CUDA
// kernel times, memory peaks, and the TrainSummary returned to the caller.
// The loop hands it what it measured (StepFacts); the report gathers what it
// needs from other ranks itself (traces to rank 0, bubbles over the pipeline
// group) and writes from rank 0 (metrics, trace).
// What is not here: any decision about training (the loop makes them).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.hpp"
#include "core/recipe/recipe.hpp"
#include "launch/train/tensorboard.hpp"
#include "launch/train/trainer.hpp"
#include "model/moe_stats.hpp"
#include "model/parallel_plan.hpp"
#include "parallel/expert_parallel.hpp"
#include "parallel/mesh.hpp"
#include "parallel/pipeline.hpp"

namespace trident::launch {

// What start-up knows, for the report.
struct RunFacts {
  int64_t params = 0;  // the whole model's (consolidated) parameters
  double flops_per_token = 0;
  double peak_flops = 0;       // per rank: the MFU reference
  std::string peak_source;     // where it came from
  std::string peak_cache_key;  // the cached CPU peak it came from ("" otherwise)
  double predicted_bubble = 0;
  double entropy_floor = 0, sequence_floor = 0;  // the synthetic source's; 0 otherwise
  int64_t eod = -1;                              // the datasets' end-of-document token (-1: none)
  int threads = 1;
};

// The MFU reference of this run (and its source, for the log):
// log.peak_flops, the GPU's dense peak, or this machine's GEMM peak for this
// many threads, measured once and cached (TRIDENT_CACHE_DIR, else
// XDG_CACHE_HOME/trident, else ~/.cache/trident: gemm_peak.json), so that
// start-up neither waits for a measurement nor takes one under load.
// cache_key: where a higher figure is cached later ("" when not cached).
std::pair<double, std::string> mfu_reference(const Recipe& rc, Device device, std::string* cache_key = nullptr);
// Records `flops` for `key` when it beats the cached figure.
void cache_gemm_peak(const std::string& key, double flops);
std::string peak_cache_file();  // "" when there is nowhere to cache

using model::MoeLoad;  // an MoE model's step (model/moe_stats.hpp)

// What the loop measured in one step (0-based `step`).
// The FP8 statistics of a step (train.fp8), per layer of the model: the
// largest |value| an FP8 GEMM quantised, the smallest quantisation scale,
// the values clamped at the format's largest (model::Fp8LayerStats; 0 where
// a layer has no FP8 GEMM).
struct Fp8StepStats {
  std::vector<double> amax, scale;
  std::vector<int64_t> saturated;
};

struct StepFacts {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, loss_scale = 1, next_loss_scale = 1;
  bool skipped = false;    // fp16: the loss scaler skipped the update (gradient overflow)
  bool nonfinite = false;  // train.nonfinite: skip dropped the update
  double comm_wait_s = 0, checkpoint_s = 0;
  std::vector<int64_t> samples_per_dataset;  // a blend: training samples drawn from each dataset so far
  std::optional<MoeLoad> moe;                // MoE models only
  std::vector<double> mtp_loss;              // model.mtp: each depth's mean loss (unweighted)
  std::vector<double> max_logit;             // QK-clip: each layer's largest attention logit of the step
  int64_t qk_clipped = -1;                   // QK-clip: the heads it scaled (-1: off)
  double qk_margin = 0;                      // QK-clip: the heads' smallest |S_h / threshold - 1|
  std::optional<Fp8StepStats> fp8;           // train.fp8: each layer's amax, scale, saturated values
};

// What end_step measured of a step, shared by its record, trace and line.
struct StepMeasures {
  double seconds = 0, tokens_per_s = 0, mfu = 0;
  std::vector<std::pair<std::string, double>> kernel_times;  // CUDA kernels (TRIDENT_KERNEL_TIMES=1)
  double kernel_s = 0;
  std::vector<double> bubble;  // per pipeline stage
  std::vector<double> busy;    // per world rank: the step less its waits for the others
  size_t slowest = 0;
  double median_busy = 0, straggler_excess = 0;
  double optimizer_s = 0;  // the optimizer step (Muon's exchanges and iterations included), the slowest rank's
  // bytes sent through each group kind this step (the busiest rank's; kinds that sent nothing left out)
  std::vector<std::pair<std::string, double>> comm_bytes;
};

class RunReport {
 public:
  enum class Span { grad_sync, optimizer };
  RunReport(const Recipe& rc, parallel::Mesh& mesh, const RunFacts& facts, bool quiet);
  ~RunReport();

  // Before the first step: peaks and the clock start here; the metrics
  // file gets its start record (appended to on resume).
  void start(bool resumed);
  // A restart by `trident supervise` (TRIDENT_RESTART set), resumed after
  // step `resumed`: once the run passes the last step the metrics file
  // holds from before the failure, the `restart` record and a line say what
  // the failure cost (docs/metrics.md).
  void restarted(int64_t resumed);
  void begin_step(int64_t step);  // aligns the ranks' clocks on traced steps
  double seconds() const;         // since begin_step
  void schedule_done(const parallel::PipelineExecutor& executor, double tensor_comm_s);
  void span(Span kind, double start, double end);
  // Expert parallelism's exchanges of a traced step (parallel/expert_parallel.hpp):
  // each dispatch or combine from issue to completion, and the part waited for.
  bool traced() const { return traced_; }
  void expert_exchanges(const std::vector<parallel::ExpertSpan>& spans);
  // Every step's expert exchanges (the metrics' expert_overlapped_s and
  // expert_waited_s) and, under dualpipev, its paired passes and their switches.
  void expert_traffic(const parallel::ExpertTraffic& t, int pairs, long switches);
  void end_step(const StepFacts& f);
  // per_dataset: the validation loss of each dataset of a blend (names from
  // data.valid), empty for one dataset.
  void evaluated(int64_t step, double val_loss, const std::vector<double>& per_dataset = {});
  void stopped(int64_t step, int signal);
  TrainSummary finish();

 private:
  struct Trace;
  MemStats memory() const;
  const Recipe& rc_;
  parallel::Mesh& mesh_;
  RunFacts facts_;
  bool quiet_;
  FILE* metrics_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // log.tensorboard, rank 0
  void emit(const nlohmann::ordered_json& record);  // to the metrics file and TensorBoard
  // end_step's jobs, in order
  StepMeasures measure(const StepFacts& f);  // every rank: the world gathers
  void raise_mfu_peak(int64_t step, double achieved);
  void trace_step(int64_t step, const StepMeasures& m);
  void keep(const StepFacts& f, const StepMeasures& m);  // into the summary
  nlohmann::ordered_json train_record(const StepFacts& f, const StepMeasures& m) const;
  std::string progress_line(const StepFacts& f, const StepMeasures& m, double peak) const;
  std::unique_ptr<Trace> trace_;
  TrainSummary out_;
  std::chrono::steady_clock::time_point run_start_, step_start_;
  bool traced_ = false;
  double sched_s_ = 0, idle_s_ = 0, tensor_comm_s_ = 0, optimizer_s_ = 0;
  std::vector<double> traffic_;  // each group kind's bytes sent up to the last step
  std::optional<parallel::ExpertTraffic> expert_;
  int pairs_ = 0;
  long switches_ = 0;
  double timed_seconds_ = 0, timed_steps_ = 0;
  int64_t stopped_after_ = 0;  // the step a stop signal ended the run after
  struct Restart {
    int attempt = 0;
    double failed_at = 0, teardown_s = 0, loop_at = 0, last_time = 0, redo_s = 0;
    std::string cause;
    int64_t resumed = 0, last_step = -1;  // -1: no step record from before the failure
  };
  std::optional<Restart> restart_;  // rank 0, until its record is written
  void restart_record(int64_t step, double step_s);
};

// One line each: model, vocabulary, tensor / pipeline / data layout, memory,
// MFU reference, device and data source. Called on every rank (log::info
// prints on rank 0).
struct StartFacts {
  const model::LocalDims* dims = nullptr;
  int64_t local_params = 0;
  std::vector<int64_t> chunk_layers;
  std::string zero_memory;  // parallel::describe_zero_memory
};
void log_run_start(const Recipe& rc, const parallel::Mesh& mesh, const RunFacts& facts, const StartFacts& start);

}  // namespace trident::launch
