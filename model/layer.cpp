// One transformer layer's forward and backward (attention, MLP or MoE, the
// norms and QK-norm), over the kernels of kernels/; the model around it
// (segments, chunks, the head) is transformer.cpp.
#include <algorithm>
#include <cstdint>
#include "kernels/activation.hpp"
#include "kernels/attention.hpp"
#include "kernels/buffer.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"
#include "kernels/rows.hpp"
#include "model/transformer.hpp"

namespace trident::model {

namespace k = trident::kernels;

template <typename T>
void Transformer<T>::norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N) {
  if (arch_.norm == NormKind::rms_norm)
    k::rmsnorm_forward(out, rstd, inp, w, N, cfg_.hidden, cfg_.norm_eps);
  else
    k::layernorm_forward(out, mean, rstd, inp, w, b, N, cfg_.hidden, cfg_.norm_eps);
}

template <typename T>
void Transformer<T>::norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                                   const T* rstd, int64_t N, bool accumulate) {
  if (arch_.norm == NormKind::rms_norm)
    k::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, cfg_.hidden, accumulate);
  else
    k::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, cfg_.hidden, accumulate);
}

// QK-norm: the query heads' rows [N H, D] and the key heads' [N KV, D] of
// qkv, gathered into pre (kept), RMS-normalised with their weights, back.
template <typename T>
void Transformer<T>::qk_norm_forward(T* qkv, T* pre, T* rstd, const LayerParams& p, int64_t N, Workspace<T>& w) {
  const int64_t H = dims_.heads, KV = dims_.kv_heads, D = cfg_.head_dim(), W = qkv_width_;
  T* out = qk_scratch(w, N);
  k::heads_gather(pre, qkv, N, H, KV, D, W);
  k::rmsnorm_forward(out, rstd, pre, p.qnw(), N * H, D, cfg_.norm_eps);
  k::rmsnorm_forward(out + N * H * D, rstd + N * H, pre + N * H * D, p.knw(), N * KV, D, cfg_.norm_eps);
  k::heads_scatter(qkv, out, N, H, KV, D, W);
}

template <typename T>
void Transformer<T>::qk_norm_backward(T* dqkv, const T* pre, const T* rstd, const LayerParams& p, int64_t N, bool acc,
                                      Workspace<T>& w) {
  const int64_t H = dims_.heads, KV = dims_.kv_heads, D = cfg_.head_dim(), W = qkv_width_, heads = H + KV;
  T *g = qk_scratch(w, N), *din = g + N * heads * D;
  k::heads_gather(g, dqkv, N, H, KV, D, W);
  k::fill_zero(din, N * heads * D);  // the backward adds to its input gradient
  k::rmsnorm_backward(din, p.dqnw(), g, pre, p.qnw(), rstd, N * H, D, acc);
  k::rmsnorm_backward(din + N * H * D, p.dknw(), g + N * H * D, pre + N * H * D, p.knw(), rstd + N * H, N * KV, D, acc);
  k::heads_scatter(dqkv, din, N, H, KV, D, W);
}

template <typename T>
T* Transformer<T>::qk_scratch(Workspace<T>& w, int64_t N) const {
  const int64_t n = 2 * N * (dims_.heads + dims_.kv_heads) * cfg_.head_dim();
  if (w.qk.numel() < n) w.qk = Tensor::empty({n}, dtype_of<T>(), MemCategory::activations, device_);
  return w.qk.template data<T>();
}

