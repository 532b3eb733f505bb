// The run's log lines, metrics file, trace and summary (see run_report.hpp).
#include "launch/train/run_report.hpp"

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"
#include "launch/train/stop_signals.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::string mib(int64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); }

using Json = nlohmann::ordered_json;

// 70.6 MiB, 12.0 GiB
std::string human_bytes(double b) {
  return b < double(1 << 30) ? fmt::format("{:.1f} MiB", b / double(1 << 20))
                             : fmt::format("{:.1f} GiB", b / double(1 << 30));
}

Json peak_bytes_json(const MemStats& s) {
  Json out = Json::object();
  for (int i = 0; i < kMemCategories; ++i) out[mem_category_name(MemCategory(i))] = s.peak[size_t(i)];
  out["total"] = s.total_peak;
  return out;
}

// x with `digits` decimals (metrics stay readable); non-finite values become null
Json rounded(double x, int digits) {
  if (!std::isfinite(x)) return nullptr;
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}
Json finite_or_null(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void write_record(FILE* f, const Json& record) {
  std::fprintf(f, "%s\n", record.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  std::fflush(f);
}

// "llama 4 x 128, 8 experts top 2": the model in a few words, for the report
std::string model_summary(const ModelConfig& m) {
  std::string s = fmt::format("{} {} x {}", enum_name(m.arch), m.layers, m.hidden);
  if (m.is_mla()) s += ", MLA";
  if (m.moe.enabled) s += fmt::format(", {} experts top {}", m.moe.experts, m.moe.top_k);
  if (m.mtp.depth > 0) s += fmt::format(", MTP {}", m.mtp.depth);
  return s;
}

}  // namespace

// A Chrome trace (chrome://tracing, Perfetto): every rank's spans of the
// traced steps, gathered to rank 0. Each span is 6 doubles: step, kind,
// chunk, micro-batch, start, end (seconds from the step's start, ranks
// aligned by a barrier at the step's start).
struct RunReport::Trace {
  enum Kind {
    forward,
    backward,
    backward_input,
    backward_weight,
    recv_wait,
    send,
    grad_sync,
    optimizer,
    expert_dispatch,
    expert_combine,
    expert_wait,
    kinds
  };
  static const char* name(int k) {
    static const char* names[kinds] = {"forward",         "backward",       "backward_input",  "backward_weight",
                                       "recv (waiting)",  "send",           "gradient sync",   "optimizer",
                                       "expert dispatch", "expert combine", "expert (waiting)"};
    return names[k];
  }
  static int kind_of(parallel::ActionType t) {
    switch (t) {
      case parallel::ActionType::forward:
        return forward;
      case parallel::ActionType::backward:
        return backward;
      case parallel::ActionType::backward_input:
        return backward_input;
      case parallel::ActionType::backward_weight:
        return backward_weight;
      case parallel::ActionType::recv_act:
      case parallel::ActionType::recv_grad:
        return recv_wait;
      case parallel::ActionType::send_act:
      case parallel::ActionType::send_grad:
        return send;
      case parallel::ActionType::paired:  // the executor records a paired step as its forward and its backward
        return -1;
    }
    return -1;
  }
  void add(int64_t step, int kind, int chunk, int micro, double start, double end) {
    for (double v : {double(step), double(kind), double(chunk), double(micro), start, end}) spans.push_back(v);
  }
  void write(const std::string& path, parallel::Communicator* world) {
    std::vector<int64_t> counts;
    const std::vector<double> all = parallel::gather_varying(world, spans, &counts);
    if (world && world->rank() != 0) return;
    Json events = Json::array();
    size_t i = 0;
    for (size_t r = 0; r < counts.size(); ++r)
      for (int64_t e = 0; e < counts[r] / 6; ++e, i += 6)
        events.push_back({{"name", name(int(all[i + 1]))},
                          {"ph", "X"},
                          {"pid", 0},
                          {"tid", r},
                          {"ts", rounded(all[i + 4] * 1e6, 1)},
                          {"dur", rounded((all[i + 5] - all[i + 4]) * 1e6, 1)},
                          {"args", {{"step", int(all[i])}, {"chunk", int(all[i + 2])}, {"micro", int(all[i + 3])}}}});
    try {
      // the measured bubble of each traced step, per pipeline stage, beside the simulator's
      write_file_atomic(path, Json{{"traceEvents", events},
                                   {"displayTimeUnit", "ms"},
                                   {"otherData", {{"bubble", bubbles}, {"bubble_predicted", rounded(predicted, 4)}}}}
                                      .dump() +
                                  "\n");
    } catch (const Error& e) {
      fail_input("log.trace: {}", e.what());
    }
  }
  std::vector<double> spans;
  Json bubbles = Json::object();  // step -> measured bubble per pipeline stage
  double predicted = 0;
};

RunReport::RunReport(const Recipe& rc, parallel::Mesh& mesh, const RunFacts& facts, bool quiet)
    : rc_(rc), mesh_(mesh), facts_(facts), quiet_(quiet), trace_(std::make_unique<Trace>()) {
  out_.entropy_floor = facts.entropy_floor;
  out_.predicted_bubble = facts.predicted_bubble;
}

RunReport::~RunReport() {
  if (metrics_) std::fclose(metrics_);
}

MemStats RunReport::memory() const {  // of the device the model lives on (the host's on CPU)
  return mesh_.device().type == DeviceType::cuda ? device_memory_stats() : HostAllocator::instance().stats();
}

void RunReport::start(bool append) {
  run_start_ = Clock::now();
  mesh_.device().type == DeviceType::cuda ? device_reset_peaks() : HostAllocator::instance().reset_peaks();
  if (!mesh_.leader()) return;
  if (!rc_.log.tensorboard.empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(rc_.log.tensorboard);
    tensorboard_->text("recipe", 0, "```yaml\n" + rc_.resolved_text() + "\n```");
  }
  const std::string& path = rc_.log.metrics;
  if (path.empty()) return;
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // a fresh run never truncates an earlier run's record: it is kept as PATH.N (the first free N)
  if (!append && std::filesystem::file_size(path, ec) > 0 && !ec) {
    std::string kept;
    for (int n = 1; kept.empty() || std::filesystem::exists(kept); ++n) kept = fmt::format("{}.{}", path, n);
    std::filesystem::rename(path, kept, ec);
    if (ec)
      fail_input("log.metrics: {} holds an earlier run's records and cannot be kept as {} ({})", path, kept,
                 ec.message());
    log::info("log.metrics: {} held an earlier run's records: kept as {}", path, kept);
  }
  metrics_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!metrics_) fail_input("log.metrics: cannot create '{}' ({})", path, std::strerror(errno));
  const bool synthetic = rc_.data.synthetic;
  write_record(metrics_, {{"type", "start"},
                          {"recipe", rc_.source},
                          {"params", facts_.params},
                          {"flops_per_token", facts_.flops_per_token},
                          {"peak_flops", facts_.peak_flops},
                          {"entropy_floor", synthetic ? Json(facts_.entropy_floor) : Json(nullptr)},
                          {"sequence_floor", synthetic ? Json(facts_.sequence_floor) : Json(nullptr)},
                          {"threads", facts_.threads},
                          {"precision", enum_name(rc_.train.precision)},
                          {"model", model_summary(rc_.model)},
                          {"mesh",
                           {{"data", rc_.parallel.data},
                            {"tensor", rc_.parallel.tensor},
                            {"pipeline", rc_.parallel.pipeline},
                            {"context", rc_.parallel.context},
                            {"expert", rc_.parallel.expert}}},
                          {"schedule", rc_.parallel.pipeline > 1 ? enum_name(rc_.parallel.schedule) : "none"},
                          {"virtual_stages", rc_.parallel.virtual_stages},
                          {"zero", rc_.parallel.zero},
                          {"steps", rc_.train.steps}});
}

