// One description of each architecture: a table of its parameters and the
// few choices its math makes. Adding an architecture means adding a table
// here (and its name to core/enums.hpp); everything below reads the rows:
//   - the parameter registry: names, shapes, kinds, initialisation (params.cpp)
//   - the tensor-parallel plan: each parameter's shard style (parallel_plan.cpp)
//   - the transformer: which pointer each parameter binds to, and how many
//     parameters a segment (embedding, layer, head) holds (transformer.cpp)
//   - Hugging Face interop: which weights transformers stores transposed (launch/checkpoint/hf.cpp)
//   - FLOPs and activation sizes: the MLP's input width (model/memory.cpp)
// Rows are in the flat buffer's order. A layer row's name is the suffix after
// the layer prefix ("attn.c_attn.weight"); embedding and head rows carry the
// whole name.
// Shapes: C hidden, F ffn_hidden, V the padded vocabulary, T seq_len, D head
// size, H heads, KV key/value heads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"
#include "model/parallel_plan.hpp"

namespace trident::model {

// buffer: state the optimizer leaves alone (no gradient, no decay): the MoE
// router's correction bias, moved by counts (docs/moe.md).
enum class ParamKind { weight, bias, norm, embedding, buffer };
enum class InitKind { normal, zeros, ones };

enum class Part { embedding, layer, head };

// The pointer the transformer reads a parameter through. The first
// kLayerSlots are a layer's, in LayerParams order; `fused` continues the previous row's
// storage (LLaMA's k_proj and v_proj after q_proj form the fused QKV weight,
// up_proj after gate_proj the SwiGLU input weight).
enum class Slot {
  norm1_weight,
  norm1_bias,
  qkv_weight,
  qkv_bias,
  attn_out_weight,
  attn_out_bias,
  norm2_weight,
  norm2_bias,
  mlp_in_weight,
  mlp_in_bias,
  mlp_out_weight,
  mlp_out_bias,
  router_weight,       // MoE: mlp.gate.weight [E, C]
  router_bias,         // MoE: the correction bias [E]
  experts_in_weight,   // MoE: [E, 2I, C], each expert's gate | up
  experts_out_weight,  // MoE: [E, C, I]
  shared_gate_weight,  // MoE: Qwen2-MoE's shared-expert gate [1, C]
  q_norm_weight,       // QK-norm (Qwen3): [D]
  k_norm_weight,       // [D]
  // multi-head latent attention (model.attention: mla; the query projection
  // q_proj / q_b_proj is qkv_weight, o_proj attn_out_weight)
  q_down_weight,   // q_a_proj [QL, C]
  q_down_norm,     // q_a_layernorm [QL]
  kv_down_weight,  // kv_a_proj_with_mqa [KL + Dr, C]: the latent's rows, then the shared rotary key's
  kv_down_norm,    // kv_a_layernorm [KL]
  kv_up_weight,    // kv_b_proj [H (Dn + Dv), KL]: each head's key part and value
  // multi-token prediction (model.mtp): a depth's module is a layer (index
  // layers + k - 1) with these too
  mtp_embed_norm,     // enorm [C]
  mtp_hidden_norm,    // hnorm [C]
  mtp_proj,           // eh_proj [C, 2C]: the normalised embedding's columns, then the hidden state's
  mtp_head_norm,      // shared_head.norm [C]: before the shared LM head
  attn_sinks,         // model.attention_sinks (gpt-oss): self_attn.sinks [H]
  router_logit_bias,  // model.moe.router.bias (gpt-oss): mlp.gate.bias [E]
  experts_in_bias,    // model.moe.expert_bias (gpt-oss): [E, 2I], each expert's gate | up
  experts_out_bias,   // [E, C]
  token_table,
  positions,
  final_norm_weight,
  final_norm_bias,
  lm_head,
  fused
};
inline constexpr int kLayerSlots = 32;

// A shape term: the product of the model sizes it names.
// MoE: E experts, I each one's width, S the shared experts' width.
// HD: H query heads of their size (MLA: Dn + Dr); HV: H value heads (the
// attention output). MLA: QL q_lora_rank, KL kv_lora_rank, KVA = KL + Dr,
// HKV = H (Dn + Dv).
enum class Dim { one, C, two_C, F, V, T, H, HD, HV, KVD, three_C, E, I, EC, two_EI, S, D, QL, KL, KVA, HKV };

// Which layers hold a layer row: all, the dense ones, or the MoE ones (all
// of them, or those with shared experts, the shared-expert gate, the
// router's correction bias), by ModelConfig::moe.
// standard: grouped-query attention's; q_full: its query projection, or
// MLA's without a query latent; mla: MLA's; mla_q_lora: MLA's query latent.
enum class LayerUse {
  all,
  dense,
  moe,
  moe_shared,
  moe_shared_gate,
  moe_bias,
  qk_norm,
  standard,
  q_full,
  mla,
  mla_q_lora,
  attention_bias,   // model.attention_bias
  o_bias,           // model.o_bias
  sinks,            // model.attention_sinks
  moe_router_bias,  // model.moe.router.bias
  moe_expert_bias,  // model.moe.expert_bias
  mtp               // a multi-token prediction module's (layer index >= layers)
};

enum class NormKind { layer_norm, rms_norm };
enum class MlpKind { gelu, swiglu };  // swiglu: the input weight is [2F, C] (gate | up)
enum class Positions { learned, rotary };

struct ParamRow {
  Part part;
  const char* name;
  Slot slot;
  Dim rows, cols = Dim::one;  // cols = one: a vector
  ParamKind kind;
  InitKind init;
  bool residual_std = false;  // GPT-2's residual projections: init_std / sqrt(2 layers)
  PlanEntry plan;
  bool hf_transposed = false;  // transformers' Conv1D: stored [in, out]
  bool untied_only = false;    // the LM head: only without tied embeddings
  LayerUse use = LayerUse::all;
  // Computed from the full rows on every tensor rank (the MoE router and
  // shared-expert gate read the gathered input): its gradient is complete on
  // each rank, never summed over the tensor group.
  bool all_rows = false;
  // Read by this rank's heads only (QK-norm's weights, shared by every
  // head): each tensor rank's gradient covers its heads, so it is summed over
  // the tensor group with or without sequence parallelism.
  bool head_partial = false;
};

struct Architecture {
  Arch arch;
  const char* layer_prefix;  // with the layer index: "transformer.h.{}."
  const char* hf_class;      // transformers' model class
  NormKind norm;
  MlpKind mlp;
  Positions positions;
  std::vector<ParamRow> rows;

  std::vector<const ParamRow*> part(Part p) const;
  const ParamRow& token_table() const;  // the embedding row of the vocabulary
  // The row of a global parameter name (a layer's by its suffix); nullptr if none.
  const ParamRow* find(const std::string& name) const;
  // The layer rows global layer `layer` holds (dense or MoE, by cfg.moe).
  std::vector<const ParamRow*> layer_rows(const ModelConfig& cfg, int64_t layer) const;
  int64_t mlp_in_width(int64_t ffn) const { return mlp == MlpKind::swiglu ? 2 * ffn : ffn; }
};

const Architecture& architecture(Arch arch);
Shape row_shape(const ParamRow& row, const ModelConfig& cfg, int64_t padded_vocab);

}  // namespace trident::model