// x_out = x_mid + exit(MLP(norm2(x_mid))), x_mid = x_in + exit(attention(norm1(x_in)))
template <typename T>
void Transformer<T>::layer_forward(const LayerActs<T>& a, T* x_out, const LayerParams& p, int64_t B, MoeActs<T>* m,
                                   Workspace<T>& w) {
  const int64_t Tn = seq(), C = cfg_.hidden, N = B * Tn, R = tp_->rows(N);
  const int64_t H = dims_.heads, KV = dims_.kv_heads, D = dq_, F = dims_.ffn;
  ensure_scratch(w, B);
  norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x_in, p.n1w(), p.n1b(), R);
  store(a.ln1, R * C);
  const T* h = tp_->enter(a.ln1_full, a.ln1, N, C);
  if (cfg_.is_mla()) {
    mla_forward(a, h, p, B, w);
  } else {
    linear_fwd(a.qkv, {h}, {p.qkvw()}, p.qkvb(), N, C, qkv_width_);
    if (a.qk_pre) qk_norm_forward(a.qkv, a.qk_pre, a.qk_rstd, p, N, w);
    if (arch_.positions == Positions::rotary) k::rope_forward(a.qkv, rope_.data(), B, Tn, H, KV, D, w.origin);
  }
  store(a.qkv, N * qkv_width_);
  cp_->attention_forward(a.atty, a.lse, a.qkv, B, H, KV, D, dv_, w.doc_start);
  store(a.atty, N * H * dv_);
  linear_fwd(w.partial, {a.atty}, {p.ow()}, nullptr, N, H * dv_, C);
  store(w.partial, N * C);
  const T* y = tp_->exit(w.reduced, w.partial, N, C);
  k::residual_forward(a.x_mid, a.x_in, y, p.ob(), R, C);
  store(a.x_mid, R * C);
  norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x_mid, p.n2w(), p.n2b(), R);
  store(a.ln2, R * C);
  h = tp_->enter(a.ln2_full, a.ln2, N, C);
  if (m) {
    moe_->forward(w.partial, h, *m, p.moe(), N, B, w.moe);
  } else {
    linear_fwd(a.fc, {h}, {p.fcw()}, p.fcb(), N, C, fc_width_);
    store(a.fc, N * fc_width_);
    if (arch_.mlp == MlpKind::swiglu)
      k::swiglu_forward(a.act, a.fc, N, F);
    else
      k::gelu_forward(a.act, a.fc, N * F);
    store(a.act, N * F);
    linear_fwd(w.partial, {a.act}, {p.pw()}, nullptr, N, F, C);
  }
  store(w.partial, N * C);
  y = tp_->exit(w.reduced, w.partial, N, C);
  k::residual_forward(x_out, a.x_mid, y, p.pb(), R, C);
  store(x_out, R * C);
}

// Local layer l of the context (layers_[li], segment s, its expert segment
// if any; next_s / next_es: the segments to prefetch): the workspace's
// d_res, the gradient of its output, becomes that of its input: the MLP's
// part, then the attention's.
template <typename T>
void Transformer<T>::layer_backward(Activations<T>& ctx, int l, int li, int s, int next_s, int next_es,
                                    Recompute recompute, bool acc, bool split, const std::function<void(int)>& ready,
                                    bool manage) {
  const int es = expert_seg_[size_t(li)];
  Workspace<T>& w = workspace(ctx);
  if (manage) {
    use_params(s, next_s);
    use_grads(s);
    if (es >= 0) use_params(es, next_es), use_grads(es);
  }
  if (ctx.is_packed()) unpack(ctx, l);
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const LayerParams& p = layers_[size_t(li)];
  if (recompute == Recompute::full) {
    // Rerun this layer's forward from its saved input; the output goes to a
    // scratch row nobody reads (w.d_ln is overwritten before use).
    layer_forward(a, w.d_ln, p, ctx.B, moe_acts(ctx, l), w);
  } else if (recompute == Recompute::selective) {
    cp_->attention_state(a.lse, w.d_atty, a.qkv, ctx.B, dims_.heads, dims_.kv_heads, dq_, dv_, w.doc_start);
  }
  mlp_backward(ctx, l, p, w, recompute, split, acc);
  attention_backward(ctx, l, p, w, split, acc);
  if (!manage) return;
  done_params(s);
  done_grads(s);
  ready(s);
  if (es >= 0) {  // the expert part's frontier: this layer's experts and every later layer's are final
    done_params(es);
    done_grads(es);
    ready(es);
  }
}

