// The FP8 GEMMs of the linear layers (train.fp8, docs/precision.md#fp8-training):
// which GEMMs run in FP8, each operand's fake quantisation under the recipe
// (kernels/fp8.hpp), the scales reduced over the ranks that hold parts of
// one tensor, delayed scaling's state, and the statistics the metrics show.
// LayerOps (model/layer_ops.hpp) and the experts (model/moe.cpp) call it;
// the GEMM itself is the fp32 GEMM on the dequantised operands (the CPU's
// emulation of an FP8 GEMM, as torchao's Float8Linear with `emulate`).
//
// A GEMM's operands: the input X [N, C], the weight W [OC, C], the output
// gradient dY [N, OC]. Forward Y = X W^T and the input gradient dX = dY W
// quantise X and dY along their rows and W whole (tensorwise, delayed) or
// in 128 x 128 blocks (blockwise: X and dY in 1 x 128 tiles along C and
// OC); the weight gradient dW = dY^T X sums over the N tokens, so
// blockwise tiles its X and dY 128 x 1 along the tokens (Transformer
// Engine's columnwise copies, DeepSeek-V3's 128 x 1 for wgrad); tensorwise
// uses the same scale for both (one quantised tensor).
//
// The same numbers on every mesh: a tensorwise amax is the whole tensor's,
// max-reduced over the tensor group (weights split into rows or columns,
// gradients of column-parallel outputs, inputs of row-parallel ones) and
// over the context group (activations and gradients hold a share of each
// sequence's rows); delayed scaling's amaxes are max-reduced once a step
// over tensor, context and data ranks. Blockwise needs none: each tile is
// on one rank where the splits are multiples of 128 (docs/precision.md).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "core/device.hpp"
#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"
#include "kernels/fp8.hpp"
#include "parallel/communicator.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/tensor_parallel.hpp"

namespace trident::model {

// A layer's linears: attention's, the MLP's, MLA's projections (its kv_a
// projection is two GEMMs: the latent and the rotary key, a scale each),
// the routed experts' two grouped GEMMs, the shared experts' two GEMMs
enum class Linear : int {
  qkv,
  proj,
  fc,
  fc2,
  q_a,
  q_b,
  kv_a,
  kv_rope,
  kv_b,
  experts_in,
  experts_out,
  shared_in,
  shared_out
};
inline constexpr int kLinears = 13;
// A GEMM's operands
enum class Operand : int { input, weight, grad };

const char* linear_name(Linear l);
const char* operand_name(Operand o);

// Where a GEMM is: a local layer (-1: not a layer's linear, never FP8) and which linear.
struct LinearSite {
  int layer = -1;
  Linear linear = Linear::qkv;
};

// Which groups hold parts of one tensor (its amax reduced over them).
struct Fp8Spread {
  bool tensor = true, context = true;
};

// One layer's FP8 statistics over a step (all its FP8 GEMMs' operands).
struct Fp8LayerStats {
  float amax = 0;         // the largest |value| quantised
  float scale = 0;        // the smallest quantisation multiplier (max_fp8 / amax; delayed: the scale used); 0: none
  int64_t saturated = 0;  // values clamped to the format's largest (|x * scale| above it)
};

// Whether the model's layer g (of `layers`; multi-token prediction depths
// after them) runs the linear's GEMMs in FP8 under f.
bool fp8_applies(const Fp8Config& f, int64_t layers, int64_t g, Linear linear);
// train.fp8.saved_inputs: which of layer g's inputs ln1_full, ln2_full and
// act (model/activations.hpp) are kept as FP8 codes: those only one FP8
// GEMM's weight gradient reads (not MLA's shared input, which three GEMMs
// cast; not an MoE layer's MLP input, which its router reads).
std::array<bool, 3> fp8_kept_inputs(const ModelConfig& cfg, const Fp8Config& f, int64_t g);

class Fp8Linears {
 public:
  // global_layers[l]: local layer l's index in the model (MTP depths after
  // the layers); layers: all of the model's (first/last layer kept).
  Fp8Linears(const Fp8Config& cfg, int64_t layers, std::vector<int64_t> global_layers, parallel::TensorParallel& tp,
             parallel::ContextParallel& cp);

  const Fp8Config& config() const { return cfg_; }
  bool on() const { return cfg_.on(); }
  // whether the site's GEMMs run in FP8
  bool applies(LinearSite s) const;

