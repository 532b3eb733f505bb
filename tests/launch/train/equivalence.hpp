// The equivalence harness (STYLE 8, the centre of the suite): a run under
// some mesh, schedule and ZeRO stage against the single-rank run of the same
// recipe. The data, tensor and pipeline suites share it: the reference run
// (one process, cached per key), the capture of step 1's reduced gradients
// consolidated into the Hugging Face layout (through the trainer's
// on_gradients observer), and one comparison with its failure output.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "launch/train/trainer.hpp"
#include "model/params.hpp"
#include "parallel/data_parallel.hpp"

namespace trident::test {

struct EquivalenceRun : launch::TrainSummary {
  // HSDP: the checks (every step: the reduced gradient shards, the updated
  // parameter shards) in which this rank's shard differed in any bit from
  // another replica's (0 without replicas)
  int64_t replica_mismatches = 0, replica_checks = 0;
  std::vector<float> step1_grads;  // consolidated, the same on every rank; MoE correction biases' slots zeroed
  // MoE models with a correction bias: what its slots hold after each step's
  // reduction, the tokens per expert over every rank (exact integers)
  std::vector<std::vector<float>> expert_counts;
};

// Whether this rank's n floats equal, bit for bit, those of every other rank of the group.
inline bool same_on_every_rank(parallel::Communicator& group, const float* x, int64_t n) {
  Tensor all = Tensor::zeros({n * group.size()}, DType::f32, MemCategory::other);
  std::copy(x, x + n, all.data<float>() + n * group.rank());
  group.all_gather(all)->wait();
  bool same = true;  // what one rank finds, its replicas find too (a difference is seen from both sides)
  for (int r = 0; r < group.size(); ++r)
    same = same && std::memcmp(all.data<float>() + n * r, x, size_t(n) * sizeof(float)) == 0;
  return same;
}

// HSDP: each part's shard (gradients or parameters) against its replicas'.
inline void check_replicas(const launch::StepGradients& g, bool grads, EquivalenceRun& run) {
  for (parallel::DataParallelPart& part : g.data_parallel) {
    if (!part.replica_group || part.replica_group->size() < 2) continue;
    const float* x = grads ? part.dp->grad_shard() : part.dp->param_shard();
    run.replica_checks += 1;
    if (!same_on_every_rank(*part.replica_group, x, part.dp->shard_size())) run.replica_mismatches += 1;
  }
}

inline EquivalenceRun train_with_step1_gradients(const Recipe& rc, launch::TrainOptions opts) {
  EquivalenceRun run;
  // the buffers' places in the consolidated layout: counts, compared exactly apart from the gradients
  std::vector<std::pair<int64_t, int64_t>> buffers;
  int64_t at = 0;
  const model::ParamRegistry whole(rc.model);
  for (const auto& p : whole.params()) {
    const int64_t n = p.valid_rows * p.global_cols();
    if (p.kind == model::ParamKind::buffer) buffers.push_back({at, n});
    at += n;
  }
  opts.on_gradients = [&](const launch::StepGradients& g) {
    check_replicas(g, true, run);
    if (g.step > 0 && buffers.empty()) return;
    std::vector<float> all = g.consolidated();
    std::vector<float> counts;
    for (auto [b, n] : buffers) {
      counts.insert(counts.end(), all.begin() + b, all.begin() + b + n);
      std::fill(all.begin() + b, all.begin() + b + n, 0.0f);
    }
    if (g.step == 0) run.step1_grads = std::move(all);
    if (!buffers.empty()) run.expert_counts.push_back(std::move(counts));
  };
  opts.on_updated = [&](const launch::StepGradients& g) { check_replicas(g, false, run); };
  static_cast<launch::TrainSummary&>(run) = launch::train(rc, opts);
  return run;
}

// An EquivalenceRun as bytes, every field (the reference's copy for the other ranks).
class RunBytes {
 public:
  std::vector<char> bytes;
  size_t at = 0;

