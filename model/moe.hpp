// The mixture-of-experts MLP of a transformer layer (docs/moe.md), written
// like the dense MLP it replaces: the single-device computation over this
// rank's share (each expert's FFN split over the tensor group as a dense MLP
// is), with the tensor-parallel region ops as its only parallel code.
//
// Forward, for the N token rows h [N,C] of the layer's column-parallel input
// (every tensor rank holds all of them):
//   router   logits [N,E] = h Wr^T (Wr replicated), kernels/router.hpp:
//            each row's k experts (increasing id) and weights
//   permute  the N k routed rows in expert order, tokens in increasing index
//            within an expert (Megatron-Core's order): a total order fixed by
//            the routes alone, so it is the same on every rank and every run
//   experts  for each expert e with rows: fc = x W1[e]^T [rows, 2I],
//            act = silu(gate) * up [rows, I], y = act W2[e]^T [rows, C]
//   combine  out[n] = sum_j w[n,j] y[n,j], j in increasing expert id
//   shared   out[n] += g[n] * S(h[n]), S the shared experts' SwiGLU MLP, g =
//            sigmoid(h w_g) with the shared-expert gate, else 1
// out [N,C] is a partial sum over the tensor group (each rank holds I / t of
// every expert's columns), reduced by the caller's exit().
//
// Backward: the weights' and the gate's gradients are dot products of the
// output gradient with partial outputs: summed over the tensor group
// (TensorParallel::sum_partials) before the router's backward. The router
// and the gate see every row on every rank, so their input gradient
// (MoeScratch::d_router_h, [N,C]) is complete on each rank: the caller adds this
// rank's rows after the column-parallel input gradient is reduced; their
// weights' gradients are complete too (ParamRow::all_rows).
//
// Load balancing (model.moe.balance), per micro-batch and layer, from the
// scores p [N,E] and the routes; q are the scores normalised over the
// experts (softmax: p itself; sigmoid: p / sum p). N and T count the whole
// micro-batch's tokens and sequence: with context parallelism the counts are
// summed over the context group, and each rank's loss value is its rows'
// share of the whole (their sum over the group is the loss):
//   aux_loss      coef E / (k N^2) sum_e count_e sum_n q_ne
//   seq_aux_loss  coef / B sum_b E / (k T^2) sum_e count_be sum_{n in b} q_ne
//   hf            coef E sum_e (c_e / R) (sum_l sum_n p_lne / R), c_e the
//                 tokens routed to e summed over the L MoE layers, R = L N
//                 (transformers' Mixtral / Qwen-MoE loss; finish_hf)
//   z_loss        z / N sum_n logsumexp(logits_n)^2
// Their gradients enter the router's backward scaled by `aux_scale`, which
// the caller makes the language-model loss's scale of the micro-batch's
// tokens (Transformer: dscale x B x T), so accumulation, data parallelism
// and every pipeline schedule weigh them as they weigh the loss.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"
#include "kernels/precision.hpp"
#include "kernels/router.hpp"
#include "model/fp8_linear.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/expert_parallel.hpp"
#include "parallel/tensor_parallel.hpp"

