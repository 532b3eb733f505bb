// The training loop (see trainer.hpp).
#include "launch/trainer.hpp"
#include "launch/checkpoint.hpp"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/allocator.hpp"
#include "core/device_memory.hpp"
#include "core/dataset.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"
#include "kernels/precision.hpp"
#include "model/transformer.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/schedule.hpp"
#include "parallel/tensor_parallel.hpp"
#include "parallel/zero_storage.hpp"
#include "parallel/device_communicator.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
#include "kernels/buffer.hpp"

namespace trident::launch {

using Clock = std::chrono::steady_clock;

namespace {
// SIGTERM / SIGUSR1 (Slurm's warning before a time limit or preemption): stop
// after the current step, save, exit 0. Set by the signal thread
// (install_stop_signals) or, in-process, by request_stop().
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_stop_accepted{false};  // a run with somewhere to save is in progress
}  // namespace

void request_stop(int sig) { g_stop_signal = sig; }

// The signals are blocked in every thread (the mask is inherited by threads
// created later: MPI's, OpenMP's), so they never interrupt MPI or a kernel
// mid-call; one thread waits for them. Without a run that can save, the
// default action (termination) is restored and the signal re-raised.
void install_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (g_stop_accepted) {
        g_stop_signal = sig;
        continue;
      }
      std::signal(sig, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      ::kill(::getpid(), sig);
    }
  }).detach();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

double measure_gemm_peak(double seconds) {
  const int64_t n = 1024;
  std::vector<float> a(static_cast<size_t>(n * n), 1.0f), b(size_t(n * n), 0.5f), c(size_t(n * n));
  kernels::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  double best = 0;
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    auto t0 = Clock::now();
    kernels::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * double(n * n * n) / dt);
  }
  return best;
}

namespace {

std::string peak_bytes_json(const MemStats& s) {
  std::string out = "{";
  for (int i = 0; i < kMemCategories; ++i)
    out += fmt::format("\"{}\":{},", mem_category_name(MemCategory(i)), s.peak[size_t(i)]);
  return out + fmt::format("\"total\":{}}}", s.total_peak);
}

std::string mib(int64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); }

// Append-only JSON-lines writer; every record is flushed.
class MetricsFile {
 public:
  explicit MetricsFile(const std::string& path, bool append = false) {
    if (path.empty()) return;
    std::error_code ec;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    f_ = std::fopen(path.c_str(), append ? "a" : "w");
    if (!f_) fail_input("log.metrics: cannot create '{}' ({})", path, std::strerror(errno));
  }
  ~MetricsFile() {
    if (f_) std::fclose(f_);
  }
  void write(const std::string& record) {
    if (!f_) return;
    std::fputs(record.c_str(), f_);
    std::fputc('\n', f_);
    std::fflush(f_);
  }

 private:
  FILE* f_ = nullptr;
};

}  // namespace

int default_threads(int world) {
  if (std::getenv("OMP_NUM_THREADS")) return omp_get_max_threads();  // the launcher's word
  int local = world;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(var)) {
      local = std::max(1, std::atoi(v));
      break;
    }
  return std::max(1, omp_get_num_procs() / local);
}

// Every rank's reduced gradients, consolidated into the Hugging Face layout
// (tests): this rank's shard -> its full buffer over the data group -> every
// tensor and pipeline rank's buffer over the model-parallel group.
std::vector<float> capture_gradients(model::Transformer<float>& net, const ModelConfig& m, const ParallelConfig& par,
                                     parallel::ProcessGroups* groups, parallel::Communicator* dp,
                                     parallel::Communicator* mp, const float* grad_shard, int64_t shard_begin,
                                     int64_t shard_end, const std::vector<int64_t>& shard_counts, int zero) {
  const int64_t n = net.registry().total();
  Tensor full = Tensor::zeros({n}, DType::f32, MemCategory::other);
  copy_bytes(full.data<float>() + shard_begin, grad_shard, size_t(shard_end - shard_begin) * sizeof(float));
  if (zero >= 1 && dp) dp->all_gather(full, {shard_counts})->wait();
  std::vector<float> out(static_cast<size_t>(model::consolidated_numel(m)));
  if (!mp || mp->size() == 1) {
    model::consolidate(out.data(), m, {{&net.registry(), full.data<float>()}});
    return out;
  }
  // buffer sizes differ between pipeline stages: gather them first
  Tensor sizes = Tensor::zeros({mp->size()}, DType::f64, MemCategory::other);
  sizes.data<double>()[mp->rank()] = double(n);
  mp->all_gather(sizes)->wait();
  std::vector<int64_t> counts;
  int64_t total = 0, mine = 0;
  for (int r = 0; r < mp->size(); ++r) {
    counts.push_back(int64_t(sizes.data<double>()[r]));
    if (r < mp->rank()) mine += counts.back();
    total += counts.back();
  }
  Tensor all = Tensor::zeros({total}, DType::f32, MemCategory::other);
  std::memcpy(all.data<float>() + mine, full.data<float>(), size_t(n) * sizeof(float));
  mp->all_gather(all, {counts})->wait();
  // the members' coordinates, in group rank order (ascending world ranks)
  const auto& topo = groups->topology();
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const auto members = topo.members(parallel::GroupKind::model_parallel, world_rank);
  std::vector<std::unique_ptr<model::ParamRegistry>> regs;
  std::vector<std::pair<const model::ParamRegistry*, const float*>> parts;
  int64_t off = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const auto c = topo.coords(members[i]);
    regs.push_back(std::make_unique<model::ParamRegistry>(
        m, model::TensorShard{c.tp, int(par.tensor)},
        model::pipeline_chunks(m, int(par.pipeline), int(par.virtual_stages), par.stage_layers, c.pp)));
    parts.push_back({regs.back().get(), all.data<float>() + off});
    off += counts[i];
  }
  model::consolidate(out.data(), m, parts);
  return out;
}