  template <typename T>
  void put(const T& v) {
    if constexpr (std::is_arithmetic_v<T>) {
      const char* p = reinterpret_cast<const char*>(&v);
      bytes.insert(bytes.end(), p, p + sizeof(T));
    } else {  // a vector
      put(static_cast<int64_t>(v.size()));
      for (const auto& e : v) put(static_cast<typename T::value_type>(e));
    }
  }
  template <typename T>
  void get(T& v) {
    if constexpr (std::is_arithmetic_v<T>) {
      std::memcpy(&v, bytes.data() + at, sizeof(T));
      at += sizeof(T);
    } else {
      int64_t n = 0;
      get(n);
      v.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        typename T::value_type e{};
        get(e);
        v[size_t(i)] = e;
      }
    }
  }
  // both directions, field by field (one list: a field added to the summary is added here once)
  template <typename Run, typename F>
  static void fields(Run& r, F&& f) {
    f(r.losses), f(r.grad_norms), f(r.loss_scales), f(r.skipped), f(r.step_seconds), f(r.final_val_loss);
    f(r.entropy_floor), f(r.tokens_per_s), f(r.mfu), f(r.comm_wait_s), f(r.bubbles), f(r.predicted_bubble);
    f(r.stopped_by_signal), f(r.expert_tokens), f(r.qk_clipped), f(r.fp8_saturated), f(r.fp8_scale), f(r.qk_margin);
    f(r.peak_params), f(r.peak_grads), f(r.peak_optimizer), f(r.peak_activations), f(r.peak_comm), f(r.peak_other);
    f(r.peak_total), f(r.replica_mismatches), f(r.replica_checks), f(r.step1_grads), f(r.expert_counts);
  }
};
// the summary's size, to catch a field added to it and not to fields()
static_assert(sizeof(launch::TrainSummary) == 10 * sizeof(std::vector<double>) + sizeof(std::vector<bool>) +
                                                  6 * sizeof(double) + sizeof(int64_t) /* the int, padded */ +
                                                  7 * sizeof(int64_t),
              "TrainSummary changed: add the new field to RunBytes::fields");

// The single-rank run of a recipe, once per key for the whole test program.
// Under MPI the world's rank 0 runs it and sends it to the others (which
// would otherwise each run the same single-process training on the shared
// cores); every rank asks for the same keys in the same order.
inline const EquivalenceRun& single_rank_reference(const std::string& key, const std::function<Recipe()>& recipe) {
  static std::map<std::string, EquivalenceRun> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int mpi = 0, rank = 0, world = 1;
  MPI_Initialized(&mpi);
  if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_Comm_size(MPI_COMM_WORLD, &world);
  EquivalenceRun run;
  if (rank == 0) run = train_with_step1_gradients(recipe(), {.quiet = true, .single_process = true});
  if (world > 1) {
    RunBytes b;
    if (rank == 0) RunBytes::fields(run, [&](const auto& v) { b.put(v); });
    int64_t n = int64_t(b.bytes.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    b.bytes.resize(size_t(n));
    MPI_Bcast(b.bytes.data(), int(n), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank != 0) RunBytes::fields(run, [&](auto& v) { b.get(v); });
  }
  return cache.emplace(key, std::move(run)).first->second;
}

inline double relative_l2(const std::vector<float>& ref, const std::vector<float>& run) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = ref[i], b = run[i];
    diff += (a - b) * (a - b), norm += a * a;
  }
  return std::sqrt(diff / norm);
}

struct Tolerance {
  double grads = 1e-5;      // relative L2 of the step-1 gradients
  double loss = 1e-4;       // relative, every step compared
  double grad_norm = 1e-4;  // relative, every step compared (< 0: not compared)
  // MoE: the routes (tokens per expert of every layer, the correction
  // bias's counts) are compared exactly. A route that sits near a tie can
  // flip under rounding that differs between meshes, CPUs and GEMM kernels;
  // from the first step whose routes differ, the runs follow different
  // (equally right) trajectories, so the steps before it are compared and
  // the rest are not. A flip is reported, never silent, and must be what
  // rounding does: not at step 1 (the same weights route the same), and at
  // most `flip_routes` of the step's routes (at least 2 routes) moved; a
  // wrong reduction or update moves far more.
  bool routes = true;  // false: 16-bit runs (router inputs round per mesh): every step compared, routes not
  double flip_routes = 1e-3;
};