namespace trident::model {

// One MoE layer's pointers into the flat parameter (or gradient) buffer:
// router [E,C], bias [E] (the correction bias, or null), experts' in [E,
// 2I, C] and out [E, C, I] (I: this rank's share), shared in [2S, C] and
// out [C, S], gate [1, C]; gpt-oss's (or null): the router's logit bias
// [E], the experts' in bias [E, 2I] and out bias [E, C].
template <typename T>
struct MoeWeights {
  const T *router, *bias, *w_in, *w_out, *s_in, *s_out, *s_gate, *logit_bias, *b_in, *b_out;
  int layer = -1;  // the model's local layer (its FP8 GEMMs, model/fp8_linear.hpp)
};
template <typename T>
struct MoeGrads {
  T *router, *bias, *w_in, *w_out, *s_in, *s_out, *s_gate, *logit_bias, *b_in, *b_out;
};

// What one MoE layer keeps of one micro-batch for its backward. The layer's
// buffers live where it runs; the router's side (its scores, choices and
// losses: a few values per token) is computed in host memory, so on a GPU
// the logits go down and the routes come back (the `_h` mirrors; on the CPU
// they are the same buffers).
template <typename T>
struct MoeActs {
  T *logits = nullptr, *weight = nullptr;                         // [N,E] router logits, [N,k] routing weights
  int32_t *expert = nullptr, *row = nullptr, *token = nullptr;    // [N,k] ids, [N,k] permuted row, [N k] its token
  T* scores = nullptr;                                            // [N,E] the router's scores (host)
  T *logits_h = nullptr, *weight_h = nullptr, *gate_h = nullptr;  // host mirrors of logits, weight, gate
  int32_t* expert_h = nullptr;                                    // host mirror of expert
  T *fc = nullptr, *act = nullptr, *y = nullptr;                  // [Nk, 2I], [Nk, I], [Nk, C]
  T *shared_fc = nullptr, *shared_act = nullptr, *shared_out = nullptr, *gate = nullptr;  // [N,2S], [N,S], [N,C], [N]
  std::vector<int64_t> offsets;  // [E+1]: expert e's permuted rows are [offsets[e], offsets[e+1])
  // Expert parallelism: this micro-batch's exchange, and the rows this
  // rank's experts received (their input, gate|up and activation, sized by
  // the exchange: [received, C], [received, 2I], [received, I])
  parallel::ExpertPlan plan;
  Tensor received;
  T *x_in = nullptr, *fc_in = nullptr, *act_in = nullptr;
  // tokens routed to each expert, over the context group: [E] for the
  // micro-batch, [B,E] per sequence with seq_aux_loss (what the balancing
  // loss counts)
  std::vector<T> counts;
  // balance kind hf: the counts summed over the micro-batch's MoE layers and
  // the rows they are over (layers x tokens), set by finish_hf
  std::vector<T> hf_counts;
  double hf_rows = 0;
  double aux_loss = 0, z_loss = 0;  // this micro-batch's balancing losses (coefficients applied)
};

// One pass's scratch of the MoE layers (a part of its model::Workspace,
// model/workspace.hpp): what a forward or backward writes and drops, sized
// by MoeMlp for the largest micro-batch seen: where the layer runs, and the
// router's side in host memory (the same buffers on the CPU). Two passes
// with scratch of their own never touch each other's.
// One MoE layer's buffers for N token rows (I, S: this rank's shares of the
// experts' and the shared experts' widths; expert_parallel: the experts'
// rows come from the expert group), in elements: what a micro-batch keeps
// (MoeActs, MoeMlp::make_acts) and what a pass writes (MoeScratch,
// MoeMlp::ensure_scratch). The allocators take their sizes from here and the
// memory formulas (model/memory.cpp, the planner's) sum them.
struct MoeLayout {
  // kept: the router's logits and scores [N,E] and weights [M] (M = N top_k),
  // the routes (expert, row, token; int32) [M] each, the experts' gate|up
  // [M,2I] and activation [M,I] (none under expert parallelism: received),
  // their output [M,C], the shared experts' gate|up [N,2S] and activation
  // [N,S], the gated output [N,C] and the gate [N]
  int64_t logits = 0, scores = 0, weight = 0, routes = 0, fc = 0, act = 0, y = 0, shared_fc = 0, shared_act = 0,
          shared_out = 0, gate = 0;
  // expert parallelism: what the forward received and computed, kept until
  // the backward (the rows, their gate|up and activation: M (C + 3I), the
  // balanced load)
  int64_t received = 0;
  // MoeScratch::buffers in order: x, dx, dys, dfc, dact, dscores_h (the
  // host's, counted on every device), dlogits, dweight, d_router_h,
  // d_shared, sdfc, sdact
  std::array<int64_t, 12> scratch{};
  // everything one micro-batch keeps of one layer, in elements of 4 bytes
  int64_t kept() const;
  int64_t scratch_total() const;
};
MoeLayout moe_layout(const MoeConfig& cfg, int64_t N, int64_t C, int64_t I, int64_t S, bool expert_parallel);

template <typename T>
struct MoeScratch {
  int64_t N = 0;  // rows it is sized for
  Tensor buffers, host, counts_dev;
  Tensor exchanged;  // the backward's exchanged rows, the forward's expert output (expert parallelism)
  Tensor staging;    // the exchange's rows in arrival order (parallel::ExpertParallel)
  T *x = nullptr, *dx = nullptr, *dys = nullptr, *dfc = nullptr, *dact = nullptr, *dlogits = nullptr,
    *dweight = nullptr, *d_shared = nullptr, *sdfc = nullptr, *sdact = nullptr;
  // [N,C] the backward's input gradient through the router and the gate
  // (complete on every rank: the caller adds this rank's rows)
  T* d_router_h = nullptr;
  T *dscores_h = nullptr, *dlogits_h = nullptr, *dweight_h = nullptr, *bias_h = nullptr;
  std::vector<T> counts_h;  // [E] one micro-batch's tokens per expert (the correction bias's slot)
};

template <typename T>
class MoeMlp {
 public:
  // ffn / shared: this rank's share of I and of S. cp: the context group
  // (each rank holds its rows of every sequence; the counts are summed over
  // it). ep: the expert group (null: every expert here): the weights hold
  // this rank's experts only, and the routed rows go to their experts' ranks
  // and back around the grouped GEMMs (parallel/expert_parallel.hpp).
  // device: where the layer's buffers live and its kernels run; math: its
  // GEMMs' precision (kernels/gemm.hpp), the model's.
  // whole_experts (expert_tensor 1 < tensor): ffn is every expert's whole
  // width; each tensor rank routes its 1/tensor of the rows (its slice of
  // out and dh is complete, the rest zero, so the tensor group's sum
  // assembles them), and the router's weight gradient, the counts and the
  // balancing losses of a rank are its slice's (summed over the tensor
  // group: the router's gradient by the data-parallel step).
  MoeMlp(const MoeConfig& cfg, int64_t hidden, int64_t ffn, int64_t shared, parallel::TensorParallel* tp,
         parallel::ContextParallel* cp, parallel::ExpertParallel* ep = nullptr, Device device = {},
         bool whole_experts = false, kernels::Precision math = kernels::Precision::fp32);