// A Chrome trace (chrome://tracing, Perfetto): every rank's spans of the
// traced steps, gathered to rank 0. Each span is 6 doubles: step, kind, chunk,
// micro-batch, start, end (seconds from the step's start, ranks aligned by a
// barrier at the step's start).
class Trace {
 public:
  enum Kind { forward, backward, backward_input, backward_weight, recv_wait, send, grad_sync, optimizer, kinds };
  static const char* name(int k) {
    static const char* names[kinds] = {"forward", "backward", "backward_input", "backward_weight",
                                       "recv (waiting)", "send", "gradient sync", "optimizer"};
    return names[k];
  }
  void add(int64_t step, int kind, int chunk, int micro, double start, double end) {
    for (double v : {double(step), double(kind), double(chunk), double(micro), start, end}) spans_.push_back(v);
  }
  void write(const std::string& path, parallel::Communicator* world) {
    std::vector<double> all = spans_;
    std::vector<int64_t> counts{int64_t(spans_.size())};
    if (world && world->size() > 1) {
      Tensor n = Tensor::zeros({world->size()}, DType::f64, MemCategory::other);
      n.data<double>()[world->rank()] = double(spans_.size());
      world->all_gather(n)->wait();
      counts.clear();
      int64_t total = 0;
      for (int r = 0; r < world->size(); ++r) counts.push_back(int64_t(n.data<double>()[r])), total += counts.back();
      Tensor buf = Tensor::zeros({std::max<int64_t>(total, 1)}, DType::f64, MemCategory::other);
      int64_t off = 0;
      for (int r = 0; r < world->rank(); ++r) off += counts[size_t(r)];
      std::copy(spans_.begin(), spans_.end(), buf.data<double>() + off);
      if (total > 0) world->all_gather(buf.view(0, {total}), {counts})->wait();
      all.assign(buf.data<double>(), buf.data<double>() + total);
      if (world->rank() != 0) return;
    }
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) fail_input("log.trace: cannot create '{}' ({})", tmp, std::strerror(errno));
    std::fputs("{\"traceEvents\":[\n", f);
    size_t i = 0;
    bool first = true;
    for (size_t r = 0; r < counts.size(); ++r)
      for (int64_t e = 0; e < counts[r] / 6; ++e, i += 6) {
        const int kind = int(all[i + 1]);
        std::fprintf(f, "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%zu,\"ts\":%.1f,\"dur\":%.1f,"
                        "\"args\":{\"step\":%d,\"chunk\":%d,\"micro\":%d}}",
                     first ? "" : ",\n", name(kind), r, all[i + 4] * 1e6, (all[i + 5] - all[i + 4]) * 1e6,
                     int(all[i]), int(all[i + 2]), int(all[i + 3]));
        first = false;
      }
    std::fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
    std::fclose(f);
    std::filesystem::rename(tmp, path);
  }

 private:
  std::vector<double> spans_;
};