// MoE: the first step (0-based) whose routes differ, and how many routes
// moved at it, of how many; step = steps when none differs.
struct RouteFlip {
  size_t step = 0;
  double moved = 0, total = 0;
};
// The routes that moved at one step: |a - b| summed over the counts, halved
// (a moved route leaves one count and joins another), of how many.
template <typename A, typename B>
void add_moved(const std::vector<std::vector<A>>& ref, const std::vector<std::vector<B>>& run, size_t s, double& moved,
               double& total) {
  if (s >= ref.size() || s >= run.size() || ref[s].size() != run[s].size()) return;
  for (size_t i = 0; i < ref[s].size(); ++i)
    moved += std::abs(double(run[s][i]) - double(ref[s][i])) / 2, total += double(ref[s][i]);
}
inline RouteFlip first_route_flip(const EquivalenceRun& ref, const EquivalenceRun& run) {
  const size_t steps = ref.losses.size();
  for (size_t s = 0; s < steps; ++s) {
    double moved = 0, total = 0, counted_moved = 0, counted = 0;  // the layers' routes; the bias's counts
    add_moved(ref.expert_tokens, run.expert_tokens, s, moved, total);
    add_moved(ref.expert_counts, run.expert_counts, s, counted_moved, counted);
    if (moved > 0 || counted_moved > 0)
      return total > 0 ? RouteFlip{s, std::max(moved, counted_moved), total} : RouteFlip{s, counted_moved, counted};
  }
  return {steps, 0, 0};
}

