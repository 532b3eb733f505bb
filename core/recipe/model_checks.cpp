// The recipe's model checks (model_checks.hpp); docs/recipes.md lists the keys.
#include "core/recipe/model_checks.hpp"

#include <fmt/ranges.h>

#include <algorithm>

namespace trident::recipe_detail {
namespace {

void validate_model(Reader& r, const ModelConfig& m) {
  const bool own_head_dim = r.has("model.head_dim");
  if (!m.is_mla() && !own_head_dim && m.hidden % m.heads != 0)
    r.inconsistent("model.heads", fmt::format("hidden({}) % heads({}) = {} != 0 (or give model.head_dim)", m.hidden,
                                              m.heads, m.hidden % m.heads));
  if (own_head_dim && m.is_mla())
    r.inconsistent("model.head_dim", "multi-head latent attention sizes its heads by model.mla (leave head_dim out)");
  if (own_head_dim && m.arch == Arch::gpt2 && m.head_dim() * m.heads != m.hidden)
    r.inconsistent("model.head_dim", fmt::format("gpt2's fused c_attn needs heads x head_dim = hidden: {} x {} != {}",
                                                 m.heads, m.head_dim(), m.hidden));
  if (m.heads % m.kv_heads != 0)
    r.inconsistent("model.kv_heads",
                   fmt::format("heads({}) % kv_heads({}) = {} != 0", m.heads, m.kv_heads, m.heads % m.kv_heads));
  if (m.arch == Arch::gpt2 && m.kv_heads != m.heads)
    r.inconsistent("model.kv_heads",
                   fmt::format("gpt2 uses multi-head attention: kv_heads({}) != heads({})", m.kv_heads, m.heads));
  if (m.arch == Arch::llama && !m.is_mla() && m.head_dim() % 2 != 0)
    r.inconsistent(own_head_dim ? "model.head_dim" : "model.heads",
                   own_head_dim ? fmt::format("rotary embedding needs an even head size, found {}", m.head_dim())
                                : fmt::format("rotary embedding needs an even head size, hidden({}) / heads({}) = {}",
                                              m.hidden, m.heads, m.head_dim()));
}

// model.rope_scaling: rotary frequencies (llama), each type's keys.
void validate_rope_scaling(Reader& r, const Recipe& rc) {
  const RopeScaling& s = rc.model.rope_scaling;
  if (s.type == RopeType::none) return;
  if (rc.model.arch != Arch::llama)
    r.inconsistent("model.rope_scaling.type", fmt::format("rotary scaling needs rotary positions (arch llama), found "
                                                          "arch {}",
                                                          enum_name(rc.model.arch)));
  if (s.type != RopeType::linear && s.original_seq_len <= 0)
    r.inconsistent("model.rope_scaling.original_seq_len",
                   fmt::format("rope_scaling {} needs the pretrained context (original_max_position_embeddings)",
                               enum_name(s.type)));
  if (s.type == RopeType::llama3 && s.high_freq_factor <= s.low_freq_factor)
    r.inconsistent(
        "model.rope_scaling.high_freq_factor",
        fmt::format("high_freq_factor({}) must exceed low_freq_factor({})", s.high_freq_factor, s.low_freq_factor));
}

// model.attention_bias, model.o_bias: the LLaMA family's standard attention (GPT-2 has its biases built in).
void validate_attention_biases(Reader& r, const Recipe& rc) {
  for (const auto& [on, key] :
       {std::pair{rc.model.attention_bias, "model.attention_bias"}, std::pair{rc.model.o_bias, "model.o_bias"}}) {
    if (!on) continue;
    if (rc.model.arch != Arch::llama)
      r.inconsistent(key, fmt::format("arch gpt2 has its attention biases always; this key is for arch llama"));
    else if (rc.model.is_mla())
      r.inconsistent(key, "multi-head latent attention's projections have no biases (DeepSeek-V3)");
  }
}

// model.sliding_window, model.layer_types, model.attention_sinks.
void validate_window_and_sinks(Reader& r, const Recipe& rc) {
  const ModelConfig& m = rc.model;
  if (!m.layer_types.empty() && int64_t(m.layer_types.size()) != m.layers)
    r.inconsistent("model.layer_types",
                   fmt::format("{} entries for model.layers({}): one per layer", m.layer_types.size(), m.layers));
  const bool sliding = std::count(m.layer_types.begin(), m.layer_types.end(), LayerAttention::sliding) > 0;
  if (sliding && m.sliding_window == 0)
    r.inconsistent("model.layer_types", "a `sliding` layer needs model.sliding_window > 0");
  if (m.attention_sinks && m.arch != Arch::llama)
    r.inconsistent("model.attention_sinks",
                   fmt::format("attention sinks are built for arch llama, found arch {}", enum_name(m.arch)));
}

// model.qk_norm: the LLaMA family.
void validate_qk_norm(Reader& r, const Recipe& rc) {
  if (!rc.model.qk_norm) return;
  if (rc.model.arch != Arch::llama)
    r.inconsistent("model.qk_norm",
                   fmt::format("QK-norm is built for arch llama, found arch {}", enum_name(rc.model.arch)));
  if (rc.optim.muon.qk_clip.on)  // the norm undoes a scaled projection; its weight is shared by every head
    r.inconsistent("optim.muon.qk_clip.on",
                   "QK-clip scales each head's query and key projections, which model.qk_norm normalises away "
                   "(set one of them false)");
}

// model.attention: mla (docs/mla.md): its sizes, and what is not built yet.
void validate_mla(Reader& r, const Recipe& rc) {
  const ModelConfig& m = rc.model;
  if (!m.is_mla()) {
    if (r.has("model.mla"))
      r.inconsistent("model.mla", "model.mla sizes multi-head latent attention: set model.attention: mla");
    return;
  }
  const MlaConfig& a = m.mla;
  if (m.arch != Arch::llama)
    r.inconsistent("model.attention", fmt::format("multi-head latent attention is built for arch llama, found arch {}",
                                                  enum_name(m.arch)));
  if (m.kv_heads != m.heads)
    r.inconsistent("model.kv_heads", fmt::format("multi-head latent attention gives every query head its own key and "
                                                 "value head: kv_heads({}) != heads({}) (leave kv_heads out)",
                                                 m.kv_heads, m.heads));
  if (a.qk_rope_head_dim % 2 != 0)
    r.inconsistent("model.mla.qk_rope_head_dim",
                   fmt::format("rotary embedding needs an even size, found {}", a.qk_rope_head_dim));
  if (m.qk_norm)
    r.inconsistent("model.qk_norm",
                   "QK-norm is for standard attention; multi-head latent attention normalises its "
                   "latents (kv_a_layernorm, q_a_layernorm)");
  if (rc.device == DeviceType::cuda && a.qk_head_dim() > 256)
    r.inconsistent("model.mla.qk_nope_head_dim",
                   fmt::format("device cuda: the attention kernels take heads of up to 256 values, found "
                               "qk_nope_head_dim + qk_rope_head_dim = {}",
                               a.qk_head_dim()));
  if (rc.device == DeviceType::cuda && a.v_head_dim > 256)
    r.inconsistent(
        "model.mla.v_head_dim",
        fmt::format("device cuda: the attention kernels take heads of up to 256 values, found {}", a.v_head_dim));
}

// model.mtp (docs/mtp.md): what the modules need, and what is not built yet.
void validate_mtp(Reader& r, const Recipe& rc) {
  const ModelConfig& m = rc.model;
  if (m.mtp.depth == 0) return;
  if (m.arch != Arch::llama)
    r.inconsistent("model.mtp",
                   fmt::format("multi-token prediction is built for arch llama, found arch {}", enum_name(m.arch)));
  if (m.mtp.depth >= m.seq_len)
    r.inconsistent("model.mtp.depth", fmt::format("depth({}) >= seq_len({}): depth k predicts from T - k positions",
                                                  m.mtp.depth, m.seq_len));
  if (m.tie_embeddings)
    r.inconsistent("model.tie_embeddings",
                   "multi-token prediction shares the embedding and the LM head as "
                   "DeepSeek-V3 does, untied: set tie_embeddings: false");
  if (rc.parallel.context > 1)
    r.inconsistent("parallel.context",
                   fmt::format("context({}) with model.mtp: each depth shifts the sequence by k tokens across the "
                               "context ranks' chunks, which is not built yet (context: 1)",
                               rc.parallel.context));
  if (rc.data.document_mask || rc.data.mask_eod_loss)
    r.inconsistent(rc.data.document_mask ? "data.document_mask" : "data.mask_eod_loss",
                   "with model.mtp: the shifted targets would cross documents; not built yet");
  if (rc.device == DeviceType::cuda)
    r.inconsistent("model.mtp",
                   "model.mtp on device cuda: multi-token prediction is built for the CPU in this version");
  if (m.moe.enabled && m.moe.balance == Balance::hf)
    r.inconsistent("model.moe.balance.kind",
                   "hf with model.mtp: transformers' cross-layer form does not count the "
                   "prediction modules' blocks; use aux_loss, seq_aux_loss or none");
}

// model.moe: what the layer needs of its keys, and what is not built yet.
void validate_moe(Reader& r, Recipe& rc) {
  MoeConfig& e = rc.model.moe;
  // enabled: set where the YAML is read (read_recipe), kept by validate_on_mesh
  if (!e.enabled) return;
  const ModelConfig& m = rc.model;
  if (m.arch != Arch::llama)
    r.inconsistent("model.moe",
                   fmt::format("mixture-of-experts layers are built for arch llama, found arch {}", enum_name(m.arch)));
  if (e.top_k > e.experts)
    r.inconsistent("model.moe.top_k", fmt::format("top_k({}) > experts({})", e.top_k, e.experts));
  if (e.experts % e.groups != 0)
    r.inconsistent("model.moe.router.groups",
                   fmt::format("experts({}) % groups({}) = {} != 0", e.experts, e.groups, e.experts % e.groups));
  if (e.group_topk > e.groups)
    r.inconsistent("model.moe.router.group_topk", fmt::format("group_topk({}) > groups({})", e.group_topk, e.groups));
  if (e.top_k > e.group_topk * (e.experts / e.groups))
    r.inconsistent("model.moe.top_k",
                   fmt::format("top_k({}) > group_topk({}) x experts({}) / groups({}) = {}: the "
                               "chosen groups hold too few experts",
                               e.top_k, e.group_topk, e.experts, e.groups, e.group_topk * (e.experts / e.groups)));
  if (e.shared_expert_gate && e.shared_experts == 0)
    r.inconsistent("model.moe.shared_expert_gate", "the shared-expert gate needs model.moe.shared_experts >= 1");
  for (int64_t l : e.dense_layers)
    if (l >= m.layers)
      r.inconsistent("model.moe.dense_layers", fmt::format("layer {} >= model.layers({})", l, m.layers));
  bool any = false;
  for (int64_t l = 0; l < m.layers; ++l) any |= e.is_moe(l);
  if (!any)
    r.inconsistent("model.moe", fmt::format("no layer of {} is an MoE layer (first_dense {}, every {}, dense_layers "
                                            "[{}])",
                                            m.layers, e.first_dense, e.every, fmt::join(e.dense_layers, ", ")));
  if (e.balance == Balance::hf && (e.score != RouterScore::softmax || e.groups != 1))
    r.inconsistent("model.moe.balance.kind",
                   "kind hf is transformers' Mixtral / Qwen-MoE loss, for softmax routers "
                   "without groups (router.score softmax, router.groups 1)");
  if (e.capacity_factor > 0)
    r.inconsistent("model.moe.capacity_factor",
                   "token dropping is not built yet: MoE layers are dropless; use capacity_factor: 0");
}

}  // namespace

void validate_model_keys(Reader& r, Recipe& rc) {
  validate_model(r, rc.model);
  validate_rope_scaling(r, rc);
  validate_attention_biases(r, rc);
  if (rc.device == DeviceType::cuda && !rc.model.is_mla() && rc.model.head_dim() > 256)
    r.inconsistent(r.has("model.head_dim") ? "model.head_dim" : "model.heads",
                   fmt::format("device cuda: the attention kernels take heads of up to 256 values, found {}",
                               rc.model.head_dim()));
  validate_moe(r, rc);
  validate_qk_norm(r, rc);
  validate_window_and_sinks(r, rc);
  validate_mla(r, rc);
  validate_mtp(r, rc);
}

}  // namespace trident::recipe_detail
