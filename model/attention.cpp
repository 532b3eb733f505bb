// The attention part of a layer (model/attention.hpp): the core every
// variant shares (attention kernels, output projection) and the standard
// variant, GqaAttention (fused q|k|v, QK-norm, rotary).
#include "model/attention.hpp"

#include <numeric>

#include "kernels/attention.hpp"
#include "kernels/buffer.hpp"
#include "kernels/norm.hpp"
#include "kernels/rotary.hpp"
#include "kernels/rows.hpp"
#include "model/rope.hpp"

namespace trident::model {

namespace k = trident::kernels;

int64_t AttentionLayout::saved_total() const { return std::accumulate(saved.begin(), saved.end(), int64_t(0)); }
int64_t AttentionLayout::scratch_total() const { return std::accumulate(scratch.begin(), scratch.end(), int64_t(0)); }

AttentionLayout attention_layout(const ModelConfig& cfg, const LocalDims& d, int64_t N) {
  switch (cfg.attention) {
    case AttentionKind::mla:
      return MlaAttention<float>::layout(cfg, d, N);
    case AttentionKind::standard:
      break;
  }
  return GqaAttention<float>::layout(cfg, d, N);
}

double attention_weights(const ModelConfig& cfg) {
  switch (cfg.attention) {
    case AttentionKind::mla:
      return MlaAttention<float>::weights(cfg);
    case AttentionKind::standard:
      break;
  }
  return GqaAttention<float>::weights(cfg);
}

template <typename T>
std::unique_ptr<Attention<T>> make_attention(const LayerOps<T>& ops) {
  switch (ops.cfg().attention) {
    case AttentionKind::mla:
      return std::make_unique<MlaAttention<T>>(ops);
    case AttentionKind::standard:
      break;
  }
  return std::make_unique<GqaAttention<T>>(ops);
}

template <typename T>
std::vector<T*> Attention<T>::scratch(Workspace<T>& w, int64_t N) const {
  const AttentionLayout z = attention_layout(ops_.cfg(), ops_.dims(), N);
  T* at = ops_.scratch(w.attention, z.scratch_total());
  std::vector<T*> out;
  for (int64_t n : z.scratch) out.push_back(at), at += n;
  return out;
}

template <typename T>
parallel::AttentionArgs<T> Attention<T>::kernel_args(const LayerParams<T>& p, int64_t B, int64_t window,
                                                     const Workspace<T>& w, bool grads) const {
  parallel::AttentionArgs<T> x;
  x.B = B, x.H = ops_.dims().heads, x.KV = ops_.dims().kv_heads, x.D = ops_.dq(), x.Dv = ops_.dv();
  x.doc_start = w.doc_start, x.window = window;
  x.sinks = p.sinks(), x.dsinks = grads ? p.dsinks() : nullptr;
  x.head_max = grads ? nullptr : p.max_logit;
  return x;
}

template <typename T>
void Attention<T>::forward(T* out, const LayerActs<T>& a, const T* h, const LayerParams<T>& p, int64_t B,
                           int64_t window, Workspace<T>& w) const {
  const LayerOps<T>& o = ops_;
  const int64_t N = B * o.seq(), C = o.cfg().hidden, H = o.dims().heads;
  project(a, h, p, B, w);
  o.store(a.qkv, N * o.qkv_width());
  o.cp().attention_forward(a.atty, a.lse, a.qkv, kernel_args(p, B, window, w, false));
  o.store(a.atty, N * H * o.dv());
  o.linear_fwd(out, {a.atty}, {p.ow()}, nullptr, N, H * o.dv(), C, {p.layer, Linear::proj});
}

template <typename T>
void Attention<T>::backward(const Activations<T>& ctx, int l, const T* dy, const LayerParams<T>& p, int64_t window,
                            Workspace<T>& w, bool split, bool acc) const {
  const LayerOps<T>& o = ops_;
  const int64_t B = ctx.B, N = B * o.seq(), C = o.cfg().hidden, H = o.dims().heads;
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  T* d_qkv = split ? ctx.saved[size_t(l)].d_qkv : w.d_qkv;
  T* dow = split && defers_weight_grads() ? nullptr : p.dow();
  if (split) k::copy(ctx.saved[size_t(l)].d_attn_out, dy, N * C);
  if (o.gemm_reads_16bit()) k::pack_16(w.dy16, dy, N * C, o.precision());
  o.linear_bwd(w.d_atty, dow, nullptr, {dy, w.dy16}, o.saved_in(ctx, l, o.atty, a.atty), {p.ow()}, N, H * o.dv(), C,
               acc, {p.layer, Linear::proj});
  o.store(w.d_atty, N * H * o.dv());
  if (p.sinks() && !acc) k::fill_zero(p.dsinks(), H);  // the sinks' gradient is added to
  o.cp().attention_backward(d_qkv, w.d_atty, a.qkv, a.atty, a.lse, kernel_args(p, B, window, w, true));
  project_backward(ctx, l, d_qkv, p, w, split, acc);
}

template <typename T>
void Attention<T>::weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const {
  if (!defers_weight_grads()) return;
  const LayerOps<T>& o = ops_;
  const int64_t N = ctx.B * o.seq(), C = o.cfg().hidden, HD = o.dims().heads * o.dv();
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  o.linear_bwd(nullptr, p.dow(), nullptr, {ctx.saved[size_t(l)].d_attn_out}, o.saved_in(ctx, l, o.atty, a.atty),
               {p.ow()}, N, HD, C, acc, {p.layer, Linear::proj});
  project_weight_grads(ctx, l, p, acc);
}

template <typename T>
void Attention<T>::rebuild_state(const LayerActs<T>& a, const LayerParams<T>& p, int64_t B, int64_t window,
                                 Workspace<T>& w) const {
  ops_.cp().attention_state(a.lse, w.d_atty, a.qkv, kernel_args(p, B, window, w, false));
}

template <typename T>
GqaAttention<T>::GqaAttention(const LayerOps<T>& ops) : Attention<T>(ops) {
  if (ops.arch().positions == Positions::rotary) rope_ = rope_table(ops.cfg(), ops.dq());
}

template <typename T>
AttentionLayout GqaAttention<T>::layout(const ModelConfig& cfg, const LocalDims& d, int64_t N) {
  if (!cfg.qk_norm) return {};
  const int64_t rows = N * (d.heads + d.kv_heads), D = cfg.head_dim();
  return {{rows * D, rows}, {rows * D, rows * D}};
}

template <typename T>
double GqaAttention<T>::weights(const ModelConfig& m) {
  const double C = double(m.hidden), D = double(m.head_dim()), H = double(m.heads), KV = double(m.kv_heads);
  return C * (H + 2 * KV) * D + H * D * C;
}

template <typename T>
void GqaAttention<T>::make_saved(LayerActs<T>& a, int64_t N, const std::function<T*(int64_t)>& alloc) const {
  const AttentionLayout z = layout(this->ops_.cfg(), this->ops_.dims(), N);
  if (z.saved.empty()) return;
  a.qk_pre = alloc(z.saved[0]), a.qk_rstd = alloc(z.saved[1]);
}

template <typename T>
void GqaAttention<T>::project(const LayerActs<T>& a, const T* h, const LayerParams<T>& p, int64_t B,
                              Workspace<T>& w) const {
  const LayerOps<T>& o = this->ops_;
  const int64_t N = B * o.seq(), C = o.cfg().hidden;
  o.linear_fwd(a.qkv, {h}, {p.qkvw()}, p.qkvb(), N, C, o.qkv_width(), {p.layer, Linear::qkv},
               o.fp8_input(a, o.ln1_full));
  if (a.qk_pre) qk_norm_forward(a.qkv, a.qk_pre, a.qk_rstd, p, N, w);
  if (!rope_.empty())
    k::rope_forward(a.qkv, rope_.data(), B, o.seq(), o.dims().heads, o.dims().kv_heads, o.dq(), w.origin);
}

template <typename T>
void GqaAttention<T>::project_backward(const Activations<T>& ctx, int l, T* d_qkv, const LayerParams<T>& p,
                                       Workspace<T>& w, bool split, bool acc) const {
  const LayerOps<T>& o = this->ops_;
  const int64_t B = ctx.B, N = B * o.seq(), C = o.cfg().hidden;
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  if (!rope_.empty())
    k::rope_backward(d_qkv, rope_.data(), B, o.seq(), o.dims().heads, o.dims().kv_heads, o.dq(), w.origin);
  if (a.qk_pre) qk_norm_backward(d_qkv, a.qk_pre, a.qk_rstd, p, N, acc, w);
  o.store_grad(d_qkv, w.dqkv16, N * o.qkv_width());
  o.linear_bwd(w.d_ln, split ? nullptr : p.dqkvw(), p.dqkvb(), {d_qkv, w.dqkv16},
               o.saved_in(ctx, l, o.ln1_full, a.ln1_full), {p.qkvw()}, N, C, o.qkv_width(), acc,
               {p.layer, Linear::qkv});
  o.store(w.d_ln, N * C);
}

template <typename T>
void GqaAttention<T>::project_weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const {
  const LayerOps<T>& o = this->ops_;
  const int64_t N = ctx.B * o.seq(), C = o.cfg().hidden;
  o.linear_bwd(nullptr, p.dqkvw(), nullptr, {ctx.saved[size_t(l)].d_qkv},
               o.saved_in(ctx, l, o.ln1_full, ctx.layers[size_t(l)].ln1_full), {p.qkvw()}, N, C, o.qkv_width(), acc,
               {p.layer, Linear::qkv});
}

// QK-norm: the query heads' rows [N H, D] and the key heads' [N KV, D] of
// qkv, gathered into pre (kept), RMS-normalised with their weights, back.
template <typename T>
void GqaAttention<T>::qk_norm_forward(T* qkv, T* pre, T* rstd, const LayerParams<T>& p, int64_t N,
                                      Workspace<T>& w) const {
  const LayerOps<T>& o = this->ops_;
  const int64_t H = o.dims().heads, KV = o.dims().kv_heads, D = o.dq(), W = o.qkv_width();
  const double eps = o.cfg().norm_eps;
  T* out = this->scratch(w, N)[0];
  k::heads_gather(pre, qkv, N, H, KV, D, W);
  k::rmsnorm_forward(out, rstd, pre, p.qnw(), N * H, D, eps);
  k::rmsnorm_forward(out + N * H * D, rstd + N * H, pre + N * H * D, p.knw(), N * KV, D, eps);
  k::heads_scatter(qkv, out, N, H, KV, D, W);
}

template <typename T>
void GqaAttention<T>::qk_norm_backward(T* dqkv, const T* pre, const T* rstd, const LayerParams<T>& p, int64_t N,
                                       bool acc, Workspace<T>& w) const {
  const LayerOps<T>& o = this->ops_;
  const int64_t H = o.dims().heads, KV = o.dims().kv_heads, D = o.dq(), W = o.qkv_width();
  const std::vector<T*> s = this->scratch(w, N);
  T *g = s[0], *din = s[1];
  k::heads_gather(g, dqkv, N, H, KV, D, W);
  k::fill_zero(din, N * (H + KV) * D);  // the backward adds to its input gradient
  k::rmsnorm_backward(din, p.dqnw(), g, pre, p.qnw(), rstd, N * H, D, acc);
  k::rmsnorm_backward(din + N * H * D, p.dknw(), g + N * H * D, pre + N * H * D, p.knw(), rstd + N * H, N * KV, D, acc);
  k::heads_scatter(dqkv, din, N, H, KV, D, W);
}

template class Attention<float>;
template class Attention<double>;
template class GqaAttention<float>;
template class GqaAttention<double>;
template std::unique_ptr<Attention<float>> make_attention(const LayerOps<float>&);
template std::unique_ptr<Attention<double>> make_attention(const LayerOps<double>&);

}  // namespace trident::model
