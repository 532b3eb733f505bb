// Checking a transformers config.json against a recipe (see hf_config.hpp).
#include "launch/checkpoint/hf_config.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "launch/checkpoint/hf_names.hpp"

namespace trident::launch {

namespace {

// The recipe keys that make a model of this family (hf_family's choice),
// as `key: value`, for those the recipe does not have.
std::vector<std::string> keys_for_family(HfFamily f, const ModelConfig& m) {
  const MoeConfig& e = m.moe;
  std::vector<std::string> out;
  auto need = [&](bool holds, const char* what) {
    if (!holds) out.push_back(what);
  };
  if (f == HfFamily::gpt2) {
    need(m.arch == Arch::gpt2, "model.arch: gpt2");
    return out;
  }
  need(m.arch == Arch::llama, "model.arch: llama");
  const bool moe = f != HfFamily::llama && f != HfFamily::qwen3 && f != HfFamily::qwen2 && f != HfFamily::mistral;
  if (f == HfFamily::gpt_oss) {
    need(e.enabled, "model.moe (with its experts)");
    need(m.attention_sinks, "model.attention_sinks: true");
    need(m.attention_bias && m.o_bias, "model.attention_bias: true, model.o_bias: true");
    need(e.router_bias, "model.moe.router.bias: true");
    need(e.expert_bias, "model.moe.expert_bias: true");
    need(e.activation == MoeActivation::clamped_swiglu, "model.moe.activation: clamped_swiglu");
    need(e.shared_experts == 0, "model.moe.shared_experts: 0");
    return out;
  }
  if (f == HfFamily::mistral) {
    need(!e.enabled, "no model.moe section (a dense model)");
    need(m.sliding_window > 0, "model.sliding_window (every layer)");
    return out;
  }
  if (f == HfFamily::qwen2) {
    need(!e.enabled, "no model.moe section (a dense model)");
    need(m.attention_bias, "model.attention_bias: true");
    need(!m.o_bias, "model.o_bias: false");
    need(!m.qk_norm, "model.qk_norm: false");
    return out;
  }
  need(e.enabled == moe, moe ? "model.moe (with its experts)" : "no model.moe section (a dense model)");
  need(m.is_mla() == (f == HfFamily::deepseek_v3),
       f == HfFamily::deepseek_v3 ? "model.attention: mla" : "model.attention: standard");
  if (f == HfFamily::deepseek_v3 || f == HfFamily::glm4_moe) {
    need(e.score == RouterScore::sigmoid, "model.moe.router.score: sigmoid");
    need(e.shared_experts >= 1, "model.moe.shared_experts: 1 (or more)");
    need(!e.shared_expert_gate, "model.moe.shared_expert_gate: false");
    if (f == HfFamily::deepseek_v3) need(!m.qk_norm, "model.qk_norm: false");
    return out;
  }
  need(m.qk_norm == (f == HfFamily::qwen3 || f == HfFamily::qwen3_moe),
       f == HfFamily::qwen3 || f == HfFamily::qwen3_moe ? "model.qk_norm: true" : "model.qk_norm: false");
  if (!moe) return out;
  need(e.score == RouterScore::softmax, "model.moe.router.score: softmax");
  if (f == HfFamily::qwen2_moe) {
    need(e.shared_experts == 1, "model.moe.shared_experts: 1");
    need(e.shared_expert_gate, "model.moe.shared_expert_gate: true");
  } else {
    need(e.shared_experts == 0, "model.moe.shared_experts: 0");
  }
  if (f == HfFamily::mixtral)
    need(e.first_dense == 0 && e.every == 1 && e.dense_layers.empty(),
         "every layer MoE (model.moe.first_dense: 0, every: 1, no dense_layers)");
  return out;
}

}  // namespace

// config.json's model_type and the family it names (refused naming the key when none).
std::pair<std::string, HfFamily> config_family(const std::string& path, const nlohmann::json& c) {
  const std::string type =
      c.contains("model_type") && c["model_type"].is_string() ? c["model_type"].get<std::string>() : "";
  const std::optional<HfFamily> family = hf_family_of(type);
  if (!family)
    fail_input(
        "{}: key 'model_type': expected gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, glm4_moe, "
        "deepseek_v3 (or kimi_k2) or gpt_oss, found '{}'",
        path, type);
  return {type, *family};
}

// config.json's rotary parameters: `rope_parameters` (transformers 5), else
// `rope_scaling` (before), where they were found, and their type (`type` or
// `rope_type`; "default" when none).
struct RopeParams {
  nlohmann::json values = nlohmann::json::object();
  std::string where = "rope_parameters", type = "default";
};
RopeParams rope_params(const nlohmann::json& c) {
  RopeParams r;
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object())
    r.values = c["rope_scaling"], r.where = "rope_scaling";
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object())
    r.values = c["rope_parameters"], r.where = "rope_parameters";
  for (const char* k : {"type", "rope_type"})
    if (r.values.contains(k) && r.values[k].is_string()) r.type = r.values[k].get<std::string>();
  return r;
}

