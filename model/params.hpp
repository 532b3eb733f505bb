// Parameter registry: every parameter's global name (Hugging Face names of
// GPT2LMHeadModel / LlamaForCausalLM), shape, place in the flat buffer,
// initialisation and optimizer treatment. The model's parameters live in one
// flat buffer in registry order, its gradients in a second of the same layout.
//
// Layout choices (documented in docs/architecture.md):
// - Every linear weight is stored [out, in] (torch.nn.Linear). GPT-2's
//   Conv1D weights are [in, out] in Hugging Face files: export transposes.
// - LLaMA's q_proj, k_proj, v_proj are adjacent, so together they are the
//   fused [(H + 2 KV) D, C] QKV weight; gate_proj and up_proj likewise form
//   the [2F, C] gate|up weight. One GEMM each, no copies.
// - With tensor parallelism each rank's registry describes its slice of every
//   parameter (model/parallel_plan.hpp): local shape and offset in this
//   rank's flat buffer, and where the slice sits in the global tensor. The
//   global tensor has the padded vocabulary (ModelConfig::padded_vocab).
//   Every tensor rank's layout has the same shapes in the same order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"
#include "kernels/adamw.hpp"
#include "model/architecture.hpp"
#include "model/parallel_plan.hpp"

namespace trident::model {

// Who else holds the same values as this rank's slice.
enum class Replication { none, tensor, kv_group };

struct ParamSpec {
  std::string name;
  Shape shape;         // this rank's slice
  int64_t offset = 0;  // in elements, into this rank's flat buffer
  int64_t numel = 0;
  ParamKind kind = ParamKind::weight;
  InitKind init = InitKind::normal;
  double init_std = 0;
  // Place in the global tensor, seen as [rows, cols] (a vector: cols = 1):
  // this rank holds the global rows of row_ranges (in local order) and the
  // columns [col_begin, col_begin + local cols).
  Shape global_shape;
  int64_t valid_rows = 0;  // global rows that are real (the rest: vocabulary padding)
  std::vector<std::pair<int64_t, int64_t>> row_ranges;
  int64_t col_begin = 0;
  ShardStyle style = ShardStyle::replicate;
  Replication replication = Replication::none;
  bool counts_in_norm = true;  // false on all but one holder of a replicated slice
  bool tied_copy = false;      // the last pipeline stage's copy of the tied token embedding
  bool token_table = false;    // the token embedding (or its tied copy)
  bool vocab_rows = false;     // rows are the (padded) vocabulary: the token table, the LM head
  bool all_rows = false;       // computed from every token row on each tensor rank (ParamRow::all_rows)
  bool router = false;         // the MoE router's weight or correction bias
  bool head_partial = false;   // each tensor rank's gradient covers its heads (ParamRow::head_partial)
  // dimension 0 is E equal blocks, one an expert (the routed experts'
  // weights): with expert parallelism this rank holds its experts' blocks
  bool expert_major = false;
  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
  int64_t global_cols() const { return global_shape.size() > 1 ? global_shape[1] : 1; }
  // Global element index of local element e.
  int64_t global_index(int64_t e) const;
};

// A routed expert's weight: dimension 0 holds E blocks, one per expert.
bool is_expert_major(const ParamRow& row);

class ParamRegistry {
 public:
  // chunks: the pipeline chunks this rank holds (empty: the whole model).
  // A chunk with the head but without the embedding gets a copy of a tied
  // embedding (same name; tied_copy), kept equal by the trainer.
  // experts: this rank's share of each MoE layer's experts (the expert-major
  // weights hold only its experts' rows, after every other parameter:
  // expert_begin(); everything else as without it).
  explicit ParamRegistry(const ModelConfig& cfg, TensorShard shard = {}, std::vector<ChunkSpec> chunks = {},
                         ExpertShard experts = {});
  TensorShard shard() const { return shard_; }
  ExpertShard experts() const { return experts_; }
  const std::vector<ChunkSpec>& chunks() const { return chunks_; }
  // The parameter of this name whose storage lies in [begin, end).
  const ParamSpec& find(const std::string& name, int64_t begin, int64_t end) const;
  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec& at(const std::string& name) const;
  int64_t total() const { return total_; }
  // Where the expert part of the flat buffer begins: with experts split over
  // ranks (ExpertShard size > 1) every routed expert's weights come after
  // all other parameters, [expert_begin, total); else total (no expert part).
  int64_t expert_begin() const { return expert_begin_; }
  // Fills buf (this registry's layout) from Philox keyed by (seed, name).
  template <typename T>
  void initialize(T* buf, uint64_t seed) const {
    initialize_range(buf, 0, total_, seed);
  }
  // Elements [begin, end) of the flat buffer into dst (dst[0] = element
  // begin): a ZeRO shard generates exactly the single-rank model's values.
  template <typename T>
  void initialize_range(T* dst, int64_t begin, int64_t end, uint64_t seed) const;

