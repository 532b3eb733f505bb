// Multi-head latent attention (model.attention: mla, docs/mla.md): the
// latents' projections and norms, the rotary parts and the heads for the
// attention kernels, forward and backward; Transformer's layer_forward and
// layer_backward call them in place of the fused QKV projection.
#include "kernels/buffer.hpp"
#include "kernels/norm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"
#include "kernels/rows.hpp"
#include "model/transformer.hpp"

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
void Transformer<T>::mla_forward(const LayerActs<T>& a, const T* h, const LayerParams& p, int64_t B, Workspace<T>& w) {
  const MlaConfig& c = cfg_.mla;
  const int64_t N = B * seq(), C = cfg_.hidden, H = dims_.heads, Dn = c.qk_nope_head_dim, Dr = c.qk_rope_head_dim;
  const int64_t QL = c.q_lora_rank, KL = c.kv_lora_rank, Dkv = Dn + dv_;
  const MlaScratch m = mla_scratch(w, N);
  const MlaActs<T>& s = a.mla;
  if (QL > 0) {
    linear_fwd(s.q_lat, {h}, {p.qaw()}, nullptr, N, C, QL);
    store(s.q_lat, N * QL);
    k::rmsnorm_forward(s.q_norm, s.q_rstd, s.q_lat, p.qan(), N, QL, kMlaNormEps);
    store(s.q_norm, N * QL);
    linear_fwd(m.q, {s.q_norm}, {p.qkvw()}, nullptr, N, QL, H * dq_);
  } else {
    linear_fwd(m.q, {h}, {p.qkvw()}, nullptr, N, C, H * dq_);
  }
  linear_fwd(s.kv_lat, {h}, {p.kvaw()}, nullptr, N, C, KL);
  store(s.kv_lat, N * KL);
  linear_fwd(m.kr, {h}, {p.kvaw() + KL * C}, nullptr, N, C, Dr);
  k::rmsnorm_forward(s.kv_norm, s.kv_rstd, s.kv_lat, p.kvan(), N, KL, kMlaNormEps);
  store(s.kv_norm, N * KL);
  linear_fwd(m.kvb, {s.kv_norm}, {p.kvbw()}, nullptr, N, KL, H * Dkv);
  k::rope_pairs_forward(m.q, rope_.data(), B, seq(), H, H * dq_, dq_, Dn, Dr, w.origin);
  k::rope_pairs_forward(m.kr, rope_.data(), B, seq(), 1, Dr, Dr, 0, Dr, w.origin);
  k::mla_heads(a.qkv, m.q, m.kvb, m.kr, N, H, Dn, Dr, dv_);
}

// d_qkv [N, H (2 Dq + Dv)] -> w.d_ln [N, C], the gradient of h; every weight's gradient
template <typename T>
void Transformer<T>::mla_backward(const LayerActs<T>& a, GemmIn h, T* d_qkv, const LayerParams& p, int64_t B, bool acc,
                                  Workspace<T>& w) {
  const MlaConfig& c = cfg_.mla;
  const int64_t N = B * seq(), C = cfg_.hidden, H = dims_.heads, Dn = c.qk_nope_head_dim, Dr = c.qk_rope_head_dim;
  const int64_t QL = c.q_lora_rank, KL = c.kv_lora_rank, Dkv = Dn + dv_;
  const MlaScratch m = mla_scratch(w, N);
  const MlaActs<T>& s = a.mla;
  k::mla_heads_backward(m.q, m.kvb, m.kr, d_qkv, N, H, Dn, Dr, dv_);
  k::rope_pairs_backward(m.q, rope_.data(), B, seq(), H, H * dq_, dq_, Dn, Dr, w.origin);
  k::rope_pairs_backward(m.kr, rope_.data(), B, seq(), 1, Dr, Dr, 0, Dr, w.origin);
  store(m.q, N * H * dq_);
  store(m.kvb, N * H * Dkv);
  store(m.kr, N * Dr);
  // keys and values: kv_b, kv_a_layernorm, kv_a's two row blocks
  linear_bwd(m.d_kv_norm, p.dkvbw(), nullptr, {m.kvb}, {s.kv_norm}, {p.kvbw()}, N, KL, H * Dkv, acc);
  k::fill_zero(m.d_kv_lat, N * KL);  // the norm's backward adds to its input gradient
  k::rmsnorm_backward(m.d_kv_lat, p.dkvan(), m.d_kv_norm, s.kv_lat, p.kvan(), s.kv_rstd, N, KL, acc);
  store(m.d_kv_lat, N * KL);
  linear_bwd(w.d_ln, p.dkvaw(), nullptr, {m.d_kv_lat}, h, {p.kvaw()}, N, C, KL, acc);
  linear_bwd(m.d_h, p.dkvaw() + KL * C, nullptr, {m.kr}, h, {p.kvaw() + KL * C}, N, C, Dr, acc);
  k::residual_forward(w.d_ln, w.d_ln, m.d_h, static_cast<T*>(nullptr), N, C);
  // queries
  if (QL > 0) {
    linear_bwd(m.d_q_norm, p.dqkvw(), nullptr, {m.q}, {s.q_norm}, {p.qkvw()}, N, QL, H * dq_, acc);
    k::fill_zero(m.d_q_lat, N * QL);
    k::rmsnorm_backward(m.d_q_lat, p.dqan(), m.d_q_norm, s.q_lat, p.qan(), s.q_rstd, N, QL, acc);
    store(m.d_q_lat, N * QL);
    linear_bwd(m.d_h, p.dqaw(), nullptr, {m.d_q_lat}, h, {p.qaw()}, N, C, QL, acc);
  } else {
    linear_bwd(m.d_h, p.dqkvw(), nullptr, {m.q}, h, {p.qkvw()}, N, C, H * dq_, acc);
  }
  k::residual_forward(w.d_ln, w.d_ln, m.d_h, static_cast<T*>(nullptr), N, C);
  store(w.d_ln, N * C);
}

template <typename T>
typename Transformer<T>::MlaScratch Transformer<T>::mla_scratch(Workspace<T>& w, int64_t N) const {
  const MlaConfig& c = cfg_.mla;
  const int64_t H = dims_.heads;
  const int64_t sizes[8] = {N * H * dq_,
                            N * H * (c.qk_nope_head_dim + dv_),
                            N * c.qk_rope_head_dim,
                            N * c.kv_lora_rank,
                            N * c.kv_lora_rank,
                            N * c.q_lora_rank,
                            N * c.q_lora_rank,
                            N * cfg_.hidden};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  if (w.mla.numel() < total) w.mla = Tensor::empty({total}, dtype_of<T>(), MemCategory::activations, device_);
  MlaScratch m{};
  T* at = w.mla.template data<T>();
  T** outs[8] = {&m.q, &m.kvb, &m.kr, &m.d_kv_norm, &m.d_kv_lat, &m.d_q_norm, &m.d_q_lat, &m.d_h};
  for (int i = 0; i < 8; ++i) *outs[i] = at, at += sizes[i];
  return m;
}

#define INSTANTIATE(T)                                                                                           \
  template void Transformer<T>::mla_forward(const LayerActs<T>&, const T*, const LayerParams&, int64_t,          \
                                            Workspace<T>&);                                                      \
  template void Transformer<T>::mla_backward(const LayerActs<T>&, GemmIn, T*, const LayerParams&, int64_t, bool, \
                                             Workspace<T>&);                                                     \
  template typename Transformer<T>::MlaScratch Transformer<T>::mla_scratch(Workspace<T>&, int64_t) const;
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::model
