// Parameter registry: names, shapes, layout and initialisation.
#include "model/params.hpp"

#include <algorithm>
#include <cmath>

#include "core/philox.hpp"

namespace trident::model {

std::string layer_prefix(const ModelConfig& cfg, int64_t layer) {
  return cfg.arch == "gpt2" ? fmt::format("transformer.h.{}.", layer) : fmt::format("model.layers.{}.", layer);
}

void ParamRegistry::add(std::string name, Shape shape, ParamKind kind, InitKind init, double std) {
  ParamSpec p{std::move(name), std::move(shape), total_, 0, kind, init, std};
  p.numel = shape_numel(p.shape);
  total_ += p.numel;
  params_.push_back(std::move(p));
}

ParamRegistry::ParamRegistry(const ModelConfig& m) {
  const int64_t C = m.hidden, F = m.ffn_hidden, V = m.vocab, D = m.head_dim();
  const int64_t H = m.heads, KV = m.kv_heads;
  const double s = m.init_std;
  const double s_resid = s / std::sqrt(2.0 * double(m.layers));  // GPT-2 scaled residual projections
  if (m.arch == "gpt2") {
    add("transformer.wte.weight", {V, C}, ParamKind::embedding, InitKind::normal, s);
    add("transformer.wpe.weight", {m.seq_len, C}, ParamKind::embedding, InitKind::normal, s);
    for (int64_t l = 0; l < m.layers; ++l) {
      std::string p = layer_prefix(m, l);
      add(p + "ln_1.weight", {C}, ParamKind::norm, InitKind::ones);
      add(p + "ln_1.bias", {C}, ParamKind::bias, InitKind::zeros);
      add(p + "attn.c_attn.weight", {3 * C, C}, ParamKind::weight, InitKind::normal, s);
      add(p + "attn.c_attn.bias", {3 * C}, ParamKind::bias, InitKind::zeros);
      add(p + "attn.c_proj.weight", {C, C}, ParamKind::weight, InitKind::normal, s_resid);
      add(p + "attn.c_proj.bias", {C}, ParamKind::bias, InitKind::zeros);
      add(p + "ln_2.weight", {C}, ParamKind::norm, InitKind::ones);
      add(p + "ln_2.bias", {C}, ParamKind::bias, InitKind::zeros);
      add(p + "mlp.c_fc.weight", {F, C}, ParamKind::weight, InitKind::normal, s);
      add(p + "mlp.c_fc.bias", {F}, ParamKind::bias, InitKind::zeros);
      add(p + "mlp.c_proj.weight", {C, F}, ParamKind::weight, InitKind::normal, s_resid);
      add(p + "mlp.c_proj.bias", {C}, ParamKind::bias, InitKind::zeros);
    }
    add("transformer.ln_f.weight", {C}, ParamKind::norm, InitKind::ones);
    add("transformer.ln_f.bias", {C}, ParamKind::bias, InitKind::zeros);
  } else {
    add("model.embed_tokens.weight", {V, C}, ParamKind::embedding, InitKind::normal, s);
    for (int64_t l = 0; l < m.layers; ++l) {
      std::string p = layer_prefix(m, l);
      add(p + "input_layernorm.weight", {C}, ParamKind::norm, InitKind::ones);
      add(p + "self_attn.q_proj.weight", {H * D, C}, ParamKind::weight, InitKind::normal, s);
      add(p + "self_attn.k_proj.weight", {KV * D, C}, ParamKind::weight, InitKind::normal, s);
      add(p + "self_attn.v_proj.weight", {KV * D, C}, ParamKind::weight, InitKind::normal, s);
      add(p + "self_attn.o_proj.weight", {C, H * D}, ParamKind::weight, InitKind::normal, s);
      add(p + "post_attention_layernorm.weight", {C}, ParamKind::norm, InitKind::ones);
      add(p + "mlp.gate_proj.weight", {F, C}, ParamKind::weight, InitKind::normal, s);
      add(p + "mlp.up_proj.weight", {F, C}, ParamKind::weight, InitKind::normal, s);
      add(p + "mlp.down_proj.weight", {C, F}, ParamKind::weight, InitKind::normal, s);
    }
    add("model.norm.weight", {C}, ParamKind::norm, InitKind::ones);
  }
  if (!m.tie_embeddings) add("lm_head.weight", {V, C}, ParamKind::weight, InitKind::normal, s);
}

const ParamSpec& ParamRegistry::at(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw Error(fmt::format("no parameter named '{}'", name));
}

template <typename T>
void ParamRegistry::initialize_range(T* out, int64_t begin, int64_t end, uint64_t seed) const {
  for (const auto& p : params_) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (hi <= lo) continue;
    T* dst = out + (lo - begin);
    switch (p.init) {
      case InitKind::zeros: std::fill(dst, dst + (hi - lo), T(0)); break;
      case InitKind::ones: std::fill(dst, dst + (hi - lo), T(1)); break;
      case InitKind::normal:
        philox_fill_normal(dst, uint64_t(lo - p.offset), hi - lo, philox_key(seed, p.name), 0.0, p.init_std);
        break;
    }
  }
}

template void ParamRegistry::initialize_range<float>(float*, int64_t, int64_t, uint64_t) const;
template void ParamRegistry::initialize_range<double>(double*, int64_t, int64_t, uint64_t) const;

}  // namespace trident::model
