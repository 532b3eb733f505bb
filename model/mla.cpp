// Multi-head latent attention (model.attention: mla, docs/mla.md), the
// MlaAttention variant of a layer's attention (model/attention.hpp): the
// latents' projections and norms, the rotary parts and the heads for the
// attention kernels, forward and backward.
#include "kernels/buffer.hpp"
#include "kernels/norm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"
#include "kernels/rows.hpp"
#include "model/attention.hpp"
#include "model/rope.hpp"

namespace trident::model {

namespace k = trident::kernels;

// Multi-head latent attention (docs/mla.md), as transformers' DeepseekV3Attention:
//   q  = q_b(rmsnorm(q_a h)) or q_proj h            [N, H Dq], each head [nope | rope]
//   kv = kv_a_proj_with_mqa h = [latent (KL) | kr (Dr)]
//   kvb = kv_b(rmsnorm(latent))                      [N, H (Dn + Dv)]
// rotary (interleaved pairs) on each query head's rope part and on kr, then
// the heads for the attention kernels (kernels::mla_heads). kv_a's two row
// blocks are two linears: the latent's KL rows, then kr's Dr rows. The
// latents' norms use epsilon 1e-6 whatever model.norm_eps says (DeepSeek's
// and transformers' code: RMSNorm(rank) with its default).
constexpr double kMlaNormEps = 1e-6;

template <typename T>
MlaAttention<T>::MlaAttention(const LayerOps<T>& ops) : Attention<T>(ops) {
  if (ops.arch().positions == Positions::rotary) rope_ = rope_table(ops.cfg(), ops.cfg().mla.qk_rope_head_dim);
  // YaRN's softmax-scale correction (transformers' yarn_apply_mscale): the
  // scores q k^T / sqrt(Dq) times c = mscale(factor, mscale_all_dim)^2, as
  // the queries times c: rows of (c, 0), a rotation by angle 0 of length c
  // applied to every pair of each query head (its backward scales by c too)
  const double c = rope_frequencies(ops.cfg(), ops.cfg().mla.qk_rope_head_dim).softmax_factor;
  if (c != 1.0) {
    const int64_t half = ops.dq() / 2;
    q_scale_.assign(size_t(ops.cfg().seq_len * half * 2), 0.0);
    for (size_t i = 0; i < q_scale_.size(); i += 2) q_scale_[i] = c;
  }
}

template <typename T>
AttentionLayout MlaAttention<T>::layout(const ModelConfig& cfg, const LocalDims& d, int64_t N) {
  const MlaConfig& c = cfg.mla;
  const int64_t QL = c.q_lora_rank, KL = c.kv_lora_rank, H = d.heads;
  AttentionLayout z;
  if (QL > 0) z.saved = {N * QL, N, N * QL};
  z.saved.insert(z.saved.end(), {N * KL, N, N * KL});
  z.scratch = {N * H * cfg.q_head_dim(),
               N * H * (c.qk_nope_head_dim + c.v_head_dim),
               N * c.qk_rope_head_dim,
               N * KL,
               N * KL,
               N * QL,
               N * QL,
               N * cfg.hidden};
  return z;
}

template <typename T>
double MlaAttention<T>::weights(const ModelConfig& m) {
  const MlaConfig& a = m.mla;
  const double C = double(m.hidden), H = double(m.heads), QL = double(a.q_lora_rank), KL = double(a.kv_lora_rank);
  const double Dq = double(a.qk_head_dim());
  return (QL > 0 ? C * QL + QL * H * Dq : C * H * Dq) + C * (KL + double(a.qk_rope_head_dim)) +
         KL * H * double(a.qk_nope_head_dim + a.v_head_dim) + H * double(a.v_head_dim) * C;
}

template <typename T>
void MlaAttention<T>::make_saved(LayerActs<T>& a, int64_t N, const std::function<T*(int64_t)>& alloc) const {
  const AttentionLayout z = layout(this->ops_.cfg(), this->ops_.dims(), N);
  size_t i = 0;
  if (this->ops_.cfg().mla.q_lora_rank > 0)
    a.mla.q_lat = alloc(z.saved[i]), a.mla.q_rstd = alloc(z.saved[i + 1]), a.mla.q_norm = alloc(z.saved[i + 2]), i += 3;
  a.mla.kv_lat = alloc(z.saved[i]), a.mla.kv_rstd = alloc(z.saved[i + 1]), a.mla.kv_norm = alloc(z.saved[i + 2]);
}

// The scratch of model/attention.hpp's layout, by name.
template <typename T>
struct MlaScratch {
  T *q, *kvb, *kr, *d_kv_norm, *d_kv_lat, *d_q_norm, *d_q_lat, *d_h;
  explicit MlaScratch(const std::vector<T*>& s)
      : q(s[0]), kvb(s[1]), kr(s[2]), d_kv_norm(s[3]), d_kv_lat(s[4]), d_q_norm(s[5]), d_q_lat(s[6]), d_h(s[7]) {}
};

template <typename T>
void MlaAttention<T>::project(const LayerActs<T>& a, const T* h, const LayerParams<T>& p, int64_t B,
                              Workspace<T>& w) const {
  const LayerOps<T>& o = this->ops_;
  const MlaConfig& c = o.cfg().mla;
  const int64_t N = B * o.seq(), C = o.cfg().hidden, H = o.dims().heads, Dn = c.qk_nope_head_dim;
  const int64_t Dr = c.qk_rope_head_dim, QL = c.q_lora_rank, KL = c.kv_lora_rank, Dq = o.dq(), Dv = o.dv();
  const MlaScratch<T> m(this->scratch(w, N));
  const MlaActs<T>& s = a.mla;
  if (QL > 0) {
    o.linear_fwd(s.q_lat, {h}, {p.qaw()}, nullptr, N, C, QL, {p.layer, Linear::q_a});
    o.store(s.q_lat, N * QL);
    k::rmsnorm_forward(s.q_norm, s.q_rstd, s.q_lat, p.qan(), N, QL, kMlaNormEps);
    o.store(s.q_norm, N * QL);
    o.linear_fwd(m.q, {s.q_norm}, {p.qkvw()}, nullptr, N, QL, H * Dq, {p.layer, Linear::q_b});
  } else {
    o.linear_fwd(m.q, {h}, {p.qkvw()}, nullptr, N, C, H * Dq, {p.layer, Linear::q_b});
  }
  o.linear_fwd(s.kv_lat, {h}, {p.kvaw()}, nullptr, N, C, KL, {p.layer, Linear::kv_a});
  o.store(s.kv_lat, N * KL);
  o.linear_fwd(m.kr, {h}, {p.kvaw() + KL * C}, nullptr, N, C, Dr, {p.layer, Linear::kv_rope});
  k::rmsnorm_forward(s.kv_norm, s.kv_rstd, s.kv_lat, p.kvan(), N, KL, kMlaNormEps);
  o.store(s.kv_norm, N * KL);
  o.linear_fwd(m.kvb, {s.kv_norm}, {p.kvbw()}, nullptr, N, KL, H * (Dn + Dv), {p.layer, Linear::kv_b});
  k::rope_pairs_forward(m.q, rope_.data(), B, o.seq(), H, H * Dq, Dq, Dn, Dr, w.origin);
  k::rope_pairs_forward(m.kr, rope_.data(), B, o.seq(), 1, Dr, Dr, 0, Dr, w.origin);
  if (!q_scale_.empty()) k::rope_pairs_forward(m.q, q_scale_.data(), B, o.seq(), H, H * Dq, Dq, 0, Dq, w.origin);
  k::mla_heads(a.qkv, m.q, m.kvb, m.kr, N, H, Dn, Dr, Dv);
}

// d_qkv [N, H (2 Dq + Dv)] -> w.d_ln [N, C], the gradient of h; every
// weight's gradient, in either backward part (docs/mla.md)
template <typename T>
void MlaAttention<T>::project_backward(const Activations<T>& ctx, int l, T* d_qkv, const LayerParams<T>& p,
                                       Workspace<T>& w, bool, bool acc) const {
  const LayerOps<T>& o = this->ops_;
  const MlaConfig& c = o.cfg().mla;
  const int64_t B = ctx.B, N = B * o.seq(), C = o.cfg().hidden, H = o.dims().heads, Dn = c.qk_nope_head_dim;
  const int64_t Dr = c.qk_rope_head_dim, QL = c.q_lora_rank, KL = c.kv_lora_rank, Dq = o.dq(), Dv = o.dv();
  const int64_t Dkv = Dn + Dv;
  const MlaScratch<T> m(this->scratch(w, N));
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const MlaActs<T>& s = a.mla;
  const GemmIn<T> h = o.saved_in(ctx, l, o.ln1_full, a.ln1_full);
  k::mla_heads_backward(m.q, m.kvb, m.kr, d_qkv, N, H, Dn, Dr, Dv);
  if (!q_scale_.empty()) k::rope_pairs_backward(m.q, q_scale_.data(), B, o.seq(), H, H * Dq, Dq, 0, Dq, w.origin);
  k::rope_pairs_backward(m.q, rope_.data(), B, o.seq(), H, H * Dq, Dq, Dn, Dr, w.origin);
  k::rope_pairs_backward(m.kr, rope_.data(), B, o.seq(), 1, Dr, Dr, 0, Dr, w.origin);
  o.store(m.q, N * H * Dq);
  o.store(m.kvb, N * H * Dkv);
  o.store(m.kr, N * Dr);
  // keys and values: kv_b, kv_a_layernorm, kv_a's two row blocks
  o.linear_bwd(m.d_kv_norm, p.dkvbw(), nullptr, {m.kvb}, {s.kv_norm}, {p.kvbw()}, N, KL, H * Dkv, acc,
               {p.layer, Linear::kv_b});
  k::fill_zero(m.d_kv_lat, N * KL);  // the norm's backward adds to its input gradient
  k::rmsnorm_backward(m.d_kv_lat, p.dkvan(), m.d_kv_norm, s.kv_lat, p.kvan(), s.kv_rstd, N, KL, acc);
  o.store(m.d_kv_lat, N * KL);
  o.linear_bwd(w.d_ln, p.dkvaw(), nullptr, {m.d_kv_lat}, h, {p.kvaw()}, N, C, KL, acc, {p.layer, Linear::kv_a});
  o.linear_bwd(m.d_h, p.dkvaw() + KL * C, nullptr, {m.kr}, h, {p.kvaw() + KL * C}, N, C, Dr, acc,
               {p.layer, Linear::kv_rope});
  k::residual_forward(w.d_ln, w.d_ln, m.d_h, static_cast<T*>(nullptr), N, C);
  // queries
  if (QL > 0) {
    o.linear_bwd(m.d_q_norm, p.dqkvw(), nullptr, {m.q}, {s.q_norm}, {p.qkvw()}, N, QL, H * Dq, acc,
                 {p.layer, Linear::q_b});
    k::fill_zero(m.d_q_lat, N * QL);
    k::rmsnorm_backward(m.d_q_lat, p.dqan(), m.d_q_norm, s.q_lat, p.qan(), s.q_rstd, N, QL, acc);
    o.store(m.d_q_lat, N * QL);
    o.linear_bwd(m.d_h, p.dqaw(), nullptr, {m.d_q_lat}, h, {p.qaw()}, N, C, QL, acc, {p.layer, Linear::q_a});
  } else {
    o.linear_bwd(m.d_h, p.dqkvw(), nullptr, {m.q}, h, {p.qkvw()}, N, C, H * Dq, acc, {p.layer, Linear::q_b});
  }
  k::residual_forward(w.d_ln, w.d_ln, m.d_h, static_cast<T*>(nullptr), N, C);
  o.store(w.d_ln, N * C);
}

template class MlaAttention<float>;
template class MlaAttention<double>;

}  // namespace trident::model
