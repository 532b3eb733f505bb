// The transformers families and their tensor names (see hf_names.hpp).
#include "launch/checkpoint/hf_names.hpp"

#include "core/error.hpp"

namespace trident::launch {

namespace {

// "model.layers.N." of a layer parameter's name, and the rest
std::pair<std::string, std::string> split_layer(const std::string& name) {
  const size_t at = name.find('.', std::string("model.layers.").size());
  return {name.substr(0, at + 1), name.substr(at + 1)};
}

[[noreturn]] void no_family(const std::string& key, const std::string& why) {
  fail_input(
      "no transformers family holds this model: {} ({}); the families: mixtral (softmax, "
      "renormalised, no shared experts, every layer MoE), qwen2_moe (softmax, one gated shared expert), "
      "qwen3_moe (softmax with QK-norm, no shared experts), glm4_moe (sigmoid, ungated shared experts), deepseek_v3 "
      "(glm4_moe's MoE with multi-head latent attention), gpt_oss (attention sinks, biases everywhere, the clamped "
      "SwiGLU)",
      key, why);
}

// Whether every layer has the sliding window (model.layer_types all sliding or left out).
bool every_layer_windowed(const ModelConfig& m) {
  for (int64_t l = 0; l < m.layers; ++l)
    if (m.window(l) == 0) return false;
  return true;
}

// gpt-oss: every one of its features, or none of them.
HfFamily gpt_oss_family(const ModelConfig& m) {
  const MoeConfig& e = m.moe;
  auto need = [](bool holds, const char* key, const char* why) {
    if (!holds) no_family(key, fmt::format("gpt_oss {}", why));
  };
  need(e.enabled, "model.moe", "is a mixture-of-experts model");
  need(m.attention_sinks, "model.attention_sinks", "has attention sinks");
  need(m.attention_bias && m.o_bias, "model.attention_bias / o_bias", "has biases on q, k, v and o");
  need(!m.qk_norm && !m.is_mla(), "model.qk_norm / attention", "has standard attention without QK-norm");
  need(e.router_bias && e.expert_bias, "model.moe.router.bias / expert_bias",
       "has the router's and the experts' biases");
  need(e.activation == MoeActivation::clamped_swiglu, "model.moe.activation", "has the clamped SwiGLU");
  need(e.score == RouterScore::softmax && e.norm_topk && e.groups == 1 && e.scaling == 1.0, "model.moe.router",
       "takes the softmax over the top k (score softmax, norm_topk true, no groups or scaling)");
  need(e.shared_experts == 0, "model.moe.shared_experts", "has no shared experts");
  need(e.first_dense == 0 && e.every == 1 && e.dense_layers.empty(), "model.moe.first_dense / every / dense_layers",
       "has every layer MoE");
  return HfFamily::gpt_oss;
}

// The family by everything but the sliding windows.
HfFamily family_of_model(const ModelConfig& m) {
  if (m.arch == Arch::gpt2) return HfFamily::gpt2;
  const MoeConfig& e = m.moe;
  if (m.attention_sinks || e.router_bias || e.expert_bias || e.activation == MoeActivation::clamped_swiglu)
    return gpt_oss_family(m);
  const char* sigmoid_family = m.is_mla() ? "deepseek_v3" : "glm4_moe";
  if (m.is_mla() && (!e.enabled || e.score != RouterScore::sigmoid))
    no_family("model.attention",
              "multi-head latent attention is deepseek_v3's, whose MoE layers have sigmoid "
              "routers (model.moe.router.score: sigmoid)");
  if (m.mtp.depth > 0 && !m.is_mla())
    no_family("model.mtp",
              "multi-token prediction modules are deepseek_v3's (num_nextn_predict_layers), whose "
              "attention is multi-head latent attention");
  if (!e.enabled) {
    // Qwen2: biases on q, k and v only; transformers' Llama and Qwen3: attention_bias puts them on q, k, v and o
    if (m.attention_bias && !m.o_bias && !m.qk_norm) return HfFamily::qwen2;
    if (m.attention_bias != m.o_bias)
      no_family("model.o_bias",
                "transformers' llama and qwen3 have biases on q, k, v and o together (attention_bias), "
                "qwen2 on q, k and v only");
    return m.qk_norm ? HfFamily::qwen3 : HfFamily::llama;
  }
  if (m.o_bias) no_family("model.o_bias", "the MoE families' o_proj has no bias");
  if (e.score == RouterScore::sigmoid) {
    if (e.shared_experts == 0)
      no_family("model.moe.shared_experts", fmt::format("{} always has shared experts", sigmoid_family));
    if (e.shared_expert_gate)
      no_family("model.moe.shared_expert_gate", fmt::format("{}'s shared experts are ungated", sigmoid_family));
    if (e.shared_ffn_hidden != e.ffn_hidden)
      no_family("model.moe.shared_ffn_hidden",
                fmt::format("{}'s shared experts have the routed experts' width", sigmoid_family));
    if (e.every != 1 || !e.dense_layers.empty())
      no_family("model.moe.every / dense_layers",
                fmt::format("{}'s MoE layers are all those from first_k_dense_replace", sigmoid_family));
    return m.is_mla() ? HfFamily::deepseek_v3 : HfFamily::glm4_moe;
  }
  if (e.groups != 1 || e.scaling != 1.0)
    no_family("model.moe.router.groups / scaling", "softmax families have neither groups nor a scaling factor");
  if (m.qk_norm) {
    if (e.shared_experts > 0) no_family("model.moe.shared_experts", "qwen3_moe (QK-norm) has no shared experts");
    if (e.first_dense != 0) no_family("model.moe.first_dense", "qwen3_moe chooses dense layers by mlp_only_layers");
    return HfFamily::qwen3_moe;
  }
  if (e.shared_experts > 0) {
    if (e.shared_experts != 1 || !e.shared_expert_gate)
      no_family("model.moe.shared_experts", "qwen2_moe has one shared expert, gated");
    if (e.first_dense != 0) no_family("model.moe.first_dense", "qwen2_moe chooses dense layers by mlp_only_layers");
    return HfFamily::qwen2_moe;
  }
  if (!e.norm_topk) no_family("model.moe.router.norm_topk", "mixtral always renormalises");
  if (e.first_dense != 0 || e.every != 1 || !e.dense_layers.empty())
    no_family("model.moe.first_dense / every / dense_layers", "every mixtral layer is an MoE layer");
  return HfFamily::mixtral;
}

}  // namespace

HfFamily hf_family(const Recipe& rc) {
  const ModelConfig& m = rc.model;
  const HfFamily f = family_of_model(m);
  if (m.sliding_window == 0) return f;
  switch (f) {
    case HfFamily::llama:  // llama's model with a window on every layer is Mistral
      if (!every_layer_windowed(m))
        no_family("model.layer_types",
                  "mistral windows every layer; qwen2 and qwen3 (q/k/v biases, QK-norm) take layer_types");
      return HfFamily::mistral;
    case HfFamily::mixtral:
      if (!every_layer_windowed(m)) no_family("model.layer_types", "mixtral windows every layer");
      return f;
    case HfFamily::qwen2:
    case HfFamily::qwen3:
    case HfFamily::qwen2_moe:
    case HfFamily::qwen3_moe:
    case HfFamily::gpt_oss:
      return f;
    default:
      no_family("model.sliding_window", fmt::format("{} has no sliding-window attention", hf_model_type(f)));
  }
}

const char* hf_model_type(HfFamily f) {
  switch (f) {
    case HfFamily::gpt2:
      return "gpt2";
    case HfFamily::llama:
      return "llama";
    case HfFamily::qwen2:
      return "qwen2";
    case HfFamily::qwen3:
      return "qwen3";
    case HfFamily::mixtral:
      return "mixtral";
    case HfFamily::qwen3_moe:
      return "qwen3_moe";
    case HfFamily::qwen2_moe:
      return "qwen2_moe";
    case HfFamily::glm4_moe:
      return "glm4_moe";
    case HfFamily::deepseek_v3:
      return "deepseek_v3";
    case HfFamily::mistral:
      return "mistral";
    case HfFamily::gpt_oss:
      return "gpt_oss";
  }
  return "";
}

const char* hf_class(HfFamily f) {
  switch (f) {
    case HfFamily::gpt2:
      return "GPT2LMHeadModel";
    case HfFamily::llama:
      return "LlamaForCausalLM";
    case HfFamily::qwen2:
      return "Qwen2ForCausalLM";
    case HfFamily::qwen3:
      return "Qwen3ForCausalLM";
    case HfFamily::mixtral:
      return "MixtralForCausalLM";
    case HfFamily::qwen3_moe:
      return "Qwen3MoeForCausalLM";
    case HfFamily::qwen2_moe:
      return "Qwen2MoeForCausalLM";
    case HfFamily::glm4_moe:
      return "Glm4MoeForCausalLM";
    case HfFamily::deepseek_v3:
      return "DeepseekV3ForCausalLM";
    case HfFamily::mistral:
      return "MistralForCausalLM";
    case HfFamily::gpt_oss:
      return "GptOssForCausalLM";
  }
  return "";
}

std::optional<HfFamily> hf_family_of(const std::string& model_type) {
  for (HfFamily f :
       {HfFamily::gpt2, HfFamily::llama, HfFamily::qwen2, HfFamily::qwen3, HfFamily::mixtral, HfFamily::qwen2_moe,
        HfFamily::qwen3_moe, HfFamily::glm4_moe, HfFamily::deepseek_v3, HfFamily::mistral, HfFamily::gpt_oss})
    if (model_type == hf_model_type(f)) return f;
  if (model_type == "kimi_k2") return HfFamily::deepseek_v3;  // Kimi-K2: DeepSeek-V3's architecture, its own name
  return std::nullopt;
}

std::vector<HfPiece> hf_pieces(const ModelConfig& m, HfFamily f, const model::ParamSpec& p, const Shape& hf_shape) {
  const MoeConfig& e = m.moe;
  const int64_t C = m.hidden, I = e.ffn_hidden, E = e.experts;
  // multi-token prediction: DeepSeek's checkpoints hold each module's copy of the embedding and LM head
  if (m.mtp.depth > 0 && (p.name == "model.embed_tokens.weight" || p.name == "lm_head.weight")) {
    std::vector<HfPiece> out = {{p.name, hf_shape, 0}};
    for (int64_t l = m.layers; l < m.layers + m.mtp.depth; ++l)
      out.push_back({fmt::format("model.layers.{}.{}", l,
                                 p.name == "lm_head.weight" ? "shared_head.head.weight" : "embed_tokens.weight"),
                     hf_shape, 0});
    return out;
  }
  if (p.name.rfind("model.layers.", 0) != 0 || !e.enabled) return {{p.name, hf_shape, 0}};
  const auto [prefix, rest] = split_layer(p.name);
  if (f == HfFamily::gpt_oss) {  // the router under mlp.router, the experts as GptOssExperts holds them
    if (rest == "mlp.gate.weight") return {{prefix + "mlp.router.weight", hf_shape, 0}};
    if (rest == "mlp.gate.bias") return {{prefix + "mlp.router.bias", hf_shape, 0}};
    if (rest == "mlp.experts.gate_up_proj")
      return {{p.name, {E, C, 2 * I}, 0, HfLayout::interleaved_rows_transposed, E, 2 * I, C}};
    if (rest == "mlp.experts.gate_up_proj_bias")
      return {{p.name, {E, 2 * I}, 0, HfLayout::interleaved_rows, E, 2 * I, 1}};
    if (rest == "mlp.experts.down_proj") return {{p.name, {E, I, C}, 0, HfLayout::transposed, E, C, I}};
    if (rest == "mlp.experts.down_proj_bias") return {{p.name, {E, C}, 0}};
    return {{p.name, hf_shape, 0}};
  }
  const bool mixtral = f == HfFamily::mixtral;
  std::vector<HfPiece> out;
  if (rest == "mlp.experts.gate_up_proj") {
    for (int64_t x = 0; x < E; ++x) {
      const std::string base = prefix + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.") + std::to_string(x);
      out.push_back({base + (mixtral ? ".w1.weight" : ".gate_proj.weight"), {I, C}, x * 2 * I * C});
      out.push_back({base + (mixtral ? ".w3.weight" : ".up_proj.weight"), {I, C}, x * 2 * I * C + I * C});
    }
    return out;
  }
  if (rest == "mlp.experts.down_proj") {
    for (int64_t x = 0; x < E; ++x)
      out.push_back({prefix + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.") + std::to_string(x) +
                         (mixtral ? ".w2.weight" : ".down_proj.weight"),
                     {C, I},
                     x * C * I});
    return out;
  }
  if (mixtral && rest == "mlp.gate.weight") return {{prefix + "block_sparse_moe.gate.weight", hf_shape, 0}};
  if (f == HfFamily::qwen2_moe && rest.rfind("mlp.shared_experts.", 0) == 0)
    return {{prefix + "mlp.shared_expert." + rest.substr(std::string("mlp.shared_experts.").size()), hf_shape, 0}};
  return {{p.name, hf_shape, 0}};
}

std::vector<HfPiece> hf_fused_pieces(const ModelConfig& m, HfFamily f, const model::ParamSpec& p,
                                     const Shape& hf_shape) {
  const MoeConfig& e = m.moe;
  if (!e.enabled || p.name.rfind("model.layers.", 0) != 0) return {};
  const auto rest = split_layer(p.name).second;
  if (f == HfFamily::gpt_oss) return {};
  if (rest == "mlp.experts.gate_up_proj") return {{p.name, {e.experts, 2 * e.ffn_hidden, m.hidden}, 0}};
  if (rest == "mlp.experts.down_proj") return {{p.name, {e.experts, m.hidden, e.ffn_hidden}, 0}};
  if (f == HfFamily::mixtral && rest == "mlp.gate.weight") return {{p.name, hf_shape, 0}};
  return {};
}

std::vector<HfPiece> hf_zero_tensors(const ModelConfig& m, HfFamily f) {
  std::vector<HfPiece> out;
  if (f != HfFamily::qwen2_moe || m.attention_bias) return out;  // without model.attention_bias: zeros
  const int64_t D = m.head_dim();
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.self_attn.", l);
    out.push_back({p + "q_proj.bias", {m.heads * D}, 0});
    out.push_back({p + "k_proj.bias", {m.kv_heads * D}, 0});
    out.push_back({p + "v_proj.bias", {m.kv_heads * D}, 0});
  }
  return out;
}

}  // namespace trident::launch