// The MLP's part (dense or MoE) and norm2's: w.d_res, the gradient of
// x_out = x_mid + exit(act pw^T) + pb, becomes that of x_mid. split: the
// linears' output gradients go where the weight pass finds them (an MoE
// layer's weight gradients come now, docs/moe.md).
template <typename T>
void Transformer<T>::mlp_backward(Activations<T>& ctx, int l, const LayerParams& p, Workspace<T>& w,
                                  Recompute recompute, bool split, bool acc) {
  const int64_t B = ctx.B, C = cfg_.hidden, N = B * seq(), R = tp_->rows(N), F = dims_.ffn;
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  k::bias_backward(p.dpb(), w.d_res, R, C, acc);
  const T* dy = tp_->exit_backward(w.d_full, w.d_res, N, C);
  MoeActs<T>* m = moe_acts(ctx, l);
  if (m) {
    moe_->backward(w.d_ln, dy, a.ln2_full, *m, p.moe(), p.moe_grads(), N, B, ctx.aux_scale, acc, w.moe);
    if (recompute == Recompute::full) m->received = Tensor();
  } else {
    T* d_fc = split ? ctx.saved[size_t(l)].d_fc : w.d_fc;
    if (split) k::copy(ctx.saved[size_t(l)].d_mlp_out, dy, N * C);
    if (gemm_reads_16bit()) k::pack_16(w.dy16, dy, N * C, precision_);  // w.d_res is rounded: exact
    linear_bwd(w.d_act, split ? nullptr : p.dpw(), nullptr, {dy, w.dy16}, saved_in(ctx, l, 7, a.act), {p.pw()}, N, F, C,
               acc);
    store(w.d_act, N * F);
    if (arch_.mlp == MlpKind::swiglu)
      k::swiglu_backward(d_fc, a.fc, w.d_act, N, F);
    else
      k::gelu_backward(d_fc, a.fc, w.d_act, N * F);
    store_grad(d_fc, w.dfc16, N * fc_width_);
    linear_bwd(w.d_ln, split ? nullptr : p.dfcw(), p.dfcb(), {d_fc, w.dfc16}, saved_in(ctx, l, 5, a.ln2_full),
               {p.fcw()}, N, C, fc_width_, acc);
  }
  store(w.d_ln, N * C);
  const T* d = tp_->enter_backward(w.d_local, w.d_ln, N, C);
  if (m) {  // the router's and gate's part, complete on every rank: this rank's rows
    k::residual_forward(w.d_local, d, w.moe.d_router_h + tp_->row_begin(N) * C, static_cast<T*>(nullptr), R, C);
    d = w.d_local;
  }
  norm_backward(w.d_res, p.dn2w(), p.dn2b(), d, a.x_mid, p.n2w(), a.ln2_mean, a.ln2_rstd, R, acc);
  store(w.d_res, R * C);
}

// The attention's part (standard or MLA) and norm1's: w.d_res, the
// gradient of x_mid = x_in + exit(atty ow^T) + ob, becomes that of x_in.
template <typename T>
void Transformer<T>::attention_backward(Activations<T>& ctx, int l, const LayerParams& p, Workspace<T>& w, bool split,
                                        bool acc) {
  const int64_t B = ctx.B, Tn = seq(), C = cfg_.hidden, N = B * Tn, R = tp_->rows(N);
  const int64_t H = dims_.heads, KV = dims_.kv_heads, D = dq_;
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  T* d_qkv = split ? ctx.saved[size_t(l)].d_qkv : w.d_qkv;
  // MLA's attention weights get their gradients in the input pass (docs/mla.md)
  T* dow = split && !cfg_.is_mla() ? nullptr : p.dow();
  k::bias_backward(p.dob(), w.d_res, R, C, acc);
  const T* dy = tp_->exit_backward(w.d_full, w.d_res, N, C);
  if (split) k::copy(ctx.saved[size_t(l)].d_attn_out, dy, N * C);
  if (gemm_reads_16bit()) k::pack_16(w.dy16, dy, N * C, precision_);
  linear_bwd(w.d_atty, dow, nullptr, {dy, w.dy16}, saved_in(ctx, l, 3, a.atty), {p.ow()}, N, H * dv_, C, acc);
  store(w.d_atty, N * H * dv_);
  cp_->attention_backward(d_qkv, w.d_atty, a.qkv, a.atty, a.lse, B, H, KV, D, dv_, w.doc_start);
  if (cfg_.is_mla()) {
    mla_backward(a, saved_in(ctx, l, 1, a.ln1_full), d_qkv, p, B, acc, w);
  } else {
    if (arch_.positions == Positions::rotary) k::rope_backward(d_qkv, rope_.data(), B, Tn, H, KV, D, w.origin);
    if (a.qk_pre) qk_norm_backward(d_qkv, a.qk_pre, a.qk_rstd, p, N, acc, w);
    store_grad(d_qkv, w.dqkv16, N * qkv_width_);
    linear_bwd(w.d_ln, split ? nullptr : p.dqkvw(), p.dqkvb(), {d_qkv, w.dqkv16}, saved_in(ctx, l, 1, a.ln1_full),
               {p.qkvw()}, N, C, qkv_width_, acc);
    store(w.d_ln, N * C);
  }
  const T* d = tp_->enter_backward(w.d_local, w.d_ln, N, C);
  norm_backward(w.d_res, p.dn1w(), p.dn1b(), d, a.x_in, p.n1w(), a.ln1_mean, a.ln1_rstd, R, acc);
  store(w.d_res, R * C);
}