void RunReport::emit(const Json& record) {
  if (metrics_) write_record(metrics_, record);
  if (tensorboard_) tensorboard_->metrics(record);
}

void RunReport::begin_step(int64_t step) {
  traced_ = !rc_.log.trace.empty() && std::count(rc_.log.trace_steps.begin(), rc_.log.trace_steps.end(), step + 1);
  if (traced_ && mesh_.world()) mesh_.world()->barrier()->wait();  // align the ranks' clocks for the trace
  step_start_ = Clock::now();
}

double RunReport::seconds() const { return std::chrono::duration<double>(Clock::now() - step_start_).count(); }

void RunReport::schedule_done(const parallel::PipelineExecutor& executor, double tensor_comm_s) {
  sched_s_ = executor.step_seconds(), idle_s_ = executor.idle_seconds(), tensor_comm_s_ = tensor_comm_s;
  if (!traced_) return;
  const int64_t step = int64_t(out_.losses.size()) + 1;  // 1-based, for the trace
  for (const auto& sp : executor.spans()) {
    const int k = Trace::kind_of(sp.type);
    if (k >= 0) trace_->add(step, k, sp.chunk, sp.micro, sp.start, sp.end);
  }
}

void RunReport::span(Span kind, double start, double end) {
  if (kind == Span::optimizer) optimizer_s_ = end - start;
  if (traced_)
    trace_->add(int64_t(out_.losses.size()) + 1, kind == Span::grad_sync ? Trace::grad_sync : Trace::optimizer, 0, 0,
                start, end);
}