// config.json's sliding windows: the window and each layer's kind, as
// transformers builds them (mistral, mixtral: every layer when sliding_window
// is set; qwen2/3 and their MoE: with use_sliding_window, layer_types or the
// layers from max_window_layers; gpt_oss: layer_types, alternating from a
// sliding one by default, window 128 by default). A window of 0: none.
struct ConfigWindows {
  int64_t window = 0;
  std::vector<LayerAttention> types;
};
ConfigWindows config_windows(const std::string& path, const nlohmann::json& c, HfFamily f, int64_t layers) {
  auto given = [&](const char* key) { return c.contains(key) && !c[key].is_null(); };
  auto integer = [&](const char* key, int64_t def) -> int64_t {
    if (!given(key)) return def;
    if (!c[key].is_number_integer())
      fail_input("{}: key '{}': expected an integer, found {}", path, key, c[key].dump());
    return c[key].get<int64_t>();
  };
  ConfigWindows w;
  const bool qwen =
      f == HfFamily::qwen2 || f == HfFamily::qwen3 || f == HfFamily::qwen2_moe || f == HfFamily::qwen3_moe;
  if (f == HfFamily::mistral || f == HfFamily::mixtral)
    w.window = integer("sliding_window", 0);
  else if (qwen)
    w.window =
        given("use_sliding_window") && c["use_sliding_window"].is_boolean() && c["use_sliding_window"].get<bool>()
            ? integer("sliding_window", 0)
            : 0;
  else if (f == HfFamily::gpt_oss)
    w.window = c.contains("sliding_window") && c["sliding_window"].is_null() ? 0 : integer("sliding_window", 128);
  if (w.window < 0) fail_input("{}: key 'sliding_window': expected a window >= 1 or null, found {}", path, w.window);
  w.types.assign(size_t(std::max<int64_t>(layers, 0)), w.window > 0 ? LayerAttention::sliding : LayerAttention::full);
  if (w.window == 0 || f == HfFamily::mistral || f == HfFamily::mixtral) return w;
  if (given("layer_types")) {
    if (!c["layer_types"].is_array() || int64_t(c["layer_types"].size()) != layers)
      fail_input("{}: key 'layer_types': expected a list of {} entries (one per layer), found {}", path, layers,
                 c["layer_types"].dump());
    for (int64_t l = 0; l < layers; ++l) {
      const auto& t = c["layer_types"][size_t(l)];
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name != "full_attention" && name != "sliding_attention")
        fail_input("{}: key 'layer_types' entry {}: expected full_attention or sliding_attention, found {}", path, l,
                   name);
      w.types[size_t(l)] = name == "sliding_attention" ? LayerAttention::sliding : LayerAttention::full;
    }
  } else {
    const int64_t from = qwen ? integer("max_window_layers", 28) : 0;
    for (int64_t l = 0; l < layers; ++l)
      w.types[size_t(l)] = (qwen ? l >= from : l % 2 == 0) ? LayerAttention::sliding : LayerAttention::full;
  }
  return w;
}

