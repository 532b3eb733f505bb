// The training loop (see trainer.hpp): build, then one named call per part
// of a step. Instrumentation is the run report's (run_report.hpp).
#include "launch/trainer.hpp"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "kernels/buffer.hpp"
#include "kernels/gemm.hpp"
#include "core/sample_index.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/prepare.hpp"
#include "launch/run_report.hpp"
#include "launch/step.hpp"
#include "launch/stop_signals.hpp"
#include "model/transformer.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/mixed_precision.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/mesh.hpp"
#include "parallel/rank_reductions.hpp"
#include "parallel/schedule.hpp"

namespace trident::launch {
namespace {

// Threads: every core for one rank; an even share of the node's cores per
// rank otherwise; train.threads or OMP_NUM_THREADS override.
int threads_per_rank(const Recipe& rc, int world) {
  if (rc.train.threads > 0) return int(rc.train.threads);
  if (std::getenv("OMP_NUM_THREADS")) return omp_get_max_threads();  // the launcher's word
  int local = world;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(var)) {
      local = std::max(1, std::atoi(v));
      break;
    }
  return std::max(1, omp_get_num_procs() / local);
}

// The token source, and the synthetic source's entropy floors (else 0).
// Datasets: their records (prepare's PREFIX.meta.json) must name one
// tokenizer; the sample indexes are built by one rank per node while the
// others wait.
std::unique_ptr<TokenSampler> make_sampler(const Recipe& rc, parallel::Mesh& mesh, RunFacts& facts) {
  if (rc.data.synthetic) {
    const auto& s = rc.data.syn;
    const MarkovSource src(s.vocab, s.order, s.branching, s.skew, uint64_t(s.seed));
    facts.entropy_floor = src.entropy_rate(), facts.sequence_floor = src.sequence_floor(rc.model.seq_len);
    return make_markov_sampler(s.vocab, s.order, s.branching, s.skew, uint64_t(s.seed));
  }
  DatasetSpec spec;
  spec.sample_len = rc.model.seq_len + 1, spec.seed = uint64_t(rc.seed);
  spec.train_samples = rc.train.steps * rc.train.global_batch;
  spec.valid_samples = rc.eval.batches * rc.train.micro_batch;
  DatasetRecord first;
  for (const auto* split : {&rc.data.train, &rc.data.valid})
    for (const DataSource& d : *split) {
      (split == &rc.data.train ? spec.train : spec.valid).push_back({d.path, d.weight});
      const DatasetRecord r = read_dataset_record(d.path);
      spec.max_token.push_back(r.max_id);
      if (r.path.empty()) continue;
      if (first.path.empty()) first = r;
      if (r.tokenizer != first.tokenizer || r.tokenizer_crc32c != first.tokenizer_crc32c || r.eod != first.eod)
        fail_input("{}: datasets made by different tokenizers: {} ({} {:08x}, eod {}) and {} ({} {:08x}, eod {})",
                   rc.source, first.path, first.tokenizer, first.tokenizer_crc32c, first.eod, r.path, r.tokenizer,
                   r.tokenizer_crc32c, r.eod);
    }
  facts.eod = first.eod;
  if ((rc.data.document_mask || rc.data.mask_eod_loss) && first.eod < 0)
    fail_input("{}: key '{}': needs datasets with an end-of-document token; {} records none (prepare with a BPE or "
               "SentencePiece tokenizer, or --eod-token)",
               rc.source, rc.data.document_mask ? "data.document_mask" : "data.mask_eod_loss",
               first.path.empty() ? rc.data.train[0].path : first.path);

  parallel::Communicator* world = mesh.world();
  IndexBuild build{mesh.node_rank() == 0, [world] {
                     if (world) world->barrier()->wait();
                   },
                   rc.data.cache_dir};
  auto sampler = make_dataset_sampler(spec, build);
  if (sampler->vocab_needed() > rc.model.vocab)
    fail_input("{}: token id {} does not fit model.vocab({}) of {}", rc.data.train[0].path,
               sampler->vocab_needed() - 1, rc.model.vocab, rc.source);
  return sampler;
}

// Test-only fault injection (docs/testing.md): TRIDENT_FAULT=nan_loss:N makes
// step N's loss NaN on every rank.
double injected_loss(int64_t step, double loss) {
  static const int64_t nan_step = [] {
    const char* f = std::getenv("TRIDENT_FAULT");
    return f && std::strncmp(f, "nan_loss:", 9) == 0 ? std::atoll(f + 9) : int64_t(-1);
  }();
  return step + 1 == nan_step ? std::nan("") : loss;
}

parallel::DataParallelSpec data_parallel_spec(const Recipe& rc, parallel::Mesh& mesh, const model::ParamRegistry& reg,
                                              const StepShape& shape) {
  const auto shared = model::shared_gradient_ranges(reg, rc.model, shape.stages, rc.parallel.sequence_parallel);
  return {int(rc.parallel.zero),
          rc.parallel.bucket_bytes,
          mesh.device(),
          shape.pipelined(),
          shape.micro_batches,
          mesh.data(),
          {shared.tied, shared.tensor_replicated, shared.kv_replicated, mesh.embedding(), mesh.tensor(), mesh.kv()}};
}

// The true global norm of the (scaled) gradients: data ranks with a sharded
// stage hold disjoint reduced shards; tensor and pipeline ranks hold disjoint
// slices (replicated ones and the tied copy counted once).
double global_grad_norm(const model::ParamRegistry& reg, parallel::DataParallel& dp, parallel::Mesh& mesh) {
  double sq = optim::sum_of_squares_counted(reg, dp.grad_shard(), dp.shard_begin(), dp.shard_end());
  if (dp.sharded()) sq = parallel::sum_over(mesh.data(), sq);
  return std::sqrt(parallel::sum_over(mesh.model_parallel(), sq));
}

// Resume: the checkpoint fills this rank's shard (parameters and optimizer
// state, from any mesh); returns the step to continue from.
int64_t resume(const Recipe& rc, const std::string& arg, const RankState& state, parallel::Mesh& mesh) {
  if (arg.empty()) return 0;
  const std::string from = resolve_resume(rc, arg);
  if (from.empty()) {
    log::info("resume: no checkpoint in {} yet; starting from step 0", rc.checkpoint.dir);
    return 0;
  }
  const int64_t step = load_checkpoint(rc, from, state, mesh.world());
  log::info("resumed from {} after step {}", from, step);
  return step;
}

}  // namespace

