// The tensor-parallel plan (see parallel_plan.hpp).
#include "model/parallel_plan.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/architecture.hpp"
#include "parallel/schedule.hpp"

namespace trident::model {

PlanEntry tensor_plan(const ModelConfig& cfg, const std::string& name) {
  if (const ParamRow* row = architecture(cfg.arch).find(name)) {
    PlanEntry e = row->plan;
    if (e.per_expert) e.parts *= int(cfg.moe.experts), e.per_expert = false;
    return e;
  }
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

std::vector<ChunkSpec> pipeline_chunks(const ModelConfig& cfg, int P, int V, const std::vector<int64_t>& list, int rank,
                                       ScheduleKind schedule) {
  const auto counts = chunk_layer_counts(cfg, P, V, list);
  std::vector<ChunkSpec> out;
  for (int v = 0; v < V; ++v) {
    const int c = parallel::global_chunk(schedule, P, v, rank);
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