template <typename T>
void Transformer<T>::layer_weight_grads(const Activations<T>& ctx, int l, const LayerParams& p, bool acc) {
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const SavedGrads<T>& g = ctx.saved[size_t(l)];
  const int64_t N = ctx.B * seq(), C = cfg_.hidden, F = dims_.ffn, HD = dims_.heads * dv_;
  if (ctx.moe.empty() || !ctx.moe[size_t(l)].logits) {  // an MoE layer's came with its input pass
    linear_bwd(nullptr, p.dpw(), nullptr, {g.d_mlp_out}, saved_in(ctx, l, 7, a.act), {p.pw()}, N, F, C, acc);
    linear_bwd(nullptr, p.dfcw(), nullptr, {g.d_fc}, saved_in(ctx, l, 5, a.ln2_full), {p.fcw()}, N, C, fc_width_, acc);
  }
  if (cfg_.is_mla()) return;  // its attention's came with the input pass
  linear_bwd(nullptr, p.dow(), nullptr, {g.d_attn_out}, saved_in(ctx, l, 3, a.atty), {p.ow()}, N, HD, C, acc);
  linear_bwd(nullptr, p.dqkvw(), nullptr, {g.d_qkv}, saved_in(ctx, l, 1, a.ln1_full), {p.qkvw()}, N, C, qkv_width_,
             acc);
}

#define INSTANTIATE(T)                                                                                                 \
  template void Transformer<T>::norm_forward(T*, T*, T*, const T*, const T*, const T*, int64_t);                       \
  template void Transformer<T>::norm_backward(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,   \
                                              bool);                                                                   \
  template void Transformer<T>::qk_norm_forward(T*, T*, T*, const LayerParams&, int64_t, Workspace<T>&);               \
  template void Transformer<T>::qk_norm_backward(T*, const T*, const T*, const LayerParams&, int64_t, bool,            \
                                                 Workspace<T>&);                                                       \
  template T* Transformer<T>::qk_scratch(Workspace<T>&, int64_t) const;                                                \
  template void Transformer<T>::layer_forward(const LayerActs<T>&, T*, const LayerParams&, int64_t, MoeActs<T>*,       \
                                              Workspace<T>&);                                                          \
  template void Transformer<T>::layer_weight_grads(const Activations<T>&, int, const LayerParams&, bool);              \
  template void Transformer<T>::layer_backward(Activations<T>&, int, int, int, int, int, Recompute, bool, bool,        \
                                               const std::function<void(int)>&, bool);                                 \
  template void Transformer<T>::mlp_backward(Activations<T>&, int, const LayerParams&, Workspace<T>&, Recompute, bool, \
                                             bool);                                                                    \
  template void Transformer<T>::attention_backward(Activations<T>&, int, const LayerParams&, Workspace<T>&, bool, bool);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::model