void RunReport::expert_exchanges(const std::vector<parallel::ExpertSpan>& spans) {
  if (!traced_) return;
  const int64_t step = int64_t(out_.losses.size()) + 1;
  const double origin = std::chrono::duration<double>(step_start_.time_since_epoch()).count();
  for (const parallel::ExpertSpan& x : spans) {
    trace_->add(step, x.combine ? Trace::expert_combine : Trace::expert_dispatch, 0, 0, x.start - origin,
                x.end - origin);
    trace_->add(step, Trace::expert_wait, 0, 0, x.wait - origin, x.end - origin);
  }
}

void RunReport::expert_traffic(const parallel::ExpertTraffic& t, int pairs, long switches) {
  expert_ = t, pairs_ = pairs, switches_ = switches;
}

// The step's measures: its time and throughput, the MFU (the reference
// raised where a step beats it), the CUDA kernels' times, and two gathers
// every rank joins: the bubble per pipeline stage and each rank's busy time.
StepMeasures RunReport::measure(const StepFacts& f) {
  StepMeasures m;
  m.kernel_times = kernels::take_kernel_times();
  for (const auto& [name, s] : m.kernel_times) m.kernel_s += s;
  m.seconds = seconds();
  if (f.step > 0 || rc_.train.steps == 1) timed_seconds_ += m.seconds, timed_steps_ += 1;
  m.tokens_per_s = double(rc_.train.global_batch * rc_.model.seq_len) / m.seconds;
  const double achieved = facts_.flops_per_token * m.tokens_per_s / mesh_.world_size();  // per rank
  raise_mfu_peak(f.step, achieved);
  m.mfu = std::min(1.0, achieved / facts_.peak_flops);
  // measured bubble per stage: time blocked on pipeline transfers / schedule time
  m.bubble = parallel::gather_scalar(mesh_.pipeline(), sched_s_ > 0 ? idle_s_ / sched_s_ : 0);
  // stragglers: each rank's busy time, the step less what it waited for the
  // others (data-parallel reductions, pipeline transfers, tensor-parallel
  // collectives); the slowest against the median rank
  m.busy = parallel::gather_scalar(mesh_.world(), std::max(0.0, m.seconds - f.comm_wait_s - idle_s_ - tensor_comm_s_));
  m.slowest = size_t(std::max_element(m.busy.begin(), m.busy.end()) - m.busy.begin());
  std::vector<double> sorted = m.busy;
  std::sort(sorted.begin(), sorted.end());
  m.median_busy = sorted[(sorted.size() - 1) / 2];
  m.straggler_excess = m.median_busy > 0 ? m.busy[m.slowest] / m.median_busy - 1 : 0;
  m.optimizer_s = parallel::max_over(mesh_.world(), optimizer_s_);
  // each group kind's bytes this step, the busiest rank's (one max over the world for all kinds)
  traffic_.resize(parallel::kAllGroupKinds.size(), 0.0);
  std::vector<double> step_bytes(traffic_.size());
  for (size_t k = 0; k < traffic_.size(); ++k) {
    const double total = mesh_.traffic(parallel::kAllGroupKinds[k]);
    step_bytes[k] = total - traffic_[k], traffic_[k] = total;
  }
  step_bytes = parallel::max_over(mesh_.world(), step_bytes);
  for (size_t k = 0; k < step_bytes.size(); ++k)
    if (step_bytes[k] > 0) m.comm_bytes.push_back({enum_name(parallel::kAllGroupKinds[k]), step_bytes[k]});
  return m;
}