  // The fake-quantised copy y of operand `op` (rows x cols, row-major) of
  // the site's GEMM; along_tokens: blockwise's 128 x 1 tiles of the weight
  // gradient (else 1 x 128 tiles of activations and gradients; weights in
  // blocks). Collective over the tensor and context groups under
  // tensorwise scaling (every rank of them calls it in the same order).
  void quantize(LinearSite s, Operand op, const float* x, int64_t rows, int64_t cols, bool along_tokens,
                float* y) const;
  // Tensorwise and delayed scaling: the same cast as quantize(), kept as
  // the codes q[rows x cols] with their format and scale, for the FP8
  // GEMMs of kernels/fp8.hpp (cuBLASLt's on CUDA).
  kernels::fp8::Operand8 quantize_codes(LinearSite s, Operand op, const float* x, int64_t rows, int64_t cols,
                                        uint8_t* q) const;
  // Blockwise: the same tiles as quantize() kept as e4m3 codes q with a
  // factor per tile (quantize_tiled's layout, factors[tile_count]), for the
  // block-scaled GEMMs of kernels/fp8.hpp (cuBLASLt's on CUDA). Not with
  // the scales frozen on purpose (fp8_frozen_scales: quantize()'s path).
  bool tiled_codes() const { return tiled() && !frozen_; }
  kernels::fp8::Tiled8 quantize_tiled_codes(LinearSite s, Operand op, const float* x, int64_t rows, int64_t cols,
                                            bool along_tokens, uint8_t* q, float* factors) const;
  // The experts' operands: G groups of rows (offsets[G + 1], host memory)
  // of one grouped tensor, each quantised with its own scale (tensorwise;
  // blockwise tiles within each group; delayed: one state for the grouped
  // tensor). Weights are G matrices of rows x cols each. The tensorwise
  // amaxes are max-reduced over the tensor group where `over.tensor` (the
  // experts split over it) and the context group where `over.context` (the
  // groups' rows spread over it; not under expert parallelism, where each
  // expert's rows come to its rank).
  using Spread = Fp8Spread;
  void quantize_groups(LinearSite s, Operand op, const float* x, const int64_t* offsets, int64_t G, int64_t cols,
                       bool along_tokens, Spread over, float* y) const;
  void quantize_weights(LinearSite s, const float* w, int64_t G, int64_t rows, int64_t cols, Spread over,
                        float* y) const;
  // Tensorwise and delayed: the same casts kept as codes q, each group's
  // scale in scales[G] (host memory; 1 for an empty group).
  void quantize_groups_codes(LinearSite s, Operand op, const float* x, const int64_t* offsets, int64_t G, int64_t cols,
                             Spread over, uint8_t* q, float* scales) const;
  void quantize_weights_codes(LinearSite s, const float* w, int64_t G, int64_t rows, int64_t cols, Spread over,
                              uint8_t* q, float* scales) const;

  // ZeRO 3's FP8 parameter gathers (train.fp8.param_gather,
  // model/fp8_gather.hpp). gather_scales: the scale each weight is cast with
  // on the wire, from amaxes[i], this rank's share of weight i's values:
  // tensorwise max-reduces them over `group` (the ranks sharing ZeRO's
  // shards) and, where over_tensor[i], the tensor group (amaxes then hold
  // the whole weight's), exactly the scale the GEMM would make from the
  // gathered weight; delayed takes the site's state's scale and records the
  // share's amax (end_step max-reduces it with the rest).
  std::vector<float> gather_scales(const std::vector<LinearSite>& sites, std::vector<float>& amaxes,
                                   const std::vector<bool>& over_tensor, parallel::Communicator* group) const;
  kernels::fp8::Format weight_format() const { return format(Operand::weight); }
  kernels::fp8::Format format_of(Operand op) const { return format(op); }
  // A gathered weight of n values at w already holds its FP8 values
  // (decoded codes, cast with `scale`): quantize() hands them on as they are
  // and notes amax, scale and the saturated count of this rank's share
  // (once), until forget(w).
  struct PreCast {
    int64_t n = 0;
    float amax = 0, scale = 1;
    int64_t saturated = 0;
  };
  void precast(const float* w, PreCast p) const { precast_[w] = p; }
  void forget(const float* w) const { precast_.erase(w); }

  // Forwards for training record delayed scaling's amaxes (evaluation's do not).
  void set_training(bool training) const { training_ = training; }
  // After a step's backward: the step's amaxes max-reduced over the tensor,
  // context and `data` groups join each history and make the next scales
  // (delayed); the statistics are reduced the same way and kept for
  // stats(); both begin afresh.
  void end_step(parallel::Communicator* data);
  // per local layer, of the last end_step
  const std::vector<Fp8LayerStats>& stats() const { return stats_; }

  // Delayed scaling's state for checkpoints: each tensor with a history
  // (the model's layer index, the linear, the operand), restored exactly by
  // load_state, which takes the local layers' entries of a whole model's
  // and leaves the others. The same on every rank of a pipeline stage.
  struct TensorState {
    int64_t layer = 0;  // the model's (global) layer
    Linear linear = Linear::qkv;
    Operand operand = Operand::input;
    float scale = 1;
    std::vector<float> amaxes;  // oldest first
  };
  std::vector<TensorState> state() const;
  void load_state(const std::vector<TensorState>& all);

 private:
  struct Delayed {
    kernels::fp8::DelayedScale scale;
    float step_amax = -1;  // this step's largest, -1: not seen
  };
  kernels::fp8::Format format(Operand op) const;
  bool tiled() const { return cfg_.recipe == Fp8Recipe::blockwise; }
  // the amax of x, max-reduced over the groups holding parts of the tensor
  float reduced_amax(Operand op, const float* x, int64_t n) const;
  void reduce_max(std::vector<float>& v, Operand op, Spread over = {}) const;
  float scale_of(LinearSite s, Operand op, float amax) const;  // tensorwise or delayed
  Delayed& delayed(LinearSite s, Operand op) const;
  void note(LinearSite s, float amax, float scale, int64_t saturated) const;

  Fp8Config cfg_;
  bool frozen_, e5m2_forward_;  // broken on purpose (TRIDENT_FAULT, core/fault.hpp)
  int64_t layers_;
  std::vector<int64_t> global_;
  parallel::TensorParallel& tp_;
  parallel::ContextParallel& cp_;
  mutable bool training_ = false;
  mutable std::map<int64_t, Delayed> delayed_;  // by (local layer, linear, operand)
  mutable std::map<const float*, PreCast> precast_;
  // tensorwise and delayed: the scale x (n values) is cast with, its amax, and the statistics noted
  float cast_scale(LinearSite s, Operand op, const float* x, int64_t n) const;
  mutable std::vector<Fp8LayerStats> step_;  // this step's, per local layer
  std::vector<Fp8LayerStats> stats_;
};

}  // namespace trident::model
