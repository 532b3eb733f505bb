// trident sweep and plan --calibrate (see sweep.hpp).
#include "launch/plan/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe/recipe.hpp"
#include "core/safetensors.hpp"
#include "kernels/gemm.hpp"
#include "launch/plan/planner.hpp"
#include "launch/train/trainer.hpp"
#include "model/params.hpp"
#include "model/transformer.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::launch {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Row {
  int64_t data = 1, tensor = 1, pipeline = 1, context = 1, expert = 1;
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
  const Recipe base = load_plan_recipe(o.recipe, o.sets);  // as `trident plan` reads it
  Cluster cl = load_cluster(o.cluster, base.train.precision);
  apply_recipe_fp8(cl, base, o.cluster);
  std::vector<std::array<int64_t, 5>> meshes = o.meshes;
  // every data x tensor x pipeline x context of the world size; MoE models also every expert size (of data x context)
  const MoeConfig& moe = base.model.moe;
  if (meshes.empty())
    for (int64_t c = 1; c <= n; ++c)
      for (int64_t t = 1; t <= n / c; ++t)
        for (int64_t p = 1; p <= n / (c * t); ++p) {
          if (n % (c * t * p)) continue;
          const int64_t d = n / (c * t * p);
          for (int64_t e = 1; e <= (moe.enabled ? d * c : 1); ++e)
            if ((d * c) % e == 0 && (e == 1 || moe.experts % e == 0)) meshes.push_back({d, t, p, c, e});
        }
  // The results directory is usable before any mesh runs (bad input: exit 2).
  parallel::agree_or_fail(
      &world,
      [&] {
        if (world.rank() != 0) return;
        // the directory, or the nearest of its parents that exists (created at the end, when results exist)
        std::error_code ec;
        fs::path at = fs::absolute(o.out_dir, ec);  // the nearest existing place on the way
        while (!at.empty() && !fs::exists(at, ec) && at.has_parent_path() && at.parent_path() != at)
          at = at.parent_path();
        if (const std::string why = unwritable_dir(at.string()); !why.empty())
          fail_input("sweep: --out: expected a directory it can write, found '{}' ({}: {})", o.out_dir, at.string(),
                     why);
      },
      fmt::format("sweep: --out {}: rank 0 cannot write there (its error says why)", o.out_dir));
  std::vector<Row> rows(meshes.size());
  for (int64_t rep = 0; rep < std::max<int64_t>(1, o.repeats); ++rep)
    for (size_t k = 0; k < meshes.size(); ++k) {
      const auto [d, t, p, cx, given] = meshes[k];
      const int64_t ex = given > 0 ? given : base.parallel.expert;  // 0: the recipe's
      Row& row = rows[k];
      row.data = d, row.tensor = t, row.pipeline = p, row.context = cx, row.expert = ex;
      const std::string name =
          fmt::format("data {} x tensor {} x pipeline {}{}{}", d, t, p, cx > 1 ? fmt::format(" x context {}", cx) : "",
                      ex > 1 ? fmt::format(" x expert {}", ex) : "");
      if (rep > 0 && !row.reason.empty()) continue;
      // the recipe on this mesh, as a run of the sweep: no evaluation, metrics, checkpoints or trace
      Recipe rc = base;
      rc.parallel.data = d, rc.parallel.tensor = t, rc.parallel.pipeline = p, rc.parallel.context = cx;
      rc.parallel.expert = ex;
      if (p == 1) rc.parallel.virtual_stages = 1;
      rc.train.steps = o.warmup + o.steps, rc.eval.batches = 0;
      rc.log.metrics.clear(), rc.checkpoint.dir.clear(), rc.log.trace.clear(), rc.log.trace_steps.clear();
      try {
        validate_on_mesh(rc, n);
      } catch (const InputError& e) {
        row.reason = e.what();
        const size_t key = row.reason.find("key '");
        if (key != std::string::npos) row.reason = row.reason.substr(key);
        log::info("sweep: {}: not valid ({})", name, row.reason);
        continue;
      }
      log::info("sweep: {}: {} warm-up + {} measured steps", name, o.warmup, o.steps);
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
      row.plan =
          plan_one(base, cl,
                   {d, t, p, rc.parallel.virtual_stages, rc.train.micro_batch, rc.parallel.zero, rc.train.recompute,
                    rc.parallel.schedule, rc.parallel.sequence_parallel, rc.parallel.stage_layers, cx,
                    rc.parallel.context_mode, ex, rc.parallel.hsdp() ? rc.parallel.data_shard_size() : 0,
                    rc.parallel.zero_accumulate == ZeroAccumulate::shard});
      std::vector<double> sorted = row.runs;  // the median over repeats (the machine is shared)
      std::sort(sorted.begin(), sorted.end());
      row.tokens_per_s = sorted[sorted.size() / 2];
      row.mfu = model::flops_per_token(rc.model) * row.tokens_per_s / (double(n) * cl.peak_flops);
    }
  if (std::all_of(rows.begin(), rows.end(), [](const Row& r) { return !r.reason.empty(); }))
    fail_input("sweep: no mesh ran: all {} meshes are not valid under this recipe and these options (the first: {})",
               rows.size(), rows.empty() ? "none" : rows[0].reason);
  if (world.rank() != 0) return;
  // table, CSV, JSON
  std::error_code made;
  fs::create_directories(o.out_dir, made);
  if (made) throw Error(fmt::format("sweep: --out {}: cannot create it ({})", o.out_dir, made.message()));
  std::string csv;
  csv +=
      "data,tensor,pipeline,context,expert,valid,tokens_per_s,predicted_tokens_per_s,mfu,predicted_mfu,bubble,"
      "predicted_"
      "bubble,"
      "peak_params,peak_grads,peak_optimizer,peak_activations,peak_buffers,peak_total,predicted_params,"
      "predicted_grads,predicted_optimizer,predicted_activations,predicted_buffers,predicted_total,reason\n";
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  fmt::print("{:>4} {:>4} {:>4} {:>4} {:>4} {:>12} {:>12} {:>7} {:>10} {:>10} {:>7} {:>8} {:>8}\n", "D", "T", "P", "C",
             "E", "tokens/s", "predicted", "MFU", "peak MiB", "pred MiB", "mem err", "bubble", "pred");
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
      fmt::print(
          "{:>4} {:>4} {:>4} {:>4} {:>4} {:>12.0f} {:>12.0f} {:>6.1f}% {:>10.1f} {:>10.1f} {:>+6.1f}% {:>7.1f}% "
          "{:>7.1f}%\n",
          r.data, r.tensor, r.pipeline, r.context, r.expert, r.tokens_per_s, r.plan.tokens_per_s, 100 * r.mfu,
          mib(r.mem[5]), mib(pm.total()), 100 * err, 100 * r.bubble, 100 * r.plan.bubble_fraction);
    } else {
      fmt::print("{:>4} {:>4} {:>4} {:>4} {:>4} not valid: {}\n", r.data, r.tensor, r.pipeline, r.context, r.expert,
                 r.reason);
    }
    csv += fmt::format(
        "{},{},{},{},{},{},{:.1f},{:.1f},{:.4f},{:.4f},{:.4f},{:.4f},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},"
        "{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{}\n",
        r.data, r.tensor, r.pipeline, r.context, r.expert, ran ? 1 : 0, r.tokens_per_s, r.plan.tokens_per_s, r.mfu,
        r.plan.mfu, r.bubble, r.plan.bubble_fraction, r.mem[0], r.mem[1], r.mem[2], r.mem[3], r.mem[4], r.mem[5],
        pm.params, pm.grads, pm.optimizer, pm.activations, pm.buffers, pm.total(), json_quote(r.reason));
    auto memory = [](double params, double grads, double optimizer, double activations, double buffers, double total) {
      return nlohmann::ordered_json{{"params", params},           {"grads", grads},     {"optimizer", optimizer},
                                    {"activations", activations}, {"buffers", buffers}, {"total", total}};
    };
    json.push_back(
        {{"data", r.data},
         {"tensor", r.tensor},
         {"pipeline", r.pipeline},
         {"context", r.context},
         {"expert", r.expert},
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
  write_file_atomic((fs::path(o.out_dir) / "sweep.csv").string(), csv);
  write_file_atomic((fs::path(o.out_dir) / "sweep.json").string(),
                    json.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (best_measured)
    fmt::print(
        "fastest measured: data {} x tensor {} x pipeline {} x context {} | fastest predicted: data {} x tensor {} x "
        "pipeline {} x context {} | {} (it measured {:.1f}% of the fastest) | largest memory error {:.1f}%\n",
        best_measured->data, best_measured->tensor, best_measured->pipeline, best_measured->context,
        best_predicted->data, best_predicted->tensor, best_predicted->pipeline, best_predicted->context,
        best_measured == best_predicted ? "the planner's top choice is the measured one"
                                        : "the planner's top choice differs",
        100 * best_predicted->tokens_per_s / best_measured->tokens_per_s, 100 * worst_mem);
  log::info("sweep: {}/sweep.csv and sweep.json written; chart: python3 bench/plot_sweep.py {}", o.out_dir, o.out_dir);
}

namespace {

// Seconds one call of `f` takes: repeated for at least `seconds`, on every rank at once.
template <typename F>
double time_call(parallel::MpiCommunicator& world, F&& f, double seconds) {
  f();  // warm
  world.barrier()->wait();
  int reps = 0;
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds || reps < 3) f(), ++reps;
  return std::chrono::duration<double>(Clock::now() - t0).count() / reps;
}

// The GEMMs of the recipe's layers for every tensor size the world allows,
// timed with the trainer's GEMM: (smallest dimension, fraction of peak),
// FLOP-weighted where several share a smallest dimension.
std::vector<std::pair<double, double>> measure_gemm_table(const Recipe& rc, const Cluster& base,
                                                          parallel::MpiCommunicator& world) {
  std::map<int64_t, std::pair<double, double>> by_dim;  // smallest dimension -> (flops, seconds)
  for (int T = 1; T <= world.size(); ++T) {
    if (world.size() % T || rc.model.heads % T || rc.model.ffn_hidden % T) continue;
    for (const Op& op : layer_ops(rc.model, {rc.train.micro_batch, T, false}, base.rates())) {
      if (op.m == 0) continue;
      std::vector<float> a(static_cast<size_t>(op.m * op.k), 0.5f), b(static_cast<size_t>(op.k * op.n), 0.25f),
          c(static_cast<size_t>(op.m * op.n));
      const double secs = time_call(
          world,
          [&] {
            for (int64_t i = 0; i < op.batch; ++i)
              kernels::gemm<float>(false, false, op.m, op.n, op.k, 1.f, a.data(), op.k, b.data(), op.n, 0.f, c.data(),
                                   op.n);
          },
          0.2);
      auto& [flops, seconds] = by_dim[std::min({op.m, op.n, op.k})];
      flops += op.flops, seconds += secs;
    }
  }
  std::vector<std::pair<double, double>> table;
  for (const auto& [dim, fs] : by_dim) {
    const double rate = -max_over(world, {-fs.first / fs.second})[0];  // the slowest rank sets the pace
    table.emplace_back(double(dim), std::min(1.0, rate / base.peak_flops));
  }
  return table;
}

}  // namespace

void calibrate(const CalibrateOptions& o, parallel::MpiCommunicator& world) {
  if (o.base_cluster.empty()) fail_input("plan --calibrate: missing --cluster BASE.yaml (the file to calibrate)");
  const Recipe rc = load_recipe_on_one_process(o.recipe, o.sets);
  Cluster cal = load_cluster(o.base_cluster, rc.train.precision);
  // the memory bandwidth each rank sees, all ranks at once (an AdamW-like sweep over 4 arrays)
  const int64_t len = int64_t(16) << 20;
  std::vector<float> p(static_cast<size_t>(len), 1.f), g(p.size(), 0.5f), m1(p.size()), m2(p.size());
  const double sweep_s = time_call(
      world,
      [&] {
        for (int64_t i = 0; i < len; ++i) {
          m1[size_t(i)] = 0.9f * m1[size_t(i)] + 0.1f * g[size_t(i)];
          m2[size_t(i)] = 0.95f * m2[size_t(i)] + 0.05f * g[size_t(i)] * g[size_t(i)];
          p[size_t(i)] -= 1e-3f * m1[size_t(i)] / (std::sqrt(m2[size_t(i)]) + 1e-8f);
        }
      },
      0.5);
  cal.memory_bandwidth = -max_over(world, {-28.0 * double(len) / sweep_s})[0];
  cal.memory_fraction = 1;
  // the GEMM table, and the least time a kernel call takes (a 1 x 1 x 1 GEMM)
  cal.gemm_table = measure_gemm_table(rc, cal, world);
  float one = 1, out = 0;
  cal.kernel_floor = max_over(
      world,
      {time_call(
          world, [&] { kernels::gemm<float>(false, false, 1, 1, 1, 1.f, &one, 1, &one, 1, 0.f, &out, 1); }, 0.1)})[0];
  // every rank at once trains the recipe alone; what the GEMMs and the
  // optimizer do not explain is the memory-bound kernels' share: their
  // achieved fraction of the measured bandwidth
  Recipe alone_rc = rc;  // 6 steps, nothing written
  alone_rc.train.steps = 6;
  alone_rc.eval.batches = 0;
  alone_rc.log.metrics.clear();
  alone_rc.checkpoint.dir.clear();
  alone_rc.log.trace.clear();
  alone_rc.log.trace_steps.clear();
  validate_on_mesh(alone_rc, 1);
  TrainOptions alone;
  alone.quiet = true;
  alone.single_process = true;
  world.barrier()->wait();
  const TrainSummary s = train(alone_rc, alone);
  std::vector<double> steps(s.step_seconds.begin() + 2, s.step_seconds.end());
  std::sort(steps.begin(), steps.end());
  const double measured = max_over(world, {steps[steps.size() / 2]})[0];  // the median step, the slowest rank
  const PlanConfig solo{1, 1, 1, 1, rc.train.micro_batch, 0, rc.train.recompute, ScheduleKind::one_f_one_b, false, {}};
  const PlanResult before = plan_one(rc, cal, solo);
  double lo = 0.02, hi = 1.0;  // the plan's step time falls as the fraction rises: bisect
  for (int i = 0; i < 40; ++i) {
    cal.memory_fraction = std::sqrt(lo * hi);
    (plan_one(rc, cal, solo).time.step() > measured ? lo : hi) = cal.memory_fraction;
  }
  const PlanResult after = plan_one(rc, cal, solo);
  // link: ping-pong between ranks 0 and 1
  double bandwidth = cal.intra.bandwidth, latency = cal.intra.latency;
  if (world.size() >= 2) {
    auto pingpong = [&](int64_t elems, int rounds) {
      Tensor buf = Tensor::zeros({elems}, DType::f32, MemCategory::comm);
      world.barrier()->wait();
      const auto t0 = Clock::now();
      for (int i = 0; i < rounds; ++i) {
        if (world.rank() == 0)
          world.send(buf, {.peer = 1, .tag = 7})->wait(), world.recv(buf, {.peer = 1, .tag = 8})->wait();
        if (world.rank() == 1)
          world.recv(buf, {.peer = 0, .tag = 7})->wait(), world.send(buf, {.peer = 0, .tag = 8})->wait();
      }
      return std::chrono::duration<double>(Clock::now() - t0).count() / (2.0 * rounds);  // one way
    };
    latency = pingpong(2, 2000);
    const double big = pingpong(int64_t(8) << 20, 10);  // 32 MiB
    bandwidth = 32.0 * 1024 * 1024 / std::max(big - latency, 1e-9);
    if (world.rank() != 0) latency = bandwidth = 0;  // rank 0's measurement, for everyone
    const auto both = max_over(world, {latency, bandwidth});
    latency = both[0], bandwidth = both[1];
  }
  if (world.rank() != 0) return;
  std::ifstream in(o.base_cluster);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string outtext = fmt::format(
      "# Calibrated by `trident plan {} --calibrate` with {} ranks from {}: the measured values\n"
      "# below override the base file's.\n",
      o.recipe, world.size(), o.base_cluster);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    bool replaced = false;
    for (const char* key : {"gemm_fraction:", "gemm_efficiency:", "intra_node:", "memory_bandwidth_gbps:",
                            "memory_fraction:", "kernel_floor_us:"})
      replaced |= line.rfind(key, 0) == 0;
    if (!replaced) outtext += line + "\n";
  }
  std::vector<std::string> cells;
  for (const auto& [dim, f] : cal.gemm_table) cells.push_back(fmt::format("[{:.0f}, {:.4f}]", dim, f));
  outtext += fmt::format("gemm_fraction: {:.4f}   # the largest measured shape's\n", cal.gemm_table.back().second);
  outtext += fmt::format("gemm_efficiency: [{}]   # the recipe's GEMMs for every tensor size, all ranks at once\n",
                         fmt::join(cells, ", "));
  outtext += fmt::format("memory_bandwidth_gbps: {:.3f}   # an AdamW sweep per rank, all ranks at once\n",
                         cal.memory_bandwidth / 1e9);
  outtext += fmt::format(
      "memory_fraction: {:.4f}   # what the recipe's step on one rank leaves to its memory-bound kernels "
      "(measured {:.4g} s per step)\n",
      cal.memory_fraction, measured);
  outtext += fmt::format("kernel_floor_us: {:.3f}   # a 1 x 1 x 1 GEMM call\n", cal.kernel_floor * 1e6);
  outtext +=
      fmt::format("intra_node: {{bandwidth_gbps: {:.3f}, latency_us: {:.2f}}}   # ping-pong between ranks 0 and 1\n",
                  bandwidth / 1e9, latency * 1e6);
  if (!o.out.empty() && fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path());
  std::ofstream(o.out) << outtext;
  fmt::print(
      "calibrated {} -> {}: GEMMs {} of peak by smallest dimension; memory {:.2f} GB/s per rank, {:.0f}% of it in "
      "the memory-bound kernels; kernel floor {:.2f} us; link {:.2f} GB/s, {:.1f} us; one rank alone: measured "
      "{:.4g} s per step, planned {:.4g} s before and {:.4g} s after\n",
      o.base_cluster, o.out, fmt::join(cells, " "), cal.memory_bandwidth / 1e9, 100 * cal.memory_fraction,
      cal.kernel_floor * 1e6, bandwidth / 1e9, latency * 1e6, measured, before.time.step(), after.time.step());
}

}  // namespace trident::launch
