// The training loop (see trainer.hpp).
#include "launch/trainer.hpp"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/allocator.hpp"
#include "core/dataset.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"
#include "model/transformer.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/tensor_parallel.hpp"
#include "parallel/zero_storage.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

namespace trident::launch {

using Clock = std::chrono::steady_clock;

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
  explicit MetricsFile(const std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    f_ = std::fopen(path.c_str(), "w");
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
  const int world_size = world ? world->size() : 1;
  if (par.data * par.tensor * par.pipeline != world_size)
    fail_input("{}: parallel mesh data({}) x tensor({}) x pipeline({}) != world size {}", rc.source, par.data,
               par.tensor, par.pipeline, world_size);
  if (par.pipeline > 1) fail_input("{}: key 'parallel.pipeline': pipeline parallelism is not implemented yet; expected 1, found {}", rc.source, par.pipeline);
  parallel::Communicator *dp = nullptr, *tp_group = nullptr;
  std::unique_ptr<parallel::MpiCommunicator> kv_group;  // ranks sharing replicated KV heads
  if (world) {
    groups = std::make_unique<parallel::ProcessGroups>(
        parallel::Topology(int(par.data), int(par.pipeline), int(par.tensor), par.order), *world);
    dp = &groups->get(parallel::GroupKind::data);
    auto& tg = groups->get(parallel::GroupKind::tensor);
    tp_group = &tg;
    if (m.kv_heads < par.tensor)  // KV head r * kv_heads / tensor is held by tensor / kv_heads ranks
      kv_group = tg.split(int(tg.rank() * m.kv_heads / par.tensor), tg.rank(), "kv");
  }
  // Tensor parallelism: the region ops the model calls (identity with one rank).
  parallel::TensorParallel tp(tp_group, par.sequence_parallel);
  const int dp_rank = dp ? dp->rank() : 0;
  const bool leader = !world || world->rank() == 0;
  const int64_t micro_steps = rc.micro_batches_per_step(par.data);
  const int64_t rank_batch = rc.train.global_batch / par.data;  // sequences per rank per step

  // Threads: every core for one rank; an even share of the node's cores per
  // rank otherwise; train.threads or OMP_NUM_THREADS override.
  int threads = rc.train.threads > 0 ? int(rc.train.threads) : default_threads(world_size);
  kernels::set_num_threads(threads);

  // Data.
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

  // Model, data parallelism / ZeRO, optimizer. ZeRO 0-1: the model owns full
  // buffers and GradientSync reduces buckets; ZeRO 2-3: ZeroStorage owns the
  // shards and serves the model segment by segment.
  const int zero = int(par.zero);
  model::Transformer<float> net(m, uint64_t(rc.seed), /*full_buffers=*/zero < 2, &tp);
  const int64_t n_params = net.registry().total();  // this rank's flat buffer
  const int64_t n_global = model::consolidated_numel(m);
  auto ctx = net.make_activations(B, recompute);
  std::unique_ptr<parallel::GradientSync> sync;
  std::unique_ptr<parallel::ZeroStorage> zstore;
  int64_t shard_begin = 0, shard_end = n_params;
  std::vector<int64_t> shard_counts;
  float *param_shard = nullptr, *grad_shard = nullptr;  // element shard_begin of this rank's shard
  if (zero < 2) {
    sync = std::make_unique<parallel::GradientSync>(dp, n_params, DType::f32, zero, par.bucket_bytes);
    shard_begin = sync->shard_begin(), shard_end = sync->shard_end(), shard_counts = sync->shard_counts();
    param_shard = net.params().data<float>() + shard_begin;
    grad_shard = net.grads().data<float>() + shard_begin;
  } else {
    zstore = std::make_unique<parallel::ZeroStorage>(dp, net.segments(), n_params, zero);
    net.set_storage(zstore.get());
    shard_begin = zstore->shard_begin(), shard_end = zstore->shard_end(), shard_counts = zstore->shard_counts();
    if (zero == 2)
      net.registry().initialize(zstore->full_params().data<float>(), uint64_t(rc.seed));
    else  // each rank generates only its shard: Philox by global index
      net.registry().initialize_range(zstore->param_shard(), shard_begin, shard_end, uint64_t(rc.seed));
    param_shard = zstore->param_shard();
    grad_shard = zstore->grad_shard();
  }
  optim::AdamW<float> opt(net.registry(), rc.optim, shard_begin, shard_end);
  // Gradients of replicated parameters: with sequence parallelism each tensor
  // rank saw only its rows, so norms and row-parallel biases are summed over
  // the tensor group; replicated KV heads are summed over their KV group
  // always. Done on the data-reduced shard (the sums commute).
  std::vector<std::pair<int64_t, int64_t>> tensor_replicated, kv_replicated;  // relative to grad_shard
  for (const auto& p : net.registry().params()) {
    const int64_t lo = std::max(shard_begin, p.offset), hi = std::min(shard_end, p.offset + p.numel);
    if (hi <= lo) continue;
    if (p.replication == model::Replication::tensor && tp.sequence_parallel())
      tensor_replicated.push_back({lo - shard_begin, hi - shard_begin});
    if (p.replication == model::Replication::kv_group) kv_replicated.push_back({lo - shard_begin, hi - shard_begin});
  }
  const double flops_tok = model::flops_per_token(m);
  const double peak = rc.log.peak_flops > 0 ? rc.log.peak_flops : measure_gemm_peak();
  const MemStats mem0 = HostAllocator::instance().stats();

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
  log::info("batch: global {} = micro {} x {} accumulation steps | recompute {} | {} threads | {}", rc.train.global_batch,
            B, micro_steps, rc.train.recompute, threads, kernels::cpu_gemm_backend());
  const double P = double(n_params), d = double(par.data);
  log::info("data parallel {} x ZeRO {} | per rank: params {} grads {} optimizer {} activations {} | ZeRO formula: "
            "params {} = {}, grads {} = {}, optimizer {} = {}",
            par.data, zero, mib(mem0.current[0]), mib(mem0.current[1]), mib(mem0.current[2]), mib(mem0.current[3]),
            zero >= 3 ? "4P/d" : "4P", mib(int64_t(zero >= 3 ? 4 * P / d : 4 * P)), zero >= 2 ? "4P/d" : "4P",
            mib(int64_t(zero >= 2 ? 4 * P / d : 4 * P)), zero >= 1 ? "8P/d" : "8P",
            mib(int64_t(zero >= 1 ? 8 * P / d : 8 * P)));
  log::info("model FLOPs/token {:.4g} | MFU reference {:.1f} GFLOP/s ({})", flops_tok, peak / 1e9,
            rc.log.peak_flops > 0 ? "log.peak_flops" : "measured sgemm");
  if (rc.data.synthetic)
    log::info("data: synthetic Markov source (vocab {}, order {}, branching {}) | entropy floor {:.4f} nats/token "
              "(sequence floor {:.4f}, log(vocab) {:.4f})",
              rc.data.syn.vocab, rc.data.syn.order, rc.data.syn.branching, floor, seq_floor,
              std::log(double(rc.data.syn.vocab)));
  if (!rc.checkpoint.dir.empty()) log::warn("checkpoint.* is set but this build does not write checkpoints yet");

  MetricsFile metrics(leader ? rc.log.metrics : std::string());
  metrics.write(fmt::format(
      "{{\"type\":\"start\",\"recipe\":\"{}\",\"params\":{},\"flops_per_token\":{},\"peak_flops\":{},"
      "\"entropy_floor\":{},\"sequence_floor\":{},\"threads\":{}}}",
      rc.source, n_global, flops_tok, peak, rc.data.synthetic ? fmt::format("{}", floor) : "null",
      rc.data.synthetic ? fmt::format("{}", seq_floor) : "null", threads));

  std::vector<int32_t> sample(static_cast<size_t>(T + 1)), tokens(size_t(B * T)), targets(size_t(B * T));
  auto load_batch = [&](uint64_t first_index, bool valid) {
    for (int64_t b = 0; b < B; ++b) {
      sampler->sample(first_index + uint64_t(b), valid, T + 1, sample.data());
      std::copy(sample.begin(), sample.begin() + T, tokens.begin() + b * T);
      std::copy(sample.begin() + 1, sample.end(), targets.begin() + b * T);
    }
  };
  auto evaluate = [&]() {
    if (rc.eval.batches == 0 || !sampler->has_valid()) return double(NAN);
    double sum = 0;
    for (int64_t i = 0; i < rc.eval.batches; ++i) {
      load_batch(uint64_t(i * B), true);
      sum += net.forward(*ctx, tokens.data(), targets.data(), 0.0f);
    }
    return sum / double(rc.eval.batches * B * T);
  };

  TrainSummary out;
  out.entropy_floor = floor;
  auto on_ready = [&](int64_t frontier) { sync->grads_ready(net.grads(), frontier); };
  const float dscale = float(1.0 / double(rc.train.global_batch * T));
  const double tokens_per_step = double(rc.train.global_batch * T);
  double timed_seconds = 0, timed_steps = 0;
  auto run_start = Clock::now();
  HostAllocator::instance().reset_peaks();

  for (int64_t step = 0; step < rc.train.steps; ++step) {
    auto t0 = Clock::now();
    const double tensor_comm0 = tp.traffic().seconds;
    double loss_sum = 0;
    for (int64_t micro = 0; micro < micro_steps; ++micro) {
      // this rank's slice of the global batch: samples [dp_rank * rank_batch, ...) of the step
      load_batch(uint64_t(step * rc.train.global_batch + dp_rank * rank_batch + micro * B), false);
      const bool last = micro + 1 == micro_steps;  // reduce once per step
      if (zstore) zstore->begin_backward(micro_steps > 1, last);
      loss_sum += net.forward(*ctx, tokens.data(), targets.data(), dscale);
      net.backward(*ctx, recompute, /*accumulate=*/micro > 0,  // the first micro-batch overwrites
                   last && sync ? std::function<void(int64_t)>(on_ready) : std::function<void(int64_t)>());
    }
    if (sync) sync->finish(net.grads());
    else zstore->finish_step();
    parallel::all_reduce_ranges(tp.group(), grad_shard, tensor_replicated);
    parallel::all_reduce_ranges(kv_group.get(), grad_shard, kv_replicated);
    // every tensor rank has the same loss (the vocab-parallel loss is complete)
    const double loss = parallel::sum_over(dp, loss_sum) / tokens_per_step;
    // the true global norm: with ZeRO >= 1 data ranks hold disjoint reduced
    // shards; tensor ranks hold disjoint slices (replicated ones counted once)
    double sq = optim::sum_of_squares_counted(net.registry(), grad_shard, shard_begin, shard_end);
    if (zero >= 1) sq = parallel::sum_over(dp, sq);
    const double gnorm = std::sqrt(parallel::sum_over(tp.group(), sq));
    if (step == 0 && opts.capture_step1_grads) {
      // this rank's full buffer, then every tensor rank's, consolidated
      const int tsize = tp.size();
      Tensor all = Tensor::zeros({tsize * n_params}, DType::f32, MemCategory::other);
      Tensor full = all.view(tp.rank() * n_params, {n_params});
      std::memcpy(full.data<float>() + shard_begin, grad_shard, size_t(shard_end - shard_begin) * sizeof(float));
      if (zero >= 1 && dp) dp->all_gather(full, {shard_counts})->wait();
      if (tp.group()) tp.group()->all_gather(all)->wait();
      std::vector<const float*> ranks;
      for (int r = 0; r < tsize; ++r) ranks.push_back(all.data<float>() + r * n_params);
      out.step1_grads.assign(size_t(n_global), 0.0f);
      model::consolidate(out.step1_grads.data(), m, ranks);
    }
    const double lr = optim::learning_rate(rc.optim, step, rc.train.steps);
    opt.step(param_shard, grad_shard, lr, step + 1, optim::clip_scale(gnorm, rc.optim.grad_clip));
    if (sync) sync->gather_params(net.params());
    else zstore->gather_params();
    const double comm_wait = sync ? sync->take_wait_seconds() : zstore->take_wait_seconds();
    out.comm_wait_s += comm_wait;
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (step > 0 || rc.train.steps == 1) timed_seconds += dt, timed_steps += 1;
    const double tps = tokens_per_step / dt;
    const double mfu = flops_tok * tps / (peak * world_size);  // peak is per rank
    out.losses.push_back(loss);
    out.grad_norms.push_back(gnorm);
    if (!std::isfinite(loss)) throw Error(fmt::format("loss is {} at step {}", loss, step + 1));

    const bool last = step + 1 == rc.train.steps;
    const MemStats mem = HostAllocator::instance().stats();
    metrics.write(fmt::format("{{\"type\":\"train\",\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},"
                              "\"tokens_per_s\":{:.1f},\"mfu\":{:.4f},\"step_s\":{:.4f},\"comm_wait_s\":{:.4f},"
                              "\"tensor_comm_s\":{:.4f},\"peak_bytes\":{}}}",
                              step + 1, loss, lr, gnorm, tps, mfu, dt, comm_wait, tp.traffic().seconds - tensor_comm0,
                              peak_bytes_json(mem)));
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
  }
  out.tokens_per_s = timed_steps > 0 ? tokens_per_step * timed_steps / timed_seconds : 0;
  {
    const MemStats peak = HostAllocator::instance().stats();
    out.peak_params = peak.peak[size_t(MemCategory::params)];
    out.peak_grads = peak.peak[size_t(MemCategory::grads)];
    out.peak_optimizer = peak.peak[size_t(MemCategory::optimizer)];
  }
  out.mfu = flops_tok * out.tokens_per_s / (peak * world_size);
  const MemStats mem = HostAllocator::instance().stats();
  if (!opts.quiet)
    log::info("done: {} steps in {} | {:.0f} tok/s | mfu {:.1f}% | peak memory {} (activations {})", rc.train.steps,
              format_duration(std::chrono::duration<double>(Clock::now() - run_start).count()), out.tokens_per_s,
              100 * out.mfu, mib(mem.total_peak), mib(mem.peak[size_t(MemCategory::activations)]));
  return out;
}

}  // namespace trident::launch
