// Import's config.json check (launch/checkpoint/hf_config.hpp) on the keys
// that change what the model computes: a Mixtral config with a sliding
// window shorter than the recipe's sequence is another model (transformers'
// Mixtral attends to the last `sliding_window` positions only) and is
// refused naming the key; a window that covers the sequence, or none, is
// the same model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/recipe/recipe.hpp"
#include "launch/checkpoint/hf_config.hpp"

namespace trident::launch {

TEST(HfConfig, MixtralSlidingWindowShorterThanTheSequenceIsRefused) {
  const Recipe rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/moe-tiny.yaml",
                                {"model.moe.first_dense=0", "model.moe.balance.kind=hf"}, 1);
  const auto& m = rc.model;
  nlohmann::json c = {{"model_type", "mixtral"},
                      {"num_hidden_layers", m.layers},
                      {"hidden_size", m.hidden},
                      {"num_attention_heads", m.heads},
                      {"num_key_value_heads", m.kv_heads},
                      {"intermediate_size", m.moe.ffn_hidden},
                      {"vocab_size", m.vocab},
                      {"max_position_embeddings", m.seq_len},
                      {"rms_norm_eps", m.norm_eps},
                      {"rope_theta", m.rope_theta},
                      {"tie_word_embeddings", false},
                      {"num_local_experts", m.moe.experts},
                      {"num_experts_per_tok", m.moe.top_k},
                      {"sliding_window", nullptr}};
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len;  // covers every position trained on
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len / 2;
  try {
    check_hf_config("config.json", c, rc);
    ADD_FAILURE() << "a window of " << m.seq_len / 2 << " imported";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("config.json: key 'sliding_window' is 32, shorter than model.seq_len 64"), std::string::npos)
        << msg;
  }
}

// head_dim: a released Qwen3's heads of their own size against model.head_dim;
// absent, transformers' default hidden_size / num_attention_heads.
TEST(HfConfig, HeadSizeIsCompared) {
  const Recipe rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-tiny.yaml",
                                {"model.qk_norm=true", "model.head_dim=48"}, 1);
  const auto& m = rc.model;
  nlohmann::json c = {{"model_type", "qwen3"},
                      {"num_hidden_layers", m.layers},
                      {"hidden_size", m.hidden},
                      {"num_attention_heads", m.heads},
                      {"num_key_value_heads", m.kv_heads},
                      {"head_dim", 48},
                      {"intermediate_size", m.ffn_hidden},
                      {"vocab_size", m.vocab},
                      {"max_position_embeddings", m.seq_len},
                      {"rms_norm_eps", m.norm_eps},
                      {"rope_theta", m.rope_theta},
                      {"tie_word_embeddings", false}};
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  for (const nlohmann::json& other : {nlohmann::json(32), nlohmann::json()}) {
    if (other.is_null())
      c.erase("head_dim");
    else
      c["head_dim"] = other;
    try {
      check_hf_config("config.json", c, rc);
      ADD_FAILURE() << "head_dim " << other.dump() << " imported into a recipe with head_dim 48";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("key 'head_dim'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("model.head_dim"), std::string::npos) << msg;
    }
  }
}

// Mistral (7B v0.3, Nemo) is LLaMA's model with a sliding window: null or
// covering the sequence imports into a llama recipe (Nemo's head size by
// model.head_dim); shorter is refused naming the key.
TEST(HfConfig, MistralImportsAsLlama) {
  const Recipe rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-tiny.yaml", {"model.head_dim=48"}, 1);
  const auto& m = rc.model;
  nlohmann::json c = {{"model_type", "mistral"},
                      {"num_hidden_layers", m.layers},
                      {"hidden_size", m.hidden},
                      {"num_attention_heads", m.heads},
                      {"num_key_value_heads", m.kv_heads},
                      {"head_dim", 48},
                      {"intermediate_size", m.ffn_hidden},
                      {"vocab_size", m.vocab},
                      {"max_position_embeddings", m.seq_len},
                      {"rms_norm_eps", m.norm_eps},
                      {"rope_theta", m.rope_theta},
                      {"tie_word_embeddings", false},
                      {"sliding_window", nullptr}};
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len;
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len / 4;
  try {
    check_hf_config("config.json", c, rc);
    ADD_FAILURE() << "a Mistral window of " << m.seq_len / 4 << " imported";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("key 'sliding_window' is 16, shorter than model.seq_len 64"), std::string::npos) << msg;
  }
}

// A config of another family names the recipe keys that would make it.
TEST(HfConfig, AnotherFamilyNamesTheKeysToSet) {
  const Recipe rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/moe-tiny.yaml",
                                {"model.moe.first_dense=0", "model.moe.balance.kind=hf"}, 1);
  auto refusal = [&](const char* type) {
    try {
      check_hf_config("config.json", {{"model_type", type}}, rc);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("imported");
  };
  EXPECT_NE(refusal("qwen3_moe")
                .find("key 'model_type' is 'qwen3_moe', the recipe " + rc.source +
                      " describes a mixtral model (model.arch llama, model.moe); for qwen3_moe set "
                      "model.qk_norm: true"),
            std::string::npos)
      << refusal("qwen3_moe");
  EXPECT_NE(
      refusal("qwen2_moe").find("for qwen2_moe set model.moe.shared_experts: 1, model.moe.shared_expert_gate: true"),
      std::string::npos)
      << refusal("qwen2_moe");
  EXPECT_NE(refusal("deepseek_v3")
                .find("for deepseek_v3 set model.attention: mla, model.moe.router.score: sigmoid, "
                      "model.moe.shared_experts: 1 (or more)"),
            std::string::npos)
      << refusal("deepseek_v3");
  EXPECT_NE(refusal("llama").find("for llama set no model.moe section (a dense model)"), std::string::npos)
      << refusal("llama");
  EXPECT_NE(refusal("gpt2").find("for gpt2 set model.arch: gpt2"), std::string::npos) << refusal("gpt2");
}

}  // namespace trident::launch
