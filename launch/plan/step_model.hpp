// The planner's step-time model, built from the operations of a layer
// (docs/planner.md): each GEMM at an efficiency that depends on its shape,
// memory-bound kernels (norms, activations, residual adds, rotary, softmax,
// cross-entropy) at the device's memory bandwidth, attention by its own
// roofline (flash-style, as Trident's CPU and CUDA kernels both are, or
// scores materialized as older GPU stacks do), and a floor per kernel launch. Collectives are costed by
// the planner (alpha-beta per link level).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/recipe/recipe.hpp"

namespace trident::launch {

// What the device achieves, from the cluster file (launch/plan/planner.hpp).
struct DeviceRates {
  double peak_flops = 0;       // per device, in the planned precision
  double gemm_peak_flops = 0;  // the GEMMs' peak: peak_flops, or fp8's where the software runs its GEMMs in fp8
  // fraction of peak a GEMM reaches by its smallest dimension (ascending
  // dimensions; interpolated in log2 of the dimension, held at the ends).
  // Empty: `gemm_fraction` for every shape.
  std::vector<std::pair<double, double>> gemm_table;
  double gemm_fraction = 1;
  double attention_fraction = 1;   // flash attention's FLOP rate as a fraction of peak
  bool flash_attention = true;     // false: scores and probabilities go through memory
  bool attention_dropout = false;  // materialized: dropout on the probabilities (one more pass each way)
  double memory_bandwidth = 0;     // bytes/s the elementwise kernels achieve
  double kernel_floor = 0;         // s: no kernel takes less (launch and tail)
  double bytes_per_value = 4;      // activations and parameters (2 for bf16/fp16)
  // cross-entropy's bytes through memory per logit, forward and backward (0: Trident's fused kernel, two values
  // forward and three backward)
  double loss_bytes_forward = 0, loss_bytes_backward = 0;
  bool fp8_casts = false;  // fp8 GEMMs: each GEMM input cast (and transposed) to fp8 first
  // FP8 from the recipe (train.fp8, Trident's FP8 linears): only the linears' GEMMs that recipe runs in FP8 (not
  // the router, the LM head, attention's own GEMMs, what keep_high_precision names) take gemm_peak_flops; from
  // the software's `gemm_precision: fp8` (Transformer Engine's recipes) every GEMM does
  bool fp8_linears_only = false;
  Fp8Config fp8;
  // The efficiency of a GEMM whose smallest dimension is `dim`.
  double gemm_efficiency(double dim) const;
};

enum class OpKind { gemm, attention, memory };
// Which layers run an operation: every one, the dense ones (their MLP), the
// MoE ones (router, permutation, experts, shared experts).
enum class OpLayers { all, dense, moe };

// One operation of a layer (or of the head), on one tensor rank, for one
// micro-batch; forward and backward times per occurrence.
struct Op {
  std::string name;
  OpKind kind = OpKind::gemm;
  int64_t m = 0, n = 0, k = 0, batch = 1;  // GEMM shape of the forward pass
  double flops = 0;                        // forward
  double bytes = 0;                        // forward
  double efficiency = 0;                   // of peak (GEMM, attention) or of bandwidth (memory)
  double forward_s = 0, backward_s = 0;
  bool head = false;        // once per micro-batch on the stage with the LM head, else once per layer
  bool recomputed = false;  // selective recomputation repeats its forward
  // the share of its forward that torchtitan's per-op selective checkpointing
  // repeats (`activations: torchtitan`): what the backward needs and the policy
  // did not save (every second matmul's output, the elementwise ops)
  double per_op = 0;
  OpLayers layers = OpLayers::all;
};

struct OpShape {
  int64_t micro_batch = 1;
  int tensor = 1;
  bool sequence_parallel = false;
  int context = 1;  // the sequence split over this many ranks: each holds seq_len / context rows
  int expert = 1;   // each MoE layer's experts split over this many ranks (each takes every rank's rows for its own)
  bool whole_experts = false;  // expert_tensor 1 < tensor: each tensor rank routes its 1 / tensor of the rows
};

// The operations of one layer and of the head for a micro-batch. An MoE
// layer's experts are a batch of E GEMMs of the routed rows split evenly
// (N top_k / E each: the balanced load the balancing aims at); with the
// experts split over `expert` ranks, a batch of E / expert GEMMs of
// expert x N top_k / E rows each (every rank's rows for this rank's experts:
// the same FLOPs, larger GEMMs).
std::vector<Op> layer_ops(const ModelConfig& m, const OpShape& shape, const DeviceRates& rates);

// Muon's Newton-Schulz iteration (optim.name muon, docs/optim.md#muon) over
// every matrix of the whole model, on one device: per m x n matrix (m <= n
// after the transpose) ns_steps x [X X^T (m x m x n), A A (m x m x m),
// B X (m x n x m)], 4 m^2 n + 2 m^3 FLOPs an iteration, each GEMM at its
// shape's efficiency. A rank runs its stage's share.
double muon_seconds(const ModelConfig& m, const MuonConfig& muon, const DeviceRates& rates);
// The elements of Muon's matrices in the whole model (the rest is AdamW's).
int64_t muon_elements(const ModelConfig& m);

// Seconds per micro-batch on a stage holding `dense` dense and `moe` MoE
// layers (and the head `heads` times: 0 off the last stage, 1 + model.mtp.depth on it), by category.
struct OpTimes {
  double gemm = 0, attention = 0, memory = 0;  // forward + backward
  double forward = 0;                          // of all three: what full recomputation repeats
  double selective = 0;                        // what selective recomputation repeats
  double per_op = 0;                           // what torchtitan's per-op policy repeats
  double total() const { return gemm + attention + memory; }
};
OpTimes stage_op_times(const std::vector<Op>& ops, double dense, double moe, double heads);

}  // namespace trident::launch

namespace trident {
TRIDENT_ENUM_NAMES(launch::OpKind, {launch::OpKind::gemm, "gemm"}, {launch::OpKind::attention, "attention"},
                   {launch::OpKind::memory, "memory"});
}  // namespace trident
