// A step's micro-batch from the token sampler: sample i of the batch is
// sampler sample first_index + i, T + 1 tokens long; tokens are its first T,
// targets its last T (the next token of each row). With mask_eod_loss a
// target equal to the EOD token takes no loss (-1, which the loss kernels
// skip); with document_mask each row records where its document starts (at
// 0 and after each EOD of the input). Whole sequences: context parallelism
// takes its rows afterwards (ContextParallel::shard).
#pragma once
#include <cstdint>

#include "core/batch.hpp"
#include "core/data/dataset.hpp"

namespace trident::data {

struct BatchSpec {
  int64_t micro_batch = 1, seq_len = 1;
  int32_t eod = -1;            // the datasets' end-of-document token (-1: none)
  bool document_mask = false;  // record each row's document start
  bool mask_eod_loss = false;  // EOD targets take no loss
  bool read = true;            // false: the rank reads no tokens (a middle pipeline stage): shape only
};

// valid: the validation split; valid_source >= 0: that dataset of a
// validation blend alone.
Batch read_batch(const TokenSampler& sampler, const BatchSpec& spec, uint64_t first_index, bool valid,
                 int valid_source = -1);

}  // namespace trident::data
