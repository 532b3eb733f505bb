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
//   mistral    mistral     MistralForCausalLM       llama's model with a sliding window on every layer
//   gpt_oss    gpt_oss     GptOssForCausalLM        attention sinks, biases on q, k, v, o, the router and the
//                                                   experts, the clamped SwiGLU, softmax over the top k, every
//                                                   layer MoE; its experts stored [E, C, 2I] with gate and up
//                                                   interleaved, [E, I, C] (HfLayout)
// Sliding windows (model.sliding_window, model.layer_types): mistral and
// mixtral window every layer; qwen2, qwen3, qwen2_moe and qwen3_moe take
// use_sliding_window with layer_types; gpt_oss its layer_types.
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

enum class HfFamily {
  gpt2,
  llama,
  qwen2,
  qwen3,
  mixtral,
  qwen2_moe,
  qwen3_moe,
  glm4_moe,
  deepseek_v3,
  mistral,
  gpt_oss
};

// How a transformers tensor's elements sit relative to Trident's parameter,
// seen as [E, R, K] (E experts of R rows of K):
//   same                          element for element
//   transposed                    theirs [E, K, R] (gpt-oss's down_proj [E, I, C])
//   interleaved_rows              theirs [E, R, K] with the two halves of R
//                                 interleaved: ours row j < R/2 is their row 2j,
//                                 row R/2 + j their row 2j + 1 (gpt-oss's gate | up
//                                 as its biases and MXFP4 blocks hold them)
//   interleaved_rows_transposed   theirs [E, K, R], interleaved so (gpt-oss's gate_up_proj)
enum class HfLayout { same, transposed, interleaved_rows, interleaved_rows_transposed };

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
  HfLayout layout = HfLayout::same;
  int64_t E = 1, R = 0, K = 1;  // the [E, R, K] view of a layout other than same
};

// Their flat index of our element (e, r, k) of [E, R, K], by the piece's layout.
inline int64_t hf_index(const HfPiece& p, int64_t e, int64_t r, int64_t k) {
  const bool interleaved = p.layout == HfLayout::interleaved_rows || p.layout == HfLayout::interleaved_rows_transposed;
  const bool transposed = p.layout == HfLayout::transposed || p.layout == HfLayout::interleaved_rows_transposed;
  const int64_t half = p.R / 2, t = interleaved ? (r < half ? 2 * r : 2 * (r - half) + 1) : r;
  return transposed ? (e * p.K + k) * p.R + t : (e * p.R + t) * p.K + k;
}
// ours [E, R, K] <- theirs (import); theirs <- ours (export).
template <typename F>
void hf_layout_in(F* ours, const F* theirs, const HfPiece& p) {
  for (int64_t e = 0; e < p.E; ++e)
    for (int64_t r = 0; r < p.R; ++r)
      for (int64_t k = 0; k < p.K; ++k) ours[(e * p.R + r) * p.K + k] = theirs[hf_index(p, e, r, k)];
}
template <typename F>
void hf_layout_out(F* theirs, const F* ours, const HfPiece& p) {
  for (int64_t e = 0; e < p.E; ++e)
    for (int64_t r = 0; r < p.R; ++r)
      for (int64_t k = 0; k < p.K; ++k) theirs[hf_index(p, e, r, k)] = ours[(e * p.R + r) * p.K + k];
}
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
