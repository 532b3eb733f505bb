// GPT-2 and LLaMA, as tables (see architecture.hpp).
#include "model/architecture.hpp"

#include "core/error.hpp"

namespace trident::model {
namespace {

using S = ShardStyle;
using P = Part;
using K = ParamKind;
using I = InitKind;
using U = LayerUse;

const Architecture kGpt2{
    Arch::gpt2,
    "transformer.h.{}.",
    "GPT2LMHeadModel",
    NormKind::layer_norm,
    MlpKind::gelu,
    Positions::learned,
    {
        {P::embedding,
         "transformer.wte.weight",
         Slot::token_table,
         Dim::V,
         Dim::C,
         K::embedding,
         I::normal,
         false,
         {S::vocab}},
        {P::embedding,
         "transformer.wpe.weight",
         Slot::positions,
         Dim::T,
         Dim::C,
         K::embedding,
         I::normal,
         false,
         {S::replicate}},
        {P::layer, "ln_1.weight", Slot::norm1_weight, Dim::C, Dim::one, K::norm, I::ones, false, {S::replicate}},
        {P::layer, "ln_1.bias", Slot::norm1_bias, Dim::C, Dim::one, K::bias, I::zeros, false, {S::replicate}},
        {P::layer,
         "attn.c_attn.weight",
         Slot::qkv_weight,
         Dim::three_C,
         Dim::C,
         K::weight,
         I::normal,
         false,
         {S::column, 3},
         true},
        {P::layer,
         "attn.c_attn.bias",
         Slot::qkv_bias,
         Dim::three_C,
         Dim::one,
         K::bias,
         I::zeros,
         false,
         {S::column, 3}},
        {P::layer,
         "attn.c_proj.weight",
         Slot::attn_out_weight,
         Dim::C,
         Dim::C,
         K::weight,
         I::normal,
         true,
         {S::row},
         true},
        {P::layer, "attn.c_proj.bias", Slot::attn_out_bias, Dim::C, Dim::one, K::bias, I::zeros, false, {S::replicate}},
        {P::layer, "ln_2.weight", Slot::norm2_weight, Dim::C, Dim::one, K::norm, I::ones, false, {S::replicate}},
        {P::layer, "ln_2.bias", Slot::norm2_bias, Dim::C, Dim::one, K::bias, I::zeros, false, {S::replicate}},
        {P::layer,
         "mlp.c_fc.weight",
         Slot::mlp_in_weight,
         Dim::F,
         Dim::C,
         K::weight,
         I::normal,
         false,
         {S::column},
         true},
        {P::layer, "mlp.c_fc.bias", Slot::mlp_in_bias, Dim::F, Dim::one, K::bias, I::zeros, false, {S::column}},
        {P::layer,
         "mlp.c_proj.weight",
         Slot::mlp_out_weight,
         Dim::C,
         Dim::F,
         K::weight,
         I::normal,
         true,
         {S::row},
         true},
        {P::layer, "mlp.c_proj.bias", Slot::mlp_out_bias, Dim::C, Dim::one, K::bias, I::zeros, false, {S::replicate}},
        {P::head,
         "transformer.ln_f.weight",
         Slot::final_norm_weight,
         Dim::C,
         Dim::one,
         K::norm,
         I::ones,
         false,
         {S::replicate}},
        {P::head,
         "transformer.ln_f.bias",
         Slot::final_norm_bias,
         Dim::C,
         Dim::one,
         K::bias,
         I::zeros,
         false,
         {S::replicate}},
        {P::head,
         "lm_head.weight",
         Slot::lm_head,
         Dim::V,
         Dim::C,
         K::weight,
         I::normal,
         false,
         {S::vocab},
         false,
         true},
    }};

const Architecture kLlama{Arch::llama,
                          "model.layers.{}.",
                          "LlamaForCausalLM",
                          NormKind::rms_norm,
                          MlpKind::swiglu,
                          Positions::rotary,
                          {
                              {P::embedding,
                               "model.embed_tokens.weight",
                               Slot::token_table,
                               Dim::V,
                               Dim::C,
                               K::embedding,
                               I::normal,
                               false,
                               {S::vocab}},
                              {P::layer,
                               "input_layernorm.weight",
                               Slot::norm1_weight,
                               Dim::C,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate}},
                              // multi-head latent attention: the latents are computed on every tensor rank
                              // from all rows; each rank's gradient covers its heads (head_partial)
                              {P::layer,
                               "self_attn.q_a_proj.weight",
                               Slot::q_down_weight,
                               Dim::QL,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mla_q_lora,
                               false,
                               true},
                              {P::layer,
                               "self_attn.q_a_layernorm.weight",
                               Slot::q_down_norm,
                               Dim::QL,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mla_q_lora,
                               false,
                               true},
                              {P::layer,
                               "self_attn.q_proj.weight",
                               Slot::qkv_weight,
                               Dim::HD,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column},
                               false,
                               false,
                               U::q_full},
                              {P::layer,
                               "self_attn.q_b_proj.weight",
                               Slot::qkv_weight,
                               Dim::HD,
                               Dim::QL,
                               K::weight,
                               I::normal,
                               false,
                               {S::column},
                               false,
                               false,
                               U::mla_q_lora},
                              {P::layer,
                               "self_attn.k_proj.weight",
                               Slot::fused,
                               Dim::KVD,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column_kv},
                               false,
                               false,
                               U::standard},
                              {P::layer,
                               "self_attn.v_proj.weight",
                               Slot::fused,
                               Dim::KVD,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column_kv},
                               false,
                               false,
                               U::standard},
                              {P::layer,
                               "self_attn.kv_a_proj_with_mqa.weight",
                               Slot::kv_down_weight,
                               Dim::KVA,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mla,
                               false,
                               true},
                              {P::layer,
                               "self_attn.kv_a_layernorm.weight",
                               Slot::kv_down_norm,
                               Dim::KL,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mla,
                               false,
                               true},
                              {P::layer,
                               "self_attn.kv_b_proj.weight",
                               Slot::kv_up_weight,
                               Dim::HKV,
                               Dim::KL,
                               K::weight,
                               I::normal,
                               false,
                               {S::column},
                               false,
                               false,
                               U::mla},
                              {P::layer,
                               "self_attn.o_proj.weight",
                               Slot::attn_out_weight,
                               Dim::C,
                               Dim::HV,
                               K::weight,
                               I::normal,
                               false,
                               {S::row}},
                              {P::layer,
                               "self_attn.q_norm.weight",
                               Slot::q_norm_weight,
                               Dim::D,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::qk_norm,
                               false,
                               true},
                              {P::layer,
                               "self_attn.k_norm.weight",
                               Slot::k_norm_weight,
                               Dim::D,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::qk_norm,
                               false,
                               true},
                              {P::layer,
                               "post_attention_layernorm.weight",
                               Slot::norm2_weight,
                               Dim::C,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate}},
                              {P::layer,
                               "mlp.gate_proj.weight",
                               Slot::mlp_in_weight,
                               Dim::F,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column},
                               false,
                               false,
                               U::dense},
                              {P::layer,
                               "mlp.up_proj.weight",
                               Slot::fused,
                               Dim::F,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column},
                               false,
                               false,
                               U::dense},
                              {P::layer,
                               "mlp.down_proj.weight",
                               Slot::mlp_out_weight,
                               Dim::C,
                               Dim::F,
                               K::weight,
                               I::normal,
                               false,
                               {S::row},
                               false,
                               false,
                               U::dense},
                              // MoE layers (transformers 5's runtime names; docs/moe.md)
                              {P::layer,
                               "mlp.gate.weight",
                               Slot::router_weight,
                               Dim::E,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::moe,
                               true},
                              {P::layer,
                               "mlp.gate.e_score_correction_bias",
                               Slot::router_bias,
                               Dim::E,
                               Dim::one,
                               K::buffer,
                               I::zeros,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::moe_bias,
                               true},
                              {P::layer,
                               "mlp.experts.gate_up_proj",
                               Slot::experts_in_weight,
                               Dim::two_EI,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column, 2, true},
                               false,
                               false,
                               U::moe},
                              {P::layer,
                               "mlp.experts.down_proj",
                               Slot::experts_out_weight,
                               Dim::EC,
                               Dim::I,
                               K::weight,
                               I::normal,
                               false,
                               {S::row},
                               false,
                               false,
                               U::moe},
                              {P::layer,
                               "mlp.shared_experts.gate_proj.weight",
                               Slot::mlp_in_weight,
                               Dim::S,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column},
                               false,
                               false,
                               U::moe_shared},
                              {P::layer,
                               "mlp.shared_experts.up_proj.weight",
                               Slot::fused,
                               Dim::S,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::column},
                               false,
                               false,
                               U::moe_shared},
                              {P::layer,
                               "mlp.shared_experts.down_proj.weight",
                               Slot::mlp_out_weight,
                               Dim::C,
                               Dim::S,
                               K::weight,
                               I::normal,
                               false,
                               {S::row},
                               false,
                               false,
                               U::moe_shared},
                              {P::layer,
                               "mlp.shared_expert_gate.weight",
                               Slot::shared_gate_weight,
                               Dim::one,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::moe_shared_gate,
                               true},
                              // multi-token prediction: each module's own (model.layers.{layers + k - 1}.)
                              {P::layer,
                               "enorm.weight",
                               Slot::mtp_embed_norm,
                               Dim::C,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mtp},
                              {P::layer,
                               "hnorm.weight",
                               Slot::mtp_hidden_norm,
                               Dim::C,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mtp},
                              {P::layer,
                               "eh_proj.weight",
                               Slot::mtp_proj,
                               Dim::C,
                               Dim::two_C,
                               K::weight,
                               I::normal,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mtp},
                              {P::layer,
                               "shared_head.norm.weight",
                               Slot::mtp_head_norm,
                               Dim::C,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate},
                               false,
                               false,
                               U::mtp},
                              {P::head,
                               "model.norm.weight",
                               Slot::final_norm_weight,
                               Dim::C,
                               Dim::one,
                               K::norm,
                               I::ones,
                               false,
                               {S::replicate}},
                              {P::head,
                               "lm_head.weight",
                               Slot::lm_head,
                               Dim::V,
                               Dim::C,
                               K::weight,
                               I::normal,
                               false,
                               {S::vocab},
                               false,
                               true},
                          }};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t size_of(Dim d, const ModelConfig& m, int64_t V) {
  switch (d) {
    case Dim::one:
      return 1;
    case Dim::C:
      return m.hidden;
    case Dim::two_C:
      return 2 * m.hidden;
    case Dim::F:
      return m.ffn_hidden;
    case Dim::V:
      return V;
    case Dim::T:
      return m.seq_len;
    case Dim::HD:
      return m.heads * m.q_head_dim();
    case Dim::HV:
      return m.heads * m.v_head_dim();
    case Dim::QL:
      return m.mla.q_lora_rank;
    case Dim::KL:
      return m.mla.kv_lora_rank;
    case Dim::KVA:
      return m.mla.kv_lora_rank + m.mla.qk_rope_head_dim;
    case Dim::HKV:
      return m.heads * (m.mla.qk_nope_head_dim + m.mla.v_head_dim);
    case Dim::KVD:
      return m.kv_heads * m.head_dim();
    case Dim::three_C:
      return 3 * m.hidden;
    case Dim::E:
      return m.moe.experts;
    case Dim::I:
      return m.moe.ffn_hidden;
    case Dim::EC:
      return m.moe.experts * m.hidden;
    case Dim::two_EI:
      return 2 * m.moe.experts * m.moe.ffn_hidden;
    case Dim::S:
      return m.moe.shared_width();
    case Dim::D:
      return m.head_dim();
  }
  return 0;
}

}  // namespace

