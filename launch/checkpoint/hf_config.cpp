// Checking a transformers config.json against a recipe (see hf_config.hpp).
#include "launch/checkpoint/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.hpp"

namespace trident::launch {

// config.json against the recipe's model: every size must agree.
void check_hf_config(const std::string& path, const nlohmann::json& c, const Recipe& rc) {
  const ModelConfig& m = rc.model;
  auto given = [&](const char* key) { return c.contains(key) && !c[key].is_null(); };
  auto typed = [&](const char* key, bool ok, const char* expected) {
    if (!ok) fail_input("{}: key '{}': expected {}, found {}", path, key, expected, c[key].dump());
  };
  const std::string type = given("model_type") && c["model_type"].is_string() ? c["model_type"].get<std::string>() : "";
  const std::optional<Arch> arch = parse_enum<Arch>(type);
  if (!arch) fail_input("{}: key 'model_type': expected {}, found '{}'", path, enum_choices<Arch>(" or "), type);
  if (*arch != m.arch)
    fail_input("{}: key 'model_type' is '{}', the recipe {} has model.arch {}", path, type, rc.source, m.arch);
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
  auto same = [&](const char* key, int64_t found, const char* recipe_key, int64_t want) {
    if (found != want)
      fail_input("{}: key '{}' is {}, the recipe {} has {} = {}", path, key, found, rc.source, recipe_key, want);
  };
  auto close = [&](const char* key, double found, const char* recipe_key, double want) {
    if (std::abs(found - want) > 1e-12 * std::max(1.0, std::abs(want)))
      fail_input("{}: key '{}' is {}, the recipe {} has {} = {}", path, key, found, rc.source, recipe_key, want);
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
    same("head_dim", num("head_dim", m.head_dim()), "model.hidden / model.heads", m.head_dim());
    same("intermediate_size", num("intermediate_size", -1), "model.ffn_hidden", m.ffn_hidden);
    same("vocab_size", num("vocab_size", -1), "model.vocab", m.vocab);
    close("rms_norm_eps", real("rms_norm_eps", 1e-6), "model.norm_eps", m.norm_eps);
    close("rope_theta", real("rope_theta", 10000.0), "model.rope_theta", m.rope_theta);
    if (text("hidden_act", "silu") != "silu")
      fail_input("{}: key 'hidden_act': expected silu (SwiGLU, as Trident), found '{}'", path, text("hidden_act", ""));
    if (flag("attention_bias", false) || flag("mlp_bias", false))
      fail_input("{}: attention_bias / mlp_bias: Trident's LLaMA has no linear biases", path);
    if (given("rope_scaling"))
      fail_input("{}: key 'rope_scaling': scaled RoPE is not supported (plain RoPE with rope_theta only)", path);
    positions = num("max_position_embeddings", -1);
    same("tie_word_embeddings", flag("tie_word_embeddings", false), "model.tie_embeddings", m.tie_embeddings);
  }
  if (positions < m.seq_len)
    fail_input("{}: the model has {} positions, the recipe {} trains on model.seq_len {}", path, positions, rc.source,
               m.seq_len);
}

}  // namespace trident::launch
