// The checkpoint index (index.json, docs/checkpoint.md): what a step
// directory holds. Written last, read first. Reading checks every key it
// uses: a missing or mistyped key is an InputError naming the file and the
// key's path (`files[2].crc32c`). Format version 1 (the same since the
// first checkpoints; a test loads one written before this reader).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "core/tensor.hpp"

namespace trident::launch::checkpoint {

inline constexpr int kVersion = 1;

std::string step_name(int64_t step);             // step_00000042
std::string file_name(int dp, int pp, int tp);   // dp0_pp1_tp0.safetensors
std::string read_text(const std::string& path);  // a small file's contents ("" when unreadable)

struct IndexFile {
  std::string file;
  int dp = 0, pp = 0, tp = 0;
  int64_t shard_begin = 0, shard_end = 0, bytes = 0;
  std::string crc32c;  // 8 hex digits of the file's CRC-32C
  // experts split over ranks (mesh.expert > 1): the writer's expert rank and
  // the expert shard it wrote after the dense one (empty: none)
  int ep = 0;
  int64_t expert_begin = 0, expert_end = 0;
};

// Where a saved parameter's elements are: one piece per file holding some.
struct IndexPiece {
  std::string file;
  int64_t offset = 0;                      // element of the file's flat tensors
  int64_t local_begin = 0, local_end = 0;  // elements of the saving rank's slice
  Shape local_shape;
  std::vector<std::pair<int64_t, int64_t>> rows;  // global rows of the slice, in its local order
  int64_t col_begin = 0;
  int64_t local_cols() const { return local_shape.size() > 1 ? local_shape[1] : 1; }
};

struct IndexTensor {
  Shape global_shape;
  int64_t valid_rows = 0;
  std::vector<IndexPiece> pieces;
};

// The tokenizer the run's data was made with (absent: synthetic data, or a
// checkpoint from before tokenizers were recorded). A copy of its file (if it
// has one) is in the step directory.
struct IndexTokenizer {
  TokenizerKind kind = TokenizerKind::byte;
  std::string file;    // tokenizer.json, tokenizer.model, vocab.json, or "" (byte)
  std::string crc32c;  // of the file, 8 hex digits ("" without a file)
  int64_t vocab = 0, eod = -1;
};

// Delayed FP8 scaling's state (launch/checkpoint/fp8_state.hpp): its file in
// the step directory and the file's checksum.
struct IndexFp8 {
  std::string file, crc32c;
};

struct CheckpointIndex {
  int version = kVersion;
  int64_t step = 0, consumed_samples = 0, seed = 0;
  ParallelConfig mesh;  // data, tensor, pipeline, virtual_stages, zero, stage_layers
  ModelConfig model;    // arch and the sizes that must match
  // every model.* key of the recipe that saved, with its value as YAML reads
  // it back (core/recipe's recipe_values; absent in older indexes: empty)
  std::vector<std::pair<std::string, std::string>> model_keys;
  int64_t optimizer_step = 0;
  // the optimizer whose state the moments hold (optim.name; absent in older
  // indexes: adamw). Muon keeps its momentum in exp_avg and leaves
  // exp_avg_sq zero for its matrices.
  OptimizerKind optimizer = OptimizerKind::adamw;
  // mixed precision (absent in older indexes: fp32, scale 1)
  std::optional<Precision> precision;
  double loss_scale = 1;
  int64_t good_steps = 0, skipped_steps = 0;
  std::string recipe_file, recipe_text;
  std::vector<std::string> recipe_overrides;
  std::optional<IndexTokenizer> tokenizer;
  std::optional<IndexFp8> fp8;  // absent: no delayed scaling state
  std::vector<IndexFile> files;
  std::map<std::string, IndexTensor> tensors;

  const IndexFile* find_file(const std::string& name) const;
};

std::string index_json(const CheckpointIndex& index);
// InputError naming `path` and the key on anything missing or malformed.
CheckpointIndex read_index(const std::string& path);

}  // namespace trident::launch::checkpoint
