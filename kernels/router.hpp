// The router of a mixture-of-experts layer: each token's scores over E
// experts from its router logits, its top-k experts and their weights, and
// the backward from the weights' gradient to the logits'. The math is
// transformers' (docs/moe.md):
//   softmax (Mixtral, Qwen2/3-MoE): scores p = softmax(logits) over all
//     experts; choose the k largest; weights p of the chosen, divided by
//     their sum when norm_topk (Mixtral always; Qwen by norm_topk_prob).
//   sigmoid (DeepSeek-V3, GLM-4-MoE): p = sigmoid(logits); choose on
//     p + bias (the per-expert correction bias, for choosing only), among
//     the group_topk of `groups` equal groups whose two best biased scores
//     sum highest; weights p of the chosen (unbiased), divided by their sum
//     + 1e-20 when norm_topk; then times `scaling`.
// A row with a non-finite choice score (a NaN logit, or a NaN bias) routes
// to experts 0..k-1 with NaN weights: its output and the step's loss are not
// finite, which the trainer's non-finite guard refuses; a NaN never silently
// picks or excludes an expert.
// Ties go to the lower expert (and group) id; a token's chosen experts are
// listed in increasing id, the order their outputs are added in. Rows are
// independent: the result does not depend on threads or on which rows are
// routed together. Host buffers; T is float (the router runs in fp32 in
// every precision) or double (the tests' references).
#pragma once
#include <cstdint>

#include "core/enums.hpp"

namespace trident::kernels {

struct RouterSpec {
  int64_t experts = 0, top_k = 0;
  RouterScore score = RouterScore::softmax;
  bool norm_topk = false;
  int64_t groups = 1, group_topk = 1;  // group-limited choice (groups = 1: none)
  double scaling = 1.0;                // routed_scaling_factor
};

// Throws (naming the field) unless 1 <= top_k <= experts, groups divides
// experts, 1 <= group_topk <= groups and top_k <= group_topk * E / groups.
void check_router(const RouterSpec& s);

// logits [N,E] -> scores [N,E] (p, kept for the backward and the balancing
// losses), expert [N,k] (increasing ids), weight [N,k]. bias [E] or null.
template <typename T>
void router_forward(int32_t* expert, T* weight, T* scores, const T* logits, const T* bias, int64_t N,
                    const RouterSpec& s);

// dlogits [N,E] (overwritten) from dweight [N,k], the gradient of the loss
// with respect to the weights, plus dscores [N,E] (may be null), a gradient
// with respect to the scores from elsewhere (the balancing losses). The
// choice itself is a step: no gradient flows through it, nor into the bias.
template <typename T>
void router_backward(T* dlogits, const T* dweight, const T* dscores, const T* scores, const int32_t* expert, int64_t N,
                     const RouterSpec& s);

// The router z-loss (ST-MoE) of logits [N,E]: returns sum_n lse_n^2, lse_n
// = logsumexp(logits_n), summed in double. With dlogits [N,E] given, also
// adds its gradient times scale: dlogits_ne += scale 2 lse_n softmax(logits_n)_e.
template <typename T>
double router_z_loss(const T* logits, int64_t N, int64_t E, T* dlogits = nullptr, double scale = 0);

// The balancing losses' gradient (docs/moe.md#load-balancing), counts held
// fixed (the choice is a step): dscores [N,E] += scale x factor x counts of
// each row's group, as a gradient with respect to the normalised scores q
// (wrt_q, or a softmax router, whose q is p) or, for a sigmoid router, to
// its scores p (q = p / sum p: dp_j = (dq_j - sum_i dq_i q_i) / sum p).
// The N rows are `groups` equal groups (sequences with seq_aux_loss, else
// one), group b's counts [E] at counts + b E.
template <typename T>
void balance_loss_grad(T* dscores, const T* scores, const T* counts, int64_t N, int64_t E, int64_t groups,
                       double factor, double scale, RouterScore score, bool wrt_q);
// The loss's value from its gradient with respect to q (the loss is linear
// in q for fixed counts): sum_ne q_ne dq_ne, summed in double.
template <typename T>
double balance_loss_value(const T* scores, const T* dq, int64_t N, int64_t E, RouterScore score);

// The shared experts' gate (Qwen2-MoE): g = sigmoid(g) in place over n
// values, and its backward dg *= g (1 - g).
template <typename T>
void gate_sigmoid(T* g, int64_t n);
template <typename T>
void gate_sigmoid_backward(T* dg, const T* g, int64_t n);

// The smallest routing margin over the N rows: the gap between the k-th and
// the (k+1)-th choice score of the chosen groups, and (groups > 1) between
// the group_topk-th and the next group score, relative to the largest
// score of its row; +inf when nothing can flip (k = E). A golden test
// asserts it is well above rounding, so no route can flip unnoticed.
template <typename T>
double router_margin(const T* logits, const T* bias, int64_t N, const RouterSpec& s);

}  // namespace trident::kernels
