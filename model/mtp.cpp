// Multi-token prediction (model/mtp.hpp, docs/mtp.md): the modules' two
// halves around their block, and the model's loops over the depths, which
// hold each depth's segments and run its block as a layer.
#include "model/mtp.hpp"

#include "kernels/buffer.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/norm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rows.hpp"
#include "model/transformer.hpp"

namespace trident::model {

namespace k = trident::kernels;

template <typename T>
void Mtp<T>::input_forward(MtpActs<T>& a, int kd, const int32_t* targets, const T* table, const T* prev,
                           const LayerParams<T>& p, T* x_in, int64_t B, Workspace<T>& w) const {
  const LayerOps<T>& o = ops_;
  const int64_t Tn = o.seq(), C = o.cfg().hidden, N = B * Tn, R = o.tp().rows(N);
  const double eps = o.cfg().norm_eps;
  // t_{i+k} = targets[i + k - 1]; t_{i+k+1} = targets[i + k], none past the sequence
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t i = b * Tn + t;
      a.tokens[size_t(i)] = t + kd - 1 < Tn ? targets[i + kd - 1] : 0;
      a.targets[size_t(i)] = t + kd < Tn ? targets[i + kd] : -1;
    }
  k::embedding_forward(w.partial, a.tokens.data(), table, N, C, o.dims().vocab_begin, o.dims().vocab);
  k::copy(a.emb, o.tp().exit(w.reduced, w.partial, N, C), R * C);
  o.store(a.emb, R * C);
  k::rmsnorm_forward(a.e_norm, a.e_rstd, a.emb, p.enw(), R, C, eps);
  k::rmsnorm_forward(a.h_norm, a.h_rstd, prev, p.hnw(), R, C, eps);
  k::columns_concat(a.cat, a.e_norm, a.h_norm, R, C, C);
  o.store(a.cat, R * 2 * C);
  o.linear_fwd(x_in, {a.cat}, {p.ehw()}, nullptr, R, 2 * C, C);
  o.store(x_in, R * C);
}

template <typename T>
void Mtp<T>::output_forward(MtpActs<T>& a, int kd, const LayerParams<T>& p, const T* head, int64_t B, T dscale) {
  const LayerOps<T>& o = ops_;
  const ModelConfig& cfg = o.cfg();
  const int64_t C = cfg.hidden, N = B * o.seq(), R = o.tp().rows(N), V = o.dims().vocab;
  const int depth = int(cfg.mtp.depth);
  if (losses_.size() < size_t(depth)) losses_.resize(size_t(depth), 0.0);
  k::rmsnorm_forward(a.o, a.o_rstd, a.x_out, p.shnw(), R, C, cfg.norm_eps);
  o.store(a.o, R * C);
  const T* h = o.tp().enter(a.o_full, a.o, N, C);
  o.linear_fwd(a.logits, {h}, {head}, nullptr, N, C, V);
  o.store(a.logits, N * V);
  // each depth's mean over its T - k positions per sequence, weighted loss_weight / D
  const double weight = cfg.mtp.loss_weight / double(depth) * double(cfg.seq_len) / double(cfg.seq_len - kd);
  // always a gradient (training): a weight of 0 gives zero dlogits, never leaves the logits in their place
  o.tp().cross_entropy(a.losses, a.logits, a.targets.data(), N, V, o.dims().vocab_valid, o.dims().vocab_begin,
                       k::LossGrad<T>::scaled(T(double(dscale) * weight)));
  o.store(a.logits, N * V);  // dlogits
  losses_[size_t(kd - 1)] += k::sum(a.losses, N);
}