TrainSummary train(const Recipe& rc, const TrainOptions& opts) {
  // Process groups, threads, data.
  parallel::Mesh mesh(parallel::mesh_spec(rc, opts.single_process), rc.source);
  const parallel::Coords at = mesh.coords();
  RunFacts facts;
  facts.threads = threads_per_rank(rc, mesh.world_size());
  kernels::set_num_threads(facts.threads);
  kernels::set_matmul_precision(rc.train.precision);
  const std::unique_ptr<TokenSampler> sampler = make_sampler(rc, mesh, facts);

  // Model chunks (this pipeline rank's, its tensor-parallel slices), data
  // parallelism, optimizer with fp32 master weights, loss scaler.
  StepShape shape = step_shape(rc, at.pp, at.dp);
  shape.eod = int32_t(facts.eod);
  parallel::TensorParallel tp(mesh.tensor(), rc.parallel.sequence_parallel);
  const auto chunks =
      model::pipeline_chunks(rc.model, shape.stages, shape.virtual_stages, rc.parallel.stage_layers, at.pp);
  model::Transformer<float> net(rc.model, uint64_t(rc.seed), parallel::model_owns_buffers(int(rc.parallel.zero)), &tp,
                                chunks, mesh.device());
  const model::ParamRegistry& reg = net.registry();
  auto dp = parallel::make_data_parallel(data_parallel_spec(rc, mesh, reg, shape), net.segments(), reg.total(),
                                         &net.params(), &net.grads());
  net.set_storage(dp->storage());
  dp->initialize([&](float* dst, int64_t begin, int64_t end) {  // Philox by global index: a shard only its own
    std::vector<float> host(size_t(end - begin));
    reg.initialize_range(host.data(), begin, end, uint64_t(rc.seed));
    kernels::copy(dst, host.data(), end - begin);
  });
  optim::AdamW<float> opt(reg, rc.optim, dp->shard_begin(), dp->shard_end(), mesh.device());
  net.set_precision(rc.train.precision);
  optim::MasterWeights master(dp->param_shard(), dp->shard_size(), rc.train.precision, mesh.device());
  optim::LossScaler scaler(rc.train);
  auto publish = [&] { master.publish(), dp->publish_params(); };
  if (rc.train.precision != Precision::fp32) publish();
  StepRunner runner(net, *dp, mesh.pipeline(), mesh.data(), *sampler, shape);

  // The report, then resume and checkpoints.
  facts.params = model::consolidated_numel(rc.model);
  facts.flops_per_token = model::flops_per_token(rc.model);
  std::tie(facts.peak_flops, facts.peak_source) = mfu_reference(rc, mesh.device());
  facts.predicted_bubble =
      parallel::simulate(shape.schedule, shape.stages, shape.virtual_stages, int(shape.micro_batches))
          .bubble_fraction();
  RunReport report(rc, mesh, facts, opts.quiet);
  log_run_start(rc, mesh, facts,
                {&net.dims(), reg.total(),
                 model::chunk_layer_counts(rc.model, shape.stages, shape.virtual_stages, rc.parallel.stage_layers),
                 parallel::describe_zero_memory(int(rc.parallel.zero), reg.total(), rc.parallel.data)});
  const RankState ckpt{&reg,
                       at.dp,
                       at.pp,
                       at.tp,
                       dp->shard_begin(),
                       dp->shard_end(),
                       master.params(),
                       opt.exp_avg(),
                       opt.exp_avg_sq(),
                       &scaler.state()};
  const int64_t start_step = resume(rc, opts.resume, ckpt, mesh);
  if (start_step > 0) publish();  // the replicas rebuilt from the loaded shards
  report.start(/*resumed=*/start_step > 0);
  CheckpointSaver saver(rc, mesh.world());
  saver.prepare(dp->shard_size());
  const StopWindow stop_window(!rc.checkpoint.dir.empty());

  for (int64_t step = start_step; step < rc.train.steps; ++step) {
    report.begin_step(step);
    const double tensor_comm0 = tp.traffic().seconds;
    runner.load_batch(step);
    const double loss_sum = runner.forward_backward(scaler.scale());
    report.schedule_done(runner.executor(), tp.traffic().seconds - tensor_comm0);

    const double sync_start = report.seconds();
    dp->finish_gradients();
    report.span(RunReport::Span::grad_sync, sync_start, report.seconds());
    // the last stage's loss, over the data group (every tensor rank has the same)
    const double loss = injected_loss(
        step, parallel::sum_over(mesh.pipeline(), parallel::sum_over(mesh.data(), loss_sum)) / runner.loss_tokens());
    // a non-finite loss stops the run before the update and before any save:
    // no checkpoint is ever written from this state; a background save of an
    // earlier (finite) state is completed first, so the last good one stays
    if (!std::isfinite(loss)) {
      if (saver.pending()) saver.finish();
      throw Error(fmt::format("loss is {} at step {}: stopped before the optimizer step; nothing was saved from this "
                              "state (the last checkpoint, if any, is untouched)",
                              loss, step + 1));
    }
    // unscaled; inf/NaN on any rank makes it non-finite everywhere
    const double gnorm = global_grad_norm(reg, *dp, mesh) / scaler.scale();
    if (opts.on_gradients) opts.on_gradients({step, rc, mesh, reg, *dp});

    const double lr = optim::learning_rate(rc.optim, step, rc.train.steps);
    const double opt_start = report.seconds(), used_scale = scaler.scale();
    const bool skip = scaler.skips(gnorm);
    if (!skip) {
      opt.step(master.params(), dp->grad_shard(), lr, scaler.next_update(),
               optim::clip_scale(gnorm, rc.optim.grad_clip) / used_scale);
      publish();
    }
    scaler.update(skip);
    report.span(RunReport::Span::optimizer, opt_start, report.seconds());

    // all ranks agree whether any of them was signalled (one number per step)
    const int stop = rc.checkpoint.dir.empty() ? 0 : int(parallel::max_over(mesh.world(), stop_window.pending()));
    const double ckpt_start = report.seconds();
    saver.after_step(step + 1, stop != 0, ckpt, opts.quiet);
    report.end_step({step, loss, lr, gnorm, used_scale, scaler.scale(), skip, dp->take_wait_seconds(),
                     report.seconds() - ckpt_start,
                     sampler->train_samples_per_source(uint64_t((step + 1) * rc.train.global_batch))});

    if ((rc.eval.every > 0 && (step + 1) % rc.eval.every == 0) || step + 1 == rc.train.steps)
      report.evaluated(step, runner.evaluate(rc.eval.batches), runner.evaluate_sources(rc.eval.batches));
    if (stop) {
      report.stopped(step, stop);
      break;
    }
  }
  return report.finish();
}

