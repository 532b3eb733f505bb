// Multi-token prediction (model.mtp, docs/mtp.md): DeepSeek-V3's modules on
// the head chunk, after the main loss. Depth k (1..D) of token i:
//   x    = eh_proj [enorm(Emb(t_{i+k})) | hnorm(h^{k-1}_i)]      [R, 2C] -> [R, C]
//   h^k  = shared_head.norm(Block_k(x))                          (h^0: the final norm's output)
//   L_k  = cross-entropy(head(h^k_i), t_{i+k+1}), i < T - k
// with the model's embedding table and LM head; the training loss adds
// loss_weight / D x sum_k L_k, L_k the mean over each sequence's T - k
// positions. Block_k is layer L + k - 1 of the context (Transformer's
// layer_forward / layer_backward, MoE and MLA included).
#include "kernels/buffer.hpp"
#include "kernels/embedding.hpp"
#include "kernels/norm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rows.hpp"
#include "model/transformer.hpp"

namespace trident::model {

namespace k = trident::kernels;

template <typename T>
void Transformer<T>::mtp_forward(Activations<T>& ctx, const int32_t* targets, T dscale) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t B = ctx.B, Tn = seq(), C = cfg_.hidden, N = B * Tn, R = tp_->rows(N), V = dims_.vocab;
  const int L = int(ch.spec.layers), depth = int(cfg_.mtp.depth);
  Workspace<T>& w = workspace(ctx);
  // the embedding's table where this rank holds it (in this chunk or another), else the head's copy
  const bool shared = ch.spec.embedding || mtp_shared_table_;
  if (shared) use_params(emb_seg_, -1);
  const T* table = shared ? wte_ : mtp_wte_;
  if (mtp_losses_.size() < size_t(depth)) mtp_losses_.resize(size_t(depth), 0.0);
  for (int kd = 1; kd <= depth; ++kd) {
    MtpActs<T>& a = ctx.mtp[size_t(kd - 1)];
    const int l = L + kd - 1, s = ch.mtp_first_seg + kd - 1;
    const int es = expert_seg_[size_t(ch.first_local + l)];
    const LayerParams<T>& p = layers_[size_t(ch.first_local + l)];
    LayerActs<T>& la = ctx.layers[size_t(l)];
    // t_{i+k} = targets[i + k - 1]; t_{i+k+1} = targets[i + k], none past the sequence
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t i = b * Tn + t;
        a.tokens[size_t(i)] = t + kd - 1 < Tn ? targets[i + kd - 1] : 0;
        a.targets[size_t(i)] = t + kd < Tn ? targets[i + kd] : -1;
      }
    use_params(s, -1);
    if (es >= 0) use_params(es, -1);
    k::embedding_forward(w.partial, a.tokens.data(), table, N, C, dims_.vocab_begin, V);
    k::copy(a.emb, tp_->exit(w.reduced, w.partial, N, C), R * C);
    store(a.emb, R * C);
    const T* prev = kd == 1 ? ctx.lnf : ctx.mtp[size_t(kd - 2)].o;
    k::rmsnorm_forward(a.e_norm, a.e_rstd, a.emb, p.enw(), R, C, cfg_.norm_eps);
    k::rmsnorm_forward(a.h_norm, a.h_rstd, prev, p.hnw(), R, C, cfg_.norm_eps);
    k::columns_concat(a.cat, a.e_norm, a.h_norm, R, C, C);
    store(a.cat, R * 2 * C);
    ops_.linear_fwd(la.x_in, {a.cat}, {p.ehw()}, nullptr, R, 2 * C, C);
    store(la.x_in, R * C);
    if (ctx.is_packed()) ops_.pack(ctx, l, 0, 1);
    layer_forward(ctx, l, int(ch.first_local) + l, a.x_out, Run::training, w);
    if (MoeActs<T>* m = moe_acts(ctx, l)) moe_->step().aux_loss += m->aux_loss, moe_->step().z_loss += m->z_loss;
    if (ctx.is_packed()) ops_.pack(ctx, l, 1, SIZE_MAX);
    k::rmsnorm_forward(a.o, a.o_rstd, a.x_out, p.shnw(), R, C, cfg_.norm_eps);
    store(a.o, R * C);
    const T* h = tp_->enter(a.o_full, a.o, N, C);
    ops_.linear_fwd(a.logits, {h}, {head_}, nullptr, N, C, V);
    store(a.logits, N * V);
    // each depth's mean over its T - k positions per sequence, weighted loss_weight / D
    const double weight = cfg_.mtp.loss_weight / double(depth) * double(cfg_.seq_len) / double(cfg_.seq_len - kd);
    // always a gradient (training): a weight of 0 gives zero dlogits, never leaves the logits in their place
    tp_->cross_entropy(a.losses, a.logits, a.targets.data(), N, V, dims_.vocab_valid, dims_.vocab_begin,
                       k::LossGrad<T>::scaled(T(double(dscale) * weight)));
    store(a.logits, N * V);  // dlogits
    mtp_losses_[size_t(kd - 1)] += k::sum(a.losses, N);
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
  const int64_t B = ctx.B, Tn = seq(), C = cfg_.hidden, N = B * Tn, R = tp_->rows(N), V = dims_.vocab;
  const int L = int(ch.spec.layers), depth = int(cfg_.mtp.depth);
  Workspace<T>& w = workspace(ctx);
  // d_next: the gradient of h^k from depth k + 1; dcat [R, 2C]; d_e, d_h [R, C]
  T *d_next = ops_.scratch(w.mtp, 5 * R * C), *dcat = d_next + R * C, *d_e = dcat + 2 * R * C, *d_h = d_e + R * C;
  // the head's copy of the table (no embedding chunk here): written by these depths alone
  if (!ch.spec.embedding && !mtp_shared_table_ && !acc) k::fill_zero(dmtp_wte_, V * C);
  for (int kd = depth; kd >= 1; --kd) {
    MtpActs<T>& a = ctx.mtp[size_t(kd - 1)];
    const int l = L + kd - 1, s = ch.mtp_first_seg + kd - 1, li = ch.first_local + l;
    const int es = expert_seg_[size_t(li)];
    const LayerParams<T>& p = layers_[size_t(li)];
    use_params(s, -1);
    use_grads(s);
    if (es >= 0) use_params(es, -1), use_grads(es);
    // the LM head (dlogits in a.logits), and the next depth's gradient of h^k
    ops_.linear_bwd(w.d_ln, dhead_, nullptr, {a.logits}, {a.o_full}, {head_}, N, C, V, kd == depth ? head_acc : true);
    store(w.d_ln, N * C);
    const T* d = tp_->enter_backward(w.d_local, w.d_ln, N, C);
    if (kd < depth) {
      k::residual_forward(w.d_local, d, d_next, static_cast<T*>(nullptr), R, C);
      d = w.d_local;
    }
    k::fill_zero(w.d_res, R * C);  // the norm's backward adds to its input gradient
    k::rmsnorm_backward(w.d_res, p.dshnw(), d, a.x_out, p.shnw(), a.o_rstd, R, C, acc);
    store(w.d_res, R * C);
    // w.d_res becomes the block's input's gradient; its weights' gradients come now in a split backward too
    layer_backward(ctx, l, li, s, -1, -1, recompute, acc, false, ready, false);
    // eh_proj over the normalised embedding and hidden state
    ops_.linear_bwd(dcat, p.dehw(), nullptr, {w.d_res}, {a.cat}, {p.ehw()}, R, 2 * C, C, acc);
    k::columns_split(d_e, d_h, dcat, R, C, C);
    k::fill_zero(a.d_emb, R * C);
    k::rmsnorm_backward(a.d_emb, p.denw(), d_e, a.emb, p.enw(), a.e_rstd, R, C, acc);
    store(a.d_emb, R * C);
    const T* prev = kd == 1 ? ctx.lnf : ctx.mtp[size_t(kd - 2)].o;
    T* d_prev = kd == 1 ? d_lnf : d_next;  // depth 1: added to the main head's gradient of the final norm's output
    if (kd > 1) k::fill_zero(d_next, R * C);
    k::rmsnorm_backward(d_prev, p.dhnw(), d_h, prev, p.hnw(), a.h_rstd, R, C, acc);
    store(d_prev, R * C);
    if (mtp_shared_table_) {  // the embedding's table, in this rank's other chunk: the step's first writer zeroes
      use_grads(emb_seg_);
      if (table_fresh_) k::fill_zero(dwte_, V * C);
      table_fresh_ = false;
      k::embedding_backward(dwte_, tp_->exit_backward(w.d_full, a.d_emb, N, C), a.tokens.data(), N, C,
                            dims_.vocab_begin, V);
      done_grads(emb_seg_);
    } else if (!ch.spec.embedding) {  // the head's copy of the table; else added with the embedding's (backward_chunk)
      const T* demb = tp_->exit_backward(w.d_full, a.d_emb, N, C);
      k::embedding_backward(dmtp_wte_, demb, a.tokens.data(), N, C, dims_.vocab_begin, V);
    }
    done_params(s);
    done_grads(s);
    ready(s);
    if (es >= 0) done_params(es), done_grads(es), ready(es);
  }
}

#define INSTANTIATE(T)                                                                   \
  template void Transformer<T>::mtp_forward(Activations<T>&, const int32_t*, T);         \
  template void Transformer<T>::mtp_backward(Activations<T>&, T*, Recompute, bool, bool, \
                                             const std::function<void(int)>&);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::model