template <typename T>
void Mtp<T>::output_backward(const MtpActs<T>& a, const LayerParams<T>& p, const T* head, T* dhead, bool head_acc,
                             const T* d_next, int64_t B, bool acc, Workspace<T>& w) const {
  const LayerOps<T>& o = ops_;
  const int64_t C = o.cfg().hidden, N = B * o.seq(), R = o.tp().rows(N), V = o.dims().vocab;
  // the LM head (dlogits in a.logits), and the next depth's gradient of h^k
  o.linear_bwd(w.d_ln, dhead, nullptr, {a.logits}, {a.o_full}, {head}, N, C, V, head_acc);
  o.store(w.d_ln, N * C);
  const T* d = o.tp().enter_backward(w.d_local, w.d_ln, N, C);
  if (d_next) {
    k::residual_forward(w.d_local, d, d_next, static_cast<T*>(nullptr), R, C);
    d = w.d_local;
  }
  k::fill_zero(w.d_res, R * C);  // the norm's backward adds to its input gradient
  k::rmsnorm_backward(w.d_res, p.dshnw(), d, a.x_out, p.shnw(), a.o_rstd, R, C, acc);
  o.store(w.d_res, R * C);
}

template <typename T>
void Mtp<T>::input_backward(MtpActs<T>& a, const LayerParams<T>& p, const T* prev, T* d_prev, bool fresh, int64_t B,
                            bool acc, Workspace<T>& w) const {
  const LayerOps<T>& o = ops_;
  const int64_t C = o.cfg().hidden, R = o.tp().rows(B * o.seq());
  // dcat [R, 2C]; d_e, d_h [R, C], after d_next
  T *dcat = d_next(w, R) + R * C, *d_e = dcat + 2 * R * C, *d_h = d_e + R * C;
  // eh_proj over the normalised embedding and hidden state
  o.linear_bwd(dcat, p.dehw(), nullptr, {w.d_res}, {a.cat}, {p.ehw()}, R, 2 * C, C, acc);
  k::columns_split(d_e, d_h, dcat, R, C, C);
  k::fill_zero(a.d_emb, R * C);
  k::rmsnorm_backward(a.d_emb, p.denw(), d_e, a.emb, p.enw(), a.e_rstd, R, C, acc);
  o.store(a.d_emb, R * C);
  if (fresh) k::fill_zero(d_prev, R * C);
  k::rmsnorm_backward(d_prev, p.dhnw(), d_h, prev, p.hnw(), a.h_rstd, R, C, acc);
  o.store(d_prev, R * C);
}

template <typename T>
void Mtp<T>::table_backward(const MtpActs<T>& a, T* dtable, int64_t B, Workspace<T>& w) const {
  const LayerOps<T>& o = ops_;
  const int64_t C = o.cfg().hidden, N = B * o.seq();
  k::embedding_backward(dtable, o.tp().exit_backward(w.d_full, a.d_emb, N, C), a.tokens.data(), N, C,
                        o.dims().vocab_begin, o.dims().vocab);
}

template <typename T>
T* Mtp<T>::d_next(Workspace<T>& w, int64_t R) const {
  return ops_.scratch(w.mtp, 5 * R * ops_.cfg().hidden);  // scratch_elements' first part
}

template <typename T>
void Mtp<T>::reset_step() {
  std::fill(losses_.begin(), losses_.end(), 0.0);
  table_fresh_ = true;
}