// The reference is a peak: a step faster than it shows the reference was
// measured low (a busy machine); it is raised (and cached) rather than
// reporting an MFU above 100%.
void RunReport::raise_mfu_peak(int64_t step, double achieved) {
  if (achieved <= facts_.peak_flops || step == 0) return;
  if (!quiet_ && facts_.peak_source.rfind("achieved", 0) != 0)
    log::info(
        "MFU reference {:.1f} GFLOP/s ({}) is below what step {} achieved ({:.1f} GFLOP/s per rank): "
        "raised to the best step's throughput from here on",
        facts_.peak_flops / 1e9, facts_.peak_source, step + 1, achieved / 1e9);
  facts_.peak_flops = achieved, facts_.peak_source = "achieved by the best step";
  if (!facts_.peak_cache_key.empty()) cache_gemm_peak(facts_.peak_cache_key, achieved);
}

namespace {
Json bubble_json(const std::vector<double>& bubble) {  // as the metrics record and the trace write it
  Json out = Json::array();
  for (double x : bubble) out.push_back(rounded(x, 4));
  return out;
}
}  // namespace

void RunReport::trace_step(int64_t step, const StepMeasures& m) {
  if (!traced_) return;
  trace_->bubbles[std::to_string(step + 1)] = bubble_json(m.bubble), trace_->predicted = facts_.predicted_bubble;
  if (step + 1 == *std::max_element(rc_.log.trace_steps.begin(), rc_.log.trace_steps.end()))
    trace_->write(rc_.log.trace, mesh_.world());
}

void RunReport::keep(const StepFacts& f, const StepMeasures& m) {
  out_.losses.push_back(f.loss);
  out_.grad_norms.push_back(f.grad_norm);
  out_.loss_scales.push_back(f.loss_scale);
  out_.skipped.push_back(f.skipped);
  out_.step_seconds.push_back(m.seconds);
  out_.bubbles.push_back(m.bubble);
  if (f.moe) out_.expert_tokens.push_back(f.moe->counts);
  if (f.qk_clipped >= 0) out_.qk_clipped.push_back(f.qk_clipped), out_.qk_margin.push_back(f.qk_margin);
  if (f.fp8) {
    int64_t n = 0;
    for (int64_t s : f.fp8->saturated) n += s;
    out_.fp8_saturated.push_back(n), out_.fp8_scale.push_back(f.fp8->scale);
  }
  out_.comm_wait_s += f.comm_wait_s;
}