  // Buffers of one micro-batch of N rows; `storage` owns them.
  MoeActs<T> make_acts(int64_t N, std::vector<Tensor>& storage) const;

  // out [N,C] (overwritten): this rank's partial MoE output for h [N,C].
  // s: the pass's scratch.
  void forward(T* out, const T* h, MoeActs<T>& a, const MoeWeights<T>& w, int64_t N, int64_t B, MoeScratch<T>& s);
  // dh [N,C] (overwritten): the partial gradient of h through the experts
  // (to be summed over the tensor group like a column-parallel input's);
  // s.d_router_h then holds the complete part through the router and gate.
  // dy [N,C]: the gradient of out (every row). acc: add to the gradients
  // (else overwrite). s: the pass's scratch.
  void backward(T* dh, const T* dy, const T* h, const MoeActs<T>& a, const MoeWeights<T>& w, const MoeGrads<T>& g,
                int64_t N, int64_t B, T aux_scale, bool acc, MoeScratch<T>& s);
  // balance kind hf (transformers' load_balancing_loss_func, one cross-layer
  // product): after the forward of every MoE layer of the micro-batch (all
  // on this rank), their counts summed; sets each layer's share of the loss.
  void finish_hf(const std::vector<MoeActs<T>*>& layers, int64_t N) const;

  // train.fp8: the routed experts' grouped GEMMs in FP8 (the model's, set
  // when it is built; null: in the layer's precision)
  const Fp8Linears* fp8 = nullptr;
  // the routed experts' FP8 tensors' spread (below); the local experts
  Fp8Linears::Spread routed_spread() const { return routed(); }
  int64_t local_experts() const { return ep_ ? ep_->local_experts() : cfg_.experts; }

