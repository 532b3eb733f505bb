// The training loop (see trainer.hpp): build, then one named call per part
// of a step. Instrumentation is the run report's (run_report.hpp).
#include "launch/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <tuple>

#include "core/atomic_file.hpp"
#include "core/crc32c.hpp"
#include "core/data/dataset_record.hpp"
#include "core/data/sample_index.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "kernels/buffer.hpp"
#include "kernels/gemm.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/checkpoint/dir_lock.hpp"
#include "launch/train/nonfinite.hpp"
#include "launch/train/part_optimizer.hpp"
#include "launch/train/run_report.hpp"
#include "launch/train/step.hpp"
#include "launch/train/stop_signals.hpp"
#include "model/parallelize.hpp"
#include "model/qk_clip.hpp"
#include "model/transformer.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/mixed_precision.hpp"
#include "optim/muon.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/mesh.hpp"
#include "parallel/paired_passes.hpp"
#include "parallel/rank_reductions.hpp"
#include "parallel/schedule.hpp"

namespace trident::launch {
namespace {

const char* kind_name(const data::DatasetRecord& r) { return r.tokenizer ? enum_name(*r.tokenizer) : "none"; }

// Threads: every core for one rank; an even share of the cores it may use
// among the ranks on its machine otherwise (the mesh's node group: MPI's
// shared-memory split, whatever the launcher); train.threads or
// OMP_NUM_THREADS override.
int threads_per_rank(const Recipe& rc, int ranks_on_node) {
  if (rc.train.threads > 0) return int(rc.train.threads);
  if (std::getenv("OMP_NUM_THREADS")) return omp_get_max_threads();  // the launcher's word
  return std::max(1, omp_get_num_procs() / std::max(1, ranks_on_node));
}

// The token source, and the synthetic source's entropy floors (else 0).
// Datasets: their records (prepare's PREFIX.meta.json) must name one
// tokenizer; the sample indexes are built by one rank per node while the
// others wait.
std::unique_ptr<data::TokenSampler> make_sampler(const Recipe& rc, parallel::Mesh& mesh, RunFacts& facts,
                                                 data::DatasetRecord& first) {
  if (rc.data.synthetic) {
    const auto& s = rc.data.syn;
    const data::MarkovSource src(s.vocab, s.order, s.branching, s.skew, uint64_t(s.seed));
    facts.entropy_floor = src.entropy_rate(), facts.sequence_floor = src.sequence_floor(rc.model.seq_len);
    return data::make_markov_sampler(s.vocab, s.order, s.branching, s.skew, uint64_t(s.seed));
  }
  data::DatasetSpec spec;
  spec.sample_len = rc.model.seq_len + 1, spec.seed = uint64_t(rc.seed);
  spec.train_samples = rc.train.steps * rc.train.global_batch;
  spec.valid_samples = rc.eval.batches * rc.train.micro_batch;
  for (const auto* split : {&rc.data.train, &rc.data.valid})
    for (const DataSource& d : *split) {
      (split == &rc.data.train ? spec.train : spec.valid).push_back({d.path, d.weight});
      const data::DatasetRecord r = data::read_dataset_record(d.path);
      spec.max_token.push_back(r.max_id);
      if (r.max_id >= rc.model.vocab)
        fail_input("{}: token id {} does not fit model.vocab({}) of {} (the largest id its record {} gives)", d.path,
                   r.max_id, rc.model.vocab, rc.source, r.path);
      if (r.path.empty()) continue;
      if (first.path.empty()) first = r;
      if (r.tokenizer != first.tokenizer || r.tokenizer_crc32c != first.tokenizer_crc32c || r.eod != first.eod)
        fail_input("{}: datasets made by different tokenizers: {} ({} {:08x}, eod {}) and {} ({} {:08x}, eod {})",
                   rc.source, first.path, kind_name(first), first.tokenizer_crc32c, first.eod, r.path, kind_name(r),
                   r.tokenizer_crc32c, r.eod);
    }
  facts.eod = first.eod;
  if ((rc.data.document_mask || rc.data.mask_eod_loss) && first.eod < 0)
    fail_input(
        "{}: key '{}': needs datasets with an end-of-document token; {} records none (prepare with a BPE or "
        "SentencePiece tokenizer, or --eod-token)",
        rc.source, rc.data.document_mask ? "data.document_mask" : "data.mask_eod_loss",
        first.path.empty() ? rc.data.train[0].path : first.path);

  parallel::Communicator* world = mesh.world();
  // A cache directory the user named is used or the run refuses to start (the
  // default, next to the data, falls back to an index in memory with a warning).
  if (!rc.data.cache_dir.empty())
    parallel::agree_or_fail(
        world,
        [&] {
          const std::string& dir = rc.data.cache_dir;
          if (const std::string why = unwritable_dir(dir); !why.empty())
            fail_input(
                "{}: key 'data.cache_dir': expected a directory this run can write the sample index to, found "
                "'{}' ({})",
                rc.source, dir, why);
        },
        fmt::format("data.cache_dir {}: rejected by another rank (its error says why)", rc.data.cache_dir));
  data::IndexBuild build{mesh.node_rank() == 0,
                         [world] {
                           if (world) world->barrier()->wait();
                         },
                         rc.data.cache_dir};
  auto sampler = data::make_dataset_sampler(spec, build);
  if (sampler->vocab_needed() > rc.model.vocab)
    fail_input("{}: token id {} does not fit model.vocab({}) of {}", rc.data.train[0].path, sampler->vocab_needed() - 1,
               rc.model.vocab, rc.source);
  return sampler;
}

// The first parameter whose gradient in this rank's shards is not finite:
// "layers.3.attn.wqkv[17]", or "" (the shards are clean).
std::string first_nonfinite_gradient(const model::ParamRegistry& reg, parallel::DataParallelParts& parts) {
  for (const parallel::DataParallelPart& part : parts) {
    std::vector<float> g(size_t(part.dp->shard_size()));
    copy_bytes(g.data(), part.dp->grad_shard(), g.size() * sizeof(float));
    const auto bad = std::find_if(g.begin(), g.end(), [](float x) { return !std::isfinite(x); });
    if (bad == g.end()) continue;
    const int64_t at = part.shard_begin() + (bad - g.begin());
    for (const auto& q : reg.params())
      if (at >= q.offset && at < q.offset + q.numel) return fmt::format("{}[{}] = {}", q.name, at - q.offset, *bad);
    return fmt::format("element {} of the flat buffer", at);
  }
  return "";
}

// Test-only faults (core/fault.hpp): a NaN in this rank's reduced gradients.
void poison_gradients(parallel::DataParallelParts& parts) {
  const float nan = std::nanf("");
  parallel::DataParallel& dp = *parts[0].dp;
  if (dp.shard_size() > 0) copy_bytes(dp.grad_shard() + dp.shard_size() / 2, &nan, sizeof(float));
}

// The true global norm of the (scaled) gradients: the ranks holding a part
// with a sharded stage hold disjoint reduced shards of it (summed over its
// replicas), the expert group's ranks disjoint experts (summed over them);
// tensor and pipeline ranks hold disjoint slices (replicated ones and the
// tied copy counted once).
// Whether this rank is the first of a group (or has none).
bool first_of(const parallel::Communicator* group) { return !group || group->rank() == 0; }

double global_grad_norm(const model::ParamRegistry& reg, parallel::DataParallelParts& parts, parallel::Mesh& mesh) {
  double sq = 0, whole = 0;
  for (const parallel::DataParallelPart& part : parts) {
    double mine = kernels::sum_of_squares_ranges(part.dp->grad_shard(),
                                                 model::norm_counted_runs(reg, part.shard_begin(), part.shard_end()));
    if (part.dp->sharded()) mine = parallel::sum_over(part.shard_group, mine);
    if (part.peers) mine = parallel::sum_over(part.peers, mine);
    // whole experts (expert_tensor 1): their expert group spans the tensor ranks; the pipeline stages are left
    (&part != &parts[0] && reg.experts().whole ? whole : sq) += mine;
  }
  sq = parallel::sum_over(mesh.model_parallel(), sq);
  if (reg.experts().whole) sq += parallel::sum_over(mesh.pipeline(), whole);
  return std::sqrt(sq);
}

// What checkpoints record of the data's tokenizer, and its file's bytes.
std::pair<checkpoint::IndexTokenizer, std::string> tokenizer_record(const data::DatasetRecord& r) {
  checkpoint::IndexTokenizer t{*r.tokenizer, "", "", r.vocab, r.eod};
  std::string bytes;
  if (!r.tokenizer_file.empty()) {
    data::check_tokenizer_copy(r);
    for (const char* name : {"tokenizer.json", "tokenizer.model", "vocab.json"})
      if (r.tokenizer_file.size() > strlen(name) && r.tokenizer_file.ends_with(std::string(".") + name)) t.file = name;
    if (t.file.empty())
      fail_input("{}: not a tokenizer copy prepare writes (recorded in {})", r.tokenizer_file, r.path);
    std::ifstream in(r.tokenizer_file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    t.crc32c = fmt::format("{:08x}", crc32c(bytes.data(), bytes.size()));
    if (t.crc32c != fmt::format("{:08x}", r.tokenizer_crc32c))
      fail_input("{}: changed while being read (recorded in {})", r.tokenizer_file, r.path);
  }
  return {t, bytes};
}

// A checkpoint trained on data of another tokenizer is not continued.
void check_resume_tokenizer(const std::string& from, const data::DatasetRecord& data) {
  const std::string index = (std::filesystem::path(from) / "index.json").string();
  const checkpoint::CheckpointIndex x = checkpoint::read_index(index);
  if (!x.tokenizer || !data.tokenizer) return;  // older checkpoints or data: nothing recorded
  const std::string mine = fmt::format("{:08x}", data.tokenizer_crc32c);
  if (x.tokenizer->kind != *data.tokenizer || (x.tokenizer->crc32c != mine && !x.tokenizer->crc32c.empty()))
    fail_input(
        "{}: key 'tokenizer': the checkpoint was trained on data made by a {} tokenizer (CRC-32C {}), this run's data "
        "({}) by a {} tokenizer (CRC-32C {}); continuing would train on other token ids",
        index, x.tokenizer->kind, x.tokenizer->crc32c.empty() ? "none" : x.tokenizer->crc32c, data.path,
        *data.tokenizer, data.tokenizer_file.empty() ? "none" : mine);
}

// A resume writes its checkpoints into checkpoint.dir and moves `latest`
// there: when that directory holds checkpoints, the resume must continue
// one of them (`--resume auto`, the directory, or one of its steps: going
// back in one's own run is a choice), never a checkpoint from elsewhere (an
// import, another run's), whose steps would be written beside that run's
// and take `latest` away from it.
void check_resume_keeps_other_runs(const Recipe& rc, const std::string& arg, const std::string& from) {
  if (from.empty() || rc.checkpoint.dir.empty()) return;
  const std::string held = existing_checkpoints(rc.checkpoint.dir);
  if (held.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::equivalent(fs::path(from).parent_path(), fs::path(rc.checkpoint.dir), ec)) return;
  fail_input(
      "--resume {}: checkpoint.dir {} already holds another run's checkpoints ({}); resuming from {} would write "
      "its steps beside them and move `latest` away from them: continue that run with --resume auto, or set "
      "another checkpoint.dir",
      arg, rc.checkpoint.dir, held, from);
}

// Resume: the checkpoint fills this rank's shard (parameters and optimizer
// state, from any mesh); returns the step to continue from, or nothing when
// no checkpoint was loaded (a step-0 checkpoint, e.g. `trident import`'s, is
// loaded and returns 0).
std::optional<int64_t> resume(const Recipe& rc, const std::string& arg, const RankState& state, parallel::Mesh& mesh,
                              const data::DatasetRecord& data) {
  if (arg.empty()) {
    // a fresh run would rotate the checkpoints there away
    if (const std::string held = existing_checkpoints(rc.checkpoint.dir); !rc.checkpoint.dir.empty() && !held.empty())
      fail_input(
          "checkpoint.dir {} already holds checkpoints ({}): continue that run with --resume, or set another "
          "checkpoint.dir (a fresh run there would replace them)",
          rc.checkpoint.dir, held);
    return std::nullopt;
  }
  // Every rank reads `latest` and the index itself; they agree before any of
  // them goes on, so a rank that fails here (or a shared filesystem that
  // shows the ranks different files) is an error on every rank, never some
  // ranks training while the others have left.
  std::string from;
  parallel::agree_or_fail(
      mesh.world(),
      [&] {
        from = resolve_resume(rc, arg);
        if (!from.empty()) check_resume_tokenizer(from, data);
        check_resume_keeps_other_runs(rc, arg, from);
      },
      fmt::format("--resume {}: rejected by another rank (its error says why)", arg));
  const double mine = from.empty() ? 1 : 0;
  const double most = parallel::max_over(mesh.world(), mine), least = -parallel::max_over(mesh.world(), -mine);
  if (most != least)
    fail_input("--resume {}: this rank finds {}, another rank {}; is {} the same directory on every node?", arg,
               from.empty() ? "no checkpoint" : from, from.empty() ? "one" : "none",
               rc.checkpoint.dir.empty() ? arg : rc.checkpoint.dir);
  if (from.empty()) {
    log::info("resume: no checkpoint in {} yet; starting from step 0", rc.checkpoint.dir);
    return std::nullopt;
  }
  const int64_t step = load_checkpoint(rc, from, state, mesh.world());
  log::info("resumed from {} after step {}", from, step);
  return step;
}

// Rank 0 holds the checkpoint directory's lock for the whole run; every rank
// stops when it cannot.
std::unique_ptr<CheckpointDirLock> lock_checkpoint_dir(const Recipe& rc, parallel::Mesh& mesh) {
  if (rc.checkpoint.dir.empty()) return nullptr;
  std::unique_ptr<CheckpointDirLock> lock;
  parallel::agree_or_fail(
      mesh.world(),
      [&] {
        if (!mesh.world() || mesh.world()->rank() == 0) lock = std::make_unique<CheckpointDirLock>(rc.checkpoint.dir);
      },
      fmt::format("checkpoint.dir {}: rank 0 could not lock it (its message says why)", rc.checkpoint.dir));
  return lock;
}

}  // namespace

TrainSummary train(const Recipe& rc, const TrainOptions& opts) {
  // Process groups, threads, data.
  parallel::Mesh mesh(parallel::mesh_spec(rc, opts.single_process), rc.source);
  const parallel::Coords at = mesh.coords();
  RunFacts facts;
  facts.threads = threads_per_rank(rc, mesh.node_size());
  kernels::set_num_threads(facts.threads);
  fault::configure(mesh.world() ? mesh.world()->rank() : 0);
  if (!fault::describe().empty()) log::warn("TRIDENT_FAULT (tests only): {}", fault::describe());
  data::DatasetRecord data_record;  // the tokenizer the data was made with (none: synthetic)
  const std::unique_ptr<data::TokenSampler> sampler = make_sampler(rc, mesh, facts, data_record);

  // Model chunks (this pipeline rank's, its tensor-parallel slices), data
  // parallelism, optimizer with fp32 master weights, loss scaler.
  StepShape shape = step_shape(rc, at.pp, at.dp);
  shape.eod = int32_t(facts.eod);
  const model::ParallelModel pm = model::parallelize(rc, mesh);
  model::Transformer<float>& net = *pm.net;
  const parallel::TensorParallel& tp = *pm.tp;
  parallel::DataParallelParts& dp = *pm.dp;
  const model::ParamRegistry& reg = net.registry();
  std::vector<std::unique_ptr<PartOptimizer>> parts;  // the dense part, then the experts' (split over ranks)
  for (parallel::DataParallelPart& part : dp) parts.push_back(std::make_unique<PartOptimizer>(rc, reg, part, mesh));
  PartOptimizer& first = *parts[0];        // the dense part (all of it without split experts)
  std::unique_ptr<model::QkClip> qk_clip;  // optim.muon.qk_clip (docs/optim.md#qk-clip)
  if (rc.optim.muon.qk_clip.on) {
    net.track_max_logits();
    qk_clip = std::make_unique<model::QkClip>(reg, rc.model, rc.optim.muon.qk_clip.threshold);
  }
  optim::LossScaler scaler(rc.train);
  auto publish = [&] {
    for (auto& p : parts) p->master.publish();
    dp.publish_params();
  };
  if (rc.train.precision != Precision::fp32) publish();
  StepRunner runner(net, dp, mesh.pipeline(), mesh.data(), mesh.context(), *sampler, shape);

  // The report, then resume and checkpoints.
  facts.params = model::consolidated_numel(rc.model);
  facts.flops_per_token = model::flops_per_token(rc.model);
  std::tie(facts.peak_flops, facts.peak_source) = mfu_reference(rc, mesh.device(), &facts.peak_cache_key);
  facts.predicted_bubble =
      parallel::simulate(shape.schedule, shape.stages, shape.virtual_stages, int(shape.micro_batches))
          .bubble_fraction();
  RunReport report(rc, mesh, facts, opts.quiet);
  log_run_start(rc, mesh, facts,
                {&net.dims(), reg.total(),
                 model::chunk_layer_counts(rc.model, shape.stages, shape.virtual_stages, rc.parallel.stage_layers),
                 parallel::describe_zero_memory(int(rc.parallel.zero), reg.total(), rc.parallel.data_shard_size())});
  // checkpoint files are per replica of a model shard: the rank in data x context
  const int replica = mesh.data_context() ? mesh.data_context()->rank() : 0;
  RankState ckpt{&reg,
                 replica,
                 at.pp,
                 at.tp,
                 first.part.shard_begin(),
                 first.part.shard_end(),
                 first.master.params(),
                 first.opt.exp_avg(),
                 first.opt.exp_avg_sq(),
                 first.opt.packed(),
                 first.opt.second_moment_runs(),
                 &scaler.state()};
  // delayed FP8 scaling's state: the same on every rank of a stage, written by its first
  if (rc.train.fp8.recipe == Fp8Recipe::delayed) ckpt.fp8 = net.fp8(), ckpt.fp8_writes = replica == 0 && at.tp == 0;
  // ZeRO 0's replicas and HSDP's hold the same state: the first of them writes it
  ckpt.writes = first_of(rc.parallel.zero >= 1 ? first.part.replica_group : mesh.data_context());
  if (dp.size() > 1) {  // the expert part: its shard over expert-data, after the dense one in the same file
    PartOptimizer& e = *parts[1];
    const parallel::Communicator* expert_data = mesh.expert_data();
    ckpt.experts = {.rank = e.part.peers ? e.part.peers->rank() : 0,
                    .dp = expert_data ? expert_data->rank() : 0,
                    .writes = first_of(rc.parallel.zero >= 1 ? e.part.replica_group : mesh.expert_data()),
                    .shard_begin = e.part.shard_begin(),
                    .shard_end = e.part.shard_end(),
                    .params = e.master.params(),
                    .exp_avg = e.opt.exp_avg(),
                    .exp_avg_sq = e.opt.exp_avg_sq(),
                    .exp_avg_sq_packed = e.opt.packed(),
                    .exp_avg_sq_runs = e.opt.second_moment_runs()};
  }
  const std::unique_ptr<CheckpointDirLock> dir_lock = lock_checkpoint_dir(rc, mesh);
  const std::optional<int64_t> resumed = resume(rc, opts.resume, ckpt, mesh, data_record);
  const int64_t start_step = resumed.value_or(0);
  // The replicas rebuilt from the loaded shards, whatever the step: a step-0
  // checkpoint (an imported model) is as much the model as a later one.
  if (resumed) publish();
  report.start(/*resumed=*/start_step > 0);
  report.restarted(start_step);
  CheckpointSaver saver(rc, mesh.world());
  if (data_record.tokenizer && !rc.checkpoint.dir.empty()) {
    auto [tokenizer, bytes] = tokenizer_record(data_record);
    saver.record_tokenizer(tokenizer, std::move(bytes));
  }
  int64_t shards = 0;  // what a save copies: this rank's shards of every part
  for (const parallel::DataParallelPart& part : dp) shards += part.dp->shard_size();
  saver.prepare(shards);
  const StopWindow stop_window(!rc.checkpoint.dir.empty());

  NonFiniteGuard guard(rc.train, scaler.dynamic());
  for (int64_t step = start_step; step < rc.train.steps; ++step) {
    report.begin_step(step);
    const double tensor_comm0 = tp.traffic().seconds;
    const bool nan_loss = fault::hit(fault::Phase::forward, step + 1);
    runner.load_batch(step);
    if (pm.ep) pm.ep->record_spans(report.traced());
    const double loss_sum = runner.forward_backward(scaler.scale()) + (nan_loss ? std::nan("") : 0.0);
    report.schedule_done(runner.executor(), tp.traffic().seconds - tensor_comm0);
    if (pm.ep) {
      report.expert_exchanges(pm.ep->take_spans());
      report.expert_traffic(pm.ep->take_traffic(), runner.executor().paired_steps(), parallel::take_pass_switches());
    }

    const double sync_start = report.seconds();
    const bool nan_grads = fault::hit(fault::Phase::backward, step + 1);
    dp.finish_gradients();
    if (fault::hit(fault::Phase::reduction, step + 1) || nan_grads) poison_gradients(dp);
    report.span(RunReport::Span::grad_sync, sync_start, report.seconds());
    // the last stage's loss, over the data and context groups (every tensor rank has the same)
    const double loss =
        parallel::sum_over(mesh.pipeline(), parallel::sum_over(mesh.data_context(), loss_sum)) / runner.loss_tokens();
    // unscaled; inf/NaN on any rank makes it non-finite everywhere
    const double gnorm = global_grad_norm(reg, dp, mesh) / scaler.scale();
    if (opts.on_gradients) opts.on_gradients({step, rc, mesh, reg, dp});

    // A non-finite loss (on any rank) or gradient norm never reaches the
    // parameters or a checkpoint (launch/train/nonfinite.hpp).
    const bool bad_loss = parallel::max_over(mesh.world(), std::isfinite(loss) ? 0 : 1) != 0;
    const bool nonfinite = guard.check(
        step, loss, bad_loss, gnorm, [&] { return first_nonfinite_gradient(reg, dp); },
        [&] {
          if (saver.pending()) saver.finish();  // the earlier (finite) state's save completes
        });

    const std::vector<double> max_logit = qk_clip ? step_max_logits(net, mesh) : std::vector<double>{};
    int64_t clipped = 0;
    const double lr = optim::learning_rate(rc.optim, step, rc.train.steps);
    const double opt_start = report.seconds(), used_scale = scaler.scale();
    const bool skip = nonfinite || scaler.skips(gnorm);
    if (!skip) {
      for (auto& p : parts)
        p->step(lr, scaler.next_update(), optim::clip_scale(gnorm, rc.optim.grad_clip) / used_scale);
      if (qk_clip)  // the attention weights are the dense part's
        clipped = qk_clip->apply(first.master.params(), first.part.shard_begin(), first.part.shard_end(), max_logit);
      publish();
    }
    if (!nonfinite) scaler.update(skip);
    report.span(RunReport::Span::optimizer, opt_start, report.seconds());
    if (opts.on_updated) opts.on_updated({step, rc, mesh, reg, dp});

    // all ranks agree whether any of them was signalled (one number per step)
    const int stop = rc.checkpoint.dir.empty() ? 0 : int(parallel::max_over(mesh.world(), stop_window.pending()));
    const double ckpt_start = report.seconds();
    saver.after_step(step + 1, stop != 0, ckpt, opts.quiet);
    report.end_step(
        {step, loss, lr, gnorm, used_scale, scaler.scale(), skip && !nonfinite, nonfinite, dp.take_wait_seconds(),
         report.seconds() - ckpt_start, sampler->train_samples_per_source(uint64_t((step + 1) * rc.train.global_batch)),
         rc.model.moe.enabled ? std::optional<MoeLoad>(runner.moe_load()) : std::nullopt,
         rc.model.mtp.depth > 0 ? runner.mtp_loss() : std::vector<double>{}, layer_max(max_logit, rc.model.heads),
         qk_clip ? clipped : -1, qk_clip ? qk_margin(max_logit, rc.optim.muon.qk_clip.threshold) : 0.0,
         rc.train.fp8.on() ? std::optional<Fp8StepStats>(runner.fp8_stats()) : std::nullopt});

    if ((rc.eval.every > 0 && (step + 1) % rc.eval.every == 0) || step + 1 == rc.train.steps)
      report.evaluated(step, runner.evaluate(rc.eval.batches), runner.evaluate_sources(rc.eval.batches));
    if (stop) {
      report.stopped(step, stop);
      saver.mark_stopped(step + 1, signal_name(stop));
      break;
    }
  }
  return report.finish();
}

// Every rank's reduced gradients, consolidated into the Hugging Face layout:
// each part's shard -> the part whole over its replicas -> every rank's
// buffer over the world (each with its tensor, pipeline and expert place;
// the replicas write the same values).
std::vector<float> StepGradients::consolidated() const {
  const auto& m = recipe.model;
  const auto& par = recipe.parallel;
  const int64_t n = registry.total();
  std::vector<float> mine(size_t(n), 0.0f);
  for (const parallel::DataParallelPart& part : data_parallel) {
    parallel::DataParallel& dp = *part.dp;
    float* at = mine.data() + part.base;
    copy_bytes(at + dp.shard_begin(), dp.grad_shard(), size_t(dp.shard_size()) * sizeof(float));
    if (dp.sharded() && part.shard_group && part.shard_group->size() > 1) {
      Tensor t = Tensor::zeros({part.numel}, DType::f32, MemCategory::other);
      std::copy(at, at + part.numel, t.data<float>());
      part.shard_group->all_gather(t, {dp.shard_counts()})->wait();
      std::copy(t.data<float>(), t.data<float>() + part.numel, at);
    }
  }
  // buffer sizes differ between pipeline stages: gather them as doubles (exact for floats), each after its place
  const parallel::Coords c = mesh.coords();
  const int expert_rank = data_parallel.size() > 1 && data_parallel[1].peers ? data_parallel[1].peers->rank() : 0;
  std::vector<double> packed = {double(c.tp), double(c.pp), double(expert_rank)};
  packed.insert(packed.end(), mine.begin(), mine.end());
  std::vector<int64_t> counts;
  const std::vector<double> all = parallel::gather_varying(mesh.world(), packed, &counts);
  std::vector<float> values(all.begin(), all.end());
  std::vector<std::unique_ptr<model::ParamRegistry>> regs;
  std::vector<std::pair<const model::ParamRegistry*, const float*>> parts;
  const int experts = data_parallel.size() > 1 ? int(par.expert) : 1;
  const bool whole = m.moe.enabled && par.whole_experts();
  int64_t off = 0;
  for (const int64_t count : counts) {
    const double* place = all.data() + off;
    regs.push_back(
        std::make_unique<model::ParamRegistry>(m, model::TensorShard{int(place[0]), int(par.tensor)},
                                               model::pipeline_chunks(m, int(par.pipeline), int(par.virtual_stages),
                                                                      par.stage_layers, int(place[1]), par.schedule),
                                               model::ExpertShard{int(place[2]), experts, whole}));
    parts.push_back({regs.back().get(), values.data() + off + 3});
    off += count;
  }
  std::vector<float> out(size_t(model::consolidated_numel(m)));
  model::consolidate(out.data(), m, parts);
  return out;
}

}  // namespace trident::launch
