// trident sweep and plan --calibrate (see sweep.hpp).
#include "launch/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe.hpp"
#include "core/safetensors.hpp"
#include "kernels/gemm.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/planner.hpp"
#include "launch/trainer.hpp"
#include "model/params.hpp"
#include "model/transformer.hpp"

namespace trident::launch {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Row {
  int64_t data = 1, tensor = 1, pipeline = 1;
  std::string reason;  // not run: why
  double tokens_per_s = 0, mfu = 0, bubble = 0;
  std::vector<double> runs;  // tokens/s of each repeat
  double mem[6] = {};        // params, grads, optimizer, activations, comm + other, total (max over ranks)
  PlanResult plan;
};

std::vector<double> max_over(parallel::MpiCommunicator& w, std::vector<double> v) {
  Tensor t = Tensor::zeros({int64_t(v.size())}, DType::f64, MemCategory::other);
  std::copy(v.begin(), v.end(), t.data<double>());
  if (w.size() > 1) w.all_reduce(t, {.op = parallel::ReduceOp::max})->wait();
  return std::vector<double>(t.data<double>(), t.data<double>() + v.size());
}

double mib(double b) { return b / (1024.0 * 1024.0); }

}  // namespace

void sweep(const SweepOptions& o, parallel::MpiCommunicator& world) {
  const int n = world.size();
  if (o.cluster.empty()) fail_input("sweep: missing --cluster CLUSTER.yaml (the planner's prediction needs one)");
  std::vector<std::string> single = o.sets;
  for (const auto& s : single_process_overrides()) single.push_back(s);
  Recipe base = load_recipe(o.recipe, single, 1);
  base.overrides = o.sets;
  const Cluster cl = load_cluster(o.cluster, base.train.precision);
  std::vector<std::array<int64_t, 3>> meshes = o.meshes;
  if (meshes.empty())
    for (int64_t t = 1; t <= n; ++t)
      for (int64_t p = 1; p <= n / t; ++p)
        if (n % (t * p) == 0) meshes.push_back({n / (t * p), t, p});
  std::vector<Row> rows(meshes.size());
  for (int64_t rep = 0; rep < std::max<int64_t>(1, o.repeats); ++rep)
    for (size_t k = 0; k < meshes.size(); ++k) {
      const auto [d, t, p] = meshes[k];
      Row& row = rows[k];
      row.data = d, row.tensor = t, row.pipeline = p;
      if (rep > 0 && !row.reason.empty()) continue;
      std::vector<std::string> sets = o.sets;
      for (const auto& s : std::vector<std::string>{
               fmt::format("parallel.data={}", d), fmt::format("parallel.tensor={}", t),
               fmt::format("parallel.pipeline={}", p), fmt::format("train.steps={}", o.warmup + o.steps),
               "eval.batches=0", "log.metrics=", "checkpoint.dir=", "log.trace="})
        sets.push_back(s);
      if (p == 1) sets.push_back("parallel.virtual_stages=1");
      Recipe rc;
      try {
        rc = load_recipe(o.recipe, sets, n);
      } catch (const InputError& e) {
        row.reason = e.what();
        const size_t key = row.reason.find("key '");
        if (key != std::string::npos) row.reason = row.reason.substr(key);
        log::info("sweep: data {} x tensor {} x pipeline {}: not valid ({})", d, t, p, row.reason);
        continue;
      }
      log::info("sweep: data {} x tensor {} x pipeline {}: {} warm-up + {} measured steps", d, t, p, o.warmup, o.steps);
      TrainOptions quiet;
      quiet.quiet = true;
      const TrainSummary s = train(rc, quiet);
      double secs = 0, bubble = 0;
      for (int64_t i = o.warmup; i < int64_t(s.step_seconds.size()); ++i) {
        secs += s.step_seconds[size_t(i)];
        double b = 0;
        for (double x : s.bubbles[size_t(i)]) b += x;
        bubble += s.bubbles[size_t(i)].empty() ? 0 : b / double(s.bubbles[size_t(i)].size());
      }
      const double tokens = double(rc.train.global_batch * rc.model.seq_len) * double(o.steps);
      row.runs.push_back(tokens / secs);
      row.bubble = bubble / double(o.steps);
      const auto m =
          max_over(world, {double(s.peak_params), double(s.peak_grads), double(s.peak_optimizer),
                           double(s.peak_activations), double(s.peak_comm + s.peak_other), double(s.peak_total)});
      std::copy(m.begin(), m.end(), row.mem);
      row.plan = plan_one(base, cl,
                          {d, t, p, rc.parallel.virtual_stages, rc.train.micro_batch, rc.parallel.zero,
                           rc.train.recompute, rc.parallel.schedule, rc.parallel.sequence_parallel});
      std::vector<double> sorted = row.runs;  // the median over repeats (the machine is shared)
      std::sort(sorted.begin(), sorted.end());
      row.tokens_per_s = sorted[sorted.size() / 2];
      row.mfu = model::flops_per_token(rc.model) * row.tokens_per_s / (double(n) * cl.peak_flops);
    }
  if (world.rank() != 0) return;
  // table, CSV, JSON
  fs::create_directories(o.out_dir);
  std::ofstream csv(fs::path(o.out_dir) / "sweep.csv");
  csv << "data,tensor,pipeline,valid,tokens_per_s,predicted_tokens_per_s,mfu,predicted_mfu,bubble,predicted_bubble,"
         "peak_params,peak_grads,peak_optimizer,peak_activations,peak_buffers,peak_total,predicted_params,"
         "predicted_grads,predicted_optimizer,predicted_activations,predicted_buffers,predicted_total,reason\n";
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  fmt::print("{:>4} {:>4} {:>4} {:>12} {:>12} {:>7} {:>10} {:>10} {:>7} {:>8} {:>8}\n", "D", "T", "P", "tokens/s",
             "predicted", "MFU", "peak MiB", "pred MiB", "mem err", "bubble", "pred");
  const Row* best_measured = nullptr;
  const Row* best_predicted = nullptr;
  double worst_mem = 0;
  for (const Row& r : rows) {
    const auto& pm = r.plan.memory;
    const bool ran = r.reason.empty();
    const double err = ran && r.mem[5] > 0 ? pm.total() / r.mem[5] - 1 : 0;
    if (ran) {
      worst_mem = std::max(worst_mem, std::abs(err));
      if (!best_measured || r.tokens_per_s > best_measured->tokens_per_s) best_measured = &r;
      if (!best_predicted || r.plan.tokens_per_s > best_predicted->plan.tokens_per_s) best_predicted = &r;
      fmt::print("{:>4} {:>4} {:>4} {:>12.0f} {:>12.0f} {:>6.1f}% {:>10.1f} {:>10.1f} {:>+6.1f}% {:>7.1f}% {:>7.1f}%\n",
                 r.data, r.tensor, r.pipeline, r.tokens_per_s, r.plan.tokens_per_s, 100 * r.mfu, mib(r.mem[5]),
                 mib(pm.total()), 100 * err, 100 * r.bubble, 100 * r.plan.bubble_fraction);
    } else {
      fmt::print("{:>4} {:>4} {:>4} not valid: {}\n", r.data, r.tensor, r.pipeline, r.reason);
    }
    csv << fmt::format(
        "{},{},{},{},{:.1f},{:.1f},{:.4f},{:.4f},{:.4f},{:.4f},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},"
        "{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{}\n",
        r.data, r.tensor, r.pipeline, ran ? 1 : 0, r.tokens_per_s, r.plan.tokens_per_s, r.mfu, r.plan.mfu, r.bubble,
        r.plan.bubble_fraction, r.mem[0], r.mem[1], r.mem[2], r.mem[3], r.mem[4], r.mem[5], pm.params, pm.grads,
        pm.optimizer, pm.activations, pm.buffers, pm.total(), json_quote(r.reason));
    auto memory = [](double params, double grads, double optimizer, double activations, double buffers, double total) {
      return nlohmann::ordered_json{{"params", params},           {"grads", grads},     {"optimizer", optimizer},
                                    {"activations", activations}, {"buffers", buffers}, {"total", total}};
    };
    json.push_back(
        {{"data", r.data},
         {"tensor", r.tensor},
         {"pipeline", r.pipeline},
         {"valid", ran},
         {"reason", ran ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.reason)},
         {"measured",
          {{"tokens_per_s", r.tokens_per_s},
           {"mfu", r.mfu},
           {"bubble", r.bubble},
           {"memory_bytes", memory(r.mem[0], r.mem[1], r.mem[2], r.mem[3], r.mem[4], r.mem[5])}}},
         {"predicted",
          {{"tokens_per_s", r.plan.tokens_per_s},
           {"mfu", r.plan.mfu},
           {"bubble", r.plan.bubble_fraction},
           {"memory_bytes", memory(pm.params, pm.grads, pm.optimizer, pm.activations, pm.buffers, pm.total())}}}});
  }
  write_file_atomic((fs::path(o.out_dir) / "sweep.json").string(),
                    json.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (best_measured)
    fmt::print(
        "fastest measured: data {} x tensor {} x pipeline {} | fastest predicted: data {} x tensor {} x pipeline "
        "{} | {} (it measured {:.1f}% of the fastest) | largest memory error {:.1f}%\n",
        best_measured->data, best_measured->tensor, best_measured->pipeline, best_predicted->data,
        best_predicted->tensor, best_predicted->pipeline,
        best_measured == best_predicted ? "the planner's top choice is the measured one"
                                        : "the planner's top choice differs",
        100 * best_predicted->tokens_per_s / best_measured->tokens_per_s, 100 * worst_mem);
  log::info("sweep: {}/sweep.csv and sweep.json written; chart: python3 bench/plot_sweep.py {}", o.out_dir, o.out_dir);
}

