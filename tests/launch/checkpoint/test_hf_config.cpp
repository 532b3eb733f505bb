// Import's config.json check (launch/checkpoint/hf_config.hpp) on the keys
// that change what the model computes: a Mixtral config with a sliding
// window shorter than the recipe's sequence is another model than a recipe
// without one (transformers' Mixtral attends to the last `sliding_window`
// positions only) and is refused naming the keys to set; the recipe with
// that window is the same model, as is a window that covers the sequence.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/recipe/recipe.hpp"
#include "launch/checkpoint/hf_config.hpp"
#include "model/params.hpp"

namespace trident::launch {

// A LLaMA-family config.json of model_type `type` with the recipe model's sizes (each test adds its family's keys).
nlohmann::json config_of(const std::string& type, const ModelConfig& m, int64_t intermediate_size) {
  return {{"model_type", type},
          {"num_hidden_layers", m.layers},
          {"hidden_size", m.hidden},
          {"num_attention_heads", m.heads},
          {"num_key_value_heads", m.kv_heads},
          {"intermediate_size", intermediate_size},
          {"vocab_size", m.vocab},
          {"max_position_embeddings", m.seq_len},
          {"rms_norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta},
          {"tie_word_embeddings", false}};
}

TEST(HfConfig, MixtralSlidingWindowShorterThanTheSequenceIsRefused) {
  const Recipe rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/moe-tiny.yaml",
                                {"model.moe.first_dense=0", "model.moe.balance.kind=hf"}, 1);
  const auto& m = rc.model;
  nlohmann::json c = config_of("mixtral", m, m.moe.ffn_hidden);
  c["num_local_experts"] = m.moe.experts, c["num_experts_per_tok"] = m.moe.top_k, c["sliding_window"] = nullptr;
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len;  // covers every position trained on
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len / 2;
  try {
    check_hf_config("config.json", c, rc);
    ADD_FAILURE() << "a window of " << m.seq_len / 2 << " imported";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("config.json: layer 0 attends to the last 32 positions (key 'sliding_window' 32, layer_types)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("set model.sliding_window: 32"), std::string::npos) << msg;
  }
  const Recipe windowed =
      load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/moe-tiny.yaml",
                  {"model.moe.first_dense=0", "model.moe.balance.kind=hf", "model.sliding_window=32"}, 1);
  EXPECT_NO_THROW(check_hf_config("config.json", c, windowed));
}

// head_dim: a released Qwen3's heads of their own size against model.head_dim;
// absent, transformers' default hidden_size / num_attention_heads.
TEST(HfConfig, HeadSizeIsCompared) {
  const Recipe rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-tiny.yaml",
                                {"model.qk_norm=true", "model.head_dim=48"}, 1);
  const auto& m = rc.model;
  nlohmann::json c = config_of("qwen3", m, m.ffn_hidden);
  c["head_dim"] = 48;
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
// model.head_dim); shorter needs model.sliding_window, every layer.
TEST(HfConfig, MistralImportsAsLlama) {
  const Recipe rc = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-tiny.yaml", {"model.head_dim=48"}, 1);
  const auto& m = rc.model;
  nlohmann::json c = config_of("mistral", m, m.ffn_hidden);
  c["head_dim"] = 48;
  c["sliding_window"] = nullptr;
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len;
  EXPECT_NO_THROW(check_hf_config("config.json", c, rc));
  c["sliding_window"] = m.seq_len / 4;
  try {
    check_hf_config("config.json", c, rc);
    ADD_FAILURE() << "a Mistral window of " << m.seq_len / 4 << " imported";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 0 attends to the last 16 positions (key 'sliding_window' 16"), std::string::npos) << msg;
  }
  const Recipe windowed = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-tiny.yaml",
                                      {"model.head_dim=48", "model.sliding_window=16"}, 1);
  EXPECT_NO_THROW(check_hf_config("config.json", c, windowed));
  const std::string derived = recipe_from_hf_config("config.json", c);
  EXPECT_NE(derived.find("sliding_window: 16"), std::string::npos) << derived;
  EXPECT_EQ(derived.find("layer_types"), std::string::npos) << derived;  // every layer
}

// Import without --recipe: the recipe written from a released config.json
// (Llama 3.1 8B's, with transformers 4's rope_scaling; Qwen3-30B-A3B's)
// loads, passes the config check it came from, and has the model of the
// shipped recipe of that model (which passes the check too).
TEST(HfConfig, RecipeFromReleasedConfigs) {
  const nlohmann::json llama = nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"],
      "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
      "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
      "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
      "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
      "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
      "vocab_size": 128256})");
  const nlohmann::json qwen = nlohmann::json::parse(R"({"architectures": ["Qwen3MoeForCausalLM"],
      "attention_bias": false, "attention_dropout": 0.0, "decoder_sparse_step": 1, "eos_token_id": 151645,
      "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
      "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
      "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
      "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
      "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
      "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
      "use_sliding_window": false, "vocab_size": 151936})");
  nlohmann::json gpt_oss = nlohmann::json::parse(R"({"architectures": ["GptOssForCausalLM"], "attention_bias": true,
      "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
      "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
      "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
      "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
      "output_router_logits": false, "pad_token_id": 199999,
      "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                              "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
      "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
      "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}, "rope_theta": 150000,
      "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": false,
      "transformers_version": "4.55.0.dev0", "use_cache": true, "vocab_size": 201088})");
  const nlohmann::json deepseek = nlohmann::json::parse(R"({"architectures": ["DeepseekV3ForCausalLM"],
      "attention_bias": false, "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 0,
      "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
      "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
      "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
      "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
      "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
      "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                              "weight_block_size": [128, 128]},
      "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
      "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"}, "rope_theta": 10000,
      "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true, "tie_word_embeddings": false,
      "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
      "use_cache": true, "v_head_dim": 128, "vocab_size": 129280})");
  gpt_oss["layer_types"] = nlohmann::json::array();
  for (int l = 0; l < 36; ++l) gpt_oss["layer_types"].push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  for (const auto& [config, shipped] :
       {std::pair{llama, "llama3.1-8b.yaml"}, std::pair{qwen, "qwen3-30b-a3b.yaml"},
        std::pair{gpt_oss, "gpt-oss-120b.yaml"}, std::pair{deepseek, "deepseek-v3.yaml"}}) {
    const std::string text = recipe_from_hf_config("config.json", config);
    const Recipe derived = load_recipe_text_on_one_process(text, "recipe.yaml");
    EXPECT_NO_THROW(check_hf_config("config.json", config, derived)) << text;
    const Recipe rc = load_recipe_on_one_process(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + shipped);
    EXPECT_NO_THROW(check_hf_config("config.json", config, rc)) << shipped;
    const ModelConfig &a = derived.model, &b = rc.model;
    EXPECT_EQ(a.layers, b.layers) << shipped;
    EXPECT_EQ(a.hidden, b.hidden) << shipped;
    EXPECT_EQ(a.heads, b.heads) << shipped;
    EXPECT_EQ(a.kv_heads, b.kv_heads) << shipped;
    EXPECT_EQ(a.head_dim(), b.head_dim()) << shipped;
    EXPECT_EQ(a.vocab, b.vocab) << shipped;
    EXPECT_EQ(a.qk_norm, b.qk_norm) << shipped;
    EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type) << shipped;
    EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor) << shipped;
    EXPECT_EQ(a.rope_scaling.original_seq_len, b.rope_scaling.original_seq_len) << shipped;
    EXPECT_EQ(a.moe.enabled, b.moe.enabled) << shipped;
    EXPECT_EQ(a.moe.experts, b.moe.experts) << shipped;
    EXPECT_EQ(a.moe.top_k, b.moe.top_k) << shipped;
    EXPECT_EQ(a.moe.ffn_hidden, b.moe.ffn_hidden) << shipped;
    EXPECT_EQ(a.moe.norm_topk, b.moe.norm_topk) << shipped;
    EXPECT_EQ(a.seq_len, 4096) << shipped;  // the positions, at most 4096
    for (int64_t l = 0; l < a.layers; ++l) EXPECT_EQ(a.window(l), b.window(l)) << shipped << " layer " << l;
    EXPECT_EQ(a.attention_sinks, b.attention_sinks) << shipped;
    EXPECT_EQ(a.moe.router_bias, b.moe.router_bias) << shipped;
    EXPECT_EQ(a.moe.expert_bias, b.moe.expert_bias) << shipped;
    EXPECT_EQ(a.moe.activation, b.moe.activation) << shipped;
    EXPECT_EQ(a.rope_scaling.truncate, b.rope_scaling.truncate) << shipped;
  }
  // gpt-oss: 128 tokens on every other layer from the first; its parameters (the released 116.8B)
  const Recipe oss = load_recipe(std::string(TRIDENT_SOURCE_DIR) + "/configs/gpt-oss-120b.yaml", {}, 1);
  EXPECT_EQ(oss.model.window(0), 128);
  EXPECT_EQ(oss.model.window(1), 0);
  EXPECT_EQ(model::ParamRegistry(oss.model).total(), 116829156672);
  // DeepSeek-V3 as released: with its multi-token prediction module when the checkpoint holds it; Kimi-K2's
  // config names DeepSeek-V3's architecture model_type kimi_k2
  const Recipe ds = load_recipe_text_on_one_process(recipe_from_hf_config("config.json", deepseek, true), "r.yaml");
  EXPECT_EQ(ds.model.mtp.depth, 1);
  EXPECT_EQ(ds.model.mla.q_lora_rank, 1536);
  EXPECT_EQ(ds.model.moe.groups, 8);
  EXPECT_EQ(ds.model.rope_scaling.mscale_all_dim, 1.0);
  nlohmann::json kimi = deepseek;
  kimi["model_type"] = "kimi_k2";
  EXPECT_NO_THROW(check_hf_config("config.json", kimi, ds));
  // a model_type Trident has no family for is refused naming the key
  nlohmann::json other = llama;
  other["model_type"] = "falcon";
  try {
    recipe_from_hf_config("config.json", other);
    ADD_FAILURE() << "falcon derived a recipe";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'model_type'"), std::string::npos) << e.what();
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