const Architecture& architecture(Arch arch) { return arch == Arch::gpt2 ? kGpt2 : kLlama; }

std::vector<const ParamRow*> Architecture::part(Part p) const {
  std::vector<const ParamRow*> out;
  for (const auto& r : rows)
    if (r.part == p) out.push_back(&r);
  return out;
}

const ParamRow& Architecture::token_table() const {
  for (const auto& r : rows)
    if (r.slot == Slot::token_table) return r;
  throw Error(fmt::format("architecture {} has no token table", arch));
}

const ParamRow* Architecture::find(const std::string& name) const {
  for (const auto& r : rows)
    if (r.part == Part::layer ? ends_with(name, std::string(".") + r.name) : name == r.name) return &r;
  return nullptr;
}

std::vector<const ParamRow*> Architecture::layer_rows(const ModelConfig& cfg, int64_t layer) const {
  const MoeConfig& e = cfg.moe;
  const bool moe = e.is_moe(layer);
  std::vector<const ParamRow*> out;
  for (const auto& r : rows) {
    if (r.part != Part::layer) continue;
    bool held = false;
    switch (r.use) {
      case LayerUse::all:
        held = true;
        break;
      case LayerUse::dense:
        held = !moe;
        break;
      case LayerUse::moe:
        held = moe;
        break;
      case LayerUse::moe_shared:
        held = moe && e.shared_experts > 0;
        break;
      case LayerUse::moe_shared_gate:
        held = moe && e.shared_expert_gate;
        break;
      case LayerUse::moe_bias:
        held = moe && e.has_bias();
        break;
      case LayerUse::qk_norm:
        held = cfg.qk_norm;
        break;
      case LayerUse::standard:
        held = !cfg.is_mla();
        break;
      case LayerUse::q_full:
        held = !cfg.is_mla() || cfg.mla.q_lora_rank == 0;
        break;
      case LayerUse::mla:
        held = cfg.is_mla();
        break;
      case LayerUse::mla_q_lora:
        held = cfg.is_mla() && cfg.mla.q_lora_rank > 0;
        break;
      case LayerUse::mtp:
        held = layer >= cfg.layers;
        break;
    }
    if (held) out.push_back(&r);
  }
  return out;
}

Shape row_shape(const ParamRow& row, const ModelConfig& cfg, int64_t padded_vocab) {
  const int64_t rows = size_of(row.rows, cfg, padded_vocab);
  if (row.cols == Dim::one) return {rows};
  return {rows, size_of(row.cols, cfg, padded_vocab)};
}

}  // namespace trident::model
