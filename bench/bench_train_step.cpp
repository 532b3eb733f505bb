// One full training step (forward + backward of every micro-batch, clipping,
// the optimizer) for a recipe, at micro-batch 4 x sequence 64 unless
// overridden; with `--muon` each recipe also under optim.name muon (its
// Newton-Schulz in bf16, and in fp32), so the optimizer_ms of AdamW and
// Muon come from one run.
// Counters: tokens/s, MFU against the measured sgemm peak (the trainer's
// reference) and against the measured FMA peak, the bf16 GEMM peak under
// bf16, and the milliseconds per step of forward, backward and optimizer.
// Usage: bench_train_step [--recipe configs/X.yaml] [--precision fp32|bf16] [--muon] [google-benchmark flags]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench/peak.hpp"
#include "core/recipe/recipe.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"
#include "launch/train/trainer.hpp"
#include "model/transformer.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/muon.hpp"

namespace trident::bench {

static void train_step(benchmark::State& st, std::string recipe_path, std::vector<std::string> sets) {
  const int threads = int(st.range(0));
  kernels::set_num_threads(threads);
  Recipe rc = load_recipe(recipe_path, sets);
  const int64_t B = rc.train.micro_batch, T = rc.model.seq_len, micro = rc.micro_batches_per_step(1);
  // train.precision as the trainer sets it, carried by the model: its GEMMs'
  // math and its storage rounding (the master-weight copy is left out: one
  // pass over the parameters per step)
  model::Transformer<float> net(rc.model, uint64_t(rc.seed), {.precision = rc.train.precision});
  auto recompute = rc.train.recompute;
  auto ctx = net.make_activations(B, recompute);
  // Muon (optim.name muon): its matrices, AdamW over the rest, the momentum in AdamW's exp_avg
  const int64_t total = net.registry().total();
  const std::vector<kernels::MuonMatrix> matrices =
      rc.optim.name == OptimizerKind::muon ? model::muon_matrices(net.registry(), rc.model, 0, total, false)
                                           : std::vector<kernels::MuonMatrix>{};
  optim::AdamW<float> opt(model::without_matrices(model::decay_ranges(net.registry(), rc.optim), matrices, 0),
                          rc.optim);
  optim::Muon<float> muon(matrices, rc.optim.muon, 0, total, 0, total);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(size_t(B * T));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = int32_t((i * 7919) % uint64_t(rc.model.vocab)),
    targets[i] = int32_t((i * 104729) % uint64_t(rc.model.vocab));
  int64_t step = 0;
  using Clock = std::chrono::steady_clock;
  double phase_s[3] = {0, 0, 0};  // forward, backward, optimizer (norm, clip, AdamW)
  auto lap = [&](Clock::time_point& t0, int phase) {
    const auto t1 = Clock::now();
    phase_s[phase] += std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
  };
  for (auto _ : st) {
    auto t0 = Clock::now();
    for (int64_t m = 0; m < micro; ++m) {
      net.forward(*ctx, tokens.data(), targets.data(), 1.0f / float(rc.train.global_batch * T));
      lap(t0, 0);
      net.backward(*ctx, recompute, /*accumulate=*/m > 0);
      lap(t0, 1);
    }
    double norm = std::sqrt(optim::sum_of_squares(net.grads().data<float>(), net.registry().total()));
    opt.step(net.params().data<float>(), net.grads().data<float>(), 1e-4, ++step,
             optim::clip_scale(norm, rc.optim.grad_clip));
    if (!matrices.empty())
      muon.step(net.params().data<float>(), net.grads().data<float>(), opt.exp_avg(), 1e-4,
                optim::clip_scale(norm, rc.optim.grad_clip));
    lap(t0, 2);
  }
  const char* phase_names[3] = {"forward_ms", "backward_ms", "optimizer_ms"};
  for (int i = 0; i < 3; ++i) st.counters[phase_names[i]] = 1e3 * phase_s[i] / double(st.iterations());
  const double tokens_per_step = double(rc.train.global_batch * T);
  const double fpt = model::flops_per_token(rc.model);
  st.counters["tokens/s"] = benchmark::Counter(tokens_per_step, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["model_GFLOP/s"] =
      benchmark::Counter(tokens_per_step * fpt / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  // the GEMM peaks in the same process: fp32 sgemm always, and under bf16
  // the bf16 GEMM's too (their ratio bounds what bf16 can gain over fp32)
  st.counters["sgemm_peak_GFLOP/s"] = kernels::measure_gemm_peak(0.5) / 1e9;
  if (rc.train.precision == Precision::bf16)
    st.counters["bf16_gemm_peak_GFLOP/s"] = kernels::measure_gemm_peak(0.5, Precision::bf16) / 1e9;
  st.counters["fma_peak_GFLOP/s"] = measure_fma_peak(threads) / 1e9;
}

}  // namespace trident::bench

int main(int argc, char** argv) {
  std::string root = TRIDENT_SOURCE_DIR;
  std::vector<std::pair<std::string, std::string>> recipes = {{"demo", root + "/configs/demo.yaml"},
                                                              {"gpt2-124m", root + "/configs/gpt2-124m.yaml"}};
  std::string precision = "fp32";
  bool muon = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--recipe") == 0 && i + 1 < argc) {
      recipes = {{argv[i + 1], argv[i + 1]}};
      ++i;
    } else if (std::strcmp(argv[i], "--muon") == 0) {
      muon = true;
    } else if (std::strcmp(argv[i], "--precision") == 0 && i + 1 < argc) {
      precision = argv[i + 1];
      ++i;
    } else {
      rest.push_back(argv[i]);
    }
  }
  // micro-batch 4 x sequence 64, one micro-batch per step
  std::vector<std::string> sets = {"train.micro_batch=4", "train.global_batch=4", "model.seq_len=64",
                                   "train.precision=" + precision};
  std::vector<std::pair<std::string, std::vector<std::string>>> optimizers = {{"", {}}};
  if (muon)
    optimizers.push_back({"/muon_bf16", {"optim.name=muon"}}),
        optimizers.push_back({"/muon_fp32", {"optim.name=muon", "optim.muon.ns_precision=fp32"}});
  for (auto& [name, path] : recipes)
    for (auto& [suffix, more] : optimizers) {
      std::vector<std::string> all = sets;
      all.insert(all.end(), more.begin(), more.end());
      benchmark::RegisterBenchmark(("train_step/" + name + suffix).c_str(), trident::bench::train_step, path, all)
          ->Arg(1)
          ->Arg(2)
          ->ArgName("threads")
          ->UseRealTime()
          ->MinTime(2.0)
          ->Unit(benchmark::kMillisecond);
    }
  int n = int(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