// Every rank's reduced gradients, consolidated into the Hugging Face layout:
// this rank's shard -> its full buffer over the data group -> every tensor
// and pipeline rank's buffer over the model-parallel group.
std::vector<float> StepGradients::consolidated() const {
  const auto& m = recipe.model;
  const auto& par = recipe.parallel;
  auto& dp = data_parallel;
  const int64_t n = registry.total();
  std::vector<float> mine(size_t(n), 0.0f);
  copy_bytes(mine.data() + dp.shard_begin(), dp.grad_shard(), size_t(dp.shard_size()) * sizeof(float));
  if (dp.sharded() && mesh.data() && mesh.data()->size() > 1) {
    Tensor t = Tensor::zeros({n}, DType::f32, MemCategory::other);
    std::copy(mine.begin(), mine.end(), t.data<float>());
    mesh.data()->all_gather(t, {dp.shard_counts()})->wait();
    mine.assign(t.data<float>(), t.data<float>() + n);
  }
  // buffer sizes differ between pipeline stages: gather them as doubles (exact for floats)
  std::vector<int64_t> counts;
  const std::vector<double> all = parallel::gather_varying(mesh.model_parallel(), {mine.begin(), mine.end()}, &counts);
  std::vector<float> values(all.begin(), all.end());
  std::vector<std::unique_ptr<model::ParamRegistry>> regs;
  std::vector<std::pair<const model::ParamRegistry*, const float*>> parts;
  int64_t off = 0;
  const auto members = mesh.model_parallel_members();
  for (size_t i = 0; i < members.size(); ++i) {
    const auto c = members[i];
    regs.push_back(std::make_unique<model::ParamRegistry>(
        m, model::TensorShard{c.tp, int(par.tensor)},
        model::pipeline_chunks(m, int(par.pipeline), int(par.virtual_stages), par.stage_layers, c.pp)));
    parts.push_back({regs.back().get(), values.data() + off});
    off += counts[i];
  }
  std::vector<float> out(size_t(model::consolidated_numel(m)));
  model::consolidate(out.data(), m, parts);
  return out;
}

}  // namespace trident::launch
