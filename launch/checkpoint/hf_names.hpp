// The transformers families a Trident model is, and the tensors each stores
// a parameter as (docs/checkpoint.md#hugging-face, docs/moe.md).
//
//   family     model_type  transformers class       which models
//   gpt2       gpt2        GPT2LMHeadModel          arch gpt2
//   llama      llama       LlamaForCausalLM         arch llama, dense
//   qwen3      qwen3       Qwen3ForCausalLM         dense with model.qk_norm
//   mixtral    mixtral     MixtralForCausalLM       every layer MoE, softmax top-k renormalised, no shared experts
//   qwen2_moe  qwen2_moe   Qwen2MoeForCausalLM      softmax, one gated shared expert, decoder_sparse_step /
//                                                   mlp_only_layers
//   qwen3_moe  qwen3_moe   Qwen3MoeForCausalLM      softmax with QK-norm, no shared experts, decoder_sparse_step /
//                                                   mlp_only_layers
//   glm4_moe   glm4_moe    Glm4MoeForCausalLM       sigmoid routing with the correction bias, groups, scaling,
//                                                   ungated shared experts, first_k_dense_replace (DeepSeek-V3
//                                                   routing on standard attention, full rotary; QK-norm
//                                                   optional: use_qk_norm)
//   deepseek_v3 deepseek_v3 DeepseekV3ForCausalLM   model.attention: mla with glm4_moe's MoE (docs/mla.md)
//
// Export writes the hub layout (one tensor per expert: Mixtral's
// block_sparse_moe.experts.N.w1 / w3 / w2, the others' mlp.experts.N.gate_proj
// / up_proj / down_proj); import reads that layout or transformers 5's fused
// one (mlp.experts.gate_up_proj [E, 2I, C], mlp.experts.down_proj [E, C, I],
// Mixtral's router as mlp.gate.weight).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"
#include "model/params.hpp"

namespace trident::launch {

enum class HfFamily { gpt2, llama, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, glm4_moe, deepseek_v3 };

// The family of the recipe's model; an MoE model no family can hold is an
// InputError naming the model.moe key that rules each out.
HfFamily hf_family(const Recipe& rc);
const char* hf_model_type(HfFamily f);
const char* hf_class(HfFamily f);
// A config.json's model_type -> its family (nullopt: none of the above).
std::optional<HfFamily> hf_family_of(const std::string& model_type);

// One transformers tensor holding elements [offset, offset + numel(shape))
// of a Trident parameter (whole parameters: offset 0).
struct HfPiece {
  std::string name;
  Shape shape;
  int64_t offset = 0;
};
// The hub layout of a parameter (export writes it; import reads it first).
std::vector<HfPiece> hf_pieces(const ModelConfig& m, HfFamily f, const model::ParamSpec& p, const Shape& hf_shape);
// Another layout import accepts (transformers 5's fused experts, Mixtral's
// router under mlp.); empty when there is none.
std::vector<HfPiece> hf_fused_pieces(const ModelConfig& m, HfFamily f, const model::ParamSpec& p,
                                     const Shape& hf_shape);
// Tensors the family has and Trident's model does not, all zero in a Trident
// model (Qwen2-MoE's q/k/v biases): export writes zeros, import requires them.
std::vector<HfPiece> hf_zero_tensors(const ModelConfig& m, HfFamily f);

}  // namespace trident::launch