 private:
  MoeConfig cfg_;
  kernels::RouterSpec spec_;
  int64_t C_, I_, S_;
  parallel::TensorParallel* tp_;
  parallel::ContextParallel* cp_;
  parallel::ExpertParallel* ep_;
  Device device_;
  kernels::Precision math_;
  bool on_host_;  // the layer runs in host memory: the router's mirrors are its own buffers
  // s sized for N rows (the order of model/memory.cpp's scratch_elements)
  void ensure_scratch(MoeScratch<T>& s, int64_t N) const;
  T* exchange_scratch(MoeScratch<T>& s, int64_t n) const;
  // The experts' grouped GEMMs (kernels/grouped_gemm.hpp), FP8 where fp8 applies to the site.
  // over: the ranks whose rows or weight slices make one tensor (the
  // routed experts': routed(); the shared experts' are the dense MLP's)
  void grouped_fwd(T* y, const T* x, const T* w, const int64_t* off, int64_t G, int64_t C, int64_t OC, LinearSite site,
                   Fp8Linears::Spread over) const;
  void grouped_bwd(T* dx, T* dw, const T* dy, const T* x, const T* w, const int64_t* off, int64_t G, int64_t C,
                   int64_t OC, bool acc, LinearSite site, Fp8Linears::Spread over) const;
  // the routed experts' tensors span the tensor group (experts split over it, or whole experts on every
  // tensor rank, each routing its slice of the rows) unless whole experts are spread over it by expert
  // parallelism, and the context group unless expert parallelism brings each expert's rows to its rank
  Fp8Linears::Spread routed() const { return {!(slice_ && ep_), !ep_}; }
  mutable Tensor fp8_scratch_[4];  // FP8 operands: inputs, weights, gradients, the weight gradient's gradients
  float* fp8_scratch(int slot, int64_t n) const;
  mutable Tensor fp8_codes_[3];  // tensorwise and delayed: the operands' codes (inputs, weights, gradients)
  uint8_t* fp8_codes(int slot, int64_t n) const;
  // The layer's phases, in the order forward and backward run them (each
  // the same on the plain path and under expert parallelism, and whichever
  // pass runs them, on the pass's scratch s).
  // The rows of one call: `all` (the micro-batch's on this context rank, h
  // [all, C]) and the n routed here starting at `first` (whole experts:
  // this tensor rank's slice; else all of them), hs = h + first C.
  struct Rows {
    int64_t all = 0, n = 0, first = 0;
    const T *h = nullptr, *hs = nullptr;
  };
  Rows rows_of(const T* h, int64_t N_all) const;
  void route(MoeActs<T>& a, const MoeWeights<T>& w, const Rows& r, MoeScratch<T>& s) const;
  void permute(MoeActs<T>& a, const Rows& r, MoeScratch<T>& s) const;
  void shared_forward(T* so, MoeActs<T>& a, const MoeWeights<T>& w, const Rows& r) const;
  // dispatch, experts, combine back (shared: the shared experts, run where they overlap the exchange)
  void experts_forward(MoeActs<T>& a, const MoeWeights<T>& w, const Rows& r, MoeScratch<T>& s,
                       const std::function<void()>& shared);
  void combine(T* out, const T* so, const MoeActs<T>& a, const Rows& r) const;
  void balance_losses(MoeActs<T>& a, const Rows& r, int64_t B, MoeScratch<T>& s) const;
  void combine_backward(const T* dy, const MoeActs<T>& a, const Rows& r, MoeScratch<T>& s) const;
  void shared_backward(T* sdx, const T* dy, const MoeActs<T>& a, const MoeWeights<T>& w, const MoeGrads<T>& g,
                       const Rows& r, MoeScratch<T>& s, bool acc) const;
  T* experts_backward(const MoeActs<T>& a, const MoeWeights<T>& w, const MoeGrads<T>& g, const Rows& r,
                      MoeScratch<T>& s, bool acc, const std::function<void(T*)>& shared);
  void router_backward(T* dh, const MoeActs<T>& a, const MoeWeights<T>& w, const MoeGrads<T>& g, const Rows& r,
                       MoeScratch<T>& s, int64_t B, T aux_scale, bool acc) const;
  void bias_counts(T* slot, const MoeActs<T>& a, MoeScratch<T>& s, bool acc) const;
  // N: the rows routed here; all: the rows of the micro-batch on this context rank (the losses' normalisation)
  void balance_grad(T* dscores, const MoeActs<T>& a, int64_t N, int64_t all, int64_t B, double scale, bool wrt_q) const;
  bool slice_ = false;  // whole experts: this tensor rank routes rows [rank N / t, (rank + 1) N / t)
  // The experts' activation (model.moe.activation) over rows [M, 2I] -> [M, I], and back.
  void activation_forward(T* act, const T* fc, int64_t M) const;
  void activation_backward(T* dfc, const T* fc, const T* dact, int64_t M) const;
  // The experts' out bias is added here: their output is not a partial sum, or this is tensor rank 0.
  bool adds_out_bias() const { return slice_ || tp_->rank() == 0; }
};

}  // namespace trident::model