TrainSummary train(const Recipe& rc, const TrainOptions& opts) {
  const auto& m = rc.model;
  const auto& par = rc.parallel;
  const int64_t B = rc.train.micro_batch, T = m.seq_len, V = m.vocab;
  const model::Recompute recompute = model::parse_recompute(rc.train.recompute);

  // Parallel layout: MPI world (when launched with mpirun/srun) -> groups.
  int mpi_on = 0;
  MPI_Initialized(&mpi_on);
  std::unique_ptr<parallel::MpiCommunicator> world;
  std::unique_ptr<parallel::ProcessGroups> groups;
  if (mpi_on && !opts.single_process) world = parallel::MpiCommunicator::world();
  parallel::set_collective_timeout(par.timeout_s);  // a hang is an error naming the operation, group and peer
  const int world_size = world ? world->size() : 1;
  if (par.data * par.tensor * par.pipeline != world_size)
    fail_input("{}: parallel mesh data({}) x tensor({}) x pipeline({}) != world size {}", rc.source, par.data,
               par.tensor, par.pipeline, world_size);
  parallel::Communicator *dp = nullptr, *tp_group = nullptr, *pp_group = nullptr, *mp_group = nullptr,
                         *emb_group = nullptr;
  std::unique_ptr<parallel::MpiCommunicator> kv_group;  // ranks sharing replicated KV heads
  parallel::Communicator* kv = nullptr;
  // device: cuda binds this rank to GPU local_rank % devices; every group
  // then carries device buffers over NCCL (one GPU per rank) or host staging.
  const bool on_cuda = rc.device == "cuda";
  Device dev;
  bool nccl = false;
  if (on_cuda) {
    const int gpus = device_count();
    if (gpus == 0)
      fail_input("{}: key 'device': cuda, but {}", rc.source,
                 kernels::cuda_built() ? "no CUDA device is visible to this process (" + kernels::cuda_backend() + ")"
                                       : std::string("this build has no CUDA backend"));
    const int local_rank = world ? parallel::local_rank_and_size(*world).first : 0;
    dev = Device{DeviceType::cuda, local_rank % gpus};
    set_device(dev.index);
    nccl = world && parallel::nccl_built() && parallel::one_gpu_per_rank(*world, gpus);
  }
  std::vector<std::unique_ptr<parallel::Communicator>> device_groups;
  auto group = [&](parallel::MpiCommunicator& g) -> parallel::Communicator* {
    if (!on_cuda) return &g;
    std::unique_ptr<parallel::Communicator> n;
    if (nccl) n = std::make_unique<parallel::NcclCommunicator>(g, dev.index);
    device_groups.push_back(std::make_unique<parallel::DeviceCommunicator>(g, std::move(n)));
    return device_groups.back().get();
  };
  if (world) {
    groups = std::make_unique<parallel::ProcessGroups>(
        parallel::Topology(int(par.data), int(par.pipeline), int(par.tensor), par.order), *world);
    dp = group(groups->get(parallel::GroupKind::data));
    pp_group = group(groups->get(parallel::GroupKind::pipeline));
    mp_group = group(groups->get(parallel::GroupKind::model_parallel));
    emb_group = group(groups->get(parallel::GroupKind::embedding));
    auto& tg = groups->get(parallel::GroupKind::tensor);
    tp_group = group(tg);
    if (m.kv_heads < par.tensor) {  // KV head r * kv_heads / tensor is held by tensor / kv_heads ranks
      kv_group = tg.split(int(tg.rank() * m.kv_heads / par.tensor), tg.rank(), "kv");
      kv = group(*kv_group);
    }
  }
  // Tensor parallelism: the region ops the model calls (identity with one rank).
  parallel::TensorParallel tp(tp_group, par.sequence_parallel);
  const int dp_rank = dp ? dp->rank() : 0;
  const int pp_rank = pp_group ? pp_group->rank() : 0;
  const int P = int(par.pipeline), VS = int(par.virtual_stages);
  const bool leader = !world || world->rank() == 0;
  const int64_t micro_steps = rc.micro_batches_per_step(par.data);
  const int64_t rank_batch = rc.train.global_batch / par.data;  // sequences per rank per step

  // Pipeline schedule: this rank's actions for one step (the same every step).
  parallel::ScheduleKind kind;
  std::vector<parallel::Action> actions;
  try {
    kind = parallel::parse_schedule(par.schedule);
    actions = parallel::make_schedule(kind, P, VS, int(micro_steps), pp_rank);
  } catch (const InputError& e) {
    fail_input("{}: key 'parallel.schedule': {} (micro-batches per step = global_batch / (micro_batch x data))",
               rc.source, e.what());
  }
  const bool split = kind == parallel::ScheduleKind::zero_bubble;
  if (split && recompute == model::Recompute::full)
    fail_input("{}: key 'train.recompute': zero_bubble's weight passes need the layer activations; expected none or "
               "selective, found full",
               rc.source);
  // piped: chunks exchange activations, or backward is split: gradients are
  // final only after the whole schedule (no overlap with the data-parallel
  // reduction); otherwise the last micro-batch's backward launches buckets.
  const bool piped = P > 1 || VS > 1 || split;

  // Threads: every core for one rank; an even share of the node's cores per
  // rank otherwise; train.threads or OMP_NUM_THREADS override.
  int threads = rc.train.threads > 0 ? int(rc.train.threads) : default_threads(world_size);
  kernels::set_num_threads(threads);
  const kernels::Precision precision = kernels::parse_precision(rc.train.precision);
  kernels::set_matmul_precision(precision);

  // Data (read by the ranks holding the embedding or the head).
  std::unique_ptr<TokenSampler> sampler;
  double floor = 0, seq_floor = 0;
  if (rc.data.synthetic) {
    const auto& s = rc.data.syn;
    MarkovSource src(s.vocab, s.order, s.branching, s.skew, uint64_t(s.seed));
    floor = src.entropy_rate();
    seq_floor = src.sequence_floor(T);
    sampler = make_markov_sampler(s.vocab, s.order, s.branching, s.skew, uint64_t(s.seed));
  } else {
    sampler = make_dataset_sampler(rc.data.train, rc.data.valid, T + 1, uint64_t(rc.seed));
    if (sampler->vocab_needed() > V)
      fail_input("{}: token id {} does not fit model.vocab({}) of {}", rc.data.train, sampler->vocab_needed() - 1, V,
                 rc.source);
  }

  // Model (this rank's pipeline chunks, its tensor-parallel slices), data
  // parallelism / ZeRO, optimizer. ZeRO 0-1: the model owns full buffers and
  // GradientSync reduces buckets; ZeRO 2-3: ZeroStorage owns the shards and
  // serves the model segment by segment.
  const int zero = int(par.zero);
  const auto chunks = model::pipeline_chunks(m, P, VS, par.stage_layers, pp_rank);
  model::Transformer<float> net(m, uint64_t(rc.seed), /*full_buffers=*/zero < 2, &tp, chunks, dev);
  bool reads_tokens = false, reads_targets = false;
  for (const auto& c : chunks) reads_tokens |= c.embedding, reads_targets |= c.head;
  const int64_t n_params = net.registry().total();  // this rank's flat buffer
  const int64_t n_global = model::consolidated_numel(m);
  std::unique_ptr<parallel::GradientSync> sync;
  std::unique_ptr<parallel::ZeroStorage> zstore;
  int64_t shard_begin = 0, shard_end = n_params;
  std::vector<int64_t> shard_counts;
  float *param_shard = nullptr, *grad_shard = nullptr;  // element shard_begin of this rank's shard
  if (zero < 2) {
    sync = std::make_unique<parallel::GradientSync>(dp, n_params, DType::f32, zero, par.bucket_bytes, dev);
    shard_begin = sync->shard_begin(), shard_end = sync->shard_end(), shard_counts = sync->shard_counts();
    param_shard = net.params().data<float>() + shard_begin;
    grad_shard = net.grads().data<float>() + shard_begin;
  } else {
    zstore = std::make_unique<parallel::ZeroStorage>(dp, net.segments(), n_params, zero, dev);
    net.set_storage(zstore.get());
    shard_begin = zstore->shard_begin(), shard_end = zstore->shard_end(), shard_counts = zstore->shard_counts();
    // drawn on the host (Philox by global index: a shard only its own elements), copied where they live
    auto init = [&](float* dst, int64_t begin, int64_t end) {
      std::vector<float> host(static_cast<size_t>(end - begin));
      net.registry().initialize_range(host.data(), begin, end, uint64_t(rc.seed));
      kernels::copy(dst, host.data(), end - begin);
    };
    if (zero == 2)
      init(zstore->full_params().data<float>(), 0, n_params);
    else
      init(zstore->param_shard(), shard_begin, shard_end);
    param_shard = zstore->param_shard();
    grad_shard = zstore->grad_shard();
  }
  optim::AdamW<float> opt(net.registry(), rc.optim, shard_begin, shard_end, dev);
  // Mixed precision: the optimizer updates fp32 master weights of this
  // rank's shard; the model computes with their rounded copy (bf16/fp16
  // storage), published to every replica after each update. fp32: the
  // optimizer updates the model's shard itself.
  net.set_precision(precision);
  const int64_t shard_n = shard_end - shard_begin;
  Tensor master;
  float* opt_params = param_shard;
  if (precision != kernels::Precision::fp32) {
    master = Tensor::empty({shard_n}, DType::f32, MemCategory::optimizer, dev);
    opt_params = master.data<float>();
    kernels::copy(opt_params, param_shard, shard_n);
  }
  auto publish_params = [&]() {
    if (master.defined()) {
      kernels::copy(param_shard, opt_params, shard_n);
      kernels::round_to_storage(param_shard, shard_n, precision);
    }
    if (sync) sync->gather_params(net.params());
    else zstore->gather_params();
  };
  if (master.defined()) publish_params();
  // fp16: dynamic loss scaling; the scale multiplies the loss gradient and
  // divides the gradients again inside the optimizer's pass.
  ScalerState scaler;
  scaler.loss_scale = precision == kernels::Precision::fp16 ? rc.train.loss_scale : 1.0;
  // Gradients of replicated parameters: with sequence parallelism each tensor
  // rank saw only its rows, so norms and row-parallel biases are summed over
  // the tensor group; replicated KV heads are summed over their KV group
  // always. Done on the data-reduced shard (the sums commute).
  std::vector<std::pair<int64_t, int64_t>> tensor_replicated, kv_replicated;  // relative to grad_shard
  // A tied embedding split over the first and last stage: its two copies'
  // gradients are summed over the embedding group before the data-parallel
  // reduction (on the full local gradients).
  std::vector<std::pair<int64_t, int64_t>> tied_table;  // relative to the local buffer
  for (const auto& p : net.registry().params()) {
    const int64_t lo = std::max(shard_begin, p.offset), hi = std::min(shard_end, p.offset + p.numel);
    if (m.tie_embeddings && P > 1 && (p.name == "transformer.wte.weight" || p.name == "model.embed_tokens.weight"))
      tied_table.push_back({p.offset, p.offset + p.numel});
    if (hi <= lo) continue;
    if (p.replication == model::Replication::tensor && tp.sequence_parallel())
      tensor_replicated.push_back({lo - shard_begin, hi - shard_begin});
    if (p.replication == model::Replication::kv_group) kv_replicated.push_back({lo - shard_begin, hi - shard_begin});
  }

  // Activation contexts: per chunk, as many as the schedule holds in flight.
  std::vector<std::vector<std::unique_ptr<model::Activations<float>>>> ctx_pool(chunks.size());
  {
    std::vector<int> live(chunks.size(), 0), peak(chunks.size(), 0);
    for (const auto& a : actions) {
      if (a.type == parallel::ActionType::forward) peak[size_t(a.chunk)] = std::max(peak[size_t(a.chunk)], ++live[size_t(a.chunk)]);
      if (a.type == parallel::ActionType::backward || a.type == parallel::ActionType::backward_weight) --live[size_t(a.chunk)];
    }
    for (size_t c = 0; c < chunks.size(); ++c)
      for (int i = 0; i < std::max(peak[c], 1); ++i)
        ctx_pool[c].push_back(net.make_activations(B, recompute, int(c), split));
  }
  const int64_t R = tp.rows(B * T);
  parallel::PipelineExecutor executor(pp_group, P, VS, R * m.hidden, par.timeout_s, /*lookahead=*/2, dev);
  const double flops_tok = model::flops_per_token(m);
  const double peak = rc.log.peak_flops > 0 ? rc.log.peak_flops
                      : on_cuda             ? kernels::cuda_peak_flops(precision)
                                            : measure_gemm_peak();
  // memory of the device the model lives on (the host's on CPU)
  auto memory = [&]() { return on_cuda ? device_memory_stats() : HostAllocator::instance().stats(); };
  auto reset_peaks = [&]() { on_cuda ? device_reset_peaks() : HostAllocator::instance().reset_peaks(); };
  const MemStats mem0 = memory();
  const double predicted_bubble = parallel::simulate(kind, P, VS, int(micro_steps)).bubble_fraction();

  log::info("trident: {} | {} layers, hidden {}, heads {}/{}, ffn {}, seq {}, vocab {} | {:.2f}M parameters",
            rc.source, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, T, V, double(n_global) / 1e6);
  const int64_t Vpad = m.padded_vocab(par.tensor);
  log::info("vocabulary padded {} -> {} (+{} rows, a multiple of vocab_multiple {} x tensor {}); padded logits are "
            "masked and stripped on export",
            V, Vpad, Vpad - V, m.vocab_multiple, par.tensor);
  if (par.tensor > 1) {
    const auto& dims = net.dims();
    log::info("tensor parallel {}{} | per rank: heads {}, kv heads {}{}, ffn {}, vocab rows {} | {:.2f}M parameters "
              "per rank",
              par.tensor, tp.sequence_parallel() ? " with sequence parallelism" : "", dims.heads, dims.kv_heads,
              m.kv_heads < par.tensor ? fmt::format(" (replicated on {} ranks)", par.tensor / m.kv_heads) : "",
              dims.ffn, dims.vocab, double(n_params) / 1e6);
  }
  if (P > 1 || VS > 1) {
    const auto counts = model::chunk_layer_counts(m, P, VS, par.stage_layers);
    log::info("pipeline {} x virtual stages {} | schedule {} | layers per chunk [{}] | {} micro-batches per step | "
              "simulated bubble {:.1f}%",
              P, VS, par.schedule, fmt::join(counts, ", "), micro_steps, 100 * predicted_bubble);
  }
  log::info("batch: global {} = micro {} x {} accumulation steps | recompute {} | {} threads | {}", rc.train.global_batch,
            B, micro_steps, rc.train.recompute, threads, kernels::cpu_gemm_backend());
  const double Pn = double(n_params), d = double(par.data);
  log::info("data parallel {} x ZeRO {} | per rank: params {} grads {} optimizer {} activations {} | ZeRO formula: "
            "params {} = {}, grads {} = {}, optimizer {} = {}",
            par.data, zero, mib(mem0.current[0]), mib(mem0.current[1]), mib(mem0.current[2]), mib(mem0.current[3]),
            zero >= 3 ? "4P/d" : "4P", mib(int64_t(zero >= 3 ? 4 * Pn / d : 4 * Pn)), zero >= 2 ? "4P/d" : "4P",
            mib(int64_t(zero >= 2 ? 4 * Pn / d : 4 * Pn)), zero >= 1 ? "8P/d" : "8P",
            mib(int64_t(zero >= 1 ? 8 * Pn / d : 8 * Pn)));
  log::info("model FLOPs/token {:.4g} | MFU reference {:.1f} GFLOP/s ({})", flops_tok, peak / 1e9,
            rc.log.peak_flops > 0 ? "log.peak_flops"
            : on_cuda             ? fmt::format("dense {} peak of cuda:{}", precision == kernels::Precision::fp32 ? "fp32" : rc.train.precision, dev.index)
                                  : precision == kernels::Precision::bf16 ? "measured bf16 GEMM" : "measured sgemm");
  if (on_cuda)
    log::info("device cuda:{} (local rank % {} GPUs) | {} | device buffers {}", dev.index, device_count(),
              kernels::cuda_backend(),
              !world ? "(one rank: no communication)"
              : nccl ? "over NCCL for every group (" + parallel::nccl_version() + ")"
                     : "staged through host memory over MPI: ranks share a GPU (NCCL needs one GPU per rank)");
  if (rc.data.synthetic)
    log::info("data: synthetic Markov source (vocab {}, order {}, branching {}) | entropy floor {:.4f} nats/token "
              "(sequence floor {:.4f}, log(vocab) {:.4f})",
              rc.data.syn.vocab, rc.data.syn.order, rc.data.syn.branching, floor, seq_floor,
              std::log(double(rc.data.syn.vocab)));
  // Resume: the same mesh's checkpoint fills this rank's shard (parameters
  // and optimizer state); the replicas are then rebuilt from the shards.
  RankState ckpt_state{&net.registry(), dp_rank, pp_rank, tp.rank(), shard_begin, shard_end, opt_params,
                       opt.exp_avg(), opt.exp_avg_sq(), &scaler};
  int64_t start_step = 0;
  if (!opts.resume.empty()) {
    const std::string from = resolve_resume(rc, opts.resume);
    if (from.empty()) {
      log::info("resume: no checkpoint in {} yet; starting from step 0", rc.checkpoint.dir);
    } else {
      start_step = load_checkpoint(rc, from, ckpt_state, world.get());
      publish_params();
      log::info("resumed from {} after step {}", from, start_step);
    }
  }

  MetricsFile metrics(leader ? rc.log.metrics : std::string(), /*append=*/start_step > 0);
  metrics.write(fmt::format(
      "{{\"type\":\"start\",\"recipe\":\"{}\",\"params\":{},\"flops_per_token\":{},\"peak_flops\":{},"
      "\"entropy_floor\":{},\"sequence_floor\":{},\"threads\":{},\"precision\":\"{}\"}}",
      rc.source, n_global, flops_tok, peak, rc.data.synthetic ? fmt::format("{}", floor) : "null",
      rc.data.synthetic ? fmt::format("{}", seq_floor) : "null", threads, rc.train.precision));

  // Tokens and targets of every micro-batch of a step (pipelines hold several).
  std::vector<int32_t> sample(static_cast<size_t>(T + 1));
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(micro_steps), std::vector<int32_t>(size_t(B * T)));
  std::vector<std::vector<int32_t>> targets = tokens;
  std::vector<Tensor> tokens_dev, targets_dev;  // their device copies (device: cuda)
  if (on_cuda && (reads_tokens || reads_targets))
    for (int64_t i = 0; i < micro_steps; ++i) {
      tokens_dev.push_back(Tensor::empty({B * T}, DType::i32, MemCategory::activations, dev));
      targets_dev.push_back(Tensor::empty({B * T}, DType::i32, MemCategory::activations, dev));
    }
  auto load_batch = [&](int64_t micro, uint64_t first_index, bool valid) {
    if (!reads_tokens && !reads_targets) return;
    auto& tok = tokens[size_t(micro)];
    auto& tgt = targets[size_t(micro)];
    for (int64_t b = 0; b < B; ++b) {
      sampler->sample(first_index + uint64_t(b), valid, T + 1, sample.data());
      std::copy(sample.begin(), sample.begin() + T, tok.begin() + b * T);
      std::copy(sample.begin() + 1, sample.end(), tgt.begin() + b * T);
    }
    if (on_cuda) {  // queued on the compute stream, before the kernels that read them
      kernels::copy(tokens_dev[size_t(micro)].data<int32_t>(), tok.data(), B * T);
      kernels::copy(targets_dev[size_t(micro)].data<int32_t>(), tgt.data(), B * T);
    }
  };
  auto tokens_of = [&](int64_t micro) -> const int32_t* {
    return on_cuda ? tokens_dev[size_t(micro)].data<int32_t>() : tokens[size_t(micro)].data();
  };
  auto targets_of = [&](int64_t micro) -> const int32_t* {
    return on_cuda ? targets_dev[size_t(micro)].data<int32_t>() : targets[size_t(micro)].data();
  };

  // The hooks the executor calls: contexts taken at forward, returned after
  // the backward (or, split, the weight pass).
  std::vector<std::vector<int>> slot_of(chunks.size(), std::vector<int>(size_t(micro_steps), -1));
  std::vector<std::vector<int>> free_slots(chunks.size());
  std::vector<char> input_started(chunks.size()), weight_started(chunks.size());
  double loss_sum = 0;
  const double mean_scale = 1.0 / double(rc.train.global_batch * T);  // dloss/dlogit of the mean loss
  float dscale = float(mean_scale);
  bool last_reduces = false;  // unpiped: the last micro-batch's backward launches the buckets
  auto on_ready = [&](int64_t frontier) { sync->grads_ready(net.grads(), frontier); };
  parallel::PipelineHooks hooks;
  hooks.forward = [&](int c, int micro, const float* input) {
    auto& fs = free_slots[size_t(c)];
    TRIDENT_CHECK(!fs.empty(), "no free activation context for chunk {}", c);
    const int slot = fs.back();
    fs.pop_back();
    slot_of[size_t(c)][size_t(micro)] = slot;
    const auto& spec = net.chunk(c);
    loss_sum += net.forward_chunk(*ctx_pool[size_t(c)][size_t(slot)], spec.embedding ? tokens_of(micro) : nullptr,
                                  input, spec.head ? targets_of(micro) : nullptr, dscale);
  };
  hooks.output = [&](int c, int micro) { return ctx_pool[size_t(c)][size_t(slot_of[size_t(c)][size_t(micro)])]->x_final; };
  hooks.input_grad = [&](int, int) { return net.input_grad(); };
  hooks.backward = [&](int c, int micro, const float* d_out, parallel::ActionType type) {
    const int slot = slot_of[size_t(c)][size_t(micro)];
    auto& ctx = *ctx_pool[size_t(c)][size_t(slot)];
    const bool weight = type == parallel::ActionType::backward_weight;
    char& started = weight ? weight_started[size_t(c)] : input_started[size_t(c)];
    const bool accumulate = started != 0;  // the step's first backward of a chunk overwrites
    started = 1;
    const bool last = !piped && micro + 1 == micro_steps;
    if (zstore) zstore->begin_backward(piped || micro_steps > 1, !piped && last);
    const model::BackwardPart part = type == parallel::ActionType::backward ? model::BackwardPart::all
                                     : weight                              ? model::BackwardPart::weight
                                                                           : model::BackwardPart::input;
    net.backward_chunk(ctx, d_out, recompute, accumulate, part,
                       last && last_reduces ? std::function<void(int64_t)>(on_ready) : std::function<void(int64_t)>());
    if (type != parallel::ActionType::backward_input) free_slots[size_t(c)].push_back(slot);
  };
  auto reset_step = [&]() {
    for (size_t c = 0; c < chunks.size(); ++c) {
      free_slots[c].clear();
      for (int i = int(ctx_pool[c].size()) - 1; i >= 0; --i) free_slots[c].push_back(i);
      input_started[c] = weight_started[c] = 0;
    }
    loss_sum = 0;
  };
  // Forward only (evaluation): micro-batch by micro-batch, chunks in order.
  auto forward_only = [&](int64_t micro_batches) {
    std::vector<parallel::Action> list;
    const int last_chunk = P * VS - 1;
    for (int mb = 0; mb < int(micro_batches); ++mb)
      for (int v = 0; v < VS; ++v) {
        const int c = v * P + pp_rank;
        if (c > 0) list.push_back({parallel::ActionType::recv_act, v, mb});
        list.push_back({parallel::ActionType::forward, v, mb});
        if (c < last_chunk) list.push_back({parallel::ActionType::send_act, v, mb});
      }
    return list;
  };
  auto evaluate = [&]() {
    if (rc.eval.batches == 0 || !sampler->has_valid()) return double(NAN);
    double sum = 0;
    const float saved_scale = dscale;
    dscale = 0;
    for (int64_t i = 0; i < rc.eval.batches; i += micro_steps) {
      const int64_t n = std::min(micro_steps, rc.eval.batches - i);
      for (int64_t mb = 0; mb < n; ++mb) load_batch(mb, uint64_t((i + mb) * B), true);
      reset_step();
      // one context per chunk suffices: each micro-batch's forward finishes before the next
      parallel::PipelineHooks eval_hooks = hooks;
      eval_hooks.forward = [&](int c, int micro, const float* input) {
        slot_of[size_t(c)][size_t(micro)] = 0;
        const auto& spec = net.chunk(c);
        loss_sum += net.forward_chunk(*ctx_pool[size_t(c)][0], spec.embedding ? tokens_of(micro) : nullptr, input,
                                      spec.head ? targets_of(micro) : nullptr, 0.0f);
      };
      executor.run(forward_only(n), eval_hooks);
      sum += loss_sum;
    }
    dscale = saved_scale;
    return parallel::sum_over(pp_group, sum) / double(rc.eval.batches * B * T);
  };

  TrainSummary out;
  out.entropy_floor = floor;
  out.predicted_bubble = predicted_bubble;
  const double tokens_per_step = double(rc.train.global_batch * T);
  double timed_seconds = 0, timed_steps = 0;
  auto run_start = Clock::now();
  reset_peaks();
  Trace trace;
  const int64_t trace_last = rc.log.trace_steps.empty()
                                 ? 0
                                 : *std::max_element(rc.log.trace_steps.begin(), rc.log.trace_steps.end());

  // Stop signals: caught only when there is somewhere to save to.
  CheckpointSaver saver(rc, world.get());
  if (!rc.checkpoint.dir.empty() && rc.checkpoint.async) {
    saver.reserve(shard_end - shard_begin);
    log::info("checkpoints: background writes from a host copy of this rank's shard ({} per rank)",
              mib(saver.buffer_bytes()));
  }
  g_stop_signal = 0;
  g_stop_accepted = !rc.checkpoint.dir.empty();
  struct StopGuard {
    ~StopGuard() { g_stop_accepted = false; }
  } stop_guard;
  for (int64_t step = start_step; step < rc.train.steps; ++step) {
    const bool traced = !rc.log.trace.empty() && std::count(rc.log.trace_steps.begin(), rc.log.trace_steps.end(), step + 1);
    if (traced && world) world->barrier()->wait();  // align the ranks' clocks for the trace
    auto t0 = Clock::now();
    auto since = [&]() { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    const double tensor_comm0 = tp.traffic().seconds;
    // this rank's slice of the global batch: samples [dp_rank * rank_batch, ...) of the step
    for (int64_t micro = 0; micro < micro_steps; ++micro)
      load_batch(micro, uint64_t(step * rc.train.global_batch + dp_rank * rank_batch + micro * B), false);
    reset_step();
    dscale = float(mean_scale * scaler.loss_scale);
    last_reduces = sync != nullptr && !piped;
    executor.run(actions, hooks);
    const double sched_s = executor.step_seconds();
    if (traced)
      for (const auto& sp : executor.spans()) {
        int k = -1;
        switch (sp.type) {
          case parallel::ActionType::forward: k = Trace::forward; break;
          case parallel::ActionType::backward: k = Trace::backward; break;
          case parallel::ActionType::backward_input: k = Trace::backward_input; break;
          case parallel::ActionType::backward_weight: k = Trace::backward_weight; break;
          case parallel::ActionType::recv_act:
          case parallel::ActionType::recv_grad: k = Trace::recv_wait; break;
          case parallel::ActionType::send_act:
          case parallel::ActionType::send_grad: k = Trace::send; break;
        }
        if (k >= 0) trace.add(step + 1, k, sp.chunk, sp.micro, sp.start, sp.end);
      }
    const double sync_start = since();
    // tied embedding: first and last stage sum their copies' gradients
    if (!tied_table.empty())
      parallel::all_reduce_ranges(emb_group, zstore ? zstore->accumulated_grads() : net.grads().data<float>(),
                                  tied_table);
    if (sync) {
      sync->finish(net.grads());
    } else {
      if (piped) zstore->reduce_accumulated();
      zstore->finish_step();
    }
    parallel::all_reduce_ranges(tp.group(), grad_shard, tensor_replicated);
    parallel::all_reduce_ranges(kv, grad_shard, kv_replicated);
    if (traced) trace.add(step + 1, Trace::grad_sync, 0, 0, sync_start, since());
    // the last stage's loss, over the data group; every tensor rank has the same
    const double loss = parallel::sum_over(pp_group, parallel::sum_over(dp, loss_sum)) / tokens_per_step;
    // the true global norm: with ZeRO >= 1 data ranks hold disjoint reduced
    // shards; tensor and pipeline ranks hold disjoint slices (replicated ones
    // and the tied copy counted once)
    double sq = optim::sum_of_squares_counted(net.registry(), grad_shard, shard_begin, shard_end);
    if (zero >= 1) sq = parallel::sum_over(dp, sq);
    // (of the scaled gradients: unscaled here; inf/NaN on any rank makes it non-finite everywhere)
    const double gnorm = std::sqrt(parallel::sum_over(mp_group, sq)) / scaler.loss_scale;
    const bool fp16 = precision == kernels::Precision::fp16;
    const bool skip = fp16 && !std::isfinite(gnorm);
    if (step == 0 && opts.capture_step1_grads) out.step1_grads = capture_gradients(net, m, par, groups.get(), dp, mp_group, grad_shard, shard_begin, shard_end, shard_counts, zero);
    const double lr = optim::learning_rate(rc.optim, step, rc.train.steps);
    const double opt_start = since();
    const double used_scale = scaler.loss_scale;
    if (!skip) {
      opt.step(opt_params, grad_shard, lr, ++scaler.optimizer_steps,
               optim::clip_scale(gnorm, rc.optim.grad_clip) / scaler.loss_scale);
      publish_params();
    }
    if (fp16) {  // dynamic loss scaling: halve on overflow, double after a window of clean steps
      if (skip) {
        scaler.loss_scale = std::max(scaler.loss_scale / 2, rc.train.min_loss_scale);
        scaler.good_steps = 0, ++scaler.skipped_steps;
        if (!opts.quiet)
          log::info("step {}: inf/NaN gradients at loss scale {:g}; step skipped, scale now {:g}", step + 1,
                    used_scale, scaler.loss_scale);
      } else if (++scaler.good_steps >= rc.train.loss_scale_window) {
        scaler.loss_scale *= 2, scaler.good_steps = 0;
      }
    }
    if (traced) trace.add(step + 1, Trace::optimizer, 0, 0, opt_start, since());
    if (traced && step + 1 == trace_last) trace.write(rc.log.trace, world.get());
    // all ranks agree whether any of them was signalled (one number per step)
    int stop = 0;
    if (!rc.checkpoint.dir.empty()) {
      double sig = double(g_stop_signal.load());
      if (world && world->size() > 1) {
        Tensor t = Tensor::zeros({1}, DType::f64, MemCategory::other);
        t.data<double>()[0] = sig;
        world->all_reduce(t, {.op = parallel::ReduceOp::max})->wait();
        sig = t.data<double>()[0];
      }
      stop = int(sig);
    }
    // checkpoints: the copy to host buffers stalls the step; the files are
    // written in the background and the save is finished at a later step
    const double ckpt_start = since();
    auto report = [&](const std::string& saved) {
      if (!opts.quiet && !saved.empty()) log::info("checkpoint {}", saved);
    };
    if (!rc.checkpoint.dir.empty()) {
      report(saver.poll());
      if ((rc.checkpoint.every > 0 && (step + 1) % rc.checkpoint.every == 0) || step + 1 == rc.train.steps || stop) {
        report(saver.start(step + 1, ckpt_state));
        if (step + 1 == rc.train.steps || stop) report(saver.finish());
      }
    }
    const double ckpt_s = since() - ckpt_start;

    // GPU time of the step's kernels (TRIDENT_KERNEL_TIMES=1 on CUDA): the
    // step should take little more than their sum
    const auto kernel_times = kernels::take_kernel_times();
    double kernel_s = 0;
    for (const auto& [name, s] : kernel_times) kernel_s += s;
    if (!kernel_times.empty() && !opts.quiet && step + 1 == rc.train.steps) {
      auto sorted = kernel_times;
      std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      std::string top;
      for (size_t i = 0; i < std::min<size_t>(sorted.size(), 8); ++i)
        top += fmt::format("{}{} {:.1f} ms", i ? ", " : "", sorted[i].first, 1e3 * sorted[i].second);
      log::info("kernels of the last step: {:.1f} ms in all | {}", 1e3 * kernel_s, top);
    }
    const double comm_wait = sync ? sync->take_wait_seconds() : zstore->take_wait_seconds();
    out.comm_wait_s += comm_wait;
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (step > 0 || rc.train.steps == 1) timed_seconds += dt, timed_steps += 1;
    const double tps = tokens_per_step / dt;
    const double mfu = flops_tok * tps / (peak * world_size);  // peak is per rank
    // measured bubble per stage: time blocked on pipeline transfers / schedule time
    std::vector<double> bubble(static_cast<size_t>(P), 0.0);
    {
      Tensor b = Tensor::zeros({P}, DType::f64, MemCategory::other);
      b.data<double>()[pp_rank] = sched_s > 0 ? executor.idle_seconds() / sched_s : 0;
      if (pp_group && P > 1) pp_group->all_gather(b)->wait();
      bubble.assign(b.data<double>(), b.data<double>() + P);
    }
    out.losses.push_back(loss);
    out.grad_norms.push_back(gnorm);
    out.loss_scales.push_back(used_scale);
    out.skipped.push_back(skip);
    out.step_seconds.push_back(dt);
    out.bubbles.push_back(bubble);
    if (!std::isfinite(loss)) throw Error(fmt::format("loss is {} at step {}", loss, step + 1));

    const bool last = step + 1 == rc.train.steps;
    const MemStats mem = memory();
    metrics.write(fmt::format("{{\"type\":\"train\",\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},{}"
                              "\"tokens_per_s\":{:.1f},\"mfu\":{:.4f},\"step_s\":{:.4f},\"comm_wait_s\":{:.4f},"
                              "\"tensor_comm_s\":{:.4f},\"checkpoint_s\":{:.4f},{}\"bubble\":[{:.4f}],\"bubble_predicted\":{:.4f},"
                              "\"peak_bytes\":{}}}",
                              step + 1, loss, lr, std::isfinite(gnorm) ? fmt::format("{}", gnorm) : "null",
                              fp16 ? fmt::format("\"loss_scale\":{},\"skipped\":{},", used_scale, skip) : "", tps, mfu, dt, comm_wait, tp.traffic().seconds - tensor_comm0,
                              ckpt_s, kernel_times.empty() ? "" : fmt::format("\"kernel_s\":{:.5f},", kernel_s),
                              fmt::join(bubble, ","), predicted_bubble, peak_bytes_json(mem)));
    if (!opts.quiet && ((step + 1) % rc.log.every == 0 || step == 0 || last)) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
      const double eta = elapsed / double(step + 1) * double(rc.train.steps - step - 1);
      log::info("step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | mfu {:.1f}% | eta {}",
                step + 1, rc.train.steps, loss, lr, gnorm, tps, 100 * mfu, format_duration(eta));
    }
    if ((rc.eval.every > 0 && (step + 1) % rc.eval.every == 0) || last) {
      double val = evaluate();
      if (std::isfinite(val)) {
        out.final_val_loss = val;
        metrics.write(fmt::format("{{\"type\":\"eval\",\"step\":{},\"val_loss\":{}}}", step + 1, val));
        if (!opts.quiet)
          log::info("eval   {:>6}/{} | val loss {:.4f}{}", step + 1, rc.train.steps, val,
                    rc.data.synthetic ? fmt::format(" | floor {:.4f} ({:+.1f}%)", floor, 100 * (val / floor - 1))
                                      : "");
      }
    }
    if (stop) {
      log::info("stopping after step {} on signal {}: saved; resume with --resume", step + 1,
                stop == SIGTERM ? "SIGTERM" : stop == SIGUSR1 ? "SIGUSR1" : std::to_string(stop));
      out.stopped_by_signal = stop;
      break;
    }
  }
  out.tokens_per_s = timed_steps > 0 ? tokens_per_step * timed_steps / timed_seconds : 0;
  {
    const MemStats peak = memory();
    out.peak_params = peak.peak[size_t(MemCategory::params)];
    out.peak_grads = peak.peak[size_t(MemCategory::grads)];
    out.peak_optimizer = peak.peak[size_t(MemCategory::optimizer)];
    out.peak_activations = peak.peak[size_t(MemCategory::activations)];
    out.peak_comm = peak.peak[size_t(MemCategory::comm)];
    out.peak_other = peak.peak[size_t(MemCategory::other)];
    out.peak_total = peak.total_peak;
  }
  out.mfu = flops_tok * out.tokens_per_s / (peak * world_size);
  const MemStats mem = memory();
  if (!opts.quiet)
    log::info("done: {} steps in {} | {:.0f} tok/s | mfu {:.1f}% | peak memory {} (activations {})", rc.train.steps,
              format_duration(std::chrono::duration<double>(Clock::now() - run_start).count()), out.tokens_per_s,
              100 * out.mfu, mib(mem.total_peak), mib(mem.peak[size_t(MemCategory::activations)]));
  return out;
}

}  // namespace trident::launch
