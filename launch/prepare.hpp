// `trident prepare`: text or JSONL corpora (plain, .gz, .zst; several files
// or globs) -> Megatron indexed datasets PREFIX_train and PREFIX_valid, with
// the tokenizer recorded next to them (docs/data.md). Streams in bounded
// memory over `workers` encoding threads. InputError naming the file (and
// line) on bad input; nothing is left behind on failure.
#pragma once
#include <string>
#include <vector>

namespace trident::launch {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or globs
  std::string out;
  std::string tokenizer = "byte";  // byte | char | a tokenizer.json / tokenizer.model
  double valid_fraction = 0.1;
  bool doc_per_line = false;       // text: one document per line instead of per paragraph
  std::string json_key = "text";  // JSONL: the document's key
  bool skip_bad_lines = false;     // JSONL: count and skip lines that are not documents
  std::string eod_token;           // text or id of the end-of-document token; "none": none; "": the tokenizer's
  int workers = 1;
  bool force = false;  // replace an existing dataset at `out` (refused otherwise)
};
void prepare(const PrepareOptions& opts);

// `trident prepare --inspect PREFIX`: documents, tokens, dtype, tokenizer and
// the first document decoded, for PREFIX or PREFIX_train and PREFIX_valid.
void inspect_dataset(const std::string& prefix);

// The record prepare writes next to a dataset (PREFIX.meta.json, PREFIX with
// _train/_valid stripped); empty `tokenizer` when there is none (older data).
struct DatasetRecord {
  std::string path;            // the record file
  std::string tokenizer;       // byte | char | hf-bpe | sentencepiece
  std::string tokenizer_file;  // the copy next to the data, or ""
  uint32_t tokenizer_crc32c = 0;
  int64_t vocab = 0, eod = -1;
  int64_t max_id = -1;  // the largest token id of this prefix's split (-1: unknown)
};
// nullopt-like: record.path empty when the dataset has none.
DatasetRecord read_dataset_record(const std::string& prefix);
// InputError when the tokenizer copy next to the data no longer matches the
// checksum prepare recorded.
void check_tokenizer_copy(const DatasetRecord& r);

}  // namespace trident::launch
