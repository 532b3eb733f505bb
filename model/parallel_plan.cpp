// The tensor-parallel plan (see parallel_plan.hpp).
#include "model/parallel_plan.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trident::model {

const char* shard_style_name(ShardStyle s) {
  switch (s) {
    case ShardStyle::replicate: return "replicate";
    case ShardStyle::column: return "column";
    case ShardStyle::column_kv: return "column_kv";
    case ShardStyle::row: return "row";
    case ShardStyle::vocab: return "vocab";
  }
  return "?";
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

PlanEntry tensor_plan(const ModelConfig& cfg, const std::string& name) {
  struct Rule {
    const char* suffix;
    PlanEntry entry;
  };
  using S = ShardStyle;
  static const Rule kGpt2[] = {
      {"wte.weight", {S::vocab}},         {"wpe.weight", {S::replicate}},      {"ln_1.weight", {S::replicate}},
      {"ln_1.bias", {S::replicate}},      {"attn.c_attn.weight", {S::column, 3}}, {"attn.c_attn.bias", {S::column, 3}},
      {"attn.c_proj.weight", {S::row}},   {"attn.c_proj.bias", {S::replicate}}, {"ln_2.weight", {S::replicate}},
      {"ln_2.bias", {S::replicate}},      {"mlp.c_fc.weight", {S::column}},    {"mlp.c_fc.bias", {S::column}},
      {"mlp.c_proj.weight", {S::row}},    {"mlp.c_proj.bias", {S::replicate}}, {"ln_f.weight", {S::replicate}},
      {"ln_f.bias", {S::replicate}},      {"lm_head.weight", {S::vocab}},
  };
  static const Rule kLlama[] = {
      {"embed_tokens.weight", {S::vocab}},    {"input_layernorm.weight", {S::replicate}},
      {"q_proj.weight", {S::column}},         {"k_proj.weight", {S::column_kv}},
      {"v_proj.weight", {S::column_kv}},      {"o_proj.weight", {S::row}},
      {"post_attention_layernorm.weight", {S::replicate}},
      {"gate_proj.weight", {S::column}},      {"up_proj.weight", {S::column}},
      {"down_proj.weight", {S::row}},         {"model.norm.weight", {S::replicate}},
      {"lm_head.weight", {S::vocab}},
  };
  const bool gpt2 = cfg.arch == "gpt2";
  const Rule* begin = gpt2 ? std::begin(kGpt2) : std::begin(kLlama);
  const Rule* end = gpt2 ? std::end(kGpt2) : std::end(kLlama);
  for (const Rule* r = begin; r != end; ++r)
    if (ends_with(name, r->suffix)) return r->entry;
  throw Error(fmt::format("tensor-parallel plan: no entry for parameter '{}'", name));
}

std::vector<int64_t> chunk_layer_counts(const ModelConfig& cfg, int P, int V, const std::vector<int64_t>& list) {
  if (!list.empty()) {
    TRIDENT_CHECK(int64_t(list.size()) == int64_t(P) * V, "stage layer list has {} entries for {} chunks", list.size(),
                  P * V);
    return list;
  }
  TRIDENT_CHECK(cfg.layers % (int64_t(P) * V) == 0, "layers({}) % chunks({}) != 0", cfg.layers, P * V);
  return std::vector<int64_t>(static_cast<size_t>(P * V), cfg.layers / (P * V));
}

std::vector<ChunkSpec> pipeline_chunks(const ModelConfig& cfg, int P, int V, const std::vector<int64_t>& list,
                                       int rank) {
  const auto counts = chunk_layer_counts(cfg, P, V, list);
  std::vector<ChunkSpec> out;
  for (int v = 0; v < V; ++v) {
    const int c = v * P + rank;
    ChunkSpec spec;
    for (int i = 0; i < c; ++i) spec.first_layer += counts[size_t(i)];
    spec.layers = counts[size_t(c)];
    spec.embedding = c == 0;
    spec.head = c == P * V - 1;
    out.push_back(spec);
  }
  return out;
}

LocalDims local_dims(const ModelConfig& cfg, TensorShard s) {
  LocalDims d;
  d.heads = cfg.heads / s.size;
  d.kv_heads = std::max<int64_t>(cfg.kv_heads / s.size, 1);
  d.ffn = cfg.ffn_hidden / s.size;
  d.vocab = cfg.padded_vocab(s.size) / s.size;
  d.vocab_begin = s.rank * d.vocab;
  d.vocab_valid = std::clamp<int64_t>(cfg.vocab - d.vocab_begin, 0, d.vocab);
  return d;
}

}  // namespace trident::model
