// AdamW over a flat parameter buffer split into ranges, each with its weight
// decay (which parameters decay is the model's to say: model::decay_ranges),
// and global-norm gradient clipping. Optimizer state (m, v) is two flat
// buffers of the parameter layout. Knows nothing of the model.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"
#include "kernels/adamw.hpp"

namespace trident::optim {

// Sum of squares in double, in a fixed order (bitwise reproducible for a
// given thread count).
template <typename T>
double sum_of_squares(const T* g, int64_t n);

template <typename T>
class AdamW {
 public:
  // State for elements [begin, end) of the flat buffer (ZeRO: this rank's
  // shard) that `ranges` covers; end < 0 means the end of the last range.
  // The moments live on `dev`, the update runs where they are (one
  // multi-tensor launch on CUDA).
  // packed: exp_avg_sq holds the ranges' elements only, one after another
  // (second_moment_runs(); the CPU's): what Muon's matrices, whose momentum
  // is exp_avg's, need not keep (4 bytes per element instead of 8).
  AdamW(const std::vector<kernels::AdamWRange>& ranges, const OptimConfig& cfg, int64_t begin = 0, int64_t end = -1,
        Device dev = {}, const std::vector<kernels::BiasRange>& biases = {}, bool packed = false);
  // One step over elements [begin, end): params and grads point at element
  // `begin` (a shard's own buffers, or full buffers + begin). `step` counts
  // from 1. Gradients are read as grad_scale * grads (clipping without a
  // separate pass).
  void step(T* params, const T* grads, double lr, int64_t step, double grad_scale = 1.0);
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  // The moment estimates (end - begin elements each), for checkpoints.
  T* exp_avg() { return m_.data<T>(); }
  T* exp_avg_sq() { return v_.data<T>(); }
  // packed: the runs [lo, hi) of [0, end - begin) exp_avg_sq holds, in order; else empty (all of them).
  bool packed() const { return packed_; }
  std::vector<std::pair<int64_t, int64_t>> second_moment_runs() const;

 private:
  OptimConfig cfg_;
  std::vector<kernels::AdamWRange> ranges_;  // intersected with [begin_, end_), relative to begin_
  std::vector<kernels::BiasRange> biases_;   // likewise
  int64_t begin_, end_;
  bool packed_;
  Tensor m_, v_;  // end_ - begin_ elements each (v: the ranges' only when packed)
};

// The factor that brings a gradient of L2 norm `norm` to at most max_norm
// (1 when max_norm is 0 or the norm is below it).
inline double clip_scale(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

// Scales grads so their L2 norm is at most max_norm (0 disables); returns the
// norm before clipping.
template <typename T>
double clip_grad_norm(T* grads, int64_t n, double max_norm);

}  // namespace trident::optim