// The metrics file's `train` record (docs/metrics.md).
Json RunReport::train_record(const StepFacts& f, const StepMeasures& m) const {
  Json r = {{"type", "train"},
            {"step", f.step + 1},
            {"loss", finite_or_null(f.loss)},
            {"lr", f.lr},
            {"grad_norm", finite_or_null(f.grad_norm)}};
  if (rc_.train.precision == Precision::fp16) r["loss_scale"] = f.loss_scale, r["skipped"] = f.skipped;
  if (f.nonfinite) r["nonfinite_skipped"] = true;
  r["tokens_per_s"] = rounded(m.tokens_per_s, 1), r["mfu"] = rounded(m.mfu, 4), r["step_s"] = rounded(m.seconds, 4);
  r["time"] = rounded(epoch_seconds(), 3);
  r["comm_wait_s"] = rounded(f.comm_wait_s, 4), r["tensor_comm_s"] = rounded(tensor_comm_s_, 4);
  r["checkpoint_s"] = rounded(f.checkpoint_s, 4), r["optimizer_s"] = rounded(m.optimizer_s, 4);
  r["busy_s_median"] = rounded(m.median_busy, 4), r["busy_s_max"] = rounded(m.busy[m.slowest], 4);
  if (!m.comm_bytes.empty()) {
    Json bytes = Json::object();
    for (const auto& [kind, b] : m.comm_bytes) bytes[kind] = int64_t(std::llround(b));
    r["comm_bytes"] = bytes;
  }
  r["slowest_rank"] = int64_t(m.slowest), r["straggler_excess"] = rounded(m.straggler_excess, 4);
  if (!m.kernel_times.empty()) r["kernel_s"] = rounded(m.kernel_s, 5);
  r["bubble"] = bubble_json(m.bubble), r["bubble_predicted"] = rounded(facts_.predicted_bubble, 4);
  if (expert_) {  // this rank's exchanges: issue to wait (other work ran), and waited
    r["expert_overlapped_s"] = rounded(expert_->overlapped_s, 4), r["expert_waited_s"] = rounded(expert_->waited_s, 4);
    if (pairs_ > 0) r["paired_passes"] = pairs_, r["pass_switches"] = int64_t(switches_);
  }
  r["peak_bytes"] = peak_bytes_json(memory());
  if (!f.mtp_loss.empty()) {
    Json mtp = Json::array();
    for (double x : f.mtp_loss) mtp.push_back(rounded(x, 6));
    r["mtp_loss"] = mtp;
  }
  if (f.qk_clipped >= 0) {
    Json top = Json::array();
    for (double x : f.max_logit) top.push_back(std::isfinite(x) ? Json(rounded(x, 4)) : Json(nullptr));
    r["max_logit"] = top, r["qk_clipped"] = f.qk_clipped;
  }
  if (f.fp8) {  // per layer of the model
    Json amax = Json::array(), scale = Json::array();
    int64_t total = 0;
    for (double a : f.fp8->amax) amax.push_back(rounded(a, 6));
    for (double x : f.fp8->scale) scale.push_back(rounded(x, 6));
    for (int64_t s : f.fp8->saturated) total += s;
    r["fp8"] = {{"amax", amax}, {"scale", scale}, {"saturated", f.fp8->saturated}, {"saturated_total", total}};
  }
  if (f.moe) {
    r["aux_loss"] = rounded(f.moe->aux_loss, 8), r["z_loss"] = rounded(f.moe->z_loss, 8);
    Json load = Json::array();
    for (size_t i = 0; i < f.moe->layers.size(); ++i) {
      Json layer = {{"layer", f.moe->layers[i]},
                    {"tokens", f.moe->tokens[i]},
                    {"min", f.moe->min[i]},
                    {"max", f.moe->max[i]},
                    {"imbalance", rounded(f.moe->imbalance[i], 4)}};
      if (f.moe->expert_ranks > 1) {  // the tokens each expert rank's experts take
        const auto first = f.moe->rank_tokens.begin() + int64_t(i) * f.moe->expert_ranks;
        layer["rank_tokens"] = std::vector<double>(first, first + f.moe->expert_ranks);
      }
      if (std::isfinite(f.moe->bias_min[i]))
        layer["bias_min"] = rounded(f.moe->bias_min[i], 6), layer["bias_max"] = rounded(f.moe->bias_max[i], 6);
      load.push_back(layer);
    }
    r["expert_load"] = load;
  }
  if (f.samples_per_dataset.size() > 1) {  // a blend: tokens consumed per dataset so far
    Json t = Json::object();
    for (size_t i = 0; i < f.samples_per_dataset.size(); ++i)
      t[rc_.data.train[i].path] = f.samples_per_dataset[i] * rc_.model.seq_len;
    r["tokens_per_dataset"] = t;
  }
  return r;
}

