// Questions about an architecture's parameter rows: which a layer holds,
// their shapes, lookup by name (the tables: architecture_tables.cpp).
#include "model/architecture.hpp"

#include "core/error.hpp"

namespace trident::model {
namespace {

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
    case Dim::H:
      return m.heads;
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
      case LayerUse::attention_bias:
        held = cfg.attention_bias && !cfg.is_mla();
        break;
      case LayerUse::o_bias:
        held = cfg.o_bias && !cfg.is_mla();
        break;
      case LayerUse::sinks:
        held = cfg.attention_sinks;
        break;
      case LayerUse::moe_router_bias:
        held = moe && e.router_bias;
        break;
      case LayerUse::moe_expert_bias:
        held = moe && e.expert_bias;
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