// Step-1 gradients, then every step's loss and gradient norm (MoE: up to
// the first route flip). On failure the message names the case, the worst
// gradient element and the step.
inline void expect_equivalent(const EquivalenceRun& ref, const EquivalenceRun& run, const std::string& what,
                              const Tolerance& tol = {}) {
  ASSERT_EQ(run.step1_grads.size(), ref.step1_grads.size()) << what << ": consolidated gradient sizes";
  EXPECT_EQ(run.replica_mismatches, 0) << what << ": of " << run.replica_checks
                                       << " checks, this many found this rank's shard differing from a replica's";
  if (what.find("data_shard") != std::string::npos)
    EXPECT_GT(run.replica_checks, 0) << what << ": HSDP replicas were never compared";
  ASSERT_EQ(run.losses.size(), ref.losses.size()) << what << ": steps";
  ASSERT_EQ(run.expert_tokens.size(), ref.expert_tokens.size()) << what << ": steps with MoE statistics";
  ASSERT_EQ(run.expert_counts.size(), ref.expert_counts.size()) << what << ": steps with expert counts";
  size_t compared = ref.losses.size();  // the steps compared: up to the first route flip
  if (tol.routes) {
    const RouteFlip flip = first_route_flip(ref, run);
    if (flip.step == 0) {
      ADD_FAILURE() << what << ", step 1: " << flip.moved << " of " << flip.total
                    << " routes differ from the single-rank run's: the same weights must route the same";
      return;
    }
    if (flip.step < compared) {
      EXPECT_LE(flip.moved, std::max(2.0, tol.flip_routes * flip.total))
          << what << ", step " << flip.step + 1 << ": " << flip.moved << " of " << flip.total
          << " routes differ from the single-rank run's: more than rounding near a tie flips";
      int rank = 0, mpi = 0;  // said once, by the world's rank 0
      MPI_Initialized(&mpi);
      if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == 0)
        std::fprintf(stderr, "[route flip] %s: step %zu, %g of %g routes moved; steps 1-%zu compared\n", what.c_str(),
                     flip.step + 1, flip.moved, flip.total, flip.step);
      ::testing::Test::RecordProperty("route_flip", what + ": step " + std::to_string(flip.step + 1));
      compared = flip.step;
    }
  }
  // fp16: a step skipped for an overflow is the same kind of discrete decision (a gradient near the format's
  // largest value); the first step where the runs decide differently ends the comparison, as a route flip
  // does, said and never at step 1
  if (run.skipped.size() == ref.skipped.size())
    for (size_t s = 0; s < std::min(compared, ref.skipped.size()); ++s)
      if (run.skipped[s] != ref.skipped[s]) {
        EXPECT_GT(s, 0u) << what << ", step 1: skipped " << run.skipped[s] << " vs single-rank " << ref.skipped[s];
        std::fprintf(stderr, "[skip flip] %s: step %zu skipped %d, single-rank %d; steps 1-%zu compared\n",
                     what.c_str(), s + 1, int(run.skipped[s]), int(ref.skipped[s]), s);
        compared = s;
        break;
      }
  // QK-clip: the heads clipped are a discrete decision too (a head's largest logit against the threshold);
  // the first step where the runs decide differently ends the comparison, when a head came within 1e-4 of
  // the threshold there (rounding's reach), else it is a failure
  if (run.qk_clipped.size() == ref.qk_clipped.size())
    for (size_t s = 0; s < std::min(compared, ref.qk_clipped.size()); ++s)
      if (run.qk_clipped[s] != ref.qk_clipped[s]) {
        EXPECT_LT(std::min(ref.qk_margin[s], run.qk_margin[s]), 1e-4)
            << what << ", step " << s + 1 << ": " << run.qk_clipped[s] << " heads clipped vs single-rank "
            << ref.qk_clipped[s] << ", with every head's largest logit away from the threshold";
        int rank = 0, mpi = 0;  // said once, by the world's rank 0
        MPI_Initialized(&mpi);
        if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
          std::fprintf(stderr, "[clip flip] %s: step %zu, %lld vs %lld heads clipped; steps 1-%zu compared\n",
                       what.c_str(), s + 1, (long long)run.qk_clipped[s], (long long)ref.qk_clipped[s], s + 1);
        compared = s + 1;  // the clip acts after the step: its loss is still the same
        break;
      }
  ASSERT_EQ(run.qk_clipped.size(), ref.qk_clipped.size()) << what << ": steps with QK-clip";
  const double rel = relative_l2(ref.step1_grads, run.step1_grads);
  if (!(rel <= tol.grads)) {
    size_t worst = 0;
    for (size_t i = 0; i < ref.step1_grads.size(); ++i)
      if (std::abs(ref.step1_grads[i] - run.step1_grads[i]) > std::abs(ref.step1_grads[worst] - run.step1_grads[worst]))
        worst = i;
    ADD_FAILURE() << what << ": step-1 gradients differ from the single-rank run: relative L2 " << rel << " > "
                  << tol.grads << "; worst element " << worst << " of " << ref.step1_grads.size() << ": "
                  << run.step1_grads[worst] << " vs single-rank " << ref.step1_grads[worst];
  }
  // the reported step-1 gradient norm is the norm of every gradient, experts included, each counted once
  // (the consolidated gradients hold each parameter once; fp16's are scaled by the loss scale)
  if (!run.grad_norms.empty() && !run.loss_scales.empty()) {
    double sq = 0;
    for (float g : run.step1_grads) sq += double(g) * double(g);
    const double norm = std::sqrt(sq) / run.loss_scales[0];
    EXPECT_LE(std::abs(run.grad_norms[0] / norm - 1), 1e-4)
        << what << ": step-1 gradient norm " << run.grad_norms[0] << ", but the gradients' norm is " << norm;
  }
  for (size_t s = 0; s < compared; ++s) {
    EXPECT_LE(std::abs(run.losses[s] / ref.losses[s] - 1), tol.loss)
        << what << ", step " << s + 1 << ": loss " << run.losses[s] << " vs single-rank " << ref.losses[s];
    if (tol.grad_norm >= 0)
      EXPECT_LE(std::abs(run.grad_norms[s] / ref.grad_norms[s] - 1), tol.grad_norm)
          << what << ", step " << s + 1 << ": grad norm " << run.grad_norms[s] << " vs single-rank "
          << ref.grad_norms[s];
  }
}

}  // namespace trident::test