void calibrate(const CalibrateOptions& o, parallel::MpiCommunicator& world) {
  if (o.base_cluster.empty()) fail_input("plan --calibrate: missing --cluster BASE.yaml (the file to calibrate)");
  std::vector<std::string> single = o.sets;
  for (const auto& s : single_process_overrides()) single.push_back(s);
  const Recipe rc = load_recipe(o.recipe, single, 1);
  const Cluster base = load_cluster(o.base_cluster, rc.train.precision);
  // every rank at once trains the recipe alone: the achieved model FLOP/s per rank
  double achieved = 0, bandwidth_mem = 0;
  {
    std::vector<std::string> sets = single;
    for (const char* s : {"train.steps=6", "eval.batches=0", "log.metrics=", "checkpoint.dir=", "log.trace="})
      sets.push_back(s);
    const Recipe one = load_recipe(o.recipe, sets, 1);
    TrainOptions alone;
    alone.quiet = true;
    alone.single_process = true;
    world.barrier()->wait();
    const TrainSummary s = train(one, alone);
    // every rank at once: the memory bandwidth each sees (an AdamW-like sweep over 4 arrays)
    const int64_t len = int64_t(16) << 20;
    std::vector<float> p(static_cast<size_t>(len), 1.f), g(p.size(), 0.5f), m1(p.size()), m2(p.size());
    world.barrier()->wait();
    int passes = 0;
    const auto b0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - b0).count() < 0.5 || passes < 2) {
      for (int64_t i = 0; i < len; ++i) {
        m1[size_t(i)] = 0.9f * m1[size_t(i)] + 0.1f * g[size_t(i)];
        m2[size_t(i)] = 0.95f * m2[size_t(i)] + 0.05f * g[size_t(i)] * g[size_t(i)];
        p[size_t(i)] -= 1e-3f * m1[size_t(i)] / (std::sqrt(m2[size_t(i)]) + 1e-8f);
      }
      ++passes;
    }
    bandwidth_mem = 28.0 * double(len) * passes / std::chrono::duration<double>(Clock::now() - b0).count();
    bandwidth_mem = -max_over(world, {-bandwidth_mem})[0];
    // the step without its optimizer part: the compute rate
    double secs = 0;
    for (size_t i = 2; i < s.step_seconds.size(); ++i) secs += s.step_seconds[i];
    const double steps = double(s.step_seconds.size() - 2);
    const double optimizer =
        optimizer_bytes_per_element(Precision::fp32) * double(model::ParamRegistry(one.model).total()) / bandwidth_mem;
    achieved = model::flops_per_token(one.model) * double(one.train.global_batch * one.model.seq_len) * steps /
               std::max(secs - steps * optimizer, 0.5 * secs);
    achieved = -max_over(world, {-achieved})[0];  // the slowest rank sets the pace
  }
  // and GEMMs of the recipe's MLP shape [rows, hidden] x [hidden, ffn], for reference
  const int64_t M = std::min<int64_t>(rc.train.micro_batch * rc.model.seq_len, 4096), K = rc.model.hidden,
                N = rc.model.ffn_hidden;
  std::vector<float> a(static_cast<size_t>(M * K), 0.5f), b(static_cast<size_t>(K * N), 0.25f),
      c(static_cast<size_t>(M * N));
  kernels::gemm<float>(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c.data(), N);
  world.barrier()->wait();
  int reps = 0;
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < 1.0 || reps < 3) {
    kernels::gemm<float>(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c.data(), N);
    ++reps;
  }
  const double rate = 2.0 * double(M * N * K) * reps / std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> rates = max_over(world, {-rate});  // the slowest rank sets the pace
  const double slowest = -rates[0];
  // link: ping-pong between ranks 0 and 1
  double bandwidth = base.intra.bandwidth, latency = base.intra.latency;
  if (world.size() >= 2) {
    auto pingpong = [&](int64_t elems, int rounds) {
      Tensor buf = Tensor::zeros({elems}, DType::f32, MemCategory::comm);
      world.barrier()->wait();
      const auto s = Clock::now();
      for (int i = 0; i < rounds; ++i) {
        if (world.rank() == 0)
          world.send(buf, {.peer = 1, .tag = 7})->wait(), world.recv(buf, {.peer = 1, .tag = 8})->wait();
        if (world.rank() == 1)
          world.recv(buf, {.peer = 0, .tag = 7})->wait(), world.send(buf, {.peer = 0, .tag = 8})->wait();
      }
      return std::chrono::duration<double>(Clock::now() - s).count() / (2.0 * rounds);  // one way
    };
    latency = pingpong(2, 2000);
    const double big = pingpong(int64_t(8) << 20, 10);  // 32 MiB
    bandwidth = 32.0 * 1024 * 1024 / std::max(big - latency, 1e-9);
    if (world.rank() != 0) latency = bandwidth = 0;  // rank 0's measurement, for everyone
    const auto both = max_over(world, {latency, bandwidth});
    latency = both[0], bandwidth = both[1];
  }
  if (world.rank() != 0) return;
  const double fraction = std::min(1.0, achieved / base.peak_flops);
  std::ifstream in(o.base_cluster);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string outtext = fmt::format(
      "# Calibrated by `trident plan {} --calibrate` with {} ranks from {}: the measured values\n"
      "# below override the base file's.\n",
      o.recipe, world.size(), o.base_cluster);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("gemm_fraction:", 0) == 0 || line.rfind("intra_node:", 0) == 0 ||
        line.rfind("memory_bandwidth_gbps:", 0) == 0)
      continue;
    outtext += line + "\n";
  }
  outtext += fmt::format(
      "gemm_fraction: {:.4f}   # {:.1f} GFLOP/s of model FLOPs per rank training alone, all ranks at "
      "once ({:.1f} GFLOP/s on [{}, {}] x [{}, {}] GEMMs)\n",
      fraction, achieved / 1e9, slowest / 1e9, M, K, K, N);
  outtext +=
      fmt::format("intra_node: {{bandwidth_gbps: {:.3f}, latency_us: {:.2f}}}   # ping-pong between ranks 0 and 1\n",
                  bandwidth / 1e9, latency * 1e6);
  outtext += fmt::format("memory_bandwidth_gbps: {:.3f}   # an AdamW sweep per rank, all ranks at once\n",
                         bandwidth_mem / 1e9);
  if (!o.out.empty() && fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path());
  std::ofstream(o.out) << outtext;
  fmt::print(
      "calibrated {} -> {}: gemm_fraction {:.4f} ({:.1f} GFLOP/s of model FLOPs per rank of {:.1f} peak; GEMM "
      "alone {:.1f}), link {:.2f} GB/s, {:.1f} us, memory {:.2f} GB/s per rank\n",
      o.base_cluster, o.out, fraction, achieved / 1e9, base.peak_flops / 1e9, slowest / 1e9, bandwidth / 1e9,
      latency * 1e6, bandwidth_mem / 1e9);
}

}  // namespace trident::launch