 private:
  void add(std::string name, const ParamRow& row, const ModelConfig& cfg);
  void apply_plan(const ModelConfig& cfg);
  std::vector<ParamSpec> params_;
  int64_t total_ = 0, expert_begin_ = 0;
  TensorShard shard_;
  std::vector<ChunkSpec> chunks_;
  ExpertShard experts_;
};

// The Hugging Face layout: every parameter whole, vocabulary padding
// stripped, in the whole model's registry order. consolidate() assembles it
// from the flat buffers of ranks that together hold every slice (each with
// its registry: every tensor rank of every pipeline stage); tied copies are
// skipped. The tensor-only form takes the buffers of tensor ranks 0..t-1.
int64_t consolidated_numel(const ModelConfig& cfg);
template <typename T>
void consolidate(T* out, const ModelConfig& cfg, const std::vector<std::pair<const ParamRegistry*, const T*>>& parts);
template <typename T>
void consolidate(T* out, const ModelConfig& cfg, const std::vector<const T*>& rank_buffers);

// Ranges [begin, end) of this rank's flat buffer whose gradients other ranks
// share (parallel/data_parallel.hpp): the tied token table when the first and
// last pipeline stage each hold a copy; slices replicated over the tensor
// group (norms, row-parallel biases: only under sequence parallelism do the
// ranks see different rows; QK-norm's weights always, each rank holding its
// heads); replicated KV heads.
struct SharedGradientRanges {
  std::vector<std::pair<int64_t, int64_t>> tied, tensor_replicated, kv_replicated;
};
SharedGradientRanges shared_gradient_ranges(const ParamRegistry& reg, const ModelConfig& cfg, int pipeline_stages,
                                            bool sequence_parallel);

// Per-layer names, so model code reads like the architecture.
std::string layer_prefix(const ModelConfig& cfg, int64_t layer);

// AdamW's ranges over the flat buffer: maximal runs of consecutive
// parameters with the same weight-decay choice, each with its decay
// (cfg.weight_decay, or 0). By default norms, biases and embeddings take no
// weight decay (Megatron-LM and nanoGPT practice);
// optim.decay_norms_and_biases / decay_embeddings turn it on. A tied
// embedding follows the embedding rule.
// The MoE correction biases (ParamKind::buffer) are left out: AdamW never
// touches them (bias_ranges).
std::vector<kernels::AdamWRange> decay_ranges(const ParamRegistry& reg, const OptimConfig& cfg);

// Muon's matrices (optim.name muon, docs/optim.md#muon): the hidden 2-D
// weights, as the logical matrices Muon orthogonalises one by one, in the
// flat buffer's order, those of this rank's parameters in [begin, end).
// Attention's q, k and v are matrices of their own (GPT-2's fused c_attn
// split in three); an expert's gate, up and down one each (the [E, 2I, C]
// and [E, C, I] weights split); MLA's down and up projections one each. Not
// Muon's: embeddings, the LM head, norms, biases, routers, the shared-expert
// gate, multi-token prediction's eh_proj. sliced: the tensor group holds
// slices of them, and held[r] gives tensor rank r's blocks (every tensor
// rank's registry has the same shapes and offsets); else held has this
// rank's blocks only (experts whole on their rank).
std::vector<kernels::MuonMatrix> muon_matrices(const ParamRegistry& reg, const ModelConfig& cfg, int64_t begin,
                                               int64_t end, bool sliced);
// ranges without the elements of held[slice] of the matrices (AdamW's share under Muon).
std::vector<kernels::AdamWRange> without_matrices(const std::vector<kernels::AdamWRange>& ranges,
                                                  const std::vector<kernels::MuonMatrix>& matrices, int slice);

// The MoE layers' correction biases and their update (kernels::BiasRange):
// moved by model.moe.balance.bias_rate from the step's counts, whose mean is
// global_batch x seq_len x top_k / experts. Empty when bias_rate is 0.
std::vector<kernels::BiasRange> bias_ranges(const ParamRegistry& reg, const Recipe& rc);

// The runs of elements of [begin, end) that count in the gradient norm,
// relative to begin: parameters replicated over the tensor group (or a KV
// group) count on one holder only (ParamSpec::counts_in_norm), so the sum
// over ranks counts each once.
std::vector<std::pair<int64_t, int64_t>> norm_counted_runs(const ParamRegistry& reg, int64_t begin, int64_t end);

}  // namespace trident::model