// The rotary scaling of config.json (`rope_parameters` in transformers 5,
// `rope_scaling` before, with `type` or `rope_type`) against
// model.rope_scaling, key by key.
void check_rope_scaling(const std::string& path, const nlohmann::json& c, const Recipe& rc) {
  const RopeScaling& s = rc.model.rope_scaling;
  const RopeParams params = rope_params(c);
  const nlohmann::json& rp = params.values;
  const std::string& where = params.where;
  std::string type = params.type;
  if (type == "default") type = "none";
  const std::optional<RopeType> found = parse_enum<RopeType>(type);
  if (!found)
    fail_input("{}: key '{}.rope_type': expected default, linear, llama3 or yarn, found '{}'", path, where, type);
  if (*found != s.type)
    fail_input(
        "{}: key '{}.rope_type' is {}, the recipe {} has model.rope_scaling.type = {}: set "
        "model.rope_scaling.type: {}",
        path, where, type, rc.source, enum_name(s.type), type);
  if (s.type == RopeType::none) return;
  auto real = [&](const char* key, double def, const char* recipe_key, double want, bool used) {
    if (!used) return;
    const double v = rp.contains(key) && rp[key].is_number() ? rp[key].get<double>() : def;
    if (std::abs(v - want) > 1e-12 * std::max(1.0, std::abs(want)))
      fail_input("{}: key '{}.{}' is {}, the recipe {} has {} = {}: set {}: {}", path, where, key, v, rc.source,
                 recipe_key, want, recipe_key, v);
  };
  const bool llama3 = s.type == RopeType::llama3, yarn = s.type == RopeType::yarn;
  real("factor", 1.0, "model.rope_scaling.factor", s.factor, true);
  real("original_max_position_embeddings", 0, "model.rope_scaling.original_seq_len", double(s.original_seq_len),
       llama3 || yarn);
  real("low_freq_factor", 1.0, "model.rope_scaling.low_freq_factor", s.low_freq_factor, llama3);
  real("high_freq_factor", 4.0, "model.rope_scaling.high_freq_factor", s.high_freq_factor, llama3);
  real("beta_fast", 32.0, "model.rope_scaling.beta_fast", s.beta_fast, yarn);
  real("beta_slow", 1.0, "model.rope_scaling.beta_slow", s.beta_slow, yarn);
  real("mscale", 0.0, "model.rope_scaling.mscale", s.mscale, yarn);
  real("mscale_all_dim", 0.0, "model.rope_scaling.mscale_all_dim", s.mscale_all_dim, yarn);
  if (yarn) {
    const bool truncate = rp.contains("truncate") && rp["truncate"].is_boolean() ? rp["truncate"].get<bool>() : true;
    if (truncate != s.truncate)
      fail_input(
          "{}: key '{}.truncate' is {}, the recipe {} has model.rope_scaling.truncate = {}: set "
          "model.rope_scaling.truncate: {}",
          path, where, truncate, rc.source, s.truncate, truncate);
    if (rp.contains("attention_factor") && !rp["attention_factor"].is_null())
      fail_input(
          "{}: key '{}.attention_factor': an explicit attention factor is not supported (Trident derives it "
          "from mscale and mscale_all_dim)",
          path, where);
  }
}