template <typename T>
void Transformer<T>::mtp_forward(Activations<T>& ctx, const int32_t* targets, T dscale) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int L = int(ch.spec.layers);
  Workspace<T>& w = workspace(ctx);
  // the embedding's table where this rank holds it (in this chunk or another), else the head's copy
  const bool shared = ch.spec.embedding || mtp_->shares_table;
  if (shared) use_params(emb_seg_, -1);
  const T* table = shared ? wte_ : mtp_->table;
  for (int kd = 1; kd <= int(cfg_.mtp.depth); ++kd) {
    MtpActs<T>& a = ctx.mtp[size_t(kd - 1)];
    const int l = L + kd - 1, s = ch.mtp_first_seg + kd - 1, li = int(ch.first_local) + l;
    const int es = expert_seg_[size_t(li)];
    const LayerParams<T>& p = layers_[size_t(li)];
    use_params(s, -1);
    if (es >= 0) use_params(es, -1);
    const T* prev = kd == 1 ? ctx.lnf : ctx.mtp[size_t(kd - 2)].o;
    mtp_->input_forward(a, kd, targets, table, prev, p, ctx.layers[size_t(l)].x_in, ctx.B, w);
    if (ctx.is_packed()) ops_.pack(ctx, l, 0, 1);
    layer_forward(ctx, l, li, a.x_out, Run::training, w);
    if (MoeActs<T>* m = moe_acts(ctx, l)) moe_->step().aux_loss += m->aux_loss, moe_->step().z_loss += m->z_loss;
    if (ctx.is_packed()) ops_.pack(ctx, l, 1, SIZE_MAX);
    mtp_->output_forward(a, kd, p, head_, ctx.B, dscale);
    if (es >= 0) done_params(es);
    done_params(s);
  }
  if (shared) done_params(emb_seg_);
  ctx.mtp_ran = true;
}

template <typename T>
void Transformer<T>::mtp_backward(Activations<T>& ctx, T* d_lnf, Recompute recompute, bool acc, bool head_acc,
                                  const std::function<void(int)>& ready) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t R = tp_->rows(ctx.B * seq()), V = dims_.vocab;
  const int L = int(ch.spec.layers), depth = int(cfg_.mtp.depth);
  Workspace<T>& w = workspace(ctx);
  T* d_next = mtp_->d_next(w, R);
  // the head's copy of the table (no embedding chunk here): written by these depths alone
  if (!ch.spec.embedding && !mtp_->shares_table && !acc) k::fill_zero(mtp_->dtable, V * cfg_.hidden);
  for (int kd = depth; kd >= 1; --kd) {
    MtpActs<T>& a = ctx.mtp[size_t(kd - 1)];
    const int l = L + kd - 1, s = ch.mtp_first_seg + kd - 1, li = int(ch.first_local) + l;
    const int es = expert_seg_[size_t(li)];
    const LayerParams<T>& p = layers_[size_t(li)];
    use_params(s, -1);
    use_grads(s);
    if (es >= 0) use_params(es, -1), use_grads(es);
    mtp_->output_backward(a, p, head_, dhead_, kd == depth ? head_acc : true, kd < depth ? d_next : nullptr, ctx.B, acc,
                          w);
    // w.d_res becomes the block's input's gradient; its weights' gradients come now in a split backward too
    layer_backward(ctx, l, li, s, -1, -1, recompute, acc, false, ready, false);
    const T* prev = kd == 1 ? ctx.lnf : ctx.mtp[size_t(kd - 2)].o;
    // depth 1: added to the main head's gradient of the final norm's output
    mtp_->input_backward(a, p, prev, kd == 1 ? d_lnf : d_next, kd > 1, ctx.B, acc, w);
    if (mtp_->shares_table) {  // the embedding's table, in this rank's other chunk: the step's first writer zeroes
      use_grads(emb_seg_);
      if (mtp_->first_table_write()) k::fill_zero(dwte_, V * cfg_.hidden);
      mtp_->table_backward(a, dwte_, ctx.B, w);
      done_grads(emb_seg_);
    } else if (!ch.spec.embedding) {  // the head's copy of the table; else added with the embedding's (backward_chunk)
      mtp_->table_backward(a, mtp_->dtable, ctx.B, w);
    }
    done_params(s);
    done_grads(s);
    ready(s);
    if (es >= 0) done_params(es), done_grads(es), ready(es);
  }
}

template class Mtp<float>;
template class Mtp<double>;
#define INSTANTIATE(T)                                                                   \
  template void Transformer<T>::mtp_forward(Activations<T>&, const int32_t*, T);         \
  template void Transformer<T>::mtp_backward(Activations<T>&, T*, Recompute, bool, bool, \
                                             const std::function<void(int)>&);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::model