// The progress line (docs/metrics.md#the-progress-line); `peak`: the
// fullest rank's peak bytes.
std::string RunReport::progress_line(const StepFacts& f, const StepMeasures& m, double peak) const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - run_start_).count();
  const double eta = elapsed / double(f.step + 1) * double(rc_.train.steps - f.step - 1);
  // memory headroom: against what one rank has (its GPU, or its share of the node's RAM)
  const double capacity = mesh_.device().type == DeviceType::cuda
                              ? double(device_total_bytes())
                              : double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE)) /
                                    double(std::max(1, mesh_.node_size()));
  std::string extra;
  if (capacity > 0)
    extra += fmt::format(" | mem {} of {} ({:.0f}% free)", human_bytes(peak), human_bytes(capacity),
                         100 * std::max(0.0, 1 - peak / capacity));
  if (!f.mtp_loss.empty()) extra += fmt::format(" | mtp {:.4f}", fmt::join(f.mtp_loss, " "));
  if (f.qk_clipped >= 0 && !f.max_logit.empty())
    extra += fmt::format(" | max logit {:.2f} ({} heads clipped)",
                         *std::max_element(f.max_logit.begin(), f.max_logit.end()), f.qk_clipped);
  if (f.moe && !f.moe->imbalance.empty())
    extra += fmt::format(" | aux {:.4f}{} | expert load max/mean {:.2f}", f.moe->aux_loss,
                         rc_.model.moe.z_loss > 0 ? fmt::format(" | z {:.4f}", f.moe->z_loss) : "",
                         *std::max_element(f.moe->imbalance.begin(), f.moe->imbalance.end()));
  if (f.moe && f.moe->expert_ranks > 1) {  // every MoE layer's tokens per expert rank, over their mean
    std::vector<double> per(size_t(f.moe->expert_ranks), 0.0);
    for (size_t i = 0; i < f.moe->rank_tokens.size(); ++i) per[i % per.size()] += f.moe->rank_tokens[i];
    const double mean = std::accumulate(per.begin(), per.end(), 0.0) / double(per.size());
    std::string each;
    for (double x : per) each += fmt::format("{}{:.2f}", each.empty() ? "" : " ", mean > 0 ? x / mean : 0);
    extra += fmt::format(" | expert rank load {} x mean", each);
  }
  if (m.busy.size() > 1 && m.straggler_excess > rc_.log.straggler)
    extra += fmt::format(" | slowest rank {} +{:.0f}% ({:.0f} ms busy, median {:.0f} ms)", m.slowest,
                         100 * m.straggler_excess, 1e3 * m.busy[m.slowest], 1e3 * m.median_busy);
  return fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | mfu {:.1f}% | eta {}{}", f.step + 1,
      rc_.train.steps, f.loss, f.lr, f.grad_norm, m.tokens_per_s, 100 * m.mfu, log::format_duration(eta), extra);
}

