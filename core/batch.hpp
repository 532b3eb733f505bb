// One micro-batch of a step, as the model reads it: B sequences of T rows
// each, every array [B,T] row-major. core/data fills it from a sampler
// (core/data/batch.hpp), parallel's ContextParallel::shard keeps this rank's
// rows of each sequence, model's chunk runner hands it to the layers. A plain
// value: no device copies (the step makes those), no collectives.
#pragma once
#include <cstdint>
#include <vector>

namespace trident {

struct Batch {
  int64_t B = 0, T = 0;            // sequences, and the rows of each held here
  std::vector<int32_t> tokens;     // [B,T] input ids (empty: this rank reads no tokens)
  std::vector<int32_t> targets;    // [B,T] the next token of each row; -1 takes no loss (empty: none read)
  std::vector<int32_t> doc_start;  // [B,T] the position where each row's document starts (empty: no document mask)
  std::vector<int32_t> origin;     // [B,T] row (b, t) sits at position t - origin (empty: the plain positions)
};

}  // namespace trident
