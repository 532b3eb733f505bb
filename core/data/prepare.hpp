// `trident prepare`: text or JSONL corpora (plain, .gz, .zst; several files
// or globs) -> Megatron indexed datasets PREFIX_train and PREFIX_valid, with
// the tokenizer recorded next to them (docs/data.md). Streams in bounded
// memory over `workers` encoding threads. InputError naming the file (and
// line) on bad input; nothing is left behind on failure.
#pragma once
#include <string>
#include <vector>

namespace trident::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or globs
  std::string out;
  std::string tokenizer = "byte";  // byte | char | a tokenizer.json / tokenizer.model
  double valid_fraction = 0.1;
  bool doc_per_line = false;      // text: one document per line instead of per paragraph
  std::string json_key = "text";  // JSONL: the document's key
  bool skip_bad_lines = false;    // JSONL: count and skip lines that are not documents
  std::string eod_token;          // text or id of the end-of-document token; "none": none; "": the tokenizer's
  int workers = 1;
  bool force = false;  // replace an existing dataset at `out` (refused otherwise)
  // The read chunk and the encoding batch (no command-line flag: the fuzz
  // target makes it small so that a small input crosses every boundary).
  size_t buffer_bytes = size_t(1) << 20;
};
void prepare(const PrepareOptions& opts);

// `trident prepare --inspect PREFIX`: documents, tokens, dtype, tokenizer and
// the first document decoded, for PREFIX or PREFIX_train and PREFIX_valid.
void inspect_dataset(const std::string& prefix);

}  // namespace trident::data