// config.json against the recipe's model: every size must agree.
void check_hf_config(const std::string& path, const nlohmann::json& c, const Recipe& rc) {
  const ModelConfig& m = rc.model;
  auto given = [&](const char* key) { return c.contains(key) && !c[key].is_null(); };
  auto typed = [&](const char* key, bool ok, const char* expected) {
    if (!ok) fail_input("{}: key '{}': expected {}, found {}", path, key, expected, c[key].dump());
  };
  const auto [type, found_family] = config_family(path, c);
  const std::optional<HfFamily> family = found_family;
  const HfFamily want = hf_family(rc);
  // a Mistral config without a window shorter than the sequence is llama's model (the window check below)
  if (*family != want && !(*family == HfFamily::mistral && want == HfFamily::llama)) {
    const std::vector<std::string> keys = keys_for_family(*family, m);
    fail_input("{}: key 'model_type' is '{}', the recipe {} describes a {} model (model.arch {}{}); for {} set {}",
               path, type, rc.source, hf_model_type(want), m.arch, m.moe.enabled ? ", model.moe" : "", type,
               keys.empty() ? std::string("the keys of its family (docs/checkpoint.md#hugging-face)")
                            : fmt::format("{}", fmt::join(keys, ", ")));
  }
  const std::optional<Arch> arch = *family == HfFamily::gpt2 ? Arch::gpt2 : Arch::llama;
  auto num = [&](const char* key, int64_t def) -> int64_t {
    if (!given(key)) {
      if (def >= 0) return def;
      fail_input("{}: missing key '{}'", path, key);
    }
    typed(key, c[key].is_number_integer(), "an integer");
    return c[key].get<int64_t>();
  };
  auto real = [&](const char* key, double def) -> double {
    if (!given(key)) return def;
    typed(key, c[key].is_number(), "a number");
    return c[key].get<double>();
  };
  // each difference names the recipe key and the value that would match (the key before a note in brackets)
  auto set_key = [](const char* recipe_key) {
    const std::string k = recipe_key;
    return k.substr(0, k.find(' '));
  };
  auto same = [&](const char* key, auto found, const char* recipe_key, auto want) {  // integers and flags
    if (found != want)
      fail_input("{}: key '{}' is {}, the recipe {} has {} = {}: set {}: {}", path, key, found, rc.source, recipe_key,
                 want, set_key(recipe_key), found);
  };
  auto close = [&](const char* key, double found, const char* recipe_key, double want) {
    if (std::abs(found - want) > 1e-12 * std::max(1.0, std::abs(want)))
      fail_input("{}: key '{}' is {}, the recipe {} has {} = {}: set {}: {}", path, key, found, rc.source, recipe_key,
                 want, set_key(recipe_key), found);
  };
  auto text = [&](const char* key, const std::string& def) {
    if (!given(key)) return def;
    typed(key, c[key].is_string(), "a string");
    return c[key].get<std::string>();
  };
  auto flag = [&](const char* key, bool def) {
    if (!given(key)) return def;
    typed(key, c[key].is_boolean(), "true or false");
    return c[key].get<bool>();
  };
  int64_t positions = 0;
  if (*arch == Arch::gpt2) {
    same("n_layer", num("n_layer", -1), "model.layers", m.layers);
    same("n_embd", num("n_embd", -1), "model.hidden", m.hidden);
    same("n_head", num("n_head", -1), "model.heads", m.heads);
    same("n_inner", num("n_inner", 4 * num("n_embd", -1)), "model.ffn_hidden", m.ffn_hidden);
    same("vocab_size", num("vocab_size", -1), "model.vocab", m.vocab);
    close("layer_norm_epsilon", real("layer_norm_epsilon", 1e-5), "model.norm_eps", m.norm_eps);
    const std::string act = text("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      fail_input("{}: key 'activation_function': expected gelu_new (tanh GELU, as Trident), found '{}'", path, act);
    positions = num("n_positions", -1);
    same("tie_word_embeddings", flag("tie_word_embeddings", true), "model.tie_embeddings", m.tie_embeddings);
  } else {
    same("num_hidden_layers", num("num_hidden_layers", -1), "model.layers", m.layers);
    same("hidden_size", num("hidden_size", -1), "model.hidden", m.hidden);
    same("num_attention_heads", num("num_attention_heads", -1), "model.heads", m.heads);
    same("num_key_value_heads", num("num_key_value_heads", num("num_attention_heads", -1)), "model.kv_heads",
         m.kv_heads);
    if (*family == HfFamily::deepseek_v3)  // its head_dim is the rotary part's (DeepseekV3Config)
      same("head_dim", num("head_dim", m.mla.qk_rope_head_dim), "model.mla.qk_rope_head_dim", m.mla.qk_rope_head_dim);
    else  // absent: hidden / heads (transformers' default)
      same("head_dim", num("head_dim", num("hidden_size", -1) / std::max<int64_t>(num("num_attention_heads", 1), 1)),
           "model.head_dim", m.head_dim());
    if (*family == HfFamily::mixtral || *family == HfFamily::gpt_oss)  // the experts' width (every layer is MoE)
      same("intermediate_size", num("intermediate_size", -1), "model.moe.ffn_hidden", m.moe.ffn_hidden);
    else
      same("intermediate_size", num("intermediate_size", -1), "model.ffn_hidden", m.ffn_hidden);
    same("vocab_size", num("vocab_size", -1), "model.vocab", m.vocab);
    close("rms_norm_eps", real("rms_norm_eps", 1e-6), "model.norm_eps", m.norm_eps);
    // rope_theta at the top level, or (transformers 5) in rope_parameters
    double theta = real("rope_theta", 10000.0);
    double partial = real("partial_rotary_factor", *family == HfFamily::glm4_moe ? 0.5 : 1.0);  // GLM's default
    if (given("rope_parameters") && c["rope_parameters"].is_object()) {
      const auto& rp = c["rope_parameters"];
      if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) theta = rp["rope_theta"].get<double>();
      if (rp.contains("partial_rotary_factor") && rp["partial_rotary_factor"].is_number())
        partial = rp["partial_rotary_factor"].get<double>();
    }
    check_rope_scaling(path, c, rc);
    close("rope_theta", theta, "model.rope_theta", m.rope_theta);
    if (partial != 1.0)
      fail_input("{}: key 'partial_rotary_factor' is {}: Trident rotates the whole head (1.0)", path, partial);
    if (text("hidden_act", "silu") != "silu")
      fail_input("{}: key 'hidden_act': expected silu (SwiGLU, as Trident), found '{}'", path, text("hidden_act", ""));
    if (flag("mlp_bias", false)) fail_input("{}: key 'mlp_bias' is true: Trident's LLaMA MLP has no biases", path);
    if (*family == HfFamily::llama || *family == HfFamily::qwen3 || *family == HfFamily::gpt_oss) {  // q, k, v, o
      const bool bias = flag("attention_bias", *family == HfFamily::gpt_oss);
      same("attention_bias", bias, "model.attention_bias", m.attention_bias);
      same("attention_bias", bias, "model.o_bias", m.o_bias);
    } else if (*family == HfFamily::qwen2_moe && !flag("qkv_bias", true) && m.attention_bias) {
      fail_input(
          "{}: key 'qkv_bias' is false, the recipe {} has model.attention_bias = true: set "
          "model.attention_bias: false",
          path, rc.source);
    }
    if (*family == HfFamily::glm4_moe) same("use_qk_norm", flag("use_qk_norm", false), "model.qk_norm", m.qk_norm);
    // sliding windows, layer by layer: a window of at least the trained sequence is none
    {
      const ConfigWindows w = config_windows(path, c, *family, m.layers);
      for (int64_t l = 0; l < m.layers; ++l) {
        const int64_t theirs = w.types[size_t(l)] == LayerAttention::sliding ? w.window : 0;
        auto seen = [&](int64_t x) { return x > 0 && x < m.seq_len ? x : 0; };
        if (seen(theirs) != seen(m.window(l)))
          fail_input(
              "{}: layer {} attends to {} (key 'sliding_window' {}, layer_types), the recipe {} to {}: set "
              "model.sliding_window: {} and model.layer_types as the config's",
              path, l, theirs > 0 ? fmt::format("the last {} positions", theirs) : std::string("every position"),
              w.window, rc.source,
              m.window(l) > 0 ? fmt::format("the last {} positions", m.window(l)) : std::string("every position"),
              w.window);
      }
    }
    const MoeConfig& e = m.moe;
    auto dense_list = [&](const char* key) {
      std::vector<int64_t> v;
      if (!given(key)) return v;
      typed(key, c[key].is_array(), "a list of layer indices");
      for (const auto& x : c[key]) {
        typed(key, x.is_number_integer(), "a list of layer indices");
        v.push_back(x.get<int64_t>());
      }
      return v;
    };
    switch (*family) {
      case HfFamily::mixtral:
        same("num_local_experts", num("num_local_experts", -1), "model.moe.experts", e.experts);
        same("num_experts_per_tok", num("num_experts_per_tok", -1), "model.moe.top_k", e.top_k);
        if (real("router_jitter_noise", 0.0) != 0.0)
          fail_input("{}: key 'router_jitter_noise': router jitter is not supported (0 only)", path);
        break;
      case HfFamily::gpt_oss:
        same("num_local_experts", num("num_local_experts", -1), "model.moe.experts", e.experts);
        same("num_experts_per_tok", num("num_experts_per_tok", -1), "model.moe.top_k", e.top_k);
        close("swiglu_limit", real("swiglu_limit", 7.0), "model.moe.swiglu_limit", e.swiglu_limit);
        close("swiglu_alpha", real("swiglu_alpha", 1.702), "model.moe.swiglu_alpha", e.swiglu_alpha);
        break;
      case HfFamily::qwen3_moe:
      case HfFamily::qwen2_moe:
        if (given("num_local_experts") && !given("num_experts"))  // how transformers 5 saves it
          same("num_local_experts", num("num_local_experts", -1), "model.moe.experts", e.experts);
        else
          same("num_experts", num("num_experts", -1), "model.moe.experts", e.experts);
        same("num_experts_per_tok", num("num_experts_per_tok", -1), "model.moe.top_k", e.top_k);
        same("moe_intermediate_size", num("moe_intermediate_size", -1), "model.moe.ffn_hidden", e.ffn_hidden);
        if (*family == HfFamily::qwen2_moe)
          same("shared_expert_intermediate_size", num("shared_expert_intermediate_size", -1),
               "model.moe.shared_ffn_hidden", e.shared_ffn_hidden);
        same("norm_topk_prob", flag("norm_topk_prob", false), "model.moe.router.norm_topk", e.norm_topk);
        same("decoder_sparse_step", num("decoder_sparse_step", 1), "model.moe.every", e.every);
        if (dense_list("mlp_only_layers") != e.dense_layers)
          fail_input(
              "{}: key 'mlp_only_layers' is {}, the recipe {} has model.moe.dense_layers [{}]: set "
              "model.moe.dense_layers: {}",
              path, c.value("mlp_only_layers", nlohmann::json::array()).dump(), rc.source,
              fmt::join(e.dense_layers, ", "), c.value("mlp_only_layers", nlohmann::json::array()).dump());
        break;
      case HfFamily::deepseek_v3: {
        const MlaConfig& a = m.mla;
        same("q_lora_rank", given("q_lora_rank") ? num("q_lora_rank", -1) : 0, "model.mla.q_lora_rank (0: null)",
             a.q_lora_rank);
        same("kv_lora_rank", num("kv_lora_rank", -1), "model.mla.kv_lora_rank", a.kv_lora_rank);
        same("qk_nope_head_dim", num("qk_nope_head_dim", -1), "model.mla.qk_nope_head_dim", a.qk_nope_head_dim);
        same("qk_rope_head_dim", num("qk_rope_head_dim", -1), "model.mla.qk_rope_head_dim", a.qk_rope_head_dim);
        same("v_head_dim", num("v_head_dim", -1), "model.mla.v_head_dim", a.v_head_dim);
        if (!flag("rope_interleave", true))
          fail_input(
              "{}: key 'rope_interleave' is false: Trident's multi-head latent attention rotates interleaved "
              "pairs, the layout of DeepSeek's published weights (true)",
              path);
        if (num("num_nextn_predict_layers", 0) < m.mtp.depth)
          fail_input(
              "{}: key 'num_nextn_predict_layers' is {}: the recipe {} has model.mtp.depth {}: set "
              "model.mtp.depth: {} or less{}",
              path, num("num_nextn_predict_layers", 0), rc.source, m.mtp.depth, num("num_nextn_predict_layers", 0),
              num("num_nextn_predict_layers", 0) == 0 ? " (no model.mtp section)" : "");
        if (text("scoring_func", "sigmoid") != "sigmoid")
          fail_input("{}: key 'scoring_func': expected sigmoid, found '{}'", path, text("scoring_func", ""));
      }
        [[fallthrough]];  // the MoE keys are glm4_moe's
      case HfFamily::glm4_moe:
        if (given("num_local_experts") && !given("n_routed_experts"))
          same("num_local_experts", num("num_local_experts", -1), "model.moe.experts", e.experts);
        else
          same("n_routed_experts", num("n_routed_experts", -1), "model.moe.experts", e.experts);
        same("num_experts_per_tok", num("num_experts_per_tok", -1), "model.moe.top_k", e.top_k);
        same("moe_intermediate_size", num("moe_intermediate_size", -1), "model.moe.ffn_hidden", e.ffn_hidden);
        same("n_shared_experts", num("n_shared_experts", 1), "model.moe.shared_experts", e.shared_experts);
        same("first_k_dense_replace", num("first_k_dense_replace", 1), "model.moe.first_dense", e.first_dense);
        same("n_group", num("n_group", 1), "model.moe.router.groups", e.groups);
        same("topk_group", num("topk_group", 1), "model.moe.router.group_topk", e.group_topk);
        close("routed_scaling_factor", real("routed_scaling_factor", 1.0), "model.moe.router.scaling", e.scaling);
        same("norm_topk_prob", flag("norm_topk_prob", true), "model.moe.router.norm_topk", e.norm_topk);
        break;
      default:
        break;
    }
    positions = num("max_position_embeddings", -1);
    same("tie_word_embeddings", flag("tie_word_embeddings", false), "model.tie_embeddings", m.tie_embeddings);
  }
  // quantized weights: those import dequantizes (quantized.hpp), and nothing else
  if (given("quantization_config")) {
    const auto& q = c["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? q["quant_method"].get<std::string>()
                                   : q.dump();
    const bool block_fp8 = method == "fp8" && (!q.contains("weight_block_size") ||
                                               q["weight_block_size"] == nlohmann::json::array({128, 128}));
    if (!(block_fp8 && *family == HfFamily::deepseek_v3) && !(method == "mxfp4" && *family == HfFamily::gpt_oss))
      fail_input(
          "{}: key 'quantization_config.quant_method' is {}: import dequantizes DeepSeek-V3's fp8 (128 x 128 "
          "blocks) and gpt-oss's mxfp4 weights only",
          path, method);
  }
  if (positions < m.seq_len)
    fail_input(
        "{}: the model has {} positions, the recipe {} trains on model.seq_len {}: set model.seq_len: {} or "
        "less",
        path, positions, rc.source, m.seq_len, positions);
}

// The recipe config.json describes (import without --recipe): its model
// section key by key, the inverse of check_hf_config, and training keys a
// user edits.
std::string recipe_from_hf_config(const std::string& path, const nlohmann::json& c, bool with_mtp) {
  auto given = [&](const char* key) { return c.contains(key) && !c[key].is_null(); };
  auto num = [&](const char* key, int64_t def) -> int64_t {
    if (!given(key)) return def;
    if (!c[key].is_number_integer())
      fail_input("{}: key '{}': expected an integer, found {}", path, key, c[key].dump());
    return c[key].get<int64_t>();
  };
  auto real = [&](const char* key, double def) -> double {
    if (!given(key)) return def;
    if (!c[key].is_number()) fail_input("{}: key '{}': expected a number, found {}", path, key, c[key].dump());
    return c[key].get<double>();
  };
  auto flag = [&](const char* key, bool def) -> bool {
    if (!given(key)) return def;
    if (!c[key].is_boolean()) fail_input("{}: key '{}': expected true or false, found {}", path, key, c[key].dump());
    return c[key].get<bool>();
  };
  const auto [type, f] = config_family(path, c);
  std::vector<std::string> m;  // the model section's lines
  auto key = [&](const std::string& k, const auto& v) { m.push_back(fmt::format("  {}: {}", k, v)); };
  auto number = [](double v) { return fmt::format("{}", v); };
  // the sequence trained on: the model's positions, at most 4096 (edit it: longer costs memory)
  const int64_t positions = num(f == HfFamily::gpt2 ? "n_positions" : "max_position_embeddings", 1024);
  if (f == HfFamily::gpt2) {
    const int64_t C = num("n_embd", -1), H = num("n_head", -1);
    key("arch", "gpt2"), key("layers", num("n_layer", -1)), key("hidden", C), key("heads", H), key("kv_heads", H);
    key("ffn_hidden", num("n_inner", 4 * C)), key("seq_len", std::min<int64_t>(positions, 4096));
    key("vocab", num("vocab_size", -1)), key("norm_eps", number(real("layer_norm_epsilon", 1e-5)));
    key("tie_embeddings", flag("tie_word_embeddings", true) ? "true" : "false");
  } else {
    const int64_t C = num("hidden_size", -1), H = num("num_attention_heads", -1);
    key("arch", "llama"), key("layers", num("num_hidden_layers", -1)), key("hidden", C), key("heads", H);
    key("kv_heads", num("num_key_value_heads", H));
    if (f != HfFamily::deepseek_v3 && given("head_dim") && num("head_dim", -1) * H != C)
      key("head_dim", num("head_dim", -1));
    key("ffn_hidden", num("intermediate_size", -1)), key("seq_len", std::min<int64_t>(positions, 4096));
    key("vocab", num("vocab_size", -1)), key("norm_eps", number(real("rms_norm_eps", 1e-6)));
    key("tie_embeddings", flag("tie_word_embeddings", false) ? "true" : "false");
    double theta = real("rope_theta", 10000.0);
    const RopeParams params = rope_params(c);
    const nlohmann::json& rp = params.values;
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) theta = rp["rope_theta"].get<double>();
    key("rope_theta", number(theta));
    const std::string& rope_type = params.type;
    if (rope_type != "default") {
      std::vector<std::string> s = {fmt::format("type: {}", rope_type)};
      for (const auto& [hf, ours] :
           std::vector<std::pair<const char*, const char*>>{{"factor", "factor"},
                                                            {"original_max_position_embeddings", "original_seq_len"},
                                                            {"low_freq_factor", "low_freq_factor"},
                                                            {"high_freq_factor", "high_freq_factor"},
                                                            {"beta_fast", "beta_fast"},
                                                            {"beta_slow", "beta_slow"},
                                                            {"mscale", "mscale"},
                                                            {"mscale_all_dim", "mscale_all_dim"},
                                                            {"truncate", "truncate"}})
        if (rp.contains(hf) && !rp[hf].is_null()) s.push_back(fmt::format("{}: {}", ours, rp[hf].dump()));
      key("rope_scaling", fmt::format("{{{}}}", fmt::join(s, ", ")));
    }
    if (f == HfFamily::qwen3 || f == HfFamily::qwen3_moe || (f == HfFamily::glm4_moe && flag("use_qk_norm", false)))
      key("qk_norm", "true");
    const bool both = ((f == HfFamily::llama || f == HfFamily::qwen3) && flag("attention_bias", false)) ||
                      (f == HfFamily::gpt_oss && flag("attention_bias", true));  // q, k, v and o
    const bool qkv = f == HfFamily::qwen2 || (f == HfFamily::qwen2_moe && flag("qkv_bias", true)) || both;
    if (qkv) key("attention_bias", "true");
    if (both) key("o_bias", "true");
    if (f == HfFamily::gpt_oss) key("attention_sinks", "true");
    // sliding windows: the window, and the layers' kinds unless every layer has it
    const ConfigWindows w = config_windows(path, c, f, num("num_hidden_layers", -1));
    if (w.window > 0) {
      key("sliding_window", w.window);
      if (std::count(w.types.begin(), w.types.end(), LayerAttention::sliding) != int64_t(w.types.size())) {
        std::vector<std::string> names;
        for (LayerAttention t : w.types) names.push_back(enum_name(t));
        key("layer_types", fmt::format("[{}]", fmt::join(names, ", ")));
      }
    }
    const bool sigmoid = f == HfFamily::glm4_moe || f == HfFamily::deepseek_v3;
    if (f == HfFamily::deepseek_v3) {
      key("attention", "mla");
      key("mla", fmt::format("{{q_lora_rank: {}, kv_lora_rank: {}, qk_nope_head_dim: {}, qk_rope_head_dim: {}, "
                             "v_head_dim: {}}}",
                             num("q_lora_rank", 0), num("kv_lora_rank", -1), num("qk_nope_head_dim", -1),
                             num("qk_rope_head_dim", -1), num("v_head_dim", -1)));
      if (const int64_t d = num("num_nextn_predict_layers", 0); d > 0 && with_mtp)
        key("mtp", fmt::format("{{depth: {}}}", d));
    }
    std::vector<std::string> e;  // the moe section
    auto experts = [&](const char* name) {
      return given("num_local_experts") && !given(name) ? num("num_local_experts", -1) : num(name, -1);
    };
    switch (f) {
      case HfFamily::gpt_oss:
        e = {fmt::format("experts: {}", num("num_local_experts", -1)),
             fmt::format("top_k: {}", num("num_experts_per_tok", -1)),
             fmt::format("ffn_hidden: {}", num("intermediate_size", -1)),
             "router: {score: softmax, norm_topk: true, bias: true}",
             "expert_bias: true",
             "activation: clamped_swiglu",
             fmt::format("swiglu_alpha: {}", number(real("swiglu_alpha", 1.702))),
             fmt::format("swiglu_limit: {}", number(real("swiglu_limit", 7.0)))};
        break;
      case HfFamily::mixtral:
        e = {fmt::format("experts: {}", num("num_local_experts", -1)),
             fmt::format("top_k: {}", num("num_experts_per_tok", -1)),
             fmt::format("ffn_hidden: {}", num("intermediate_size", -1)), "router: {score: softmax, norm_topk: true}"};
        break;
      case HfFamily::qwen2_moe:
      case HfFamily::qwen3_moe: {
        e = {fmt::format("experts: {}", experts("num_experts")),
             fmt::format("top_k: {}", num("num_experts_per_tok", -1)),
             fmt::format("ffn_hidden: {}", num("moe_intermediate_size", -1)),
             fmt::format("every: {}", num("decoder_sparse_step", 1)),
             fmt::format("router: {{score: softmax, norm_topk: {}}}", flag("norm_topk_prob", false))};
        if (given("mlp_only_layers") && c["mlp_only_layers"].is_array() && !c["mlp_only_layers"].empty())
          e.push_back(fmt::format("dense_layers: {}", c["mlp_only_layers"].dump()));
        if (f == HfFamily::qwen2_moe)
          e.insert(e.end(), {"shared_experts: 1", "shared_expert_gate: true",
                             fmt::format("shared_ffn_hidden: {}", num("shared_expert_intermediate_size", -1))});
        break;
      }
      case HfFamily::glm4_moe:
      case HfFamily::deepseek_v3:
        e = {fmt::format("experts: {}", experts("n_routed_experts")),
             fmt::format("top_k: {}", num("num_experts_per_tok", -1)),
             fmt::format("ffn_hidden: {}", num("moe_intermediate_size", -1)),
             fmt::format("shared_experts: {}", num("n_shared_experts", 1)),
             fmt::format("first_dense: {}", num("first_k_dense_replace", 1)),
             fmt::format("router: {{score: sigmoid, groups: {}, group_topk: {}, scaling: {}, norm_topk: {}}}",
                         num("n_group", 1), num("topk_group", 1), real("routed_scaling_factor", 1.0),
                         flag("norm_topk_prob", true))};
        break;
      default:
        break;
    }
    if (!e.empty()) {
      // balancing: DeepSeek-V3's (the correction bias, a small per-sequence aux loss) for sigmoid routers, the
      // aux loss at the config's coefficient for softmax ones
      e.push_back(sigmoid ? "balance: {kind: seq_aux_loss, coef: 0.0001, bias_rate: 0.001}"
                          : fmt::format("balance: {{kind: aux_loss, coef: {}}}", real("router_aux_loss_coef", 0.001)));
      m.push_back(fmt::format("  moe:\n    {}", fmt::join(e, "\n    ")));
    }
  }
  return fmt::format(
      "# Written by `trident import` from {} (model_type {}): the model as transformers defines it; the\n"
      "# training keys below are a starting point to edit (docs/recipes.md).\n"
      "model:\n{}\n"
      "train:    {{global_batch: 32, micro_batch: 1, steps: 1000, precision: bf16}}\n"
      "optim:    {{lr: 3.0e-5, min_lr: 3.0e-6, warmup: 100, decay: cosine, betas: [0.9, 0.95], weight_decay: 0.1, "
      "grad_clip: 1.0}}\n"
      "parallel: {{data: auto}}\n"
      "# data:   {{train: PREFIX}}   # a tokenized dataset (docs/data.md); without it, synthetic tokens\n"
      "seed: 1234\n",
      path, type, fmt::join(m, "\n"));
}

}  // namespace trident::launch
