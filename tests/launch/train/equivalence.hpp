// The equivalence harness (STYLE 8, the centre of the suite): a run under
// some mesh, schedule and ZeRO stage against the single-rank run of the same
// recipe. The data, tensor and pipeline suites share it: the reference run
// (one process, cached per key), the capture of step 1's reduced gradients
// consolidated into the Hugging Face layout (through the trainer's
// on_gradients observer), and one comparison with its failure output.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "launch/train/trainer.hpp"
#include "model/params.hpp"

namespace trident::test {

struct EquivalenceRun : launch::TrainSummary {
  std::vector<float> step1_grads;  // consolidated, the same on every rank; MoE correction biases' slots zeroed
  // MoE models with a correction bias: what its slots hold after each step's
  // reduction, the tokens per expert over every rank (exact integers)
  std::vector<std::vector<float>> expert_counts;
};

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
  static_cast<launch::TrainSummary&>(run) = launch::train(rc, opts);
  return run;
}

// The single-rank run of a recipe, once per key for the whole test program.
inline const EquivalenceRun& single_rank_reference(const std::string& key, const std::function<Recipe()>& recipe) {
  static std::map<std::string, EquivalenceRun> cache;
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, train_with_step1_gradients(recipe(), {.quiet = true, .single_process = true})).first;
  return it->second;
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
  double loss = 1e-4;       // relative, every step
  double grad_norm = 1e-4;  // relative, every step (< 0: not compared)
  // MoE: step 1's tokens per expert exactly, later steps' within this fraction
  // of the routed tokens (rounding differences between meshes grow with
  // training and can flip a route that sits near a tie); < 0: not compared
  // (16-bit runs round the router's input differently)
  double routes = 0.01;
};

// Step-1 gradients, then every step's loss and gradient norm. On failure the
// message names the case, the worst gradient element and the step.
inline void expect_equivalent(const EquivalenceRun& ref, const EquivalenceRun& run, const std::string& what,
                              const Tolerance& tol = {}) {
  ASSERT_EQ(run.step1_grads.size(), ref.step1_grads.size()) << what << ": consolidated gradient sizes";
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
  // every MoE layer's tokens per expert: step 1's exactly (the same weights route the same), later steps'
  // up to the few routes that rounding differences can flip near a tie
  ASSERT_EQ(run.expert_tokens.size(), ref.expert_tokens.size()) << what << ": steps with MoE statistics";
  for (size_t s = 0; s < ref.expert_tokens.size() && tol.routes >= 0; ++s) {
    if (s == 0) {
      EXPECT_EQ(run.expert_tokens[s], ref.expert_tokens[s]) << what << ", step 1: tokens per expert";
      continue;
    }
    double moved = 0, total = 0;
    for (size_t i = 0; i < ref.expert_tokens[s].size(); ++i)
      moved += std::abs(run.expert_tokens[s][i] - ref.expert_tokens[s][i]), total += ref.expert_tokens[s][i];
    EXPECT_LE(moved, tol.routes * total) << what << ", step " << s + 1 << ": " << moved / 2
                                         << " routes differ from the single-rank run's, of " << total;
  }
  // the correction bias's counts (reduced over every rank before the bias moves): the same rule
  ASSERT_EQ(run.expert_counts.size(), ref.expert_counts.size()) << what << ": steps with expert counts";
  for (size_t s = 0; s < ref.expert_counts.size(); ++s) {
    if (s == 0 || tol.routes < 0) {
      EXPECT_EQ(run.expert_counts[s], ref.expert_counts[s]) << what << ", step " << s + 1 << ": expert counts";
      continue;
    }
    ASSERT_EQ(run.expert_counts[s].size(), ref.expert_counts[s].size()) << what << ": expert count sizes";
    double moved = 0, total = 0;
    for (size_t i = 0; i < ref.expert_counts[s].size(); ++i)
      moved += std::abs(run.expert_counts[s][i] - ref.expert_counts[s][i]), total += ref.expert_counts[s][i];
    EXPECT_LE(moved, tol.routes * total) << what << ", step " << s + 1 << ": " << moved / 2
                                         << " counted routes differ from the single-rank run's, of " << total;
  }
  ASSERT_EQ(run.losses.size(), ref.losses.size()) << what << ": steps";
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_LE(std::abs(run.losses[s] / ref.losses[s] - 1), tol.loss)
        << what << ", step " << s + 1 << ": loss " << run.losses[s] << " vs single-rank " << ref.losses[s];
    if (tol.grad_norm >= 0)
      EXPECT_LE(std::abs(run.grad_norms[s] / ref.grad_norms[s] - 1), tol.grad_norm)
          << what << ", step " << s + 1 << ": grad norm " << run.grad_norms[s] << " vs single-rank "
          << ref.grad_norms[s];
  }
}

}  // namespace trident::test