void RunReport::restarted(int64_t resumed) {
  const char* env = std::getenv("TRIDENT_RESTART");
  if (!env || !mesh_.leader()) return;
  Restart r;
  r.resumed = resumed, r.loop_at = epoch_seconds();
  if (const char* a = std::getenv("TRIDENT_ATTEMPT")) r.attempt = std::atoi(a);
  std::istringstream in(env);  // failed_at=S;teardown=S;cause=TEXT
  for (std::string part; std::getline(in, part, ';');) {
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq), value = eq == std::string::npos ? "" : part.substr(eq + 1);
    if (key == "failed_at") r.failed_at = std::atof(value.c_str());
    if (key == "teardown") r.teardown_s = std::atof(value.c_str());
    if (key == "cause") r.cause = value;
  }
  // the last step the failed attempt finished: the metrics file's last train record before this run's
  std::ifstream metrics(rc_.log.metrics);
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"type\":\"train\"") == std::string::npos) continue;
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j.contains("time"))
      r.last_step = j["step"].get<int64_t>(), r.last_time = j["time"].get<double>();
  }
  restart_ = r;
}

// The failure's cost, once the restarted run has redone the steps the failed attempt had finished:
// detection (from that attempt's last finished step to its end), teardown, restart (launch, start-up,
// loading the checkpoint), the steps redone.
void RunReport::restart_record(int64_t step, double step_s) {
  Restart& r = *restart_;
  if (step <= r.last_step) r.redo_s += step_s;
  if (step < r.last_step) return;
  const bool known = r.last_step >= 0;
  const double detect = known ? std::max(0.0, r.failed_at - r.last_time) : 0.0;
  const double restart = std::max(0.0, r.loop_at - r.failed_at - r.teardown_s);
  const double lost = detect + r.teardown_s + restart + r.redo_s;
  const int64_t redone = known ? std::max<int64_t>(0, r.last_step - r.resumed) : 0;
  if (metrics_) {
    Json j = {{"type", "restart"}, {"attempt", r.attempt}, {"cause", r.cause}, {"resumed_step", r.resumed}};
    j["last_step"] = known ? Json(r.last_step) : Json(nullptr);
    j["steps_redone"] = redone, j["detect_s"] = rounded(detect, 3), j["teardown_s"] = rounded(r.teardown_s, 3);
    j["restart_s"] = rounded(restart, 3), j["redo_s"] = rounded(r.redo_s, 3), j["lost_s"] = rounded(lost, 3);
    emit(j);
  }
  log::info(
      "restart (attempt {}) after {}: {:.1f} s lost: detection {:.1f} s, teardown {:.1f} s, restart and load {:.1f} "
      "s, {} step{} redone {:.1f} s (resumed after step {})",
      r.attempt + 1, r.cause, lost, detect, r.teardown_s, restart, redone, redone == 1 ? "" : "s", r.redo_s, r.resumed);
  restart_.reset();
}

void RunReport::end_step(const StepFacts& f) {
  const StepMeasures m = measure(f);
  if (restart_) restart_record(f.step + 1, m.seconds);
  const bool last = f.step + 1 == rc_.train.steps;
  if (!m.kernel_times.empty() && !quiet_ && last) {  // the step should take little more than their sum
    auto sorted = m.kernel_times;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string top;
    for (size_t i = 0; i < std::min<size_t>(sorted.size(), 8); ++i)
      top += fmt::format("{}{} {:.1f} ms", i ? ", " : "", sorted[i].first, 1e3 * sorted[i].second);
    log::info("kernels of the last step: {:.1f} ms in all | {}", 1e3 * m.kernel_s, top);
  }
  trace_step(f.step, m);
  keep(f, m);
  if (!quiet_ && f.skipped)
    log::info("step {}: inf/NaN gradients at loss scale {:g}; step skipped, scale now {:g}", f.step + 1, f.loss_scale,
              f.next_loss_scale);
  if (metrics_ || tensorboard_) emit(train_record(f, m));
  if ((f.step + 1) % rc_.log.every == 0 || f.step == 0 || last) {  // the same steps on every rank
    const double peak = parallel::max_over(mesh_.world(), double(memory().total_peak));
    if (!quiet_) log::info("{}", progress_line(f, m, peak));
  }
}

