// The record `trident prepare` writes next to a dataset (PREFIX.meta.json,
// PREFIX with _train/_valid stripped; docs/data.md): the tokenizer (kind,
// vocabulary, EOD, its copy and CRC-32C), the token dtype, the splits. What
// the trainer, `sample` and the checkpoints read of a dataset's origin. The
// writer is prepare (prepare.cpp); this is the reader.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/enums.hpp"

namespace trident::data {

struct DatasetRecord {
  std::string path;                        // the record file; empty when the dataset has none (older data)
  std::optional<TokenizerKind> tokenizer;  // none when there is no record
  std::string tokenizer_file;              // the copy next to the data, or ""
  uint32_t tokenizer_crc32c = 0;
  int64_t vocab = 0, eod = -1;
  int64_t max_id = -1;  // the largest token id of this prefix's split (-1: unknown)
};
// The record of the dataset at `prefix`; path empty when it has none.
// InputError naming the file (and key) when it is not one prepare writes.
DatasetRecord read_dataset_record(const std::string& prefix);
// InputError when the tokenizer copy next to the data no longer matches the
// checksum prepare recorded.
void check_tokenizer_copy(const DatasetRecord& r);

}  // namespace trident::data
