// One transformer layer: the norm pair, the residual stream and the
// tensor-parallel region around its two parts, the attention
// (model/attention.hpp) and the MLP (model/mlp.hpp), forward and backward;
// the model around it (segments, chunks, the head) is transformer.cpp.
#include <cstdint>

#include "kernels/buffer.hpp"
#include "kernels/residual.hpp"
#include "model/transformer.hpp"

namespace trident::model {

namespace k = trident::kernels;

// x_out = x_mid + exit(MLP(norm2(x_mid))), x_mid = x_in + exit(attention(norm1(x_in)))
template <typename T>
void Transformer<T>::layer_forward(Activations<T>& ctx, int l, int li, T* x_out, Run run, Workspace<T>& w) {
  const int64_t B = ctx.B, C = cfg_.hidden, N = B * seq(), R = tp_->rows(N);
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  LayerParams<T> p = layers_[size_t(li)];
  if (run == Run::eval) p.max_logit = nullptr;  // QK-clip counts the training forwards' logits only
  ensure_scratch(w, B);
  ops_.norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x_in, p.n1w(), p.n1b(), R);
  store(a.ln1, R * C);
  const T* h = tp_->enter(a.ln1_full, a.ln1, N, C);
  attention_->forward(w.partial, a, h, p, B, cfg_.window(global_[size_t(li)]), w);
  store(w.partial, N * C);
  const T* y = tp_->exit(w.reduced, w.partial, N, C);
  k::residual_forward(a.x_mid, a.x_in, y, p.ob(), R, C);
  store(a.x_mid, R * C);
  ops_.norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x_mid, p.n2w(), p.n2b(), R);
  store(a.ln2, R * C);
  h = tp_->enter(a.ln2_full, a.ln2, N, C);
  mlp_[size_t(li)]->forward(w.partial, ctx, l, h, p, global_[size_t(li)], run, w);
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
  if (ctx.is_packed()) ops_.unpack(ctx, l);
  if (recompute == Recompute::full) {
    // Rerun this layer's forward from its saved input; the output goes to a
    // scratch row nobody reads (w.d_ln is overwritten before use).
    layer_forward(ctx, l, li, w.d_ln, Run::recompute, w);
  } else if (recompute == Recompute::selective) {
    attention_->rebuild_state(ctx.layers[size_t(l)], layers_[size_t(li)], ctx.B, cfg_.window(global_[size_t(li)]), w);
  }
  mlp_backward(ctx, l, li, w, recompute, split, acc);
  attention_backward(ctx, l, li, w, split, acc);
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

// The MLP's part and norm2's: w.d_res, the gradient of
// x_out = x_mid + exit(act pw^T) + pb, becomes that of x_mid.
template <typename T>
void Transformer<T>::mlp_backward(Activations<T>& ctx, int l, int li, Workspace<T>& w, Recompute recompute, bool split,
                                  bool acc) {
  const int64_t C = cfg_.hidden, N = ctx.B * seq(), R = tp_->rows(N);
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const LayerParams<T>& p = layers_[size_t(li)];
  Mlp<T>& mlp = *mlp_[size_t(li)];
  k::bias_backward(p.dpb(), w.d_res, R, C, acc);
  const T* dy = tp_->exit_backward(w.d_full, w.d_res, N, C);
  mlp.backward(ctx, l, dy, p, w, recompute, split, acc);
  store(w.d_ln, N * C);
  const T* d = mlp.add_replicated_grad(tp_->enter_backward(w.d_local, w.d_ln, N, C), w, N);
  ops_.norm_backward(w.d_res, p.dn2w(), p.dn2b(), d, a.x_mid, p.n2w(), a.ln2_mean, a.ln2_rstd, R, acc);
  store(w.d_res, R * C);
}

// The attention's part and norm1's: w.d_res, the gradient of
// x_mid = x_in + exit(atty ow^T) + ob, becomes that of x_in.
template <typename T>
void Transformer<T>::attention_backward(Activations<T>& ctx, int l, int li, Workspace<T>& w, bool split, bool acc) {
  const int64_t C = cfg_.hidden, N = ctx.B * seq(), R = tp_->rows(N);
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const LayerParams<T>& p = layers_[size_t(li)];
  k::bias_backward(p.dob(), w.d_res, R, C, acc);
  attention_->backward(ctx, l, tp_->exit_backward(w.d_full, w.d_res, N, C), p, cfg_.window(global_[size_t(li)]), w,
                       split, acc);
  const T* d = tp_->enter_backward(w.d_local, w.d_ln, N, C);
  ops_.norm_backward(w.d_res, p.dn1w(), p.dn1b(), d, a.x_in, p.n1w(), a.ln1_mean, a.ln1_rstd, R, acc);
  store(w.d_res, R * C);
}

// The split backward's weight pass of one layer: the MLP's, then the attention's.
template <typename T>
void Transformer<T>::layer_weight_grads(const Activations<T>& ctx, int l, int li, bool acc) {
  const LayerParams<T>& p = layers_[size_t(li)];
  mlp_[size_t(li)]->weight_grads(ctx, l, p, acc);
  attention_->weight_grads(ctx, l, p, acc);
}

#define INSTANTIATE(T)                                                                                          \
  template void Transformer<T>::layer_forward(Activations<T>&, int, int, T*, Run, Workspace<T>&);               \
  template void Transformer<T>::layer_weight_grads(const Activations<T>&, int, int, bool);                      \
  template void Transformer<T>::layer_backward(Activations<T>&, int, int, int, int, int, Recompute, bool, bool, \
                                               const std::function<void(int)>&, bool);                          \
  template void Transformer<T>::mlp_backward(Activations<T>&, int, int, Workspace<T>&, Recompute, bool, bool);  \
  template void Transformer<T>::attention_backward(Activations<T>&, int, int, Workspace<T>&, bool, bool);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::model