void RunReport::evaluated(int64_t step, double val, const std::vector<double>& per_dataset) {
  if (!std::isfinite(val)) return;
  out_.final_val_loss = val;
  std::string each;
  Json per = Json::object();
  for (size_t i = 0; i < per_dataset.size() && i < rc_.data.valid.size(); ++i) {
    per[rc_.data.valid[i].path] = finite_or_null(per_dataset[i]);
    each += fmt::format(" | {} {:.4f}", rc_.data.valid[i].path, per_dataset[i]);
  }
  if (metrics_ || tensorboard_) {
    Json r = {{"type", "eval"}, {"step", step + 1}, {"val_loss", val}};
    if (!per_dataset.empty()) r["val_loss_per_dataset"] = per;
    emit(r);
  }
  if (!quiet_)
    log::info("eval   {:>6}/{} | val loss {:.4f}{}{}", step + 1, rc_.train.steps, val,
              rc_.data.synthetic ? fmt::format(" | floor {:.4f} ({:+.1f}%)", facts_.entropy_floor,
                                               100 * (val / facts_.entropy_floor - 1))
                                 : "",
              each);
}

void RunReport::stopped(int64_t step, int signal) {
  if (tensorboard_) tensorboard_->flush();
  log::info("stopping after step {} of {} on signal {}: saved; resume with --resume", step + 1, rc_.train.steps,
            signal_name(signal));
  out_.stopped_by_signal = signal, stopped_after_ = step + 1;
}

TrainSummary RunReport::finish() {
  const double tokens_per_step = double(rc_.train.global_batch * rc_.model.seq_len);
  out_.tokens_per_s = timed_steps_ > 0 ? tokens_per_step * timed_steps_ / timed_seconds_ : 0;
  const MemStats peak = memory();
  out_.peak_params = peak.peak[size_t(MemCategory::params)];
  out_.peak_grads = peak.peak[size_t(MemCategory::grads)];
  out_.peak_optimizer = peak.peak[size_t(MemCategory::optimizer)];
  out_.peak_activations = peak.peak[size_t(MemCategory::activations)];
  out_.peak_comm = peak.peak[size_t(MemCategory::comm)];
  out_.peak_other = peak.peak[size_t(MemCategory::other)];
  out_.peak_total = peak.total_peak;
  out_.mfu = std::min(1.0, facts_.flops_per_token * out_.tokens_per_s / (facts_.peak_flops * mesh_.world_size()));
  if (!quiet_)
    log::info("{} in {} | {:.0f} tok/s | mfu {:.1f}% | peak memory {} (activations {})",
              stopped_after_ > 0 ? fmt::format("stopped: {} of {} steps done ({} in this run)", stopped_after_,
                                               rc_.train.steps, out_.losses.size())
                                 : fmt::format("done: {} steps ({} in this run)", rc_.train.steps, out_.losses.size()),
              log::format_duration(std::chrono::duration<double>(Clock::now() - run_start_).count()), out_.tokens_per_s,
              100 * out_.mfu, mib(peak.total_peak), mib(peak.peak[size_t(MemCategory::activations)]));
  // what the run wrote for its user and could not: an error the exit code shows
  if (metrics_ && (std::fflush(metrics_) != 0 || std::ferror(metrics_)))
    throw Error(fmt::format("log.metrics: writing '{}' failed (disk full or removed?)", rc_.log.metrics));
  if (tensorboard_ && !tensorboard_->ok())
    throw Error(fmt::format("log.tensorboard: writing '{}' failed (disk full or removed?)", tensorboard_->path()));
  return out_;
}

}  // namespace trident::launch
