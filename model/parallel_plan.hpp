// The tensor-parallel plan: how each parameter is split over the tensor group
// (torchtitan's parallelize plan, as a table). Model code is written as the
// single-device computation over the local sizes below; the split itself is
// applied by the parameter registry (params.hpp) and the communication is
// done by the region ops (parallel/tensor_parallel.hpp).
//
// Styles (weights are [out, in]):
//   column     rows split: each rank computes a slice of the outputs
//              (QKV, MLP up / gate); `parts` > 1 splits each of that many
//              equal row blocks (GPT-2's fused c_attn: q, k and v; an MoE
//              layer's [E, 2I, C] experts: gate and up of each expert)
//   column_kv  the key/value heads of grouped-query attention: split when
//              there are at least `tensor` of them, replicated over groups
//              of tensor / kv_heads ranks otherwise
//   row        columns split: each rank holds a partial sum of the outputs
//              (attention output, MLP down, the experts' [E, C, I] down)
//   vocab      rows of the padded vocabulary split (embedding, LM head)
//   replicate  every rank holds all of it (norms, biases of row-parallel
//              layers, position embeddings)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"

namespace trident::model {

enum class ShardStyle { replicate, column, column_kv, row, vocab };

struct TensorShard {
  int rank = 0, size = 1;
};
// This rank's place in the expert group (parallel.expert): it holds the
// experts [rank L, (rank + 1) L), L = experts / size, of every MoE layer.
// whole: expert_tensor 1 < tensor, each expert's FFN whole on its rank (not
// split over the tensor group; the tensor ranks hold different experts).
struct ExpertShard {
  int rank = 0, size = 1;
  bool whole = false;
};

struct PlanEntry {
  ShardStyle style = ShardStyle::replicate;
  int parts = 1;
  bool per_expert = false;  // `parts` row blocks in each of the MoE layer's experts (tensor_plan multiplies)
};

// The plan entry of a parameter (by its global name); every parameter of
// both architectures has one.
PlanEntry tensor_plan(const ModelConfig& cfg, const std::string& name);

// One pipeline chunk: consecutive layers, with the embedding (global chunk
// 0) and / or the final norm, head and loss (the last global chunk).
struct ChunkSpec {
  int64_t first_layer = 0, layers = 0;
  bool embedding = true, head = true;
};

// Layers of each of the P x V global chunks: `stage_layers` (its sum must be
// the layer count; validated by the recipe loader) or the even split.
std::vector<int64_t> chunk_layer_counts(const ModelConfig& cfg, int stages, int virtual_stages,
                                        const std::vector<int64_t>& stage_layers);
// The chunks pipeline rank `rank` holds under `schedule`: global chunks
// parallel::global_chunk(schedule, stages, v, rank), v = 0..V-1.
std::vector<ChunkSpec> pipeline_chunks(const ModelConfig& cfg, int stages, int virtual_stages,
                                       const std::vector<int64_t>& stage_layers, int rank, ScheduleKind schedule);

// This rank's share of the model's dimensions.
struct LocalDims {
  int64_t heads, kv_heads, ffn;  // query heads, key/value heads, MLP hidden
  int64_t vocab;                 // rows of the padded vocabulary held
  int64_t vocab_begin;           // global index of the first
  int64_t vocab_valid;           // how many of them are real tokens
};
LocalDims local_dims(const ModelConfig& cfg, TensorShard shard);

}  // namespace trident::model

namespace trident {
TRIDENT_ENUM_NAMES(model::ShardStyle, {model::ShardStyle::replicate, "replicate"},
                   {model::ShardStyle::column, "column"}, {model::ShardStyle::column_kv, "column_kv"},
                   {model::ShardStyle::row, "row"}, {model::ShardStyle::vocab, "vocab"});
}  // namespace trident
